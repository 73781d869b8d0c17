"""Assignments in the style of minitorch: a stub file, the tests it must pass, a solution.

The exercises of chapter 1 (``bigram``), 2.1 (``strides``), 3.2 (``adamw``) and 4.1
(``engine``). An application (layer 6 of docs/layout.md).

Each assignment is three files of this package:

- ``sitp/exercises/<name>.py``: the file you edit. Its functions raise
  ``NotImplementedError`` until you write them.
- ``sitp/exercises/tests/test_<name>.py``: the tests. Run them against your file with::

      pytest --pyargs sitp.exercises.tests.test_<name>

- ``sitp/exercises/solutions/<name>.py``: a solution, which the book's own test suite
  runs the same tests against (and checks that the untouched stub fails every one).

Which module a test run checks: the environment variable ``SITP_EXERCISE_TARGET``
(``exercise`` or ``solution``) if it is set; otherwise your file when the test file or
its folder is named on the command line, and the solution when the tests are collected
as part of a larger run (``pytest src/sitp``, as ``make test`` does).

To work on a copy outside the installed package, point ``SITP_EXERCISE_MODULE`` at an
importable module name of your own, e.g. ``SITP_EXERCISE_MODULE=my_strides``.

Example:
    >>> from sitp.exercises import check
    >>> check("strides", "solution")["test_contiguous_strides"]
    'passed'
    >>> check("strides", "exercise")["test_contiguous_strides"]
    'NotImplementedError'
"""

from __future__ import annotations

import importlib
import inspect
import os
from types import ModuleType

#: The assignments, by chapter.
ASSIGNMENTS = {
    "bigram": "1: counts, smoothing, NLL and the softmax gradient by hand",
    "strides": "2.1: strides, positions, broadcasting and permutations",
    "adamw": "3.2: one step of Adam and of AdamW",
    "engine": "4.1: a scalar reverse-mode engine",
}


def module(name: str, target: str = "exercise") -> ModuleType:
    """The module an assignment's tests check: the stub you edit or the solution."""
    if name not in ASSIGNMENTS:
        raise KeyError(f"no assignment {name!r}; the assignments are {sorted(ASSIGNMENTS)}")
    if target == "solution":
        return importlib.import_module(f"sitp.exercises.solutions.{name}")
    if target != "exercise":
        raise ValueError(f"target must be 'exercise' or 'solution', not {target!r}")
    return importlib.import_module(
        os.environ.get("SITP_EXERCISE_MODULE") or f"sitp.exercises.{name}"
    )


def assignment_tests(name: str) -> dict:
    """The test functions of assignment ``name``, by name, in file order."""
    mod = importlib.import_module(f"sitp.exercises.tests.test_{name}")
    found = [
        (f.__code__.co_firstlineno, n, f)
        for n, f in vars(mod).items()
        if n.startswith("test_") and inspect.isfunction(f)
    ]
    return {n: f for _, n, f in sorted(found)}


def check(name: str, target: str = "exercise") -> dict[str, str]:
    """Runs assignment ``name``'s tests on ``target`` without pytest.

    Returns:
        dict from test name to ``'passed'`` or the name of the exception it raised.
    """
    impl = module(name, target)
    results = {}
    for test_name, test in assignment_tests(name).items():
        try:
            test(impl)
        except Exception as e:  # noqa: BLE001 - a report, not error handling
            results[test_name] = type(e).__name__
        else:
            results[test_name] = "passed"
    return results

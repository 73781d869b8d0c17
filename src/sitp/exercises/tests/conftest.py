"""The ``impl`` fixture: the module an assignment's tests check.

Your file (``sitp/exercises/<name>.py``) when this folder or a test file in it is named on
the command line (``pytest --pyargs sitp.exercises.tests.test_strides``); the solution
when the tests are collected as part of a larger run, such as the book's ``make test``.
``SITP_EXERCISE_TARGET=exercise`` or ``=solution`` overrides both.
"""

import os
from pathlib import Path

import pytest

from sitp.exercises import module


def _target(request) -> str:
    chosen = os.environ.get("SITP_EXERCISE_TARGET")
    if chosen:
        return chosen
    path = Path(request.path)
    named = any(request.session.isinitpath(p) for p in (path, path.parent))
    return "exercise" if named else "solution"


@pytest.fixture
def impl(request):
    name = request.module.__name__.rsplit(".", 1)[-1].removeprefix("test_")
    return module(name, _target(request))

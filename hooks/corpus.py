"""Which test items read the book's corpora, and what happens to them where a corpus is missing.

makemore's ``names.txt`` and tinyshakespeare are read from ``$SITP_DATA_DIR`` (``make
test`` points it at ``../shared/data`` when that folder exists; GitHub's CI downloads
them and sets it), or, by code that goes through ``sitp.data``'s loaders, from sitp's
cache. An item that reads one carries the marker ``needs_corpus``:

- a test in ``tests/`` says so itself, ``@pytest.mark.needs_corpus("tinyshakespeare.txt")``
  (the file must be in ``$SITP_DATA_DIR``; ``cached=True``: sitp's cached copy does too);
- a fence, a ``>>>`` example or the copy-run test of a page gets the marker from the
  root ``conftest.py`` when the code it runs calls a corpus loader
  (:func:`corpora_read_by`). For a ``{.python continuation}`` fence that code is the chain
  it continues; for the copy-run test, every block of the page.

Where the file is missing, such an item is skipped with :func:`missing_corpus`'s reason,
except under ``CI=true`` (:func:`in_ci`), where it fails with that reason: a CI run
that lacks the data must say so, not pass by skipping. Nothing else is skipped for
missing data: a page's static checks (fence lint, ``pycon`` format, recorded outputs)
and the fences that read no corpus run everywhere. A fence that reads a corpus in a way
:func:`corpora_read_by` does not see is not marked, so without the data it fails: never
a silent skip.
"""

from __future__ import annotations

import ast
import os
import re
from collections.abc import Iterable

from sitp.data.download import data_dir_copy, makemore_names_path, tinyshakespeare_path

#: The corpus files, by the name they have in ``$SITP_DATA_DIR``, and where sitp caches each.
CACHED = {"names.txt": makemore_names_path, "tinyshakespeare.txt": tinyshakespeare_path}

#: The functions of ``sitp.data`` that read a corpus file, and the file each reads.
LOADERS = {
    "load_tinyshakespeare": "tinyshakespeare.txt",
    "download_tinyshakespeare": "tinyshakespeare.txt",
    "prepare_shakespeare": "tinyshakespeare.txt",
    "download_makemore_names": "names.txt",
}

#: The copy-run test (file, function), parametrised by ``page``: it runs all of a page's blocks.
COPY_RUN_TEST = ("test_copy_run.py", "test_page_runs_as_a_reader_pastes_it")

# `python -m sitp train ... --data shakespeare` (or makemore), in one string
_DATA_FLAG = re.compile(r"--data[= ]+(shakespeare|makemore)\b")
_CORPUS_OF_DATA = {"shakespeare": "tinyshakespeare.txt", "makemore": "names.txt"}
# `load_names("makemore")` / `load_names("names")` read makemore's file
_NAMES_SOURCES = ("makemore", "names")


def in_ci() -> bool:
    """Whether this is a CI run (``CI=true``, as GitHub Actions and ``.ci/run`` set it)."""
    return os.environ.get("CI", "").strip().lower() in ("true", "1")


def _called_name(call: ast.Call) -> str | None:
    func = call.func
    if isinstance(func, ast.Attribute):
        return func.attr
    return func.id if isinstance(func, ast.Name) else None


def _constant(node: ast.AST) -> object:
    return node.value if isinstance(node, ast.Constant) else None


def corpora_read_by(code: str) -> set[str]:
    """The corpus files (``names.txt``, ``tinyshakespeare.txt``) that ``code`` reads.

    It reads one when it calls a loader of :data:`LOADERS`, ``load_names("makemore")``
    or ``load_names("names")``, or passes ``--data shakespeare`` (or ``makemore``) to a
    command line, as one string or as two items of a list. Comments and other strings do
    not count.

    >>> sorted(corpora_read_by("from sitp.data import load_tinyshakespeare\\ntext = load_tinyshakespeare()"))
    ['tinyshakespeare.txt']
    >>> corpora_read_by("# not load_tinyshakespeare() here\\nwords = load_names('offline')")
    set()
    >>> sorted(corpora_read_by("run(['sitp', 'train', '--data', 'shakespeare']); load_names('names')"))
    ['names.txt', 'tinyshakespeare.txt']
    """
    try:
        tree = ast.parse(code)
    except SyntaxError:  # not a whole program (a fragment of a session): look at its words
        found = {f for name, f in LOADERS.items() if re.search(rf"\b{name}\s*\(", code)}
        if re.search(r"\bload_names\s*\(\s*['\"](makemore|names)['\"]", code):
            found.add("names.txt")
        return found | {_CORPUS_OF_DATA[m[1]] for m in _DATA_FLAG.finditer(code)}
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = _called_name(node)
            if name in LOADERS:
                found.add(LOADERS[name])
            elif name == "load_names" and node.args and _constant(node.args[0]) in _NAMES_SOURCES:
                found.add("names.txt")
        elif isinstance(node, (ast.List, ast.Tuple)):
            items = [_constant(e) for e in node.elts]
            for flag, value in zip(items, items[1:]):
                if flag == "--data" and value in _CORPUS_OF_DATA:
                    found.add(_CORPUS_OF_DATA[value])
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            found |= {_CORPUS_OF_DATA[m[1]] for m in _DATA_FLAG.finditer(node.value)}
    return found


def missing_corpus(names: Iterable[str], cached: bool = False) -> str | None:
    """Why an item that reads the corpus files ``names`` cannot run here; None if it can.

    A file is there when ``$SITP_DATA_DIR`` holds it or, with ``cached``, when sitp's
    cache does (where ``sitp.data``'s loaders look after ``$SITP_DATA_DIR``).
    """
    names = list(names)
    unknown = [n for n in names if n not in CACHED]
    if unknown:
        raise ValueError(f"needs_corpus: unknown corpus {unknown}; known: {sorted(CACHED)}")
    missing = [
        n for n in names if data_dir_copy(n) is None and not (cached and CACHED[n]().is_file())
    ]
    if not missing:
        return None
    files = " and ".join(missing)
    root = os.environ.get("SITP_DATA_DIR")
    where = f"SITP_DATA_DIR={root} holds no {files}" if root else "SITP_DATA_DIR is not set"
    if cached:
        where += " and sitp's cache has no copy"
    return (
        f"{where}: this test reads {files}; set SITP_DATA_DIR to a directory holding "
        "names.txt (makemore's) and tinyshakespeare.txt (char-rnn's input.txt), as "
        "../shared/data or the download step of .github/workflows/ci.yml"
    )

"""Book-wide pytest setup, loaded for every path under the repository.

It lives at the root (not in tests/) so that it also applies when pytest is pointed at
docs/ or src/ alone, e.g. ``pytest --markdown-docs docs/ch02/strides.md``.
"""

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent

# pytest-xdist runs one worker per core; a numba thread pool per worker on top of that
# oversubscribes the cores, and OpenMP's parallel regions then stall for whole
# scheduler time slices (measured: a 10 us sgemv taking 44 ms). One thread per worker.
# (numba reads it when first imported, below.)
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("NUMBA_NUM_THREADS", "1")
# Figures drawn by fences and doctests go nowhere.
os.environ.setdefault("MPLBACKEND", "Agg")

# --8<-- [start:simulator]
# Must happen before numba is first imported (by a fence, by a test): numba reads
# NUMBA_ENABLE_CUDASIM once. Importing sitp.cuda does it, as it does for a reader: where
# no GPU answers, it sets NUMBA_ENABLE_CUDASIM=1 and CUDA kernels run in numba's
# simulator. An explicit setting (the Makefile's, gpu.yml's NUMBA_ENABLE_CUDASIM=0) wins.
import sitp.cuda  # noqa: E402,F401
# --8<-- [end:simulator]

if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import pytest  # noqa: E402
from hooks import corpus  # noqa: E402
from hooks.fences import make_parser  # noqa: E402
from hooks.pagecode import blocks  # noqa: E402
from pytest_markdown_docs.plugin import (  # noqa: E402
    MarkdownDocstringCodeModule,
    MarkdownInlinePythonItem,
    MarkdownTextFile,
)

# tests/test_book.py runs pytest-markdown-docs on sample pages with `pytester`.
pytest_plugins = ["pytester"]


def pytest_markdown_docs_markdown_it():
    """Let pytest-markdown-docs see fences inside admonitions and content tabs."""
    return make_parser()


def pytest_runtest_teardown(item):
    """Undo what a test or fence did to matplotlib's global settings, and close its figures.

    A figure script may set ``rcParams`` (a font size, say) for its own figures; within
    one pytest worker that would change every figure drawn after it, and the PNGs the
    pages regenerate would differ from run to run with the order of the tests.
    """
    mpl = sys.modules.get("matplotlib")
    if mpl is None:
        return
    if "matplotlib.pyplot" in sys.modules:
        sys.modules["matplotlib.pyplot"].close("all")
    backend = mpl.get_backend()
    mpl.rcdefaults()
    mpl.rcParams["backend"] = backend


# The corpora (hooks/corpus.py): an item that reads makemore's names.txt or tinyshakespeare
# carries the marker needs_corpus. Tests in tests/ set it themselves; a fence, a `>>>`
# example or the copy-run test of a page gets it here when the code it runs calls a corpus
# loader. Without the file the item is skipped with the reason, or fails under CI=true.
# Nothing else is skipped for missing data.
_COPY_RUN = corpus.COPY_RUN_TEST  # its items run every block of their page


def _is_copy_run(item) -> bool:
    return (item.path.name, getattr(item, "originalname", None)) == _COPY_RUN


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "needs_corpus(*files, cached=False): reads these corpus files (names.txt, "
        "tinyshakespeare.txt) of $SITP_DATA_DIR (cached=True: or sitp's cache); skipped "
        "without them, failing under CI=true (hooks/corpus.py)",
    )


def _code_of(item, pages: dict) -> str | None:
    """The code an item runs, where it is a page's: a fence (with the chain a continuation
    fence continues), a doctest's examples, or every block of a copy-run page."""
    if isinstance(item, MarkdownInlinePythonItem):
        return item.code  # pytest-markdown-docs joins a continuation to its chain
    if isinstance(item, pytest.DoctestItem):
        return "\n".join(example.source for example in item.dtest.examples)
    if _is_copy_run(item):
        page = Path(item.callspec.params["page"])
        if page not in pages:
            pages[page] = "\n".join(b.code for b in blocks(page.read_text(encoding="utf-8")))
        return pages[page]
    return None


def _fences_the_copy_run_runs(config, items) -> None:
    """Leave out the in-repository run of the book's fences when the copy-run runs them.

    tests/test_copy_run.py runs every Python fence of every page from its installed
    wheel, each standalone block in a fresh namespace shared only with its
    continuations: what pytest-markdown-docs checks in-process, and more. Running both
    doubled the fences' time in ``make test``. A run without the copy-run test (``pytest
    --markdown-docs docs/ch02/strides.md``, say) keeps the fences. The ``>>>`` examples
    (doctests) and fences in the package's docstrings always run here.
    """
    if not any(_is_copy_run(item) for item in items):
        return
    docs = config.rootpath / "docs"
    keep, dropped = [], []
    for item in items:
        in_book = isinstance(item, MarkdownInlinePythonItem) and item.path.is_relative_to(docs)
        (dropped if in_book else keep).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep


def _takes_in_the_copy_run(config) -> bool:
    """Whether this session's arguments collect the copy-run test with nothing that could
    deselect it (no ``-k``, no ``-m``): then the book's fences are left out (below)
    before they are collected, not after."""
    if config.option.keyword or config.option.markexpr:
        return False
    target = config.rootpath / "tests" / _COPY_RUN[0]
    here = config.invocation_params.dir
    for arg in config.args:
        path = (here / arg.split("::")[0]).resolve()
        if path == target or path in target.parents:
            return True
    return False


@pytest.hookimpl(wrapper=True)
def pytest_collect_file(file_path, parent):
    """Do not let pytest-markdown-docs parse what it would find nothing in, or what
    would be left out: a module of Python with no fence in its text (it walks every
    object's docstring, about 4 s a process for the package and the tests), and the
    book's pages when the copy-run runs their fences (each page parsed for its fences,
    about 5 s a process; every pytest-xdist worker collects everything). The `>>>`
    examples of the pages are doctests, collected by pytest's doctest plugin as before."""
    collectors = yield
    config = parent.config
    if not hasattr(config, "_sitp_copy_run"):
        config._sitp_copy_run = _takes_in_the_copy_run(config)
    docs = config.rootpath / "docs"
    kept = []
    for c in collectors:
        if isinstance(c, MarkdownDocstringCodeModule):
            text = Path(file_path).read_text(encoding="utf-8", errors="replace")
            if "```" not in text and "~~~" not in text:
                continue
        elif isinstance(c, MarkdownTextFile):
            if config._sitp_copy_run and Path(file_path).is_relative_to(docs):
                continue
        kept.append(c)
    return kept


@pytest.hookimpl(trylast=True)  # after `-m` and `-k` have deselected what they do
def pytest_collection_modifyitems(config, items):
    _fences_the_copy_run_runs(config, items)
    pages = {}
    for item in items:
        code = _code_of(item, pages)
        files = corpus.corpora_read_by(code) if code else set()
        if files:
            item.add_marker(pytest.mark.needs_corpus(*sorted(files), cached=True))


@pytest.hookimpl(tryfirst=True)  # before fixtures: the copy-run test's builds a wheel
def pytest_runtest_setup(item):
    for mark in item.iter_markers("needs_corpus"):
        why = corpus.missing_corpus(mark.args, cached=mark.kwargs.get("cached", False))
        if why is None:
            continue
        if corpus.in_ci():
            pytest.fail(f"CI=true and a corpus is missing: {why}", pytrace=False)
        pytest.skip(why)

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

from hooks.fences import make_parser  # noqa: E402
from sitp.data.download import data_dir_copy, tinyshakespeare_path  # noqa: E402

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


# Pages that read tinyshakespeare through sitp.data need the file: from $SITP_DATA_DIR
# (make test points it at ../shared/data when that folder exists), from sitp's cache, or
# from the network. Tests and CI have no internet, so on a clone without ../shared those
# pages' fences and copy-run test are skipped, as the corpus tests in tests/ are.
_CORPUS_CALLS = ("load_tinyshakespeare(", "prepare_shakespeare(", "download_tinyshakespeare(")


def _corpus_on_disk() -> bool:
    return data_dir_copy("tinyshakespeare.txt") is not None or tinyshakespeare_path().is_file()


def _page_of(item):
    """The Markdown page an item runs: a fence of pytest-markdown-docs, or a copy-run."""
    page = getattr(getattr(item, "callspec", None), "params", {}).get("page")
    path = Path(page) if page is not None else Path(str(item.path))
    return path if path.suffix == ".md" and path.is_file() else None


def pytest_collection_modifyitems(config, items):
    if _corpus_on_disk():
        return
    needs = {}
    for item in items:
        page = _page_of(item)
        if page is None:
            continue
        if page not in needs:
            needs[page] = any(call in page.read_text(encoding="utf-8") for call in _CORPUS_CALLS)
        if needs[page]:
            item.add_marker(
                pytest.mark.skip(reason="tinyshakespeare is not on disk: set SITP_DATA_DIR")
            )

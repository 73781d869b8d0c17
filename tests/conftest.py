"""Fixtures and markers for the unit tests in tests/.

The environment (NUMBA_ENABLE_CUDASIM, MPLBACKEND) is set by the repository's root
conftest.py, which pytest loads before this file and before any test imports numba.
"""

import os

import pytest

SIMULATOR = os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"

# tests/scripts/ holds training scripts written for PyTorch, which tests run unchanged in
# subprocesses (run_with.py). They are scripts, not modules: importing one (as
# --doctest-modules would) runs it, with whatever it sets on torch's global switches.
collect_ignore_glob = ["scripts/*.py"]


def pytest_collection_modifyitems(config, items):
    """Tests marked ``gpu`` need a real device: skip them under the CUDA simulator."""
    if not SIMULATOR:
        return
    skip = pytest.mark.skip(reason="needs a real CUDA device (NUMBA_ENABLE_CUDASIM=1)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def pytest_terminal_summary(terminalreporter):
    """Print, once, the lines tests recorded with ``record_property("not_collected", line)``:
    how many cases a parametrised test leaves out because no machine could run them.
    (The reports carry them from pytest-xdist's workers.)"""
    lines = {
        value
        for reports in terminalreporter.stats.values()
        for report in reports
        for name, value in getattr(report, "user_properties", ())
        if name == "not_collected"
    }
    if lines:
        terminalreporter.section("cases not collected")
        for line in sorted(lines):
            terminalreporter.write_line(line)


@pytest.fixture(scope="session")
def built_site(tmp_path_factory):
    """The built book: a directory with the site's HTML, for the link and browser checks.

    ``make test`` builds the site (``mkdocs build --strict``) before pytest and passes
    it as ``SITP_SITE_DIR=site``; run alone, the tests build the book into a temporary
    directory themselves, so they never check a stale ``site/``.
    """
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    given = os.environ.get("SITP_SITE_DIR")
    if given:
        site = Path(given).resolve()
        if not (site / "index.html").is_file():
            pytest.fail(f"SITP_SITE_DIR={given} holds no built site (no index.html)")
        return site
    from filelock import FileLock  # a dependency of torch, which the tests need anyway

    root = Path(__file__).resolve().parent.parent
    # One build per run, shared by its pytest-xdist workers: the parent of a worker's
    # base temporary directory is the run's own.
    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent
    site = shared / "sitp-site"
    with FileLock(str(shared / "sitp-site.lock")):
        if not (site / "index.html").is_file():
            build = subprocess.run(
                # Not --quiet: it silences the warnings that --strict counts.
                [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(site)],
                cwd=root,
                capture_output=True,
                text=True,
                env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
            )
            if build.returncode != 0:
                shutil.rmtree(site, ignore_errors=True)
                pytest.fail(f"mkdocs build --strict failed:\n{build.stdout}\n{build.stderr}")
    return site


@pytest.fixture(scope="session")
def zensical_site(tmp_path_factory):
    """The book built by Zensical (scripts/zensical_build.py), for the comparison with
    the MkDocs build and the browser checks.

    ``make test`` builds it before pytest and passes ``SITP_ZENSICAL_SITE_DIR``; run
    alone, the tests build it once into the run's temporary directory.
    """
    import subprocess
    import sys
    from pathlib import Path

    given = os.environ.get("SITP_ZENSICAL_SITE_DIR")
    if given:
        site = Path(given).resolve()
        if not (site / "index.html").is_file():
            pytest.fail(f"SITP_ZENSICAL_SITE_DIR={given} holds no built site (no index.html)")
        return site
    try:
        import zensical  # noqa: F401
    except ImportError:
        message = "no zensical: pip install -e '.[docs]' (make test installs it)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    from filelock import FileLock

    root = Path(__file__).resolve().parent.parent
    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent
    out = shared / "sitp-zensical"
    with FileLock(str(shared / "sitp-zensical.lock")):
        if not (out / "site" / "index.html").is_file():
            build = subprocess.run(
                [sys.executable, "scripts/zensical_build.py", "--out", str(out)],
                cwd=root,
                capture_output=True,
                text=True,
            )
            if build.returncode != 0:
                pytest.fail(f"the Zensical build failed:\n{build.stdout}\n{build.stderr}")
    return out / "site"

"""The reader's contract: every page's Python blocks run outside the repository.

A reader installs ``sitp[book]``, downloads a page's script (or pastes its blocks in
order into a fresh ``python``) in an empty directory and runs it. This test does exactly
that, for every page:

- the package is built as a wheel (from a copy of the sources, so the build leaves
  nothing in the tree) and installed, not editable, into a virtual environment of its
  own under ``build/copy-run/``; the dependencies are those of ``.venv``, seen through a
  ``.pth`` file, so nothing is downloaded. The install is reused while ``src/`` and
  ``pyproject.toml`` are unchanged (their hash names the folder), so numba's cache of
  the installed kernels stays valid from one run to the next;
- each page runs in a fresh subprocess of that environment, with no ``PYTHONPATH`` and
  no ``NUMBA_ENABLE_CUDASIM`` (without a GPU, ``sitp.cuda`` must switch numba's
  simulator on by itself), from an empty temporary directory that holds only the page's
  script, the one the site offers as its download (``hooks/pagecode.py``,
  :func:`page_script`);
- the script must compile as a whole, as ``python sitp-ch02-strides.py`` reads it; it
  then runs cell by cell in one process, the blocks in the page's order, so that a
  failure names the page's line of the block, and each block's printed output is
  recorded. Each standalone block starts a fresh namespace (``__name__ ==
  "__main__"``), which its continuations share: a block must run pasted alone, with
  only the blocks it continues before it, so a name it takes from an earlier chain
  fails here. That is stricter than the downloaded script's one namespace and checks
  what running every fence in-process would (the in-repository fence run is left out
  when this test runs: ``conftest.py``);
- that output must be the one recorded in ``docs/_outputs/<page>.json``, which the site
  shows beneath the block: exactly, or with every number masked for a block marked
  ``volatile-output`` (timings). ``make outputs`` (``SITP_RECORD_OUTPUTS=1``) runs this
  same test and records the outputs instead of comparing them.

Pages are parameters, so pytest-xdist spreads them over its workers.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
import zipfile
from pathlib import Path

import pytest
from hooks import pagecode

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
WORK = ROOT / "build" / "copy-run"
# What the wheel is built from (copied, so that setuptools' build/ and egg-info stay out
# of the tree).
SOURCES = ("src", "pyproject.toml", "README.md", "LICENSE")
PAGE_TIMEOUT = 600
RECORD = os.environ.get("SITP_RECORD_OUTPUTS") == "1"


def page_blocks(page: Path) -> list[pagecode.Block]:
    return pagecode.blocks(page.read_text(encoding="utf-8"))


PAGES = [p for p in sorted(DOCS.rglob("*.md")) if page_blocks(p)]

# Runs in the reader's interpreter: the page's script, compiled whole, then executed
# cell by cell in one namespace, each block's output recorded (and printed, as the
# reader sees it). Tracebacks show the script's lines (compiled with its file name).
RUNNER = r"""
import builtins, contextlib, io, json, sys, time, traceback
script, cells, page, report_path = sys.argv[1], json.load(open(sys.argv[2])), sys.argv[3], sys.argv[4]
source = open(script, encoding="utf-8").read()
lines = source.splitlines(True)
try:
    compile(source, script, "exec")
except SyntaxError:
    traceback.print_exc()
    print(f"copy-run: the script of {page} does not compile as one file", file=sys.stderr)
    sys.exit(1)
sys.argv = [script]

class Tee(io.TextIOBase):
    def __init__(self, out):
        self.out, self.buf = out, io.StringIO()
    def write(self, s):
        self.out.write(s)
        return self.buf.write(s)
    def flush(self):
        self.out.flush()

report = []
for cell in cells:
    if not cell["continuation"]:  # a standalone block: a fresh namespace, as pasted alone
        ns = {"__name__": "__main__", "__file__": script, "__builtins__": builtins}
    code = "\n" * (cell["start"] - 1) + "".join(lines[cell["start"] - 1 : cell["end"]])
    tee, start = Tee(sys.stdout), time.perf_counter()
    try:
        with contextlib.redirect_stdout(tee):
            exec(compile(code, script, "exec"), ns)
    except BaseException:
        traceback.print_exc()
        print(f"copy-run: the block at {page}:{cell['line']} failed (line {cell['start']} "
              f"of the page's script)", file=sys.stderr)
        sys.exit(1)
    finally:
        report.append({"line": cell["line"], "seconds": time.perf_counter() - start,
                       "stdout": tee.buf.getvalue()})
        json.dump(report, open(report_path, "w", encoding="utf-8"))
"""


def _source_hash() -> str:
    digest = hashlib.sha256()
    for name in SOURCES:
        path = ROOT / name
        files = sorted(path.rglob("*")) if path.is_dir() else [path]
        for f in files:
            if (
                f.is_file()
                and "__pycache__" not in f.parts
                and f.suffix not in {".pyc", ".nbi", ".nbc"}
            ):
                if ".egg-info" in str(f):
                    continue
                digest.update(f.relative_to(ROOT).as_posix().encode())
                digest.update(f.read_bytes())
    return digest.hexdigest()[:16]


def _install(target: Path) -> None:
    """Build the wheel and install it into a fresh virtual environment at ``target``."""
    with tempfile.TemporaryDirectory() as tmp:
        tree, wheels = Path(tmp) / "tree", Path(tmp) / "wheels"
        tree.mkdir()
        for name in SOURCES:
            src = ROOT / name
            if src.is_dir():
                shutil.copytree(
                    src,
                    tree / name,
                    ignore=shutil.ignore_patterns(
                        "__pycache__", "*.egg-info", "*.nbi", "*.nbc", "*.pyc"
                    ),
                )
            elif src.exists():
                shutil.copy2(src, tree / name)
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "wheel",
                "--quiet",
                "--no-deps",
                "--no-index",
                "--no-build-isolation",
                "--wheel-dir",
                str(wheels),
                str(tree),
            ],
            check=True,
            capture_output=True,
            text=True,
        )
        (wheel,) = wheels.glob("sitp-*.whl")
        staging = target.with_name(target.name + ".tmp")
        shutil.rmtree(staging, ignore_errors=True)
        # The base interpreter, not .venv's: a venv of a venv would see .venv's site-packages
        # editable install of sitp through its .pth files.
        base = getattr(sys, "_base_executable", sys.executable)
        subprocess.run([base, "-m", "venv", "--without-pip", str(staging)], check=True)
        python = staging / "bin" / "python"
        site = Path(
            subprocess.run(
                [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                check=True,
                capture_output=True,
                text=True,
            ).stdout.strip()
        )
        with zipfile.ZipFile(wheel) as zf:
            for info in zf.infolist():
                zf.extract(info, site)
                # The sources' times, from the wheel: numba's cache of the installed
                # kernels stays valid when the same sources are installed again.
                stamp = time.mktime(info.date_time + (0, 0, -1))
                os.utime(site / info.filename, (stamp, stamp))
        # .venv's dependencies (torch, numba, ...), with their own .pth files
        # (numba-cuda's redirect of numba.cuda), minus the editable sitp of the checkout.
        deps = sysconfig.get_paths()["purelib"]
        (site / "zz_sitp_book_deps.pth").write_text(
            f"import site; site.addsitedir({deps!r})\n"
            f"import sys; sys.path[:] = [p for p in sys.path if p != {str(ROOT / 'src')!r}]\n"
        )
        _link_prefix_files(Path(deps), staging)
        (staging / "installed-from").write_text(wheel.name + "\n")
        os.replace(staging, target)


def _link_prefix_files(deps: Path, prefix: Path) -> None:
    """Link into ``prefix`` the files that .venv's mpich wheel installed outside
    site-packages (``bin/mpirun``, ``lib/libmpi``): where a reader's ``pip install
    "sitp[book]"`` puts them, and where the launcher and mpi4py look (``sys.prefix``).
    Other wheels' files there are console scripts, which the reader's pip would write
    for the reader's own interpreter; they are not linked."""
    for dist in importlib.metadata.distributions(path=[str(deps)], name="mpich"):
        for f in dist.files or ():
            if not str(f).startswith(".."):
                continue
            source = Path(dist.locate_file(f)).resolve()
            dest = prefix / source.relative_to(Path(sys.prefix).resolve())
            if source.is_file() and not dest.exists():
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.symlink_to(source)


@pytest.fixture(scope="session")
def reader_python() -> Path:
    """The interpreter of a reader's environment with a non-editable install of sitp."""
    WORK.mkdir(parents=True, exist_ok=True)
    target = WORK / _source_hash()
    with open(WORK / ".lock", "w") as lock:  # xdist workers and parallel sessions
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (target / "installed-from").is_file():
            _install(target)
        for old in WORK.iterdir():  # installs of other sources, unused for a day
            if old.is_dir() and old != target and time.time() - old.stat().st_mtime > 86400:
                shutil.rmtree(old, ignore_errors=True)
    os.utime(target)
    return target / "bin" / "python"


def reader_env() -> dict[str, str]:
    """The environment of a reader's shell: nothing of the repository or the test set-up."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PYTEST", "PYTHON", "VIRTUAL_ENV", "COV_"))
    }
    for name in ("NUMBA_ENABLE_CUDASIM", "MPLBACKEND", "SITP_SITE_DIR"):
        env.pop(name, None)
    # One thread for numba's and OpenMP's pools (torch, BLAS): the blocks print the same
    # last digits however many cores the machine has and however pytest was started
    # (a parallel sum adds in another order with another thread count), so that their
    # outputs can be recorded and compared; and two xdist workers do not oversubscribe
    # two cores. It changes speed and rounding, not what the code does.
    env["NUMBA_NUM_THREADS"] = env["OMP_NUM_THREADS"] = "1"
    return env


def run_page(python: Path, page: Path, tmp_path: Path) -> tuple[subprocess.CompletedProcess, list]:
    """Run the page's script (the download) from a directory that holds only it."""
    rel = page.relative_to(DOCS).as_posix()
    script, cells = pagecode.page_script(rel, page.read_text(encoding="utf-8"))
    cwd = tmp_path / "reader"
    cwd.mkdir()
    path = cwd / f"{pagecode.download_name(rel)}.py"
    path.write_text(script, encoding="utf-8")
    (tmp_path / "cells.json").write_text(json.dumps(cells), encoding="utf-8")
    (tmp_path / "runner.py").write_text(RUNNER, encoding="utf-8")
    # `python -c` puts the working directory first on sys.path, as `python script.py`
    # puts the script's; the runner's own file is read, not imported from the checkout.
    code = f"exec(open({str(tmp_path / 'runner.py')!r}).read())"
    report_path = tmp_path / "report.json"
    proc = subprocess.run(
        [
            str(python),
            "-c",
            code,
            str(path),
            str(tmp_path / "cells.json"),
            page.relative_to(ROOT).as_posix(),
            str(report_path),
        ],
        cwd=cwd,
        env=reader_env(),
        capture_output=True,
        text=True,
        timeout=PAGE_TIMEOUT,
    )
    report = json.loads(report_path.read_text()) if report_path.exists() else []
    return proc, report


def test_the_install_is_the_wheel_not_the_checkout(reader_python, tmp_path):
    proc = subprocess.run(
        [
            str(reader_python),
            "-c",
            "import sitp, sitp.cuda, sys, torch, matplotlib, numba.cuda; "
            "print(sitp.__file__); print(sitp.cuda.is_simulated() or sitp.cuda.is_available())",
        ],
        cwd=tmp_path,
        env=reader_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    where, cuda_ok = proc.stdout.split()
    assert Path(where).is_relative_to(reader_python.parent.parent), where
    assert not Path(where).is_relative_to(ROOT / "src")
    assert cuda_ok == "True"


def _diff(recorded: str, fresh: str) -> str:
    import difflib

    return "".join(
        difflib.unified_diff(
            recorded.splitlines(True), fresh.splitlines(True), "recorded", "this run", n=1
        )
    )


@pytest.mark.slow
@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(DOCS).as_posix())
def test_page_runs_as_a_reader_pastes_it(reader_python, page, tmp_path):
    """The page's script, run from an empty directory outside the repository; each
    block prints what the page shows beneath it (or, with SITP_RECORD_OUTPUTS=1, what
    it prints is recorded for the page to show)."""
    proc, report = run_page(reader_python, page, tmp_path)
    if proc.returncode != 0:
        pytest.fail(
            f"{page.relative_to(ROOT)} fails outside the repository:\n{proc.stderr[-6000:]}",
            pytrace=False,
        )
    blocks = page_blocks(page)
    assert [r["line"] for r in report] == [b.line for b in blocks]
    rel = page.relative_to(DOCS).as_posix()
    stdouts = [r["stdout"] for r in report]
    recorded = pagecode.load_outputs(rel)
    if RECORD:
        # A block that prints what its record says (for a volatile one: up to its
        # numbers) keeps its record, so that `git diff docs/_outputs` shows real changes.
        for n, block in enumerate(blocks):
            entry = pagecode.recorded_output(block, blocks, recorded)
            if entry is not None and pagecode.same_output(block, entry["stdout"], stdouts[n]):
                stdouts[n] = entry["stdout"]
        path = pagecode.outputs_path(rel)
        path.parent.mkdir(parents=True, exist_ok=True)
        record = pagecode.outputs_record(rel, blocks, stdouts)
        path.write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        return
    problems = []
    for block, fresh in zip(blocks, stdouts, strict=True):
        where = f"docs/{rel}:{block.line}"
        entry = pagecode.recorded_output(block, blocks, recorded)
        if entry is None:
            problems.append(f"{where}: no output recorded for this code (run `make outputs`)")
        elif not pagecode.same_output(block, entry["stdout"], fresh):
            kind = " (numbers masked: volatile-output)" if block.volatile else ""
            problems.append(
                f"{where}: prints something else than the page shows{kind}; "
                f"if the change is right, run `make outputs`\n" + _diff(entry["stdout"], fresh)
            )
    assert not problems, "\n".join(problems)

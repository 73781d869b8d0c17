"""Running code on several MPI ranks from a test: :func:`run_ranks` and :data:`requires_mpi`.

    from dist_util import requires_mpi, run_ranks

    @requires_mpi
    def test_sum():
        out = run_ranks('''
            import sitp, sitp.distributed as dist
            dist.init_process_group()
            x = sitp.ones(3); dist.all_reduce(x)
            assert x.tolist() == [2.0] * 3
            print("ok", dist.get_rank())
        ''')
        assert out.stdout.count("ok") == 2

The code runs under the launcher the reader uses (``python -m sitp.distributed.run``,
whose ``launch`` runs here in the test's process, which has imported sitp already, so no
process is started for the launcher itself). Its ``--timeout`` kills the whole job, and
the test fails with everything the ranks printed, so nothing hangs and nothing is
hidden.
"""

from __future__ import annotations

import importlib.util
import io
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def mpirun() -> str | None:
    """The mpirun the launcher would use (see ``sitp/distributed/run.py``), or None."""
    env = os.environ.get("SITP_MPIRUN")
    if env:
        return env
    beside = Path(sys.executable).parent / "mpirun"
    return str(beside) if beside.exists() else shutil.which("mpirun")


def mpi_missing() -> str | None:
    """Why the distributed tests cannot run here (None when they can)."""
    if importlib.util.find_spec("mpi4py") is None:
        return "mpi4py is not installed (pip install 'sitp[distributed]')"
    if mpirun() is None:
        return "no mpirun (pip install 'sitp[distributed]' installs the mpich wheel's)"
    return None


#: Under CI=true (where `make test` installs the test extra, MPI included) nothing is
#: skipped for a missing MPI: the test runs, and fails with the launcher's message.
IN_CI = os.environ.get("CI", "").strip().lower() in ("true", "1")

#: Skip a test where mpi4py or mpirun is missing, with the reason (not under CI=true).
requires_mpi = pytest.mark.skipif(
    mpi_missing() is not None and not IN_CI, reason=str(mpi_missing())
)


def _script(code_or_path, tmp: Path) -> Path:
    if isinstance(code_or_path, Path) or (
        isinstance(code_or_path, str) and code_or_path.endswith(".py") and "\n" not in code_or_path
    ):
        return Path(code_or_path)
    path = tmp / "ranks.py"
    path.write_text(textwrap.dedent(code_or_path))
    return path


def output(proc) -> str:
    """A finished process's stdout and stderr, for a failure message."""
    return f"--- stdout ---\n{proc.stdout}\n--- stderr ---\n{proc.stderr}"


def run_ranks(
    code_or_path,
    nproc: int = 2,
    timeout: float = 60,
    env: dict | None = None,
    args=(),
    check: bool = True,
    launcher_args=(),
    cwd=None,
    module: bool = False,
) -> subprocess.CompletedProcess:
    """Run a script (a path, or the code itself) on ``nproc`` ranks with the launcher.

    Args:
        code_or_path: a ``Path`` or a ``.py`` path, or Python source (dedented).
        nproc: ranks (``--nproc-per-node``).
        timeout: seconds the job may take (the launcher's ``--timeout``).
        env: variables added to the environment.
        args: the script's arguments.
        check: fail the test, showing the output, if the job exits nonzero.
        launcher_args: more options for ``python -m sitp.distributed.run``.
        cwd: the working directory (default: the repository).
        module: ``code_or_path`` names a module, run as ``-m module`` (torchrun's ``-m``).

    Returns:
        The CompletedProcess, with ``stdout`` and ``stderr`` as text.
    """
    from sitp.distributed import run as launcher

    with tempfile.TemporaryDirectory() as tmp:
        script = ["-m", code_or_path] if module else [str(_script(code_or_path, Path(tmp)))]
        argv = ["--nproc-per-node", str(nproc), "--timeout", str(timeout), *map(str, launcher_args)]
        argv += [*script, *map(str, args)]
        # the launcher, run in this process (python -m sitp.distributed.run is what main()
        # does with its own streams; test_cli_ddp.py runs that command as a reader types it)
        out, err = io.StringIO(), io.StringIO()
        try:
            status = launcher.launch(
                launcher.parse(argv), out, err, {**os.environ, **(env or {})}, cwd or ROOT
            )
        except SystemExit as e:
            status = 2 if e.code is None or isinstance(e.code, str) else e.code
            err.write(f"{e.code}\n" if isinstance(e.code, str) else "")
    done = subprocess.CompletedProcess(argv, status, out.getvalue(), err.getvalue())
    if check and done.returncode != 0:
        pytest.fail(f"{nproc} ranks exited with status {done.returncode}\n{output(done)}")
    return done


def ranks_output(test_file, nproc: int = 2, timeout: float = 90) -> str:
    """What the test file's rank program printed, run on ``nproc`` MPI ranks: for a
    module fixture. Without MPI, a skip (a failure when CI=true)."""
    if mpi_missing():
        if IN_CI:
            pytest.fail(f"CI=true: {mpi_missing()}")
        pytest.skip(mpi_missing())
    return run_ranks(Path(test_file), nproc=nproc, timeout=timeout).stdout


def run_checks(checks) -> None:
    """The rank program of a test file: join the default group, run each ``(name,
    check)`` in turn on every rank, and have rank 0 print ``ok <name>`` after each (what
    :func:`checks_passed` reads back); a failing check ends the job with its traceback."""
    import sitp.distributed as dist

    dist.init_process_group()
    for name, check in checks:
        check()
        if dist.get_rank() == 0:
            print(f"ok {name}", flush=True)
    dist.destroy_process_group()


def checks_passed(out: str) -> list[str]:
    """The checks a rank program reported as passed (its lines ``ok <name> ...``), in order."""
    return [line.split()[1] for line in out.splitlines() if line.startswith("ok ")]


def rank_check_tests(test_file, checks, nproc: int = 2):
    """The pytest side of a test file that is also its ranks' program (:func:`run_checks`):
    a module fixture that runs the file on ``nproc`` ranks once, and a test per name in
    ``checks`` that its line ``ok <name>`` was printed. Bind both in the module::

        ranks_output, test_two_ranks = dist_util.rank_check_tests(__file__, CHECKS)
    """
    run_file = ranks_output

    @pytest.fixture(scope="module")
    def fixture():
        return run_file(test_file, nproc=nproc)

    @pytest.mark.parametrize("check", checks)
    def test(ranks_output, check):
        assert check in checks_passed(ranks_output), ranks_output

    return fixture, test

"""``python -m sitp.distributed.run``: start a script on several processes, as torchrun does,
through the installed MPI's ``mpirun``.

    python -m sitp.distributed.run --nproc-per-node 2 train.py --lr 3e-4
    python -m sitp.distributed.run --nproc-per-node 2 -m sitp train ...
    python -m sitp.distributed.run --nproc-per-node 4 --hostfile hosts train.py

It runs ``mpirun -n N python _bootstrap.py script args`` (see ``_bootstrap.py``): each rank
gets torchrun's variables (RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR,
MASTER_PORT) and runs the script as ``python script.py`` would. Scripts that call
``init_process_group`` read their rank from MPI, so ``mpirun -n N python script.py``
works as well; the launcher adds torchrun's options and variables, a timeout, and an
error that ends the job when a rank fails.

The ``mpirun`` is the one beside the running Python (the mpich wheel installs it in the
virtual environment's ``bin``), else the first on ``PATH``; ``SITP_MPIRUN`` names another.
MPICH's (Hydra) and Open MPI's are both understood. With ``--hostfile`` (one host a line,
MPICH's ``host:slots`` or Open MPI's ``host slots=n``), ``--nproc-per-node`` ranks start on
each of ``--nnodes`` hosts (all of the file's hosts by default), and ``MASTER_ADDR``
defaults to the first host. On one machine more ranks than cores may be started (MPICH
allows it by default; for Open MPI the launcher passes ``--oversubscribe``).

Exit status: 0 when every rank succeeded; nonzero when one failed (MPI ends the others
as soon as one aborts) and 124 when the job ran past ``--timeout`` seconds, after which
every process of the job is killed. A rank that raised is reported with its traceback
(``_bootstrap``); one killed by a signal (SIGKILL, the OOM killer) leaves none, so the
launcher reads ``mpirun``'s own message (the pid and the signal; it passes through the
launcher's stdout and stderr) and names the rank from the pid each rank wrote at start.
"""

from __future__ import annotations

import argparse
import functools
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

BOOTSTRAP = Path(__file__).resolve().parent / "_bootstrap.py"


def find_mpirun() -> str:
    """The mpirun to use: ``$SITP_MPIRUN``, the one beside ``sys.executable``, or PATH's."""
    env = os.environ.get("SITP_MPIRUN")
    if env:
        return env
    beside = Path(sys.executable).parent / "mpirun"
    if beside.exists():
        return str(beside)
    found = shutil.which("mpirun") or shutil.which("mpiexec")
    if found is None:
        raise SystemExit(
            "sitp.distributed.run: no mpirun found (not beside "
            f"{sys.executable}, not on PATH); pip install 'sitp[distributed]' installs the "
            "mpich wheel's, or set SITP_MPIRUN to one"
        )
    return found


@functools.cache
def flavour(mpirun: str) -> str:
    """ "mpich" (Hydra) or "openmpi", from ``mpirun --version``."""
    try:
        out = subprocess.run(
            [mpirun, "--version"], capture_output=True, text=True, timeout=30
        ).stdout
    except (OSError, subprocess.TimeoutExpired) as e:
        raise SystemExit(f"sitp.distributed.run: cannot run {mpirun} --version: {e}") from None
    return "openmpi" if ("Open MPI" in out or "OpenRTE" in out or "prte" in out) else "mpich"


def hosts(hostfile: str) -> list[str]:
    """The host names of a hostfile, in order, without comments and repeats."""
    names = []
    for line in Path(hostfile).read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name = line.split()[0].split(":")[0]
            if name not in names:
                names.append(name)
    if not names:
        raise SystemExit(f"sitp.distributed.run: the hostfile {hostfile} names no host")
    return names


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m sitp.distributed.run",
        description="Start a script on several processes through MPI, as torchrun does.",
    )
    p.add_argument("--nproc-per-node", "--nproc_per_node", type=int, default=1, metavar="N")
    p.add_argument("--nnodes", type=int, default=None, help="hosts used (default: the hostfile's)")
    p.add_argument("--hostfile", default=None, help="a file of host names, one a line")
    p.add_argument("--master-addr", "--master_addr", default=None)
    p.add_argument("--master-port", "--master_port", type=int, default=29500)
    p.add_argument("--timeout", type=float, default=None, help="seconds; then kill the job")
    p.add_argument("--mpirun-args", default="", help="more arguments for mpirun (one string)")
    p.add_argument("--standalone", action="store_true", help="accepted, as torchrun's")
    p.add_argument("-m", "--module", action="store_true", help="run a module, as python -m")
    p.add_argument("script", help="the script (or, with -m, the module) to run")
    p.add_argument("args", nargs=argparse.REMAINDER)
    a = p.parse_args(argv)
    if a.nproc_per_node < 1:
        p.error(f"--nproc-per-node must be at least 1 (got {a.nproc_per_node})")
    if a.timeout is not None and a.timeout <= 0:
        p.error(f"--timeout must be positive (got {a.timeout})")
    if not a.module and not Path(a.script).exists():
        p.error(f"no such script: {a.script}")
    if a.hostfile is not None and not Path(a.hostfile).exists():
        p.error(f"no such hostfile: {a.hostfile}")
    return a


def command(
    a: argparse.Namespace, mpirun: str, kind: str, environ: dict | None = None
) -> tuple[list[str], dict]:
    """The mpirun command line and its environment (``environ``'s, by default this
    process's, with torchrun's variables added)."""
    nodes = hosts(a.hostfile) if a.hostfile else ["127.0.0.1"]
    nnodes = a.nnodes if a.nnodes is not None else len(nodes)
    if nnodes < 1 or (a.hostfile is None and nnodes != 1):
        raise SystemExit("sitp.distributed.run: more than one node needs a --hostfile")
    total = a.nproc_per_node * nnodes
    env = dict(os.environ if environ is None else environ)
    env["MASTER_ADDR"] = a.master_addr or nodes[0]
    env["MASTER_PORT"] = str(a.master_port)
    cmd = [mpirun, "-n", str(total)]
    if kind == "openmpi":
        for name in ("MASTER_ADDR", "MASTER_PORT"):
            cmd += ["-x", name]
        if a.hostfile:
            cmd += ["--hostfile", a.hostfile, "--map-by", f"ppr:{a.nproc_per_node}:node"]
        else:
            cmd += ["--oversubscribe"]
    elif a.hostfile:
        cmd += ["-f", a.hostfile, "-ppn", str(a.nproc_per_node)]
    cmd += shlex.split(a.mpirun_args)
    cmd += [sys.executable, str(BOOTSTRAP)] + (["-m"] if a.module else []) + [a.script, *a.args]
    return cmd, env


def _kill(proc: subprocess.Popen) -> None:
    """End mpirun and every rank: they share the session the launcher started."""
    for sig, wait in ((signal.SIGTERM, 5), (signal.SIGKILL, 5)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(wait)
            return
        except subprocess.TimeoutExpired:
            continue


def main(argv: list[str] | None = None) -> int:
    try:
        return launch(parse(sys.argv[1:] if argv is None else argv), sys.stdout, sys.stderr)
    except KeyboardInterrupt:  # Ctrl-C: launch has ended the job
        return 130


def launch(a: argparse.Namespace, stdout, stderr, environ=None, cwd=None) -> int:
    """Run the job that the parsed options ``a`` describe, in the environment ``environ``
    (default: this process's) and the directory ``cwd`` (default: this process's);
    mpirun's output and the ranks' failure reports go to the text streams ``stdout`` and
    ``stderr``. Returns the exit status (``main``'s). A KeyboardInterrupt ends the job,
    then goes on to the caller. ``sitp.distributed.spawn`` calls it in its own process."""
    mpirun = find_mpirun()
    cmd, env = command(a, mpirun, flavour(mpirun), environ)
    with tempfile.TemporaryDirectory(prefix="sitp-run-") as failures:
        env["SITP_RUN_FAILURES"] = failures  # _bootstrap._fail leaves its report here
        # mpirun's own messages (MPICH's on stdout, Open MPI's on stderr) pass through
        # here, to be read for a rank that died of a signal: it leaves no report of its own
        proc = subprocess.Popen(
            cmd,
            env=env,
            cwd=cwd,
            start_new_session=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            errors="replace",
        )
        said: list[str] = []
        copiers = [
            threading.Thread(target=_copy, args=(stream, sink, said), daemon=True)
            for stream, sink in ((proc.stdout, stdout), (proc.stderr, stderr))
        ]
        for copier in copiers:
            copier.start()
        status = 130
        try:
            status = _run(proc, a, stderr)
            return status
        except KeyboardInterrupt:
            _kill(proc)
            raise
        finally:
            for copier in copiers:
                copier.join(timeout=5)
            reports = sorted(Path(failures).glob("rank*[0-9]"))
            for report in reports:
                stderr.write(report.read_text(encoding="utf-8"))
            if status not in (0, 124, 130) and not reports:
                stderr.write(_signalled(said, Path(failures)))
            stderr.flush()


def _copy(stream, sink, said: list) -> None:
    """Copy one of mpirun's streams to ours, line by line, keeping the lines."""
    for line in iter(stream.readline, ""):
        sink.write(line)
        sink.flush()
        said.append(line)


def _signalled(said: list[str], folder: Path) -> str:
    """Name the rank that died without a report (a signal: SIGKILL, the OOM killer), from
    mpirun's message and the ranks' pid files (``_bootstrap``)."""
    text = "".join(said)
    ranks = {}
    for f in folder.glob("pid*[0-9]"):
        try:
            ranks[int(f.read_text().strip())] = int(f.name[3:])
        except ValueError:
            continue
    pid = re.search(r"PID (\d+)", text)
    sig = re.search(r"(?:KILLED BY SIGNAL:?|[Ss]ignal) (\d+)", text)
    rank = re.search(r"process rank (\d+)", text)  # Open MPI names it
    who = None
    if rank:
        who = int(rank.group(1))
    elif pid and int(pid.group(1)) in ranks:
        who = ranks[int(pid.group(1))]
    what = f"signal {sig.group(1)}" if sig else "a signal, or an exit that bypassed the launcher"
    if sig:
        try:
            what += f" ({signal.Signals(int(sig.group(1))).name})"
        except ValueError:
            pass
    name = f"rank {who}" if who is not None else "a rank"
    pid_text = f" (pid {pid.group(1)})" if pid else ""
    return (
        f"sitp.distributed.run: {name}{pid_text} was ended by {what} and left no "
        "traceback; MPI then ended the other ranks\n"
    )


def _run(proc: subprocess.Popen, a: argparse.Namespace, stderr) -> int:
    try:
        status = proc.wait(a.timeout)
    except subprocess.TimeoutExpired:
        _kill(proc)
        stderr.write(
            f"sitp.distributed.run: the job ran past --timeout {a.timeout:g} s; killed it\n"
        )
        return 124
    return status if status >= 0 else 128 - status


if __name__ == "__main__":
    sys.exit(main())

"""What each rank runs under ``python -m sitp.distributed.run``: set torchrun's variables,
run the user's script or module, and end the whole job if it fails.

``mpirun`` starts ``python .../_bootstrap.py [-m] target args...`` once per rank. This file
is run by path, so importing it imports neither sitp nor numba (a script that never
imports sitp does not pay for them). It sets, as torchrun does, ``RANK``, ``WORLD_SIZE``,
``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``, ``GROUP_RANK`` (the node), ``MASTER_ADDR`` and
``MASTER_PORT``; then runs the target with :mod:`runpy` as ``python script.py`` or
``python -m module`` would (``sys.argv`` and ``sys.path[0]`` set alike).

A rank whose target raises prints the traceback, each line prefixed ``[rank R]:``, and
calls ``MPI.COMM_WORLD.Abort``, which ends every rank at once: the others, blocked in a
collective that the failed rank will never join, would otherwise wait for ever. A rank
that calls ``sys.exit(n)`` with n != 0 ends the job the same way, with status n.
"""

from __future__ import annotations

import os
import runpy
import sys
import traceback

try:
    from mpi4py import MPI
except ImportError:  # the launcher checks for mpi4py; this is for a bare mpirun of this file
    MPI = None


def _env_int(*names: str) -> int | None:
    for name in names:
        v = os.environ.get(name)
        if v not in (None, ""):
            return int(v)
    return None


def set_env() -> int:
    """Set torchrun's variables from MPI (its process manager's variables, else MPI
    itself); returns the rank."""
    rank = _env_int("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK")
    size = _env_int("PMI_SIZE", "OMPI_COMM_WORLD_SIZE")
    local = _env_int("MPI_LOCALRANKID", "OMPI_COMM_WORLD_LOCAL_RANK")
    local_size = _env_int("MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE")
    if MPI is not None and None in (rank, size, local, local_size):
        world = MPI.COMM_WORLD
        rank, size = world.Get_rank(), world.Get_size()
        node = world.Split_type(MPI.COMM_TYPE_SHARED)
        local, local_size = node.Get_rank(), node.Get_size()
        node.Free()
    if rank is None:  # no MPI at all: a world of one
        rank, size, local, local_size = 0, 1, 0, 1
    os.environ.update(
        RANK=str(rank),
        WORLD_SIZE=str(size),
        LOCAL_RANK=str(local),
        LOCAL_WORLD_SIZE=str(local_size),
        GROUP_RANK=str(rank // max(local_size, 1)),
        ROLE_RANK=str(rank),
        ROLE_WORLD_SIZE=str(size),
    )
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29500")
    return rank


def _fail(rank: int, status: int, text: str) -> None:
    prefix = f"[rank {rank}]: "
    report = "".join(prefix + line + "\n" for line in text.rstrip("\n").split("\n"))
    sys.stdout.flush()
    # MPI's abort can end the job before mpirun has forwarded this rank's stderr, and the
    # message would be lost: where the launcher gave a folder (on this host), the rank
    # leaves it there and the launcher prints it once the job has ended.
    folder = os.environ.get("SITP_RUN_FAILURES")
    if folder and os.path.isdir(folder):
        path = os.path.join(folder, f"rank{rank:06d}")
        with open(path + ".tmp", "w", encoding="utf-8") as f:
            f.write(report)
        os.replace(path + ".tmp", path)
    else:
        sys.stderr.write(report)
        sys.stderr.flush()
    if MPI is not None:
        MPI.COMM_WORLD.Abort(status)
    os._exit(status)


def _user_frames(e: BaseException):
    """The traceback from the first frame that is neither this file's nor runpy's."""
    tb = e.__traceback__
    while tb is not None and tb.tb_next is not None:
        name = tb.tb_frame.f_code.co_filename
        if name != __file__ and "runpy" not in name:
            break
        tb = tb.tb_next
    return tb


def main(argv: list[str]) -> None:
    if not argv or argv[0] == "-m" and len(argv) < 2:
        sys.exit("usage: _bootstrap.py [-m module | script.py] args...")
    rank = set_env()
    folder = os.environ.get("SITP_RUN_FAILURES")
    if folder and os.path.isdir(folder):  # which process is which rank, for the launcher's
        with open(os.path.join(folder, f"pid{rank:06d}"), "w") as f:  # report of a signal
            f.write(f"{os.getpid()}\n")
    # One write a line: a rank's line appears before an abort can kill the rank, and
    # whole, never broken into print's pieces among another rank's (which unbuffered
    # output, one write a piece, lets mpirun's forwarding do).
    for stream in (sys.stdout, sys.stderr):
        stream.reconfigure(line_buffering=True, write_through=False)
    module = argv[0] == "-m"
    target = argv[1] if module else argv[0]
    rest = argv[2:] if module else argv[1:]
    try:
        if module:
            sys.argv = [target, *rest]
            sys.path[0] = os.getcwd()
            runpy.run_module(target, run_name="__main__", alter_sys=True)
        else:
            sys.argv = [target, *rest]
            sys.path[0] = os.path.dirname(os.path.abspath(target))
            runpy.run_path(target, run_name="__main__")
    except SystemExit as e:
        code = e.code
        if code is None or code == 0:
            return
        status = code if isinstance(code, int) else 1
        message = "" if isinstance(code, int) else f"{code}\n"
        _fail(rank, status, f"{message}exited with status {status}")
    except BaseException as e:
        _fail(rank, 1, "".join(traceback.format_exception(type(e), e, _user_frames(e))))
    sys.stdout.flush()


if __name__ == "__main__":
    main(sys.argv[1:])

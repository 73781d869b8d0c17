"""``sitp.distributed.spawn``: run a plain Python function on N ranks, from a script, a
page or a notebook (chapter 7), as ``torch.multiprocessing.spawn`` does.

    import sitp
    import sitp.distributed as dist

    def main(rank, n):
        dist.init_process_group()
        x = sitp.full((n,), float(rank))
        dist.all_reduce(x)
        return x.tolist()

    print(dist.spawn(main, args=(3,), nprocs=2))   # [[1.0, 1.0, 1.0], [1.0, 1.0, 1.0]]

torch forks or spawns Python processes and connects them through a TCP store; sitp's
collectives run on MPI, so the processes are started by the launcher of 7.1
(``python -m sitp.distributed.run``, that is ``mpirun``), and each calls
``fn(rank, *args)``. The differences from torch's, each a consequence of that:

- the function travels to the ranks by value. torch's ``spawn`` start method pickles it
  by name, which fails for a function defined in a notebook or a page (its module,
  ``__main__``, is not importable by the new processes). Here a function from
  ``__main__`` is sent as its source code, with the module-level names it uses: modules
  as imports (``sitp``, ``dist`` above), functions of ``__main__`` as their source too,
  importable functions and classes by name, and any other value pickled. A lambda or a
  closure cannot be sent (their source is not a definition of their own): define the
  function with ``def`` at the top level;
- each rank's return value comes back: ``spawn`` returns the list of them, by rank
  (torch's returns None), and what the ranks print is printed here once the job has
  ended, so a notebook or a page's recorded output shows it;
- a rank that raises ends the whole job (the launcher's guarantee): ``spawn`` raises
  :class:`ProcessRaisedException` with that rank's traceback; a job that exits
  otherwise, or runs past ``timeout`` seconds, :class:`ProcessExitedException`.

``join=False``, ``daemon`` and ``start_method`` (torch's process-management options) have
no meaning for an MPI job and are not taken.
"""

from __future__ import annotations

import inspect
import io
import pickle
import re
import subprocess
import sys
import tempfile
import textwrap
import types
from pathlib import Path


class ProcessException(Exception):
    """A rank of a :func:`spawn` job failed (torch's base class of the same name)."""

    def __init__(self, msg: str, error_index: int | None = None, error_pid: int | None = None):
        super().__init__(msg)
        self.msg = msg
        self.error_index = error_index  # the rank that failed, when known
        self.error_pid = error_pid


class ProcessRaisedException(ProcessException):
    """A rank raised: the message holds its traceback, each line prefixed ``[rank R]:``."""


class ProcessExitedException(ProcessException):
    """The job ended without a traceback: a nonzero exit, a signal, or the timeout."""

    def __init__(self, msg, error_index=None, error_pid=None, exit_code=None, signal_name=None):
        super().__init__(msg, error_index, error_pid)
        self.exit_code = exit_code
        self.signal_name = signal_name


# ------------------------------------------------------------ the function, by value
def _names(code: types.CodeType) -> set[str]:
    """The global names a code object (and the functions and classes nested in it) reads."""
    out = set(code.co_names)
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            out |= _names(c)
    return out


def _importable(obj) -> bool:
    """Whether a new process can import ``obj`` by its module and name."""
    mod = getattr(obj, "__module__", None)
    name = getattr(obj, "__qualname__", None)
    if mod in (None, "__main__", "builtins") or name is None or "<locals>" in name:
        return mod == "builtins"
    found = sys.modules.get(mod)
    for part in name.split("."):
        found = getattr(found, part, None)
    return found is obj


def _source(fn) -> tuple[str, str, int]:
    """The dedented ``def`` of a function of ``__main__`` (or of any file), its file and
    first line (a rank's traceback then shows the lines where the function was written)."""
    if fn.__name__ == "<lambda>":
        raise TypeError(
            "spawn cannot send a lambda to the ranks (its source is not a definition of its "
            "own): define the function with def"
        )
    if fn.__closure__:
        raise TypeError(
            f"spawn cannot send {fn.__name__}: it is a closure over "
            f"{', '.join(fn.__code__.co_freevars)} (a function defined inside another); "
            "define it at the top level and pass the values in args"
        )
    try:
        lines, first = inspect.getsourcelines(fn)
    except (OSError, TypeError) as e:
        raise TypeError(
            f"spawn cannot find the source of {fn.__name__} ({e}): define it in a file, a "
            "notebook cell or a page's code block, or in an importable module"
        ) from None
    src = textwrap.dedent("".join(lines))
    if not _defines(src, fn):
        raise TypeError(
            f"spawn: the source of {fn.__name__} in {fn.__code__.co_filename} is not the "
            "function's (the file changed since it was run?)"
        )
    return src, fn.__code__.co_filename, max(first, 1)


def _defines(src: str, fn) -> bool:
    """Whether ``src`` defines ``fn``: a function of its name, arguments, local names and
    global names (not its bytecode, which the compiler words by context: a method call on
    an imported module compiles differently in the module than alone)."""
    try:
        module = compile(src, "<source>", "exec")
    except SyntaxError:
        return False
    want = fn.__code__
    return any(
        isinstance(c, types.CodeType)
        and (c.co_name, c.co_argcount, c.co_varnames)
        == (want.co_name, want.co_argcount, want.co_varnames)
        and set(c.co_names) == set(want.co_names)
        for c in module.co_consts
    )


def _pack(fn) -> dict:
    """What a new process needs to rebuild ``fn``: a list of (name, kind, what) to define
    in one namespace, then the function's name there."""
    if _importable(fn):  # a function of a module: by name
        return {"entries": [], "fn": ("import", (fn.__module__, fn.__qualname__))}
    entries: dict[str, tuple] = {}
    todo = [fn]
    seen = set()
    while todo:
        f = todo.pop()
        if id(f) in seen:
            continue
        seen.add(id(f))
        entries[f.__name__] = (f.__name__, "source", _source(f))
        for name in sorted(_names(f.__code__)):
            if name in entries or name not in f.__globals__:
                continue  # a builtin, an attribute name, or defined already
            value = f.__globals__[name]
            if isinstance(value, types.ModuleType):
                entries[name] = (name, "module", value.__name__)
            elif _importable(value):
                entries[name] = (name, "import", (value.__module__, value.__qualname__))
            elif isinstance(value, types.FunctionType):
                todo.append(value)  # a helper of __main__: its source too
            else:
                try:
                    entries[name] = (name, "value", pickle.dumps(value))
                except Exception as e:
                    raise TypeError(
                        f"spawn cannot send the global {name!r} that {f.__name__} uses "
                        f"({type(value).__name__}: {e}); pass it in args, or build it "
                        "inside the function"
                    ) from None
    order = sorted(entries.values(), key=lambda e: e[1] == "source")  # definitions last
    return {"entries": order, "fn": ("name", fn.__name__)}


# ------------------------------------------------------------ the job
def spawn(fn, args=(), nprocs: int = 1, timeout: float | None = None) -> list:
    """Run ``fn(rank, *args)`` on ``nprocs`` ranks of an MPI job; return their results.

    Args:
        fn: a function defined with ``def`` (in ``__main__``, a notebook or a page, or
            an importable module). It is called with the rank first; it calls
            ``sitp.distributed.init_process_group()`` itself, as under torch.
        args: more positional arguments, pickled.
        nprocs: the ranks (the launcher's ``--nproc-per-node``).
        timeout: seconds before the whole job is killed (None: no limit).

    Returns:
        The ranks' return values, in rank order (each pickled back).

    Raises:
        ProcessRaisedException: a rank raised (its traceback is in the message).
        ProcessExitedException: the job failed otherwise or ran past ``timeout``.
        TypeError: ``fn`` cannot be sent (a lambda, a closure, a global that does not
            pickle) or an argument has the wrong type.
    """
    if not callable(fn) or not isinstance(fn, types.FunctionType):
        raise TypeError(f"spawn: fn must be a function (got {type(fn).__name__})")
    if not isinstance(args, tuple):
        raise TypeError(f"spawn: args must be a tuple (got {type(args).__name__})")
    if isinstance(nprocs, bool) or not isinstance(nprocs, int) or nprocs < 1:
        raise ValueError(f"spawn: nprocs must be a positive int (got {nprocs!r})")
    if timeout is not None and not timeout > 0:
        raise ValueError(f"spawn: timeout must be positive seconds (got {timeout!r})")
    payload = _pack(fn)
    payload["args"] = args
    payload["path"] = [p for p in sys.path if p]
    with tempfile.TemporaryDirectory(prefix="sitp-spawn-") as tmp:
        folder = Path(tmp)
        try:
            blob = pickle.dumps(payload)
        except Exception as e:
            raise TypeError(f"spawn: the args do not pickle ({type(e).__name__}: {e})") from None
        (folder / "payload.pkl").write_bytes(blob)
        # the launcher of 7.1 (python -m sitp.distributed.run), run in this process
        from sitp.distributed import run as launcher  # late: python -m must find it unimported

        argv = ["--nproc-per-node", str(nprocs)]
        if timeout is not None:
            argv += ["--timeout", f"{timeout:g}"]
        argv += ["-m", "sitp.distributed._spawn_rank", str(folder)]
        out, err = io.StringIO(), io.StringIO()
        try:
            status = launcher.launch(launcher.parse(argv), out, err)
        except SystemExit as e:  # no mpirun, or one that does not run
            raise ProcessExitedException(f"spawn: {e}", exit_code=1) from None
        done = subprocess.CompletedProcess(argv, status, out.getvalue(), err.getvalue())
        sys.stdout.write(done.stdout)
        sys.stdout.flush()
        if done.returncode != 0:
            _raise(done, nprocs, timeout)
        if done.stderr:
            sys.stderr.write(done.stderr)
        results = []
        for r in range(nprocs):
            path = folder / f"result{r}.pkl"
            if not path.exists():
                raise ProcessExitedException(
                    f"spawn: rank {r} returned no result\n{done.stderr}", error_index=r
                )
            results.append(pickle.loads(path.read_bytes()))
    return results


def _raise(done: subprocess.CompletedProcess, nprocs: int, timeout) -> None:
    err = done.stderr
    ranks = [int(m) for m in re.findall(r"^\[rank (\d+)\]: ", err, re.MULTILINE)]
    rank = ranks[0] if ranks else None
    if done.returncode == 124 and timeout is not None:
        raise ProcessExitedException(
            f"spawn: the job of {nprocs} ranks ran past timeout={timeout:g} s and was killed\n"
            f"{err}",
            exit_code=124,
        )
    if "Traceback" in err and rank is not None:
        raise ProcessRaisedException(
            f"\n-- rank {rank} terminated with the following error:\n{err}", error_index=rank
        )
    raise ProcessExitedException(
        f"spawn: the job of {nprocs} ranks exited with status {done.returncode}"
        + (f" (rank {rank})" if rank is not None else "")
        + f"\n{err}",
        error_index=rank,
        exit_code=done.returncode,
    )

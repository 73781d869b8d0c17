"""The worker process of :mod:`sitp.bench.ab`: one side ("arm") of an A-against-B timing.

:class:`sitp.bench.ab.Worker` starts this file as a script (``runpy``, not ``import``),
so the process imports nothing of sitp by itself: only what its workloads' factories
import. An arm that times PyTorch runs no numba kernel, and numba's thread pool never
starts in it.

Before anything else the worker pins itself to the cores in ``SITP_AB_CORES`` (a JSON
list) with ``os.sched_setaffinity``; the parent has already set ``NUMBA_NUM_THREADS``,
``OMP_NUM_THREADS``, ``OPENBLAS_NUM_THREADS`` and ``MKL_NUM_THREADS`` to
``SITP_AB_THREADS`` in its environment, and after each factory the worker calls
``torch.set_num_threads`` if the factory imported torch.

It reads one JSON command a line on stdin and answers one JSON line on the pipe that
was its stdout; its stdout is pointed at stderr, so what a workload prints goes there.
An exception is answered as ``{"ok": false, "error": <traceback>}``.

Commands:

* ``load`` (``key``, ``factory``, ``kwargs``, ``warmup``, ``clock``): ``factory`` is
  ``"package.module:function"`` or ``"/path/to/file.py:function"``; ``function(**kwargs)``
  returns the workload, a callable of no arguments. The worker calls it ``warmup``
  times untimed by the harness (their seconds are answered as ``warmup_s``: a
  compiler's first calls), then answers the workload's ``info`` (a dict, or a callable
  returning one) if it has one.
* ``time`` (``key``, ``calls``): ``calls`` calls, each timed on its own; answers their
  seconds, and the block's wall and CPU seconds. A call that returns a dict with a
  ``"seconds"`` entry timed itself (it leaves out what it does untimed, such as an
  evaluation); the rest of the last such dict is answered as ``extra``.
* ``result`` (``key``): the workload's ``result()``, if it has one.
* ``about``: the process's CPU seconds, its cores, threads and library versions.
* ``exit``.
"""

import importlib
import importlib.util
import json
import os
import sys
import time
import traceback

LIBRARIES = ("sitp", "torch", "numba", "numpy")


def cpu_seconds() -> float:
    """CPU seconds of this process (all its threads; ``time.process_time``, finer than
    the scheduler's ticks) and of the children it waited for (``os.times``)."""
    t = os.times()
    return time.process_time() + t.children_user + t.children_system


def resolve(spec: str):
    """The factory named by ``"module:function"`` or ``"path/file.py:function"``."""
    where, _, name = spec.rpartition(":")
    if where.endswith(".py"):
        module_name = "_sitp_ab_" + os.path.splitext(os.path.basename(where))[0]
        module = sys.modules.get(module_name)
        if module is None:
            loader = importlib.util.spec_from_file_location(module_name, where)
            module = importlib.util.module_from_spec(loader)
            sys.modules[module_name] = module  # dataclasses and pickling look it up
            loader.loader.exec_module(module)
    else:
        module = importlib.import_module(where)
    return getattr(module, name)


def set_threads(n: int) -> None:
    """PyTorch reads OMP_NUM_THREADS at start; set it again in case a factory changed it."""
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(n)


def threads_in_use() -> dict:
    """The thread counts of the libraries loaded (numba's from its config: asking numba
    directly would start its pool)."""
    out = {}
    if "torch" in sys.modules:
        out["torch"] = sys.modules["torch"].get_num_threads()
    if "numba" in sys.modules:
        out["numba"] = sys.modules["numba"].config.NUMBA_NUM_THREADS
    return out


def call_seconds(fn, clock, threads):
    """Run ``fn()`` once; (seconds, what it returned)."""
    if clock == "cpu":  # CPU time over the threads: another program's turn is not counted
        c0 = time.process_time()
        got = fn()
        seconds = (time.process_time() - c0) / threads
    else:
        t0 = time.perf_counter()
        got = fn()
        seconds = time.perf_counter() - t0
    if isinstance(got, dict) and "seconds" in got:
        return float(got["seconds"]), got
    return seconds, None


class Loop:
    """The worker's state: its workloads by key."""

    def __init__(self, threads: int):
        self.threads = threads
        self.loads = {}  # key -> (workload, clock)

    def load(self, key, factory, kwargs, warmup, clock):
        t0 = time.perf_counter()
        fn = resolve(factory)(**kwargs)
        set_threads(self.threads)
        setup_s = time.perf_counter() - t0
        warm = []
        for _ in range(warmup):
            warm.append(call_seconds(fn, clock, self.threads)[0])
        self.loads[key] = (fn, clock)
        info = getattr(fn, "info", None)
        info = info() if callable(info) else (info or {})
        return {"setup_s": setup_s, "warmup_s": warm, "info": info, "threads": threads_in_use()}

    def time(self, key, calls):
        fn, clock = self.loads[key]
        times, extra = [], None
        c0, t0 = cpu_seconds(), time.perf_counter()
        for _ in range(calls):
            seconds, got = call_seconds(fn, clock, self.threads)
            times.append(seconds)
            if got is not None:
                extra = {k: v for k, v in got.items() if k != "seconds"}
        wall = time.perf_counter() - t0
        return {"times": times, "wall_s": wall, "cpu_s": cpu_seconds() - c0, "extra": extra}

    def result(self, key):
        fn = self.loads[key][0]
        return {"result": fn.result() if hasattr(fn, "result") else None}

    def about(self):
        versions = {}
        for name in LIBRARIES:
            if name in sys.modules:
                versions[name] = getattr(sys.modules[name], "__version__", "unknown")
        cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
        return {
            "pid": os.getpid(),
            "cpu_s": cpu_seconds(),
            "cores": cores,
            "threads": threads_in_use(),
            "versions": versions,
            "python": sys.version.split()[0],
        }


def main() -> None:
    cores = json.loads(os.environ.get("SITP_AB_CORES", "null"))
    if cores and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, cores)  # before any library starts a thread: they inherit it
    loop = Loop(int(os.environ.get("SITP_AB_THREADS", "1")))
    answers = os.fdopen(os.dup(1), "w", buffering=1)  # the parent reads this pipe
    os.dup2(2, 1)  # a workload's prints go to stderr, not into the answers
    for line in sys.stdin:
        msg = json.loads(line)
        cmd = msg.pop("cmd")
        try:
            if cmd == "exit":
                answer = {}
            else:
                answer = getattr(loop, cmd)(**msg)
            answer["ok"] = True
        except BaseException:  # noqa: BLE001 - every failure goes back to the parent
            answer = {"ok": False, "error": traceback.format_exc()}
        answers.write(json.dumps(answer) + "\n")
        if cmd == "exit":
            break


if __name__ == "__main__":
    main()

"""Autotuning: each generated kernel's thread split, chosen by timing it on its real inputs.

A generated kernel whose index space reaches ``codegen.PARALLEL_MIN`` entries comes in
two versions: a parallel one (its outer loop a ``prange``) and a serial twin. Without
tuning, the program runs the twin only when numba has one thread; the threshold is one
number for every kernel and every CPU. With ``sitp.compile(fn, tune=True)`` (or
``SITP_TUNE=1``), the first call of each such kernel on more than one thread times both
versions on that call's arrays, a few calls each, interleaved, and keeps the faster by
the median; later calls run the one kept. A GEMM with an epilogue (``rules.py``) is
tuned the same way.

The decision is cached on disk beside the kernels' sources (``codegen.kernel_dir()``),
one small JSON file per decision, keyed by the kernel's source hash (which fixes its
shapes and strides), the CPU numba compiles for and the thread count. A second compile of
the same program, in this process or a later one, reads the decision and times nothing.

Both versions compute the same values (the twin is the same loops with ``range`` for
``prange``), so a tuned program's outputs equal the untuned one's. The kernels write
only their outputs, never their inputs (``passes.plan_memory`` never gives an output
the slot of an input of the same step), which is why the timing calls can be repeated.
The search is two candidates per kernel: BEAM search over tile shapes (tinygrad's) is
the larger version of the same loop, not built here.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import json
import os
import time

import numba

from sitp import _target
from sitp.compile import codegen

ROUNDS = 5  # timed calls of each version, interleaved (after one untimed call of each)
ENV = "SITP_TUNE"  # "1": sitp.compile's default is tune=True

_current: contextvars.ContextVar = contextvars.ContextVar("sitp_tuner", default=None)


def key(source: str, threads: int, cpu: str | None = None) -> str:
    """The name of a decision: the kernel's source hash, the CPU and the thread count."""
    h = hashlib.sha1(source.encode()).hexdigest()[:16]  # codegen.load's hash
    return f"{h}_{cpu or _target.cpu_name()}_t{threads}"


class Tuner:
    """Chooses, per kernel and thread count, between its parallel and serial version.

    Args:
        directory: where decisions are cached (default ``codegen.kernel_dir()/tune``).
        timer: a clock in seconds (tests pass a fake one).
        threads: a function returning the thread count (default numba's).
        cpu: the CPU name in the key (default ``sitp._target.cpu_name()``).
        rounds: timed calls of each version.

    ``stats`` counts what it did: kernels ``timed``, decisions read from the disk cache
    (``cached``), choices of the ``serial`` twin, the ``seconds`` spent timing, and the
    medians of the timed kernels added up, each version's (``parallel_s``, ``serial_s``).
    """

    def __init__(self, directory=None, timer=time.perf_counter, threads=None, cpu=None,
                 rounds=ROUNDS):  # fmt: skip
        self.directory = directory or os.path.join(codegen.kernel_dir(), "tune")
        self.timer, self.rounds = timer, rounds
        self.threads = threads or numba.get_num_threads
        self.cpu = cpu or _target.cpu_name()
        self.decisions: dict[str, str] = {}
        self.stats = dict(timed=0, cached=0, serial=0, seconds=0.0, parallel_s=0.0, serial_s=0.0)

    def choose(self, source: str, parallel, serial, args) -> str:
        """The version to run, "parallel" or "serial", at the current thread count; if
        undecided, both are timed on ``args`` (the kernel's arrays, outputs included)."""
        threads = self.threads()
        if threads == 1:
            return "serial"  # the untuned rule: one thread never starts the pool
        k = key(source, threads, self.cpu)
        if k in self.decisions:
            return self.decisions[k]
        path = os.path.join(self.directory, k + ".json")
        try:
            with open(path) as f:
                choice = json.load(f)["choice"]
            self.stats["cached"] += 1
        except (OSError, ValueError, KeyError):
            choice = self._time(path, parallel, serial, args)
        self.decisions[k] = choice
        self.stats["serial"] += choice == "serial"
        return choice

    def _time(self, path, parallel, serial, args) -> str:
        t0 = self.timer()
        versions = {"parallel": parallel, "serial": serial}
        for fn in versions.values():
            fn(*args)  # numba compiles (or loads) it; the pool starts
        samples: dict[str, list] = {"parallel": [], "serial": []}
        for r in range(self.rounds):
            for name in ("parallel", "serial") if r % 2 == 0 else ("serial", "parallel"):
                s = self.timer()
                versions[name](*args)
                samples[name].append(self.timer() - s)
        med = {name: sorted(v)[len(v) // 2] for name, v in samples.items()}
        choice = "serial" if med["serial"] < med["parallel"] else "parallel"
        self.stats["timed"] += 1
        self.stats["seconds"] += self.timer() - t0
        self.stats["parallel_s"] += med["parallel"]
        self.stats["serial_s"] += med["serial"]
        os.makedirs(self.directory, exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            json.dump({"choice": choice, "median_s": med}, f)
        os.replace(tmp, path)  # atomic: a concurrent session reads the whole file or none
        return choice


def resolve(tune) -> Tuner | None:
    """``sitp.compile``'s ``tune``: a Tuner, True (a new one), False, or None (``SITP_TUNE``)."""
    if tune is None:
        tune = os.environ.get(ENV, "0") not in ("", "0")
    if isinstance(tune, Tuner):
        return tune
    return Tuner() if tune else None


@contextlib.contextmanager
def using(tuner: Tuner | None):
    """Make ``tuner`` the one the steps built inside this block consult (``current``)."""
    tok = _current.set(tuner)
    try:
        yield
    finally:
        _current.reset(tok)


def current() -> Tuner | None:
    return _current.get()


def picker(source: str, parallel, serial):
    """A function of a call's arrays that returns the version to run: the tuner's choice
    when compiling under one (``using``), else the untuned rule (serial on one thread)."""
    tuner = current()
    if serial is None:
        return lambda args: parallel
    if tuner is None:
        return lambda args: serial if numba.get_num_threads() == 1 else parallel
    chosen: dict[int, object] = {}  # thread count -> version, so a call looks up one dict

    def pick(args):
        t = tuner.threads()
        fn = chosen.get(t)
        if fn is None:
            choice = tuner.choose(source, parallel, serial, args)
            fn = chosen[t] = serial if choice == "serial" else parallel
        return fn

    return pick

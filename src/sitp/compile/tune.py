"""Autotuning: a small beam search over each generated kernel's thread count, fusion and
block size, timed on the kernel's real inputs.

Without tuning, a compiled program follows fixed rules: a kernel whose index space reaches
``codegen.PARALLEL_MIN`` entries runs its parallel version (a ``prange`` on all of
numba's threads) unless numba has one thread, when it runs its serial twin; a GEMM with a
pointwise epilogue (``rules.py``) always runs fused, one block of ``SMALL_MR`` rows per
task. With ``sitp.compile(fn, tune=True)`` (or ``SITP_TUNE=1``, or torch's
``mode="max-autotune"``), the first call of each such kernel searches its *knobs*:

* ``threads``: 1 (the serial twin), then 2, 4, ... up to numba's thread count (the
  parallel version, numba's ``set_num_threads`` lowering the count for that call);
* ``fuse`` (a GEMM with an epilogue): ``"epilogue"``, the fused kernel, or ``"apart"``,
  the backend's product (``blas.matmul``, eager's) followed by the epilogue as a kernel
  of its own, as it was before the rule fused them;
* ``rows`` (a fused GEMM): how many blocks of ``SMALL_MR`` rows a task computes before it
  runs the epilogue on them (1, 2, 4, 8): bigger blocks, fewer and larger tasks, but rows
  that have left L1 by the time the epilogue reads them.

The search is a beam search (as tinygrad's ``BEAM=2`` over its kernels' optimisations): it starts from the fixed rule's
choice, times every configuration one knob step away from those in its beam (one untimed
call, then ``PROBE`` timed calls, their median), keeps the ``WIDTH`` fastest seen, and
stops when the beam has no neighbour left untimed. The finalists then take turns,
``ROUNDS`` timed calls each, and the smallest median wins: a first probe of a few
microseconds is noisy, the interleaved final is the decision.

The decision is cached on disk beside the kernels' sources (``codegen.kernel_dir()``),
one small JSON file per kernel, keyed by the kernel's source hash, the call's sizes (which
the source fixes, except a dynamic entry's, whose source is the same at every batch
size), the CPU numba compiles for and the thread count. A second compile of the
same program, in this process or a later one, reads the decision and times nothing.

The thread count and the block size change no value: the twin is the same loops with
``range`` for ``prange``, and a row's entries are the same sums in any block. The fusion
choice can change the last bits: the backend's product may sum in other blocks, and the
epilogue's ``contract`` flag fuses a multiply and an add that the standalone kernel
rounds twice. A tuned program therefore equals the untuned one to rounding, and bit for
bit when no ``apart`` was chosen (``tests/test_compile_tune.py``). The kernels write only
their outputs, never their inputs (``passes.plan_memory`` never gives an output the slot
of an input of the same step), which is why the timing calls can be repeated.
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

PROBE = 3  # timed calls of a configuration the search visits (after one untimed call)
ROUNDS = 5  # timed calls of each finalist, interleaved
WIDTH = 2  # configurations kept in the beam, and finalists
ROWS = (1, 2, 4, 8)  # blocks of SMALL_MR rows per task of a fused GEMM
ENV = "SITP_TUNE"  # "1": sitp.compile's default is tune=True

_current: contextvars.ContextVar = contextvars.ContextVar("sitp_tuner", default=None)


def key(source: str, threads: int, cpu: str | None = None, args=()) -> str:
    """The name of a decision: the kernel's source hash, the CPU and the thread count,
    and, for a source with size arguments (a dynamic entry's, the same at every batch
    size), the call's sizes: the shapes of its arrays and its integers."""
    h = hashlib.sha1(source.encode()).hexdigest()[:16]  # codegen.load's hash
    sizes = [a.shape if hasattr(a, "shape") else a for a in args]
    if sizes:
        h += "_" + hashlib.sha1(repr(sizes).encode()).hexdigest()[:8]
    return f"{h}_{cpu or _target.cpu_name()}_t{threads}"


def thread_counts(threads: int) -> list:
    """1, 2, 4, ... below ``threads``, then ``threads`` itself."""
    counts, t = [], 1
    while t < threads:
        counts.append(t)
        t *= 2
    return counts + [threads]


def name(config: dict) -> str:
    """A configuration as one string, knobs in order: ``"fuse=apart,threads=2"``."""
    return ",".join(f"{k}={v}" for k, v in sorted(config.items()))


class Choices:
    """What the search may choose for one kernel, and how each choice is run.

    Args:
        parallel: the kernel's parallel version, a function of the call's arrays.
        serial: its serial twin, or None (a kernel too small for a ``prange``: the one
            version, nothing to choose on the ``threads`` knob).
        apart: for a GEMM with an epilogue, a function ``apart(args, one)`` that runs the
            product and then the epilogue as a kernel of its own (its serial twin if
            ``one``); None for a plain kernel.
        rows: whether ``parallel``/``serial`` take a block size (``ROWS``) as their
            last argument (a fused GEMM).

    A run returns what the version returned (a fused GEMM's product buffer, whose place
    the ``apart`` run takes with the backend's product).
    """

    def __init__(self, parallel, serial=None, apart=None, rows=False):
        self.parallel, self.serial, self.apart, self.rows = parallel, serial, apart, rows

    def knobs(self, threads: int) -> dict:
        k = {"threads": thread_counts(threads) if self.serial is not None else [threads]}
        if self.apart is not None:
            k["fuse"] = ["epilogue", "apart"]
        if self.rows:
            k["rows"] = list(ROWS)
        return k

    def size(self, threads: int) -> int:
        """How many configurations there are (a GEMM apart has no block size)."""
        k = self.knobs(threads)
        per_thread = len(k.get("rows", [1])) + (self.apart is not None)
        return len(k["threads"]) * per_thread

    def fixed(self, threads: int) -> dict:
        """The fixed rule's configuration: fused, one block per task, every thread."""
        c = {"threads": threads}
        if self.apart is not None:
            c["fuse"] = "epilogue"
        if self.rows:
            c["rows"] = 1
        return c

    def norm(self, config: dict, threads: int) -> dict:
        """``config`` with the block size dropped where the GEMM runs apart (it has none)."""
        c = {**self.fixed(threads), **config}
        if c.get("fuse") == "apart":
            c.pop("rows", None)
        return c

    def valid(self, config, threads: int) -> bool:
        """Whether ``config`` (read from a file) is one of this kernel's configurations."""
        knobs = self.knobs(threads)
        return (
            isinstance(config, dict)
            and all(k in knobs and v in knobs[k] for k, v in config.items())
            and self.norm(config, threads) == config
        )

    def run(self, config: dict, threads: int):
        """The function to call on the call's arrays to run ``config``: the kernel itself
        where it can be."""
        t = config["threads"]
        if config.get("fuse") == "apart":  # the backend's product threads by numba's count
            apart, one = self.apart, t == 1
            if t == threads:
                return lambda *args: apart(args, one)
            return lambda *args: with_threads(t, apart, args, one)
        fn = self.serial if t == 1 and self.serial is not None else self.parallel
        if self.rows:
            rows = config["rows"]
            if t in (1, threads):
                return lambda *args: fn(*args, rows)
            return lambda *args: with_threads(t, fn, *args, rows)
        if t in (1, threads):  # the serial twin, or every thread: the kernel itself
            return fn
        return lambda *args: with_threads(t, fn, *args)


def with_threads(t: int, fn, *args):
    """``fn(*args)`` with numba's thread count set to ``t`` for the call."""
    old = numba.get_num_threads()
    numba.set_num_threads(t)
    try:
        return fn(*args)
    finally:
        numba.set_num_threads(old)


class Tuner:
    """Chooses each kernel's configuration by a beam search (see the module).

    Args:
        directory: where decisions are cached (default ``codegen.kernel_dir()/tune``).
        timer: a clock in seconds (tests pass a fake one).
        threads: a function returning the thread count (default numba's).
        cpu: the CPU name in the key (default ``sitp._target.cpu_name()``).
        rounds: timed calls of each finalist.

    ``stats`` counts what it did: kernels searched (``timed``), decisions read from the
    disk cache (``cached``), ``configs`` timed in all, of the ``space`` of
    configurations the searched kernels have, the winners that run on fewer
    threads than numba has (``fewer``; ``serial`` of those on one), that run apart
    (``apart``) and that take more than one block per task (``rows``), the ``seconds``
    spent searching, and the searched kernels' medians added up: the fixed rule's
    configuration's (``fixed_s``) and the winner's (``tuned_s``).
    """

    def __init__(self, directory=None, timer=time.perf_counter, threads=None, cpu=None,
                 rounds=ROUNDS):  # fmt: skip
        self.directory = directory or os.path.join(codegen.kernel_dir(), "tune")
        self.timer, self.rounds = timer, rounds
        self.threads = threads or numba.get_num_threads
        self.cpu = cpu or _target.cpu_name()
        self.decisions: dict[str, dict] = {}
        self.stats = dict(timed=0, cached=0, configs=0, space=0, fewer=0, serial=0, apart=0,
                          rows=0, seconds=0.0, fixed_s=0.0, tuned_s=0.0)  # fmt: skip

    def choose(self, source: str, choices: Choices, args) -> dict:
        """The configuration to run at the current thread count; if undecided, searched
        on ``args`` (the kernel's arrays, outputs included)."""
        threads = self.threads()
        knobs = choices.knobs(threads)
        if all(len(v) == 1 for v in knobs.values()):
            return choices.fixed(threads)  # nothing to choose (one thread, a plain kernel)
        k = key(source, threads, self.cpu, args)
        if k in self.decisions:
            return self.decisions[k]
        path = os.path.join(self.directory, k + ".json")
        try:
            with open(path) as f:
                config = json.load(f)["choice"]
            if not choices.valid(config, threads):
                raise ValueError("a decision of another search")
            self.stats["cached"] += 1
        except (OSError, ValueError, KeyError):
            config = self._search(path, choices, knobs, threads, args)
        self.decisions[k] = config
        self.stats["fewer"] += config["threads"] < threads
        self.stats["serial"] += config["threads"] == 1
        self.stats["apart"] += config.get("fuse") == "apart"
        self.stats["rows"] += config.get("rows", 1) > 1
        return config

    def _median(self, fn, args, calls) -> float:
        samples = []
        for _ in range(calls):
            s = self.timer()
            fn(*args)
            samples.append(self.timer() - s)
        return sorted(samples)[len(samples) // 2]

    def _search(self, path, choices, knobs, threads, args) -> dict:
        t0 = self.timer()
        configs: dict[str, dict] = {}
        probe: dict[str, float] = {}

        def visit(c):
            n = name(c)
            if n not in configs:
                configs[n] = c
                fn = choices.run(c, threads)
                fn(*args)  # numba compiles (or loads) it; the pool starts
                probe[n] = self._median(fn, args, PROBE)

        fixed = choices.fixed(threads)
        visit(fixed)
        beam = [name(fixed)]
        while True:
            new = []
            for n in beam:
                c = configs[n]
                for knob, values in knobs.items():
                    if knob not in c:
                        continue
                    i = values.index(c[knob])
                    for j in (i - 1, i + 1):
                        if 0 <= j < len(values):
                            nc = choices.norm({**c, knob: values[j]}, threads)
                            if name(nc) not in configs:
                                new.append(nc)
            if not new:
                break
            for c in new:
                visit(c)
            beam = sorted(probe, key=probe.get)[:WIDTH]
        finalists = sorted(probe, key=probe.get)[:WIDTH]
        if name(fixed) not in finalists:
            finalists.append(name(fixed))  # the fixed rule's time, measured as the winner's
        runs = {n: choices.run(configs[n], threads) for n in finalists}
        samples: dict[str, list] = {n: [] for n in finalists}
        for r in range(self.rounds):
            for n in finalists if r % 2 == 0 else finalists[::-1]:
                s = self.timer()
                runs[n](*args)
                samples[n].append(self.timer() - s)
        med = {n: sorted(v)[len(v) // 2] for n, v in samples.items()}
        win = min(finalists, key=lambda n: (med[n], n != name(fixed)))  # a tie: the rule
        self.stats["timed"] += 1
        self.stats["configs"] += len(configs)
        self.stats["space"] += choices.size(threads)
        self.stats["seconds"] += self.timer() - t0
        self.stats["fixed_s"] += med[name(fixed)]
        self.stats["tuned_s"] += med[win]
        os.makedirs(self.directory, exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            json.dump({"choice": configs[win], "median_s": med, "probe_s": probe}, f)
        os.replace(tmp, path)  # atomic: a concurrent session reads the whole file or none
        return configs[win]


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


def picker(source: str, choices: Choices):
    """A function of a call's arrays (a list) that returns the function to call on them:
    the tuner's choice at the current thread count; None where there is nothing to
    choose at any thread count (a kernel without a twin, not a GEMM). Only called while
    compiling under a tuner (``using``)."""
    if choices.serial is None and choices.apart is None and not choices.rows:
        return None  # the kernel itself, as without a tuner (no look-up per call)
    tuner = current()
    chosen: dict[int, object] = {}  # thread count -> runner, so a call looks up one dict

    def pick(args):
        t = tuner.threads()
        fn = chosen.get(t)
        if fn is None:
            fn = chosen[t] = choices.run(tuner.choose(source, choices, args), t)
        return fn

    return pick

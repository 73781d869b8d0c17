"""sitp.bench.ab: one fair harness for timing A against B (sitp against PyTorch, compiled
against eager, one rank against two).

A speed comparison is fair before it is fast. Here each side ("arm") runs in a worker
process of its own (:mod:`sitp.bench.abworker`), so that numba's and PyTorch's thread
pools never share one. Every worker gets the same thread count (``NUMBA_NUM_THREADS``,
``OMP_NUM_THREADS``, ``OPENBLAS_NUM_THREADS``, ``MKL_NUM_THREADS``, and
``torch.set_num_threads`` where torch is loaded) and is pinned to the same cores.
Each arm builds its workload once and warms it with untimed calls (a compiler's
first calls; their seconds are reported apart). Then the arms take turns, round after
round, each timing a block of calls, in the order A, B in one round and B, A in the
next, so that a change of the machine's load falls on both. Each round gives each arm
the median of its block, and the ratio of the arms' medians; the result is, per arm,
the median over the rounds and their range, and per ratio its median and range. The
machine (CPU, the ISA sitp compiles for, cores, threads), the load average before and
after, the share of the CPUs that other programs and the hypervisor (steal) took
during the rounds (from ``/proc/stat``), the libraries' versions and the date go with
it.

A workload is named by its factory, ``"package.module:function"`` or
``"/path/to/file.py:function"``, which the worker imports and calls with ``kwargs``;
it returns a callable of no arguments. Two options for what it returns (see
:mod:`sitp.bench.abworker`): an ``info`` attribute, a dict (or a callable returning
one, called after the warm-up), and a ``result()`` method; and a call may time itself
by returning ``{"seconds": s, ...}``.

Example (``busy.py`` holding ``def spin(ms): ...`` that returns a busy-wait of ``ms``)::

    from sitp.bench import ab

    with ab.workers(["a", "b"], threads=1) as w:
        res = ab.compare(
            {"fast": ab.Arm(w["a"], "busy.py:spin", {"ms": 1}),
             "slow": ab.Arm(w["b"], "busy.py:spin", {"ms": 2})},
            rounds=5, calls=10, ratios=[("slow", "fast")])
    print(ab.table(res))       # res is a dict, ready for json.dump
"""

import contextlib
import dataclasses
import datetime
import json
import os
import select
import statistics
import subprocess
import sys
import threading
import time
from collections import deque

from sitp import _target
from sitp.bench import PAUSE_S, cpu_model, simd_flags

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "abworker.py")
BOOT = "import runpy, sys; runpy.run_path(sys.argv[1], run_name='__main__')"
THREAD_VARS = ("NUMBA_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def source_tree_env(tree: str) -> dict:
    """The environment of a worker that imports sitp from the source tree ``tree/src``
    (``git archive <commit> src | tar -x -C tree``): an arm that times an older sitp."""
    src = os.path.join(os.path.abspath(tree), "src")
    if not os.path.isfile(os.path.join(src, "sitp", "__init__.py")):
        # without it the worker would import the installed sitp, and the "old" arm
        # would time the new code under the old label
        raise ValueError(
            f"source tree {tree!r}: no sitp package at {src}/sitp; pass the directory "
            "that holds src/ (git archive <commit> src | tar -x -C DIR, then DIR)"
        )
    return {"PYTHONPATH": src + os.pathsep + os.environ.get("PYTHONPATH", "")}


class WorkerError(RuntimeError):
    """A worker failed: its traceback, or its exit status and the end of its stderr."""


def default_cores(threads: int) -> list[int] | None:
    """The first ``threads`` cores this process may run on (None where the OS has no
    affinity call)."""
    if not hasattr(os, "sched_getaffinity"):
        return None
    allowed = sorted(os.sched_getaffinity(0))
    if threads > len(allowed):
        raise ValueError(f"threads={threads}, but this process may use only {len(allowed)} cores")
    return allowed[:threads]


class Worker:
    """One persistent worker process; :func:`workers` starts and stops them together.

    Args:
        name: its name in messages and in the result.
        threads: the thread count of every library in it.
        cores: the cores it is pinned to (default: the first ``threads`` this process may use).
        env: extra environment variables (e.g. ``{"SITP_MALLOC_TUNING": "0"}``).
        echo: copy what it writes to stderr (a workload's prints) to ours, prefixed with
            its name; the last 200 lines are kept in any case, for the error of a worker
            that dies.
        timeout: seconds one command may take.
    """

    def __init__(self, name, threads=1, cores=None, env=None, echo=False, timeout=3600.0):
        self.name, self.threads, self.timeout = name, threads, timeout
        self.cores = default_cores(threads) if cores is None else list(cores)
        self.loaded = {}  # key -> the load command's answer
        self.stderr_tail = deque(maxlen=200)
        full_env = {**os.environ, **{v: str(threads) for v in THREAD_VARS}, **(env or {})}
        full_env["SITP_AB_THREADS"] = str(threads)
        full_env["SITP_AB_CORES"] = json.dumps(self.cores)
        self.proc = subprocess.Popen(
            [sys.executable, "-c", BOOT, WORKER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=full_env,
        )
        self._buf = b""
        self._reader = threading.Thread(target=self._read_stderr, args=(echo,), daemon=True)
        self._reader.start()

    def _read_stderr(self, echo):
        for raw in self.proc.stderr:
            line = raw.decode(errors="replace").rstrip("\n")
            self.stderr_tail.append(line)
            if echo:
                print(f"[{self.name}] {line}", file=sys.stderr, flush=True)

    def _died(self, doing: str) -> WorkerError:
        try:
            status = self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            status = None
        self._reader.join(timeout=5)
        tail = "\n".join(self.stderr_tail) or "(nothing)"
        return WorkerError(
            f"worker {self.name!r} (pid {self.proc.pid}) ended with status {status} while "
            f"{doing}; its stderr ends:\n{tail}"
        )

    def _readline(self, doing: str) -> bytes:
        deadline = time.monotonic() + self.timeout
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                self.close(kill=True)
                raise WorkerError(f"worker {self.name!r} took over {self.timeout} s {doing}")
            ready, _, _ = select.select([fd], [], [], min(left, 1.0))
            if ready:
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    raise self._died(doing)
                self._buf += chunk
        line, _, self._buf = self._buf.partition(b"\n")
        return line

    def ask(self, cmd: str, **fields) -> dict:
        """Send one command and return the answer; raise :class:`WorkerError` if it failed."""
        doing = f"answering {cmd!r}" + (f" for {fields['key']!r}" if "key" in fields else "")
        if self.proc.poll() is not None:
            raise self._died(doing)
        try:
            self.proc.stdin.write((json.dumps({"cmd": cmd, **fields}) + "\n").encode())
            self.proc.stdin.flush()
        except BrokenPipeError:
            raise self._died(doing) from None
        answer = json.loads(self._readline(doing))
        if not answer.pop("ok"):
            raise WorkerError(f"worker {self.name!r} failed {doing}:\n{answer['error']}")
        return answer

    def load(self, key, factory, kwargs=None, warmup=2, clock="wall") -> dict:
        """Build workload ``key`` from ``factory(**kwargs)`` and warm it (once per key)."""
        if key not in self.loaded:
            self.loaded[key] = self.ask(
                "load", key=key, factory=factory, kwargs=kwargs or {}, warmup=warmup, clock=clock
            )
        return self.loaded[key]

    def close(self, kill=False) -> None:
        """Ask the worker to exit (kill it if it does not within 10 s, or at once if ``kill``)."""
        if self.proc.poll() is None and not kill:
            with contextlib.suppress(OSError, ValueError):
                self.proc.stdin.write(b'{"cmd": "exit"}\n')
                self.proc.stdin.flush()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=10)
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        for f in (self.proc.stdin, self.proc.stdout):
            with contextlib.suppress(OSError, ValueError):
                f.close()
        self._reader.join(timeout=5)
        with contextlib.suppress(OSError, ValueError):
            self.proc.stderr.close()


@contextlib.contextmanager
def workers(names, threads=1, cores=None, env=None, echo=False, timeout=3600.0):
    """Start one :class:`Worker` per name (``env``: name -> extra variables), yield them
    as a dict, and stop every one of them however the body ends."""
    started = {}
    try:
        for name in names:
            started[name] = Worker(name, threads, cores, (env or {}).get(name), echo, timeout)
        yield started
    finally:
        for w in started.values():
            w.close()


@dataclasses.dataclass
class Arm:
    """One side of a comparison: a workload in a worker.

    Args:
        worker: the process it runs in (several arms of one library may share one).
        factory: ``"module:function"`` or ``"/path/file.py:function"``.
        kwargs: the factory's keyword arguments (JSON values).
        warmup: untimed calls after building it.
        key: its name in the worker (default: factory and kwargs).
    """

    worker: Worker
    factory: str
    kwargs: dict = dataclasses.field(default_factory=dict)
    warmup: int = 2
    key: str | None = None

    def __post_init__(self):
        if self.key is None:
            self.key = f"{self.factory} {json.dumps(self.kwargs, sort_keys=True)}"


# ---------------------------------------------------------------- the machine and its load
def machine() -> dict:
    """The CPU, the vector ISA sitp compiles for, the cores, the date."""
    return {
        "cpu": cpu_model(),
        "simd": simd_flags(),
        "isa": _target.isa_name(),
        "compiled_for": _target.cpu_name(),
        "logical_cpus": os.cpu_count(),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }


def loadavg():
    """The 1, 5 and 15 minute load averages, or None."""
    try:
        return list(os.getloadavg())
    except OSError:
        return None


def proc_stat():
    """The aggregate ``cpu`` line of /proc/stat (jiffies), or None off Linux."""
    try:
        with open("/proc/stat") as f:
            return [int(v) for v in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None


def load_shares(before, after, ours_s) -> dict:
    """What the machine's CPUs did between two /proc/stat snapshots, as shares of all of
    them: busy, taken by the hypervisor (steal), and busy with programs other than ours
    (busy less the CPU seconds our processes used)."""
    if before is None or after is None:
        return {"busy_share": None, "steal_share": None, "other_share": None}
    d = [b - a for a, b in zip(before, after)]
    total = sum(d[:8]) or 1  # user nice system idle iowait irq softirq steal
    steal = d[7] if len(d) > 7 else 0
    busy = total - d[3] - d[4] - steal
    hz = os.sysconf("SC_CLK_TCK")
    ours = ours_s * hz / total
    return {
        "busy_share": round(busy / total, 4),
        "steal_share": round(steal / total, 4),
        "other_share": round(max(0.0, busy / total - ours), 4),
        "ours_share": round(ours, 4),
    }


def _stats(values) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


# ---------------------------------------------------------------- the comparison
def compare(arms: dict, rounds=5, calls=10, ratios=None, pause=PAUSE_S, clock="wall") -> dict:
    """Time the arms against each other; see the module's docstring.

    Args:
        arms: name -> :class:`Arm`, in the order of the first round.
        rounds: rounds; each arm times one block in each, the order reversed every
            other round (A B, B A, A B, ...).
        calls: calls per block; a block's figure is their median.
        ratios: pairs ``(x, y)``: the ratio of x's time to y's, per round (default: the
            first arm's over the second's, when there are two).
        pause: seconds of sleep before each block, for the previous arm's spinning
            threads (OpenBLAS, OpenMP) to go to sleep.
        clock: ``"wall"``, or ``"cpu"``: the worker's CPU seconds (on a machine that other
            jobs keep busy: their turns are not counted); one thread only, since CPU
            seconds over threads equal the wall time only while every thread works.

    Returns:
        A dict for JSON (seconds throughout): ``arms`` (per arm its rounds' medians,
        their median, min and max, its block's CPU per wall second, its set-up and
        warm-up seconds, its workload's info; for self-timed calls, ``extras``: what the
        last call of each round returned besides its seconds, and ``extra``, the last
        round's), ``ratios``, ``order`` (the arms of each
        round, in the order timed), ``machine``, ``threads``, ``cores``, ``load``,
        ``versions`` (per worker), ``rounds``, ``calls``, ``clock``.
    """
    if rounds < 1 or calls < 1:
        raise ValueError(f"rounds and calls must be positive, got {rounds} and {calls}")
    if clock not in ("wall", "cpu"):
        raise ValueError(f"clock must be 'wall' or 'cpu', got {clock!r}")
    names = list(arms)
    if ratios is None:
        ratios = [(names[0], names[1])] if len(names) == 2 else []
    for x, y in ratios:
        if x not in arms or y not in arms:
            raise ValueError(f"ratio ({x!r}, {y!r}) names an arm that is not among {names}")
    threads = {a.worker.threads for a in arms.values()}
    if len(threads) != 1:
        raise ValueError(f"the arms' workers run different thread counts: {sorted(threads)}")
    if clock == "cpu" and next(iter(threads)) > 1:
        raise ValueError(
            "clock='cpu' takes a worker's CPU seconds over its thread count, which is its "
            "wall time only while every thread is busy: a program that keeps one of two "
            "threads busy would show half its time. Use clock='wall' with more than one thread"
        )
    pinned = {tuple(a.worker.cores or ()) for a in arms.values()}
    if len(pinned) != 1:
        raise ValueError(f"the arms' workers are pinned to different cores: {sorted(pinned)}")
    loaded = {}
    for name, arm in arms.items():  # one after the other: a compile does not share the CPUs
        loaded[name] = arm.worker.load(arm.key, arm.factory, arm.kwargs, arm.warmup, clock)
    procs = {id(a.worker): a.worker for a in arms.values()}.values()
    about0 = {w.name: w.ask("about") for w in procs}
    load0, stat0, ours0 = loadavg(), proc_stat(), sum(os.times()[:2])
    per_arm = {
        n: {"rounds_s": [], "cpu_per_wall": [], "block_min_s": [], "extras": []} for n in names
    }
    order = []
    for r in range(rounds):
        turn = names if r % 2 == 0 else names[::-1]
        order.append(list(turn))
        for name in turn:
            arm = arms[name]
            time.sleep(pause)
            got = arm.worker.ask("time", key=arm.key, calls=calls)
            rec = per_arm[name]
            rec["rounds_s"].append(statistics.median(got["times"]))
            rec["block_min_s"].append(min(got["times"]))
            rec["cpu_per_wall"].append(round(got["cpu_s"] / max(got["wall_s"], 1e-9), 3))
            rec["extras"].append(got["extra"])
    about1 = {w.name: w.ask("about") for w in procs}
    ours = sum(os.times()[:2]) - ours0
    ours += sum(about1[k]["cpu_s"] - about0[k]["cpu_s"] for k in about1)
    load = {"loadavg_before": load0, "loadavg_after": loadavg()}
    load.update(load_shares(stat0, proc_stat(), ours))
    out_arms = {}
    for name in names:
        rec, info = per_arm[name], loaded[name]
        out_arms[name] = {
            "worker": arms[name].worker.name,
            **_stats(rec["rounds_s"]),
            "rounds_s": rec["rounds_s"],
            "block_min_s": rec["block_min_s"],
            "cpu_per_wall": rec["cpu_per_wall"],
            "setup_s": info["setup_s"],
            "warmup_s": info["warmup_s"],
            "info": info["info"],
        }
        if any(e is not None for e in rec["extras"]):  # self-timed calls: what they returned
            out_arms[name]["extras"] = rec["extras"]
            out_arms[name]["extra"] = rec["extras"][-1]
    out_ratios = {}
    for x, y in ratios:
        per_round = [a / b for a, b in zip(per_arm[x]["rounds_s"], per_arm[y]["rounds_s"])]
        out_ratios[f"{x}/{y}"] = {**_stats(per_round), "rounds": per_round}
    cores = sorted({c for w in procs for c in (w.cores or [])}) or None
    return {
        "harness": "sitp.bench.ab",
        "rounds": rounds,
        "calls": calls,
        "clock": clock,
        "statistic": "per round, each arm's median over its block of calls; per arm, the "
        "median, min and max over the rounds (seconds); ratios per round, then the same",
        "order": order,
        "arms": out_arms,
        "ratios": out_ratios,
        "threads": threads.pop(),
        "cores": cores,
        "threads_seen": {k: v["threads"] for k, v in about1.items()},
        "versions": {k: v["versions"] for k, v in about1.items()},
        "machine": machine(),
        "load": load,
    }


def load_line(res: dict) -> str:
    """One line on the machine, the threads and the load during the rounds."""
    m, ld = res["machine"], res["load"]
    avg = lambda v: "?" if v is None else f"{v[0]:.2f}"  # noqa: E731
    share = lambda v: "?" if v is None else f"{100 * v:.0f}%"  # noqa: E731
    return (
        f"{m['cpu']} ({m['isa']}, sitp compiled for {m['compiled_for']}), "
        f"{m['logical_cpus']} logical CPUs; {res['threads']} thread(s) pinned to cores "
        f"{res['cores']}; load average {avg(ld['loadavg_before'])} -> "
        f"{avg(ld['loadavg_after'])}; other programs {share(ld['other_share'])} and steal "
        f"{share(ld['steal_share'])} of the CPUs during the rounds; {m['date']}"
    )


def ratio_text(res: dict, pair: str, digits=2) -> str:
    """``'0.65 (0.61-0.70 over 5 rounds)'``: a ratio with its range."""
    r = res["ratios"][pair]
    few = "; fewer than 3: not a headline" if res["rounds"] < 3 else ""
    return (
        f"{r['median']:.{digits}f} ({r['min']:.{digits}f}-{r['max']:.{digits}f} over "
        f"{res['rounds']} rounds{few})"
    )


def table(res: dict, unit="ms") -> str:
    """A short text table of :func:`compare`'s result."""
    scale = {"s": 1.0, "ms": 1e3, "us": 1e6}[unit]
    lines = [
        f"{'arm':<20}{'median ' + unit:>12}{'min':>10}{'max':>10}{'CPU/wall':>10}{'warm-up s':>11}",
    ]
    for name, a in res["arms"].items():
        cw = statistics.median(a["cpu_per_wall"])
        lines.append(
            f"{name:<20}{a['median'] * scale:>12.3f}{a['min'] * scale:>10.3f}"
            f"{a['max'] * scale:>10.3f}{cw:>10.2f}{sum(a['warmup_s']):>11.2f}"
        )
    for pair in res["ratios"]:
        lines.append(f"time {pair}: {ratio_text(res, pair)}")
    lines.append(
        f"{res['rounds']} rounds of {res['calls']} calls per arm, alternating; {res['clock']} clock"
    )
    lines.append(load_line(res))
    return "\n".join(lines)

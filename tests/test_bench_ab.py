"""sitp.bench.ab: the A-against-B harness, on busy-wait workloads of known length.

The workloads spin on the CPU (not sleep: a sleeping arm would look fast under the CPU
clock and would not compete for a core), 1 ms against 2 ms, so the ratio the harness
reports must be about 2, and about 1/2 if the arms were swapped. The bands are wide
(the machine is shared), yet no band holds for a swapped or an untimed arm.
"""

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from sitp.bench import ab
from sitp.examples import inference_figures

WORKLOADS = textwrap.dedent(
    """
    import os
    import time


    def spin(ms, first_ms=0.0, fail_at=None, die=False, prints=False, cpu=False):
        calls = [0]
        clock = time.process_time if cpu else time.perf_counter

        def busy(seconds):
            end = clock() + seconds
            while clock() < end:
                pass

        def fn():
            calls[0] += 1
            if prints:
                print("a line of the workload's own")
            if die:
                os._exit(7)
            if fail_at is not None and calls[0] == fail_at:
                raise ValueError(f"spin: call {calls[0]} fails as asked")
            busy((first_ms if calls[0] == 1 and first_ms else ms) / 1e3)

        fn.info = lambda: {"calls_so_far": calls[0], "pid": os.getpid()}
        fn.result = lambda: {"calls": calls[0]}
        return fn


    def self_timed(ms):
        def fn():
            time.sleep(0.005)  # untimed work, such as an evaluation
            return {"seconds": ms / 1e3, "note": "self-timed"}

        return fn


    def broken_factory():
        raise KeyError("no such model")
    """
)


@pytest.fixture(scope="module")
def spec(tmp_path_factory):
    path = tmp_path_factory.mktemp("ab") / "workloads.py"
    path.write_text(WORKLOADS)
    return lambda name: f"{path}:{name}"


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/status").read_text().find("zombie") < 0


def test_ratio_order_warmup_ranges_and_cleanup(spec):
    # busy-waits on each worker's CPU clock, timed by it: a worker that the machine's
    # other jobs preempt (CI's runners, xdist's other workers) waits longer by the wall
    # clock, which once put a round's ratio at 14 instead of 2; its CPU time does not grow
    kw = {"first_ms": 300.0, "cpu": True}
    with ab.workers(["a", "b"], threads=1) as w:
        arms = {
            "fast": ab.Arm(w["a"], spec("spin"), {"ms": 1.0, **kw}, warmup=1),
            "slow": ab.Arm(w["b"], spec("spin"), {"ms": 2.0, **kw}, warmup=1),
        }
        res = ab.compare(arms, rounds=4, calls=5, ratios=[("slow", "fast")], pause=0.0, clock="cpu")
        pids = [w["a"].proc.pid, w["b"].proc.pid]
        assert all(alive(p) for p in pids)
    assert not any(alive(p) for p in pids)  # stopped when the block ended
    json.dumps(res)  # ready for JSON
    # alternation: A B, B A, A B, B A
    assert res["order"] == [["fast", "slow"], ["slow", "fast"], ["fast", "slow"], ["slow", "fast"]]
    fast, slow = res["arms"]["fast"], res["arms"]["slow"]
    # the slow first call (300 ms) is the warm-up's, reported apart, not in the rounds
    assert fast["warmup_s"][0] > 0.25 and slow["warmup_s"][0] > 0.25
    assert fast["info"]["calls_so_far"] == 1  # info is read after the warm-up
    assert max(fast["rounds_s"]) < 0.1 and max(slow["rounds_s"]) < 0.1
    # the busy-waits are at least their length; a median can't beat its block's minimum
    assert len(fast["rounds_s"]) == len(slow["rounds_s"]) == 4
    assert fast["min"] >= 1e-3 and slow["min"] >= 2e-3
    assert fast["min"] <= fast["median"] <= fast["max"]
    assert all(m >= b for m, b in zip(fast["rounds_s"], fast["block_min_s"]))
    r = res["ratios"]["slow/fast"]
    assert 1.4 < r["median"] < 2.6, r  # swapped: 0.5; untimed: nonsense
    assert r["min"] <= r["median"] <= r["max"] and len(r["rounds"]) == 4
    # the same threads, pinned to the same cores, in both
    assert res["threads"] == 1 and len(res["cores"]) == 1
    assert set(res["versions"]) == {"a", "b"}
    assert res["machine"]["isa"] and res["machine"]["cpu"]
    assert res["load"]["loadavg_before"] is not None
    text = ab.table(res)
    assert "time slow/fast:" in text and "over 4 rounds" in text


def test_cpu_clock_and_pinning(spec):
    with ab.workers(["a"], threads=1) as w:
        arms = {
            "one": ab.Arm(w["a"], spec("spin"), {"ms": 1.0, "cpu": True}, warmup=0),
            "three": ab.Arm(w["a"], spec("spin"), {"ms": 3.0, "cpu": True}, warmup=0),
        }
        res = ab.compare(arms, rounds=3, calls=4, pause=0.0, clock="cpu")
        about = w["a"].ask("about")
    assert about["cores"] == res["cores"] == ab.default_cores(1)
    assert 0.2 < res["ratios"]["one/three"]["median"] < 0.5


def test_cpu_clock_refuses_several_threads():
    """CPU seconds over two threads would halve a program that keeps one thread busy
    (a recurrent cell's Python, timed on two threads, looked twice as fast)."""

    class TwoThreads:
        threads, cores = 2, [0, 1]

    arms = {name: ab.Arm(TwoThreads(), "m:f", warmup=0) for name in ("x", "y")}
    with pytest.raises(ValueError, match="clock='wall' with more than one thread"):
        ab.compare(arms, clock="cpu")


def test_self_timed_calls_and_result(spec):
    with ab.workers(["a"]) as w:
        arms = {
            "two": ab.Arm(w["a"], spec("self_timed"), {"ms": 2.0}, warmup=0),
            "spin": ab.Arm(w["a"], spec("spin"), {"ms": 1.0}, warmup=0),
        }
        res = ab.compare(arms, rounds=2, calls=3, pause=0.0)
        done = w["a"].ask("result", key=arms["spin"].key)["result"]
    assert res["arms"]["two"]["median"] == pytest.approx(2e-3)  # the call's own figure
    assert res["arms"]["two"]["extra"] == {"note": "self-timed"}
    assert done == {"calls": 6}


def test_a_worker_exception_is_shown_and_workers_stop(spec):
    with pytest.raises(ab.WorkerError) as err:
        with ab.workers(["a", "b"]) as w:
            pids = [w["a"].proc.pid, w["b"].proc.pid]
            arms = {
                "ok": ab.Arm(w["a"], spec("spin"), {"ms": 1.0}, warmup=0),
                "bad": ab.Arm(w["b"], spec("spin"), {"ms": 1.0, "fail_at": 3}, warmup=0),
            }
            ab.compare(arms, rounds=3, calls=2, pause=0.0)
    msg = str(err.value)
    assert "worker 'b' failed" in msg and "ValueError: spin: call 3 fails as asked" in msg
    assert "Traceback" in msg
    assert not any(alive(p) for p in pids)


def test_a_failing_factory_and_a_dying_worker(spec):
    with ab.workers(["a"]) as w:
        with pytest.raises(ab.WorkerError, match="KeyError: 'no such model'"):
            w["a"].load("x", spec("broken_factory"))
        w["a"].load("ok", spec("spin"), {"ms": 0.1}, warmup=1)  # the worker lives on
    with ab.workers(["d"]) as w:
        with pytest.raises(
            ab.WorkerError, match=r"(?s)ended with status 7 .*a line of the workload"
        ):
            w["d"].load("die", spec("spin"), {"ms": 1.0, "die": True, "prints": True}, warmup=1)


def test_bad_arguments(spec):
    with ab.workers(["a"]) as w:
        arm = ab.Arm(w["a"], spec("spin"), {"ms": 1.0})
        with pytest.raises(ValueError, match="names an arm"):
            ab.compare({"x": arm}, ratios=[("x", "y")])
        with pytest.raises(ValueError, match="clock must be"):
            ab.compare({"x": arm}, clock="gpu")
    with pytest.raises(ValueError, match="threads=999"):
        ab.Worker("big", threads=999)
    if len(os.sched_getaffinity(0)) >= 2:  # the same thread count on other cores: refused
        other = [sorted(os.sched_getaffinity(0))[1]]
        with ab.workers(["a"]) as w, ab.workers(["b"], cores=other) as v:
            arms = {
                "x": ab.Arm(w["a"], spec("spin"), {"ms": 1.0}),
                "y": ab.Arm(v["b"], spec("spin"), {"ms": 1.0}),
            }
            with pytest.raises(ValueError, match="pinned to different cores"):
                ab.compare(arms)


def test_an_old_source_tree_must_hold_sitp(tmp_path):
    """--before DIR: DIR/src/sitp must exist; DIR/src itself (one level too deep) is
    refused, rather than let the worker import the installed sitp under the old label."""
    (tmp_path / "src" / "sitp").mkdir(parents=True)
    with pytest.raises(ValueError, match="no sitp package"):
        ab.source_tree_env(str(tmp_path))
    (tmp_path / "src" / "sitp" / "__init__.py").write_text("")
    env = ab.source_tree_env(str(tmp_path))
    assert env["PYTHONPATH"].split(os.pathsep)[0] == str(tmp_path / "src")
    with pytest.raises(ValueError, match="pass the directory that holds src/"):
        ab.source_tree_env(str(tmp_path / "src"))


# ------------------------------------------------------------------ the scripts, tiny
SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"


def run_script(name, *argv, timeout=600):
    # no pauses between the harness's blocks: a smoke run checks the script, not figures
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "SITP_BENCH_PAUSE_S": "0"}
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, str(SCRIPTS / name), *argv],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    return proc, time.perf_counter() - t0


@pytest.mark.slow  # a script's run at its smallest: 10-20 s
def test_bench_compile_smoke(tmp_path):
    out = tmp_path / "compile.json"
    # one block: the GPT step's compilation (most of a cold run's time here) is
    # tests/test_compile.py's; this checks the script and the record it writes
    blocks = "gelu(xW+b)"
    argv = ["--smoke", "--reps", "2", "--rounds", "2", "--no-torch-compile", "--blocks", blocks]
    proc, _ = run_script("bench_compile.py", *argv, "--json", str(out))
    run = json.loads(out.read_text())["runs"][0]
    assert list(run["rows"]) == ["gelu(xW+b)"]
    for row in run["rows"].values():  # the fields the book and its figures read
        for key in ("eager", "compiled", "torch", "compile_s", "ops", "steps", "kernels"):
            assert key in row, key
        assert row["range_ms"]["torch"][0] <= row["torch"] <= row["range_ms"]["torch"][1]
        assert set(row["ratios"]) == {"eager/compiled", "compiled/torch"}
    assert run["harness"]["order"] == [
        ["eager", "compiled", "torch"],
        ["torch", "compiled", "eager"],
    ]
    assert "time ratios, median (min-max) over 2 rounds" in proc.stdout


@pytest.mark.slow  # a script's run at its smallest: 10-20 s
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="times one thread against two")
def test_thread_profile_smoke(tmp_path):
    out = tmp_path / "threads.json"
    proc, _ = run_script("thread_profile.py", "--smoke", "--json", str(out))
    run = json.loads(out.read_text())
    parts = run["parts"]
    # the step's parts: its fused layers, the backend's calls, AdamW, and the Python
    for name in (
        "Linear.forward",
        "Linear.backward",
        "LayerNorm.backward",
        "Python around the calls",
    ):
        assert parts[name]["ms_1t"] > 0 and parts[name]["ms_2t"] > 0, name
    assert any(k.startswith("AdamW") for k in parts)
    kernels = sum(p["ms_1t"] for k, p in parts.items() if k != "Python around the calls")
    # the parts add up to the step (medians of parts need not add up exactly)
    assert kernels < run["step_ms"]["1t"] * 1.05
    assert run["speedup"]["min"] <= run["speedup"]["median"] <= run["speedup"]["max"]
    assert run["amdahl_bound"] > 1 and run["machine"]["cores"] == sorted(run["machine"]["cores"])
    assert "Amdahl" in proc.stdout and "the step" in proc.stdout


def test_gemm_shapes_smoke():
    """scripts/gemm_shapes.py times the anchor layer's 13 products (its run checks each
    against torch.mm first) and prints a row for each and their total."""
    pytest.importorskip("torch")
    proc, _ = run_script("gemm_shapes.py", "--smoke")
    lines = proc.stdout.splitlines()
    assert sum(line.startswith(("x @ W.T", "dY @ W", "dY.T @ X")) for line in lines) == 13
    assert lines[-1].startswith("all 13: sitp ")


@pytest.mark.slow  # a script's run at its smallest: 10-20 s
def test_compare_torch_smoke(tmp_path):
    out = tmp_path / "torch.json"
    argv = ["--smoke", "--models", "bigram", "--steps", "3", "--bench-steps", "2"]
    proc, _ = run_script("compare_torch.py", *argv, "--repeats", "2", "--threads", "1",
                         "--json", str(out))  # fmt: skip
    record = json.loads(out.read_text())
    assert record["losses"][0]["model"] == "bigram"
    r = record["throughput"]
    assert r["sitp_range"][0] <= r["sitp"] <= r["sitp_range"][1]
    assert r["ratios"][0] <= r["ratio"] <= r["ratios"][-1] and len(r["ratios"]) == 2
    assert r["harness"]["threads"] == 1 and r["harness"]["order"] == [
        ["sitp", "torch"],
        ["torch", "sitp"],
    ]
    assert len(record["gemms"]) == 2 and record["gemms"][0]["shape"] == "1024x64x192"
    assert "sitp / torch = " in proc.stdout and "over 2 rounds" in proc.stdout


@pytest.mark.slow  # a script's run at its smallest: 10-20 s
@pytest.mark.needs_corpus("tinyshakespeare.txt")  # skipped without, failing under CI=true
def test_compare_shakespeare_smoke(tmp_path):
    out = tmp_path / "anchor.json"
    proc, _ = run_script("compare_shakespeare.py", "--smoke", "--threads", "1", "--json", str(out))
    run = json.loads(out.read_text())
    for name in ("sitp", "torch"):  # the fields the pages read, and the rounds' range
        r = run["results"][name]
        assert r["ms_per_step_range"][0] <= r["ms_per_step"] <= r["ms_per_step_range"][1]
        assert [step for step, _ in r["curve"]] == [0, 2, 4]
    # same weights, same batches: the same losses
    assert abs(run["results"]["sitp"]["val"] - run["results"]["torch"]["val"]) < 1e-3
    lo, hi = run["speed_ratio_range"]
    assert lo <= run["speed_ratio"] <= hi and run["rounds"] == 2
    assert run["params"] > 0 and run["machine"] and len(run["sample"]) == 6
    assert run["harness"]["order"] == [["sitp", "torch"], ["torch", "sitp"]]
    assert "over 2 rounds" in proc.stdout


@pytest.mark.slow  # a script's run at its smallest: 10-20 s
def test_bench_kv_cache_smoke(tmp_path):
    out = tmp_path / "kv.json"
    proc, _ = run_script("bench_kv_cache.py", "--smoke", "--roofs", "--json", str(out))
    res = json.loads(out.read_text())
    assert set(res["roofs"]) == {"peak_1", "dram_1", "l2_1"} and min(res["roofs"].values()) > 0
    assert "roofs, one thread: peak" in proc.stdout
    points = inference_figures.decode_points(res)  # 5.4's roofline reads this record
    assert [(p["library"], p["batch"], p["context"]) for p in points] == [
        ("sitp", 1, 16),
        ("torch", 1, 16),
        ("sitp", 2, 16),
        ("torch", 2, 16),
    ]
    assert points[2]["intensity"] > points[0]["intensity"] > 0  # a batch shares the weights
    for lib in ("sitp", "torch"):
        for L in ("8", "16"):
            row = res[lib]["steps"][L]
            lo, hi = row["cached_range"]
            assert lo <= row["cached"] <= hi
        assert set(res[lib]["engine"]) == {"cached", "uncached"}
    r = res["ratios"]["16"]["torch cached/sitp cached"]
    assert r["min"] <= r["median"] <= r["max"] and len(r["rounds"]) == 2
    # Table 1 keeps the columns that the book's checks read from the recorded text
    rows = [line for line in proc.stdout.splitlines() if line.startswith("| 8 |")]
    assert len(rows) == 1 and rows[0].count("|") == 9
    assert "sitp/torch speed with the cache, median (min-max) over 2 rounds" in proc.stdout


# scripts/bench_ddp.py's smoke run, with the harness's record, is tests/test_cli_ddp.py's

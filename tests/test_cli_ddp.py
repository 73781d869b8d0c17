"""``python -m sitp train`` on two ranks (DDP): under the launcher and under a bare mpirun.

Two ranks that each take half of a batch of 2B end with the weights of one process on
the batch of 2B (float32: the ranks' losses are means over B, averaged, where one
process takes one mean over 2B, so the sums are rounded in another order); rank 0
alone prints and writes; a run stopped and resumed on two ranks equals, bit for bit, one
that went on, dropout included (each rank's generator is in the checkpoint); and a
failure on one rank ends the job at once, with its message.
"""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file

from dist_util import mpirun, output, requires_mpi, run_ranks
from sitp.bench import ab
from sitp.train.checkpoint import load_record
from sitp.train.cli import main

pytestmark = requires_mpi

TINY = ["--set", "n_layer=1", "--set", "n_embd=16", "--set", "n_head=2"]
TEXT = "First Citizen:\nBefore we proceed any further, hear me speak.\n" * 40


def argv(out, steps):
    """The options of every run here; each test adds its own."""
    return ["train", "--model", "gpt", "--steps", str(steps), "--out", str(out), *TINY]


def on_two_ranks(args, timeout=60):
    return run_ranks("sitp", nproc=2, timeout=timeout, args=args, module=True)


def weights(out):
    return load_file(str(Path(out) / "model.safetensors"))


def assert_close(a, b, **tol):
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_allclose(a[k], b[k], err_msg=k, **tol)


@pytest.mark.parametrize(
    "kind,extra",
    [
        ("names", ["--grad-accum", "2"]),  # names: padded sequences, micro-batches
        ("text", ["--tokenizer", "char", "--set", "block_size=16", "--eval-batches", "2"]),
    ],
)
def test_two_ranks_take_the_steps_of_one_process_on_the_whole_batch(tmp_path, kind, extra):
    if kind == "text":
        (tmp_path / "text.txt").write_text(TEXT)
        extra = [*extra, "--data", str(tmp_path / "text.txt")]
    common = ["--batch-size", "8", "--eval-every", "3", "--save-every", "0", *extra]
    two = on_two_ranks([*argv(tmp_path / "two", 6), *common])
    assert main([*argv(tmp_path / "one", 6), *common, "--quiet"]) == 0
    assert_close(weights(tmp_path / "two"), weights(tmp_path / "one"), rtol=1e-4, atol=1e-5)
    r2, r1 = load_record(tmp_path / "two"), load_record(tmp_path / "one")
    assert r2["step"] == r1["step"] == 6
    np.testing.assert_allclose(r2["history"]["train"], r1["history"]["train"], rtol=1e-5)
    # rank 0 alone prints: one description, one line per evaluation, one summary
    out = two.stdout
    assert out.count(" parameters, ") == 1, output(two)
    assert out.count("step 3: train loss") == 1 and out.count("step 6: train loss") == 1
    assert out.count("steps in") == 1
    assert "(2 ranks x 4)" in out
    # the run directory is one process's: it loads, and holds each rank's generator
    assert len(r2["rng"]["default_ranks"]) == 2
    assert {p.name for p in (tmp_path / "two").iterdir()} >= {
        "model.safetensors",
        "optimizer.safetensors",
        "record.json",
        "loss.png",
    }
    assert not [p for p in (tmp_path / "two").iterdir() if p.name.startswith(".")]


#: Rank 0 "crashes" right after its step-3 checkpoint (as test_cli.py's single process).
CRASH_AFTER_SAVE = """
import sys
import sitp.train.trainer
from sitp.train.cli import main

real_save = sitp.train.trainer.ckpt.save_checkpoint


def save_then_die(*args, **kwargs):
    real_save(*args, **kwargs)
    raise KeyboardInterrupt


sitp.train.trainer.ckpt.save_checkpoint = save_then_die
sys.exit(main(sys.argv[1:]))
"""


def test_a_run_resumed_on_two_ranks_equals_one_that_went_on(tmp_path):
    """The interrupted run shards AdamW (--zero) before and after its resume: ZeRO's steps
    are AdamW's, its checkpoint (gathered on rank 0) is AdamW's whole state, and each rank
    takes back its share."""
    # dropout: the ranks draw different masks, so each rank's generator must be restored
    common = ["--model", "gpt", *TINY, "--set", "dropout=0.2", "--batch-size", "8", "--quiet"]
    common += ["--steps", "6", "--eval-every", "0", "--save-every", "3"]
    on_two_ranks(["train", *common, "--out", tmp_path / "straight"])
    crash = run_ranks(
        CRASH_AFTER_SAVE,
        timeout=60,
        args=["train", *common, "--zero", "--out", tmp_path / "split"],
        check=False,
    )
    assert crash.returncode != 0, output(crash)
    assert "interrupted; the last checkpoint is kept" in crash.stderr, output(crash)
    assert load_record(tmp_path / "split")["step"] == 3
    on_two_ranks(["train", "--resume", "--out", tmp_path / "split", "--quiet"])  # still --zero
    a, b = weights(tmp_path / "straight"), weights(tmp_path / "split")
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)
    for name in ("optimizer.safetensors",):
        assert (tmp_path / "straight" / name).read_bytes() == (
            tmp_path / "split" / name
        ).read_bytes()
    ra, rb = load_record(tmp_path / "straight"), load_record(tmp_path / "split")
    assert ra["history"] == rb["history"] and ra["rng"] == rb["rng"]
    assert rb["train_config"]["zero"] and not ra["train_config"]["zero"]
    assert rb["rng"]["default_ranks"][0] != rb["rng"]["default_ranks"][1]
    # the checkpoint is one process's: it resumes there too
    resume_one = ["train", "--resume", "--steps", "7", "--out", str(tmp_path / "split")]
    assert main([*resume_one, "--quiet"]) == 0
    assert load_record(tmp_path / "split")["step"] == 7


def test_bare_mpirun_runs_the_command_line(tmp_path):
    cmd = [mpirun(), "-n", "2", sys.executable, "-m", "sitp"]
    cmd += [*argv(tmp_path / "run", 4), "--batch-size", "8", "--eval-every", "2", "--quiet"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=90)
    assert proc.returncode == 0, output(proc)
    assert proc.stdout.count("step 2: train loss") == 1, output(proc)
    assert load_record(tmp_path / "run")["step"] == 4


@pytest.mark.parametrize("launcher", ["sitp.distributed.run", "mpirun"])
def test_a_failure_on_rank_0_alone_ends_the_job(tmp_path, launcher):
    # rank 0 encodes the text while rank 1 waits for it in a barrier: a text too short
    # for the batch fails on rank 0 only, and the job must end with its message
    (tmp_path / "short.txt").write_text("To be, or not to be.\n" * 3)
    args = [*argv(tmp_path / "run", 4), "--data", str(tmp_path / "short.txt")]
    args += ["--tokenizer", "char", "--batch-size", "8", "--quiet"]
    if launcher == "mpirun":
        cmd = [mpirun(), "-n", "2", sys.executable, "-m", "sitp", *args]
    else:
        cmd = [sys.executable, "-m", launcher, "--nproc-per-node", "2", "-m", "sitp", *args]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0, output(proc)
    assert "sitp train: error: the train part of" in proc.stderr, output(proc)
    assert "error on rank 1" not in proc.stderr  # rank 1 did not get that far
    assert time.perf_counter() - t0 < 30


def test_bench_ddp_smoke(tmp_path):
    """scripts/bench_ddp.py runs its three ways and writes a record the timeline reads."""
    (tmp_path / "text.txt").write_text(TEXT * 3)
    out = tmp_path / "bench.json"
    cmd = [sys.executable, str(Path(__file__).parent.parent / "scripts" / "bench_ddp.py")]
    cmd += ["--smoke", "--steps", "2", "--warmup", "1", "--data", str(tmp_path / "text.txt")]
    env = {**os.environ, "SITP_BENCH_PAUSE_S": "0"}  # a smoke run: no pauses between blocks
    proc = subprocess.run(
        [*cmd, "--json", str(out)], capture_output=True, text=True, timeout=120, env=env
    )
    assert proc.returncode == 0, output(proc)
    record = json.loads(out.read_text())
    assert [r["ranks"] for r in record["results"]] == [1, 1, 2]
    assert [r["threads_per_rank"] for r in record["results"]] == [1, 2, 1]
    assert all(len(r["step_ms"]) == 2 for r in record["results"])
    for rank in record["timeline"]["ranks"]:  # each bucket launched, done, then waited for
        assert rank["forward_start_ms"] <= rank["backward_start_ms"] <= rank["backward_end_ms"]
        for b in rank["buckets"]:
            assert b["launch_ms"] <= b["complete_ms"] <= b["wait_returned_ms"]
            assert b["wait_returned_ms"] <= rank["backward_end_ms"]
        names = sum(record["ddp_buckets"], [])
        assert len(rank["grads_ready_ms"]) == len(names) == len(set(names))
    assert "2 ranks x 1 thread" in proc.stdout
    # the three ways alternate as whole runs (sitp.bench.ab): each way's median with the
    # range of its rounds, the speed-ups as medians of the rounds' ratios
    ways = [r["way"] for r in record["results"]]
    assert record["rounds"] == 2
    assert record["harness"]["order"] == [ways, ways[::-1]]
    assert record["harness"]["cores"] == ab.default_cores(2)
    for r in record["results"]:
        lo, hi = r["median_step_ms_range"]
        assert lo <= r["median_step_ms"] <= hi and len(r["rounds_median_step_ms"]) == 2
        assert r["speedup"]["min"] <= r["speedup"]["median"] <= r["speedup"]["max"]
    assert record["results"][0]["speedup"]["median"] == 1.0
    assert "medians over 2 rounds" in proc.stdout

"""scripts/bpb_budget.py runs end to end at a tiny budget and writes its JSON.

The figures of section 5.3's budget comparison come from this script; here it runs
with ``--smoke`` (a 1-layer model, a slice of the corpus, half a second per config),
so only the shape of its record and the sanity of its numbers are checked, never a
timing.
"""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "bpb_budget.py"
SHARED = Path(os.environ.get("SITP_DATA_DIR", "/nonexistent")) / "tinyshakespeare.txt"
CONFIGS = ["gpt2, char", "modern, char", "modern, BPE 512", "modern, BPE 1024"]


@pytest.mark.needs_corpus("tinyshakespeare.txt")  # skipped without, failing under CI=true
def test_bpb_budget_smoke_run_writes_finite_bits_per_byte(tmp_path):
    out = tmp_path / "bpb.json"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--smoke", "--budget", "0.5", "--corpus-chars", "100000",
         "--json", str(out)],
        capture_output=True, text=True, timeout=240, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "| config |" in done.stdout and "machine:" in done.stdout
    record = json.loads(out.read_text())
    assert record["cpu"] and record["machine"]
    assert len(record["load_average"]["start"]) == 3
    assert record["config"]["budget"] == 0.5 and record["corpus_chars"] == 100_000
    assert record["val_bytes"] == 10_000  # the last 10% of 100,000 ASCII characters
    assert [r["config"] for r in record["rows"]] == CONFIGS
    for r in record["rows"]:
        assert r["steps"] >= 1 and r["seconds"] >= 0.5 and r["tokens_per_s"] > 0
        assert math.isfinite(r["val_bpb"]) and 0 < r["val_bpb"] < math.log2(256)
        # bits per byte is the loss per token converted with that tokenizer's own ratio
        ratio = r["val_tokens"] / record["val_bytes"]
        assert math.isclose(r["val_bpb"], r["val_loss"] / math.log(2) * ratio, rel_tol=1e-9)
    char, bpe512, bpe1024 = record["rows"][1], record["rows"][2], record["rows"][3]
    assert char["block_size"] == 64
    assert char["vocab_size"] == len(set(SHARED.read_text(encoding="utf-8")[:100_000]))
    assert bpe512["vocab_size"] == 512 and bpe1024["vocab_size"] == 1024
    # the same context in bytes: a BPE block holds about 64 bytes of text
    for r in (bpe512, bpe1024):
        assert abs(r["block_size"] * r["bytes_per_token"] - 64) <= r["bytes_per_token"]
    assert 1 < bpe512["bytes_per_token"] < bpe1024["bytes_per_token"]

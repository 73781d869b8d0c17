"""scripts/posttrain_pipeline.py: its preference stages are 8.4's commands, they run, resume
and are judged; and the whole script runs end to end with ``--small``.

The figures of 8.5's pipeline come from this script at the book's configuration; here
only the commands, the shape of the record and the sanity of its numbers are checked,
never a timing.
"""

import importlib.util
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

import sitp
from sitp.data.tokens import ByteTokenizer
from sitp.models.gpt import GPT, GPTConfig
from sitp.posttrain import cli
from sitp.posttrain.chat import ChatTokenizer
from sitp.train import checkpoint as ckpt

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "posttrain_pipeline.py"


def load_script():
    spec = importlib.util.spec_from_file_location("posttrain_pipeline", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def options(argv: list[str]) -> list[str]:
    """A command's verb and options, without the checkpoint paths (--init, --out, --reward-model)."""
    paths = {"--init", "--out", "--reward-model"}
    return [a for i, a in enumerate(argv) if a not in paths and not (i and argv[i - 1] in paths)]


def test_the_preference_stages_are_8_4s_commands():
    """At the book's configuration the pipeline types the commands of 8.4's page."""
    text = (ROOT / "docs" / "ch08" / "preferences.md").read_text(encoding="utf-8")
    block = text[text.index("## From the command line") :]
    page = {}
    for line in re.findall(r"^\$ python -m sitp (.+?(?:\\\n.+?)*)$", block, re.MULTILINE):
        argv = shlex.split(line.replace("\\\n", " "))
        page[argv[argv.index("--out") + 1].split("/")[-1]] = argv
    pipeline = load_script()
    commands = dict(pipeline.preference_commands(Path("runs/chat"), small=False))
    assert list(commands) == ["rm", "rl-rm", "dpo"]
    for stage, argv in commands.items():
        assert options(argv) == options(page[stage]), stage
        assert argv[argv.index("--init") + 1] == "runs/chat/sft"
    assert commands["rl-rm"][commands["rl-rm"].index("--reward-model") + 1] == "runs/chat/rm"


def test_the_preference_stages_run_resume_and_are_judged(tmp_path, capsys):
    """The ``--small`` preference commands from a tiny SFT checkpoint: each finishes, a
    finished stage is not rerun, and each policy gets a win rate against the SFT model."""
    pipeline = load_script()
    tok = ChatTokenizer(ByteTokenizer())
    sitp.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=tok.vocab_size, block_size=96, n_layer=1, n_head=2,
                          n_embd=16))  # fmt: skip
    cli.save(tmp_path / "sft", model, sitp.optim.AdamW(model.parameters()), tok, None,
             {"stage": "sft", "step": 0, "history": []})  # fmt: skip
    commands = pipeline.preference_commands(tmp_path, small=True)
    for stage, argv in commands:
        assert not pipeline.finished(tmp_path / stage, argv)
        pipeline.run_stage(tmp_path, stage, argv)
        assert pipeline.finished(tmp_path / stage, argv)
    assert ckpt.load_record(tmp_path / "rm")["model"] == "reward"
    saved = {stage: ckpt.load_checkpoint(tmp_path / stage).model_state for stage, _ in commands}
    capsys.readouterr()
    for stage, argv in commands:  # finished: skipped, the checkpoints untouched
        pipeline.run_stage(tmp_path, stage, argv)
        after = ckpt.load_checkpoint(tmp_path / stage).model_state
        assert all((after[k] == v).all() for k, v in saved[stage].items())
    assert not re.search(r"^[a-z]+ step \d", capsys.readouterr().out, re.MULTILINE)
    base = pipeline.judged_replies(tmp_path / "sft", 4, seed=0)[1]
    assert len(base) == 4 * pipeline.ROUNDS
    for stage in ("sft", "rl-rm", "dpo"):
        v = pipeline.verdict(tmp_path / stage, base, 4)
        w = v["win"]
        assert w["n"] == 4 * pipeline.ROUNDS and w["wins"] + w["ties"] + w["losses"] == w["n"]
        assert w["ci"][0] <= w["win_rate"] <= w["ci"][1]
        assert 0 <= v["sampled"]["right"] <= 1 and v["sampled"]["chars"] >= 0


@pytest.mark.slow
@pytest.mark.needs_corpus("tinyshakespeare.txt")  # skipped without, failing under CI=true
def test_small_pipeline_runs_every_stage_and_writes_its_record(tmp_path):
    out = tmp_path / "record.json"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--out", str(tmp_path / "run"), "--small", "--heldout", "4",
         "--json", str(out)],
        capture_output=True, text=True, timeout=600, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    record = json.loads(out.read_text())
    assert record["small"] and record["threads"] >= 1 and len(record["loadavg_end"]) == 3
    assert [s["stage"] for s in record["stages"]] == ["pretrain", "midtrain", "sft", "rl"]
    prefs = record["preferences"]
    assert prefs["task"] == "chain1" and prefs["sft_against_itself"]["win"]["n"] == 8
    assert [s["stage"] for s in prefs["stages"]] == ["rm", "rl-rm", "dpo"]
    for s in prefs["stages"]:
        assert s["seconds"] >= 0 and s["history"]
        assert ("win" in s) == (s["stage"] != "rm")
        if "win" in s:
            assert set(s["pass@1"]) == set(record["tasks"])
    total = sum(s["seconds"] + s["eval_seconds"] for s in record["stages"] + prefs["stages"])
    assert record["minutes"] >= total / 60 - 0.01


def test_seeded_commands_and_the_seeds_summary(tmp_path):
    """``--seed`` reaches every stage's command; ``--collect`` sums up the runs' records:
    per stage and task the values in order, their mean and sample sd, RL's gain over SFT
    per run, and the preference stages' win rates where the records have them."""
    pipeline = load_script()
    commands = pipeline.stage_commands(tmp_path, "sort", small=False)
    assert pipeline.seeded(commands, None) == commands
    for (stage, argv), (same, seeded) in zip(commands, pipeline.seeded(commands, 3)):
        assert same == stage and seeded == [*argv, "--seed", "3"]

    seen = {"right": 0.1, "chars": 9.0}

    def record(seed, sft, rl, win):
        stages = [{"stage": s, "pass@1": {t: {"pass@1": v} for t, v in scores.items()}}
                  for s, scores in (("sft", sft), ("rl", rl))]  # fmt: skip
        prefs = {"sft_against_itself": {"win": {"win_rate": 0.5, "ci": [0.4, 0.6]},
                                        "sampled": seen},
                 "stages": [{"stage": "rm"},
                            {"stage": "dpo", "win": {"win_rate": win, "ci": [win - 0.1, win + 0.1]},
                             "sampled": seen, "pass@1": {"chain1": {"pass@1": 0.25}}}]}  # fmt: skip
        path = tmp_path / f"s{seed}.json"
        path.write_text(json.dumps({"seed": seed, "small": False, "cpu": "x", "minutes": 1.0,
                                    "stages": stages, "preferences": prefs}))  # fmt: skip
        return path

    paths = [record(1, {"sort": 0.5, "chain1": 0.2}, {"sort": 0.7, "chain1": 0.2}, 0.6),
             record(2, {"sort": 0.6, "chain1": 0.4}, {"sort": 0.9, "chain1": 0.3}, 0.8)]  # fmt: skip
    summary = pipeline.collect(paths)
    assert [r["seed"] for r in summary["runs"]] == [1, 2]
    sort = summary["pass@1"]["rl"]["sort"]
    assert sort["values"] == [0.7, 0.9] and sort["mean"] == pytest.approx(0.8)
    assert sort["sd"] == pytest.approx(0.2 / 2**0.5)  # sample sd of two: |a - b| / sqrt(2)
    assert summary["rl_gain"]["sort"]["values"] == pytest.approx([0.2, 0.3])
    assert summary["rl_gain"]["chain1"]["values"] == pytest.approx([0.0, -0.1])
    assert summary["win_rate"]["dpo"]["mean"] == pytest.approx(0.7)
    assert summary["win_rate"]["sft"]["sd"] == 0
    assert summary["pass@1"]["dpo"]["chain1"]["values"] == [0.25, 0.25]
    assert summary["runs"][1]["win_ci"]["dpo"] == pytest.approx([0.7, 0.9])
    assert summary["runs"][0]["sampled"] == {"sft": seen, "dpo": seen}

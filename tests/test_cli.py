"""``python -m sitp train|sample`` end to end, on tiny models and a few steps.

Resuming is exact (a run stopped at step 4 and resumed to 8 has the weights of a run
that went to 8 at once), a crash while writing a checkpoint leaves the previous one
loadable, and every bad request is a one-line error with exit status 2.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file

import sitp
import sitp.train.checkpoint
import sitp.train.trainer
from sitp.train.cli import main

TINY = {
    "gpt": ["--set", "n_layer=1", "--set", "n_embd=16", "--set", "n_head=2"],
    "mlp": ["--set", "n_hidden=16"],
    "wavenet": ["--set", "n_embd=8", "--set", "n_hidden=16"],
    "gru": ["--set", "n_embd=8", "--set", "n_embd2=16"],
}


def train(out, model="gpt", steps=8, *extra):
    argv = [
        "train",
        "--model",
        model,
        "--steps",
        str(steps),
        "--out",
        str(out),
        "--quiet",
        "--eval-every",
        "4",
        "--save-every",
        "4",
        "--batch-size",
        "8",
        *TINY[model],
        *extra,
    ]
    return main(argv)


def weights(out):
    return load_file(str(Path(out) / "model.safetensors"))


def assert_same_arrays(a, b):
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)


@pytest.fixture(scope="module")
def gpt_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("gpt")
    assert train(out) == 0
    return out


def test_train_writes_a_checkpoint(gpt_run, capsys):
    names = {p.name for p in gpt_run.iterdir()}
    assert names == {"model.safetensors", "optimizer.safetensors", "record.json", "loss.png"}
    record = json.loads((gpt_run / "record.json").read_text())
    assert record["model"] == "gpt" and record["step"] == 8
    assert record["model_config"]["n_layer"] == 1 and record["vocab"][0] == "."
    assert len(record["history"]["train"]) == 8
    assert [e["step"] for e in record["history"]["eval"]] == [4, 8]
    assert set(record["final"]) == {"train", "val", "test"}
    assert set(record["rng"]) == {"default", "batch"}
    assert (gpt_run / "loss.png").read_bytes()[:4] == b"\x89PNG"


def test_weights_load_in_pytorch(gpt_run):
    """model.safetensors is a plain state_dict for PyTorch (the tied weight under both names)."""
    torch = pytest.importorskip("torch")
    from safetensors.torch import load_file as torch_load_file

    from sitp.models import MODELS
    from sitp.train.checkpoint import load_checkpoint

    record = json.loads((gpt_run / "record.json").read_text())
    spec = MODELS["gpt"]
    tmodel = spec.build(spec.make_config("torch", **record["model_config"]), "torch")
    tmodel.load_state_dict(torch_load_file(str(gpt_run / "model.safetensors")))
    smodel = spec.build(record["model_config"])
    load_checkpoint(gpt_run).load_model(smodel)
    X = sitp.randint(0, len(record["vocab"]), (2, 6))
    np.testing.assert_allclose(
        smodel(X)[0].detach().numpy(),
        tmodel(torch.tensor(X.numpy()))[0].detach().numpy(),
        rtol=1e-4,
        atol=1e-5,
    )


@pytest.mark.parametrize("model", ["gpt", "wavenet"])
def test_resume_is_exact(model, tmp_path, monkeypatch):
    whole, parts = tmp_path / "whole", tmp_path / "parts"
    assert train(whole, model) == 0

    real_save = sitp.train.checkpoint.save_checkpoint

    def save_then_die(*args, **kwargs):  # the process "crashes" right after the step-4 save
        real_save(*args, **kwargs)
        raise KeyboardInterrupt

    monkeypatch.setattr(sitp.train.trainer.ckpt, "save_checkpoint", save_then_die)
    assert train(parts, model) == 130
    monkeypatch.undo()
    assert json.loads((parts / "record.json").read_text())["step"] == 4
    assert main(["train", "--resume", "--out", str(parts), "--quiet"]) == 0

    assert_same_arrays(weights(whole), weights(parts))  # bit for bit, BatchNorm buffers too
    assert_same_arrays(
        load_file(str(whole / "optimizer.safetensors")),
        load_file(str(parts / "optimizer.safetensors")),
    )
    a, b = (json.loads((d / "record.json").read_text()) for d in (whole, parts))
    assert a["history"] == b["history"] and a["rng"] == b["rng"] and a["final"] == b["final"]


def test_resume_to_more_steps(gpt_run, tmp_path, capsys):
    out = tmp_path / "more"
    out.mkdir()
    for f in gpt_run.iterdir():
        (out / f.name).write_bytes(f.read_bytes())
    assert main(["train", "--resume", "--out", str(out), "--steps", "10", "--quiet"]) == 0
    record = json.loads((out / "record.json").read_text())
    assert record["step"] == 10 and len(record["history"]["train"]) == 10
    assert "test loss" in capsys.readouterr().out


def test_crash_while_writing_keeps_the_last_checkpoint(gpt_run, tmp_path, monkeypatch):
    out = tmp_path / "crash"
    out.mkdir()
    for f in gpt_run.iterdir():
        (out / f.name).write_bytes(f.read_bytes())
    before = weights(out)

    def write_half_then_fail(f, data):
        f.write(data[: len(data) // 2])
        raise OSError("disk on fire")

    monkeypatch.setattr(sitp.serialization, "_write", write_half_then_fail)
    with pytest.raises(OSError, match="disk on fire"):
        main(["train", "--resume", "--out", str(out), "--steps", "12", "--quiet"])
    monkeypatch.undo()
    assert sorted(p.name for p in out.iterdir()) == sorted(p.name for p in gpt_run.iterdir())
    assert_same_arrays(before, weights(out))  # no temporary file left, old weights intact
    point = sitp.train.checkpoint.load_checkpoint(out)  # and the checkpoint still loads
    assert point.record["step"] == 8
    assert main(["train", "--resume", "--out", str(out), "--steps", "9", "--quiet"]) == 0


def test_sample_prints_names_and_innovation(gpt_run, capsys):
    assert (
        main(
            [
                "sample",
                str(gpt_run),
                "--num",
                "5",
                "--temperature",
                "0.8",
                "--top-k",
                "10",
                "--seed",
                "3",
            ]
        )
        == 0
    )
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 6 and lines[-1].startswith("innovation rate: ")
    assert (
        main(
            [
                "sample",
                str(gpt_run),
                "--num",
                "5",
                "--temperature",
                "0.8",
                "--top-k",
                "10",
                "--seed",
                "3",
            ]
        )
        == 0
    )
    assert capsys.readouterr().out.splitlines() == lines  # a seed repeats the draw
    assert (
        main(
            [
                "sample",
                "--out",
                str(gpt_run),
                "--num",
                "5",
                "--temperature",
                "0.8",
                "--top-k",
                "10",
                "--seed",
                "3",
            ]
        )
        == 0
    )
    assert capsys.readouterr().out.splitlines() == lines  # --out DIR is the same as DIR


def one_line_error(capsys, argv, match):
    with pytest.raises(SystemExit) as info:
        raise SystemExit(main(argv))
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert match in err, err


def test_bad_requests_are_one_line_errors(gpt_run, tmp_path, capsys):
    one_line_error(
        capsys,
        ["train", "--model", "transformer", "--out", str(tmp_path / "x")],
        "invalid choice: 'transformer'",
    )
    one_line_error(capsys, ["sample", str(tmp_path / "nowhere")], "no checkpoint")
    one_line_error(capsys, ["train", "--resume", "--out", str(tmp_path)], "no checkpoint")
    one_line_error(
        capsys,
        ["train", "--model", "mlp", "--resume", "--out", str(gpt_run)],
        "is a 'gpt' model, not 'mlp'",
    )
    one_line_error(
        capsys, ["train", "--model", "gpt", "--out", str(gpt_run)], "already holds a checkpoint"
    )
    one_line_error(
        capsys,
        ["train", "--resume", "--out", str(gpt_run), "--lr", "0.5"],
        "cannot change --lr when resuming",
    )
    one_line_error(
        capsys,
        ["train", "--model", "gpt", "--out", str(tmp_path / "y"), "--device", "cuda"],
        "sitp.cuda.is_available() is False",
    )
    one_line_error(capsys, ["sample", str(gpt_run), "--temperature", "0"], "temperature")
    one_line_error(
        capsys,
        ["train", "--model", "gpt", "--out", str(tmp_path / "z"), "--set", "n_layers=2"],
        "n_layers",
    )
    one_line_error(
        capsys,
        [
            "train",
            "--model",
            "mlp",
            "--out",
            str(tmp_path / "k"),
            "--batch-size",
            "5",
            "--grad-accum",
            "2",
            "--steps",
            "1",
        ],
        "grad_accum",
    )


def test_grad_accum_from_the_command_line(tmp_path):
    """--grad-accum K reaches the trainer, is saved with the run and kept on resume."""
    out = tmp_path / "ga"
    args = ["train", "--model", "mlp", "--steps", "3", "--batch-size", "8", "--grad-accum", "2"]
    assert main(args + ["--out", str(out), "--quiet"]) == 0
    record = json.loads((out / "record.json").read_text())
    assert record["train_config"]["grad_accum"] == 2
    assert main(["train", "--resume", "--out", str(out), "--steps", "4", "--quiet"]) == 0
    assert json.loads((out / "record.json").read_text())["train_config"]["grad_accum"] == 2


@pytest.mark.parametrize("damage", ["truncate", "garbage-json", "swap-weights"])
def test_corrupt_checkpoint_is_a_one_line_error(gpt_run, tmp_path, capsys, damage):
    out = tmp_path / "bad"
    out.mkdir()
    for f in gpt_run.iterdir():
        (out / f.name).write_bytes(f.read_bytes())
    if damage == "truncate":
        data = (out / "model.safetensors").read_bytes()
        (out / "model.safetensors").write_bytes(data[: len(data) // 3])
        match = "corrupt checkpoint"
    elif damage == "garbage-json":
        (out / "record.json").write_text("{not json")
        match = "not valid JSON"
    else:  # weights of another model, with a record that vouches for them
        mlp = tmp_path / "mlp"
        assert train(mlp, "mlp", 1) == 0
        (out / "model.safetensors").write_bytes((mlp / "model.safetensors").read_bytes())
        record = json.loads((out / "record.json").read_text())
        record["files"]["model.safetensors"] = json.loads((mlp / "record.json").read_text())[
            "files"
        ]["model.safetensors"]
        (out / "record.json").write_text(json.dumps(record))
        match = "do not fit the model"
    capsys.readouterr()
    one_line_error(capsys, ["sample", str(out)], match)
    one_line_error(capsys, ["train", "--resume", "--out", str(out)], match)


def test_console_entry_point_exit_status():
    """A real process: `python -m sitp` with a bad model exits 2 with one line on stderr."""
    env = dict(os.environ, PYTHONPATH=str(Path(sitp.__file__).parents[1]))
    proc = subprocess.run(
        [sys.executable, "-m", "sitp", "train", "--model", "nope", "--out", "unused"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "invalid choice" in proc.stderr


BAD_NUMBERS = [  # (option, value, what the one-line error says)
    ("--temperature", "nan", "finite"),
    ("--temperature", "inf", "finite"),
    ("--temperature", "-inf", "finite"),
    ("--temperature", "0", "greater than 0"),
    ("--temperature", "-1", "greater than 0"),
    ("--temperature", "hot", "expected a number"),
    ("--top-k", "0", "positive"),
    ("--top-k", "2.5", "expected an integer"),
    ("--top-k", "-3", "positive"),
    ("--num", "0", "positive"),
    ("--max-len", "0", "positive"),
    ("--seed", "-1", "at least 0"),
    ("--seed", "1e3", "expected an integer"),
]


@pytest.mark.parametrize("option,value,match", BAD_NUMBERS)
def test_sample_numeric_options_are_checked(tmp_path, capsys, option, value, match):
    # the parser rejects the value before it looks for a checkpoint
    one_line_error(capsys, ["sample", str(tmp_path), option, value], f"argument {option}")
    one_line_error(capsys, ["sample", str(tmp_path), f"{option}={value}"], match)


TRAIN_BAD_NUMBERS = [
    ("--steps", "0"),
    ("--steps", "nan"),
    ("--batch-size", "-2"),
    ("--lr", "nan"),
    ("--lr", "0"),
    ("--lr", "inf"),
    ("--weight-decay", "-0.1"),
    ("--weight-decay", "nan"),
    ("--warmup", "-1"),
    ("--eval-every", "-1"),
    ("--save-every", "x"),
    ("--threads", "0"),
    ("--seed", "-5"),
]


@pytest.mark.parametrize("option,value", TRAIN_BAD_NUMBERS)
def test_train_numeric_options_are_checked(tmp_path, capsys, option, value):
    out = tmp_path / "run"
    one_line_error(
        capsys,
        ["train", "--model", "mlp", "--out", str(out), f"{option}={value}"],
        f"argument {option}",
    )
    assert not out.exists()  # nothing was started


def test_good_edge_values_pass_the_parser():
    from sitp.train.cli import build_parser

    args = build_parser().parse_args(
        ["sample", "d", "--temperature", "1e-3", "--top-k", "1", "--seed", "0", "--num", "1"]
    )
    assert (args.temperature, args.top_k, args.seed, args.num) == (1e-3, 1, 0, 1)
    args = build_parser().parse_args(
        ["train", "--out", "d", "--weight-decay", "0", "--warmup", "0", "--lr", "3e-4"]
    )
    assert (args.weight_decay, args.warmup, args.lr) == (0.0, 0, 3e-4)


def test_tokenizer_train_saves_a_tokenizer_that_loads(tmp_path, capsys):
    from sitp.tokenizers import BPETokenizer

    text = tmp_path / "corpus.txt"
    text.write_text("the cat sat on the mat; the hat is flat\n" * 20, encoding="utf-8")
    out = tmp_path / "bpe"
    args = ["tokenizer", "train", "--data", str(text), "--vocab-size", "270", "--out", str(out)]
    assert main(args) == 0
    assert "14 merges learned" in capsys.readouterr().out
    tok = BPETokenizer.load(out)
    assert tok.vocab_size == 270 and tok.decode(tok.encode("the cat")) == "the cat"
    one_line_error(capsys, args[:5] + ["256", "--out", str(out)], "--vocab-size")
    one_line_error(
        capsys,
        ["tokenizer", "train", "--data", str(tmp_path / "none"), "--out", str(out)],
        "not shakespeare, names or a text file",
    )

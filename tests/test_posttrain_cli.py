"""sitp.posttrain.cli: sft, rl, eval and chat on a tiny GPT; resumes exactly; one-line errors."""

import subprocess
import sys

import numpy as np
import pytest

import sitp
from sitp.data.tokens import ByteTokenizer, CharTokenizer
from sitp.models.gpt import GPT, GPTConfig
from sitp.posttrain import cli
from sitp.posttrain.chat import ChatTokenizer
from sitp.posttrain.tasks import get_task


def make_init(path, base=None, vocab_extra=True):
    tok = ChatTokenizer(base or ByteTokenizer())
    vocab = tok.vocab_size if vocab_extra else tok.base.vocab_size
    sitp.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=vocab, block_size=48, n_layer=1, n_head=2, n_embd=16))
    opt = sitp.optim.AdamW(model.parameters(), lr=1e-3)
    cli.save(path, model, opt, tok, None, {"stage": "pretrain", "step": 0, "history": []})
    return model


def weights(directory):
    model = cli.load_model(directory)[0]
    return {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}


def test_sft_resumes_exactly(tmp_path, capsys):
    make_init(tmp_path / "init")
    base = ["--init", str(tmp_path / "init"), "--tasks", "addition1", "--identity",
            "--problems", "50", "--batch-size", "4", "--lr", "3e-3"]  # fmt: skip
    assert cli.main_sft(base + ["--out", str(tmp_path / "a"), "--steps", "6"]) == 0
    assert cli.main_sft(base + ["--out", str(tmp_path / "b"), "--steps", "3"]) == 0
    assert cli.main_sft(base + ["--out", str(tmp_path / "b"), "--steps", "6"]) == 0  # resume
    wa, wb = weights(tmp_path / "a"), weights(tmp_path / "b")
    assert wa.keys() == wb.keys()
    for k in wa:
        np.testing.assert_array_equal(wa[k], wb[k], err_msg=k)
    assert "sft step 6" in capsys.readouterr().out


def test_rl_eval_and_resume(tmp_path, capsys):
    make_init(tmp_path / "init")
    base = ["--init", str(tmp_path / "init"), "--task", "addition1", "--prompts", "2",
            "--group", "3", "--max-new-tokens", "3", "--kl", "0.05", "--lr", "1e-3"]  # fmt: skip
    assert (
        cli.main_rl(base + ["--out", str(tmp_path / "a"), "--steps", "4", "--save-every", "2"]) == 0
    )
    assert cli.main_rl(base + ["--out", str(tmp_path / "b"), "--steps", "2"]) == 0
    assert cli.main_rl(base + ["--out", str(tmp_path / "b"), "--steps", "4"]) == 0
    wa, wb = weights(tmp_path / "a"), weights(tmp_path / "b")
    for k in wa:
        np.testing.assert_array_equal(wa[k], wb[k], err_msg=k)
    out = capsys.readouterr().out
    assert "rl step 4: reward" in out
    assert cli.main_eval([str(tmp_path / "a"), "--task", "addition1", "--problems", "5"]) == 0
    line = capsys.readouterr().out.strip()
    assert line.startswith("addition1 pass@1: ") and "95% CI" in line and "5 held-out" in line
    assert cli.main_eval([str(tmp_path / "a"), "--task", "addition1", "--problems", "4",
                          "--samples", "3", "--k", "1,3", "--temperature", "1"]) == 0  # fmt: skip
    assert "pass@3" in capsys.readouterr().out


def test_vocab_is_extended_for_the_chat_tokens(tmp_path):
    base = CharTokenizer("0123456789+? Whatis")
    model = make_init(tmp_path / "char", base=base, vocab_extra=False)
    loaded, tok, _, _ = cli.load_model(tmp_path / "char")
    assert loaded.config.vocab_size == tok.vocab_size == base.vocab_size + 5
    old = model.transformer.wte.weight.detach().numpy()
    new = loaded.transformer.wte.weight.detach().numpy()
    np.testing.assert_array_equal(new[: base.vocab_size], old)
    assert np.all(np.abs(new[base.vocab_size :]) > 0)


def test_chat_streams_two_replies(tmp_path):
    make_init(tmp_path / "init")
    code = "import sys; from sitp.posttrain.cli import main_chat; sys.exit(main_chat(sys.argv[1:]))"
    run = subprocess.run([sys.executable, "-c", code, str(tmp_path / "init"), "--max-new-tokens",
                          "5"], input="hello\nWhat is 1+1?\n", capture_output=True, text=True,
                         timeout=120)  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert len(run.stdout.splitlines()) == 2  # one line per reply, no prompt when piped


@pytest.mark.parametrize(
    "main,argv,message",
    [
        (cli.main_eval, ["{d}", "--task", "subtraction"], "unknown task 'subtraction'"),
        (cli.main_eval, ["{d}/missing", "--task", "addition1"], "no checkpoint"),
        (cli.main_sft, ["--out", "{d}/new", "--tasks", "count"], "give --init DIR"),
        (cli.main_sft, ["--init", "{d}", "--out", "{d}/x"], "no data"),
        (
            cli.main_rl,
            ["--init", "{d}", "--out", "{d}/y", "--task", "count", "--group", "1"],
            "--group must be at least 2",
        ),  # fmt: skip
        (cli.main_sft, ["--init", "{d}", "--out", "{d}/z", "--steps", "0"], "must be positive"),
        (cli.main_rl, ["--init", "{d}", "--out", "{d}", "--task", "count"], "not rl"),
    ],
)
def test_one_line_errors(tmp_path, capsys, main, argv, message):
    make_init(tmp_path)
    try:
        code = main([a.format(d=tmp_path) for a in argv])
    except SystemExit as exit_:
        code = exit_.code
    err = capsys.readouterr().err
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err


def test_python_m_sitp_runs_the_posttrain_commands(tmp_path):
    """`python -m sitp eval|sft|rl|chat` reach sitp.posttrain.cli; `sitp --help` names them."""
    make_init(tmp_path)
    run = subprocess.run([sys.executable, "-m", "sitp", "eval", str(tmp_path), "--task",
                          "subtraction"], capture_output=True, text=True, timeout=120)  # fmt: skip
    assert run.returncode == 2 and "unknown task 'subtraction'" in run.stderr, run.stderr
    helped = subprocess.run([sys.executable, "-m", "sitp", "--help"], capture_output=True,
                            text=True, timeout=120)  # fmt: skip
    assert all(f"'sitp {verb}'" in helped.stdout for verb in ("sft", "rl", "eval", "chat"))


def test_eval_defaults_fit_the_task(tmp_path, capsys):
    """With no --problems, eval takes all of a split smaller than 100 (chain1 has 95); with
    no --max-new-tokens, the cap fits the longest correct reply and its end token."""
    make_init(tmp_path)
    task = get_task("chain1")
    problems = task.problems("heldout", 100, seed=0, at_most=True)
    tok = cli.load_model(tmp_path)[1]
    longest = max(len(tok.encode_text(task.reference(p))) for p in problems)
    assert cli.reply_budget(task, problems, tok) >= longest + 1
    assert cli.main_eval([str(tmp_path), "--task", "chain1"]) == 0
    out = capsys.readouterr().out
    assert f"{len(problems)} held-out problems" in out and len(problems) < 100

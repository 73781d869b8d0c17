"""Chapter 8's first stages: ``sitp pretrain`` (bytes), ``sitp midtrain``, and task mixtures."""

import numpy as np
import pytest

from sitp.data.tokens import ByteTokenizer, CharTokenizer
from sitp.posttrain import cli
from sitp.posttrain.chat import ChatTokenizer, render
from sitp.posttrain.midtrain import main_midtrain, midtrain_stream
from sitp.posttrain.tasks import Mixture, get_task
from sitp.train.cli import main as sitp_main
from test_posttrain_cli import make_init, weights

TINY = ["--set", "n_layer=1", "--set", "n_embd=16", "--set", "n_head=2", "--set", "block_size=48"]


def test_stream_holds_every_conversation_and_the_text_share():
    tok = ChatTokenizer(ByteTokenizer())
    task = get_task("addition2")
    convos = [task.conversation(p) for p in task.problems("train", 30)]
    text = "".join(chr(ord("a") + i % 26) for i in range(5000))
    ids = midtrain_stream(convos, tok, text, text_share=0.25, seed=3, piece=20)
    n_conv = sum(len(render(c, tok)[0]) for c in convos)
    assert ids.dtype == np.int64
    # every conversation once: as many <|user_start|> as conversations, whole
    assert int((ids == tok.user_start).sum()) == len(convos)
    text_tokens = len(ids) - n_conv
    assert text_tokens % 21 == 0  # pieces of <|bos|> and 20 bytes
    assert text_tokens / len(ids) == pytest.approx(0.25, abs=21 / len(ids))
    again = midtrain_stream(convos, tok, text, text_share=0.25, seed=3, piece=20)
    np.testing.assert_array_equal(ids, again)  # the same options, the same stream
    assert len(midtrain_stream(convos, tok)) == n_conv  # no text: conversations only


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"text_share": 1.0}, "text_share must be in [0, 1)"),
        ({"text": "short", "piece": 8}, "not more than one piece"),
    ],
)
def test_stream_refuses_bad_options(kwargs, message):
    tok = ChatTokenizer(ByteTokenizer())
    convo = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "ok"}]
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace(")", r"\)")):
        midtrain_stream([convo], tok, **kwargs)


def test_pretrain_bytes_then_midtrain_resumes_exactly(tmp_path, capsys, monkeypatch):
    """`sitp pretrain` trains a byte-level GPT on a text file; `sitp midtrain` from it,
    interrupted and resumed, ends on the same weights as an uninterrupted run."""
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("To be, or not to be: that is the question.\n" * 200)
    pre = tmp_path / "pre"
    argv = ["--out", str(pre), "--data", str(corpus), "--steps", "4", "--quiet", *TINY]
    assert sitp_main(["pretrain", *argv]) == 0
    model, tok, record, _ = cli.load_model(pre)
    assert record["tokenizer"] == {"kind": "bytes"}
    assert isinstance(tok.base, ByteTokenizer) and model.config.vocab_size == 256 + 5
    base = ["--init", str(pre), "--tasks", "addition1,count", "--identity", "--problems", "40",
            "--batch-size", "3", "--text-share", "0.3"]  # fmt: skip
    assert main_midtrain(base + ["--out", str(tmp_path / "a"), "--steps", "6"]) == 0
    assert main_midtrain(base + ["--out", str(tmp_path / "b"), "--steps", "3"]) == 0
    assert main_midtrain(base + ["--out", str(tmp_path / "b"), "--steps", "6"]) == 0
    wa, wb = weights(tmp_path / "a"), weights(tmp_path / "b")
    for k in wa:
        np.testing.assert_array_equal(wa[k], wb[k], err_msg=k)
    captured = capsys.readouterr()
    assert "midtrain step 6" in captured.out and "30% plain text" in captured.err
    # the next stage reads midtrain's checkpoint
    assert cli.main_sft(["--init", str(tmp_path / "a"), "--out", str(tmp_path / "s"), "--tasks",
                         "addition1", "--problems", "20", "--steps", "2"]) == 0  # fmt: skip


def test_midtrain_refuses_a_tokenizer_that_cannot_write_the_tasks(tmp_path, capsys):
    make_init(tmp_path / "init", base=CharTokenizer("abc "), vocab_extra=False)
    code = main_midtrain(["--init", str(tmp_path / "init"), "--out", str(tmp_path / "m"),
                          "--tasks", "addition1", "--text", "none"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and "cannot build the stream" in err and "--tokenizer bytes" in err, err
    assert len(err.strip().splitlines()) == 1


def test_mixture_asks_and_checks_each_problem_by_its_task():
    mix = get_task("addition2, chain1")
    assert isinstance(mix, Mixture) and mix.name == "addition2,chain1"
    problems = mix.problems("heldout", 150, seed=0, at_most=True)
    assert len(problems) == 150  # chain1 has 95 held-out problems: addition2 fills the rest
    for p in problems:
        task = get_task(p.task)
        assert mix.prompt(p) == task.prompt(p) and mix.reference(p) == task.reference(p)
        assert mix.check(p, task.reference(p)) and not mix.check(p, "no idea")
    small = [
        len(get_task(n).problems("heldout", 500, at_most=True)) for n in ("chain1", "addition1")
    ]
    assert sum(small) < 400  # both splits are small: the mixture runs out
    with pytest.raises(ValueError, match=f"found only {sum(small)} distinct heldout problems"):
        get_task("chain1,addition1").problems("heldout", 400)
    with pytest.raises(ValueError, match="not a task of the mixture"):
        mix.prompt(get_task("count").problems("train", 1)[0])


def test_rl_on_a_mixture(tmp_path, capsys):
    make_init(tmp_path / "init")
    assert cli.main_rl(["--init", str(tmp_path / "init"), "--out", str(tmp_path / "rl"),
                        "--task", "addition1,count", "--prompts", "2", "--group", "2",
                        "--steps", "2"]) == 0  # fmt: skip
    assert "rl step 2: reward" in capsys.readouterr().out

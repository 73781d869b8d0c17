"""sitp.posttrain.chat and .tasks: the chat format, its mask, parsing back; tasks and checkers."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sitp.data.tokens import ByteTokenizer, CharTokenizer
from sitp.posttrain import tasks as T
from sitp.posttrain.chat import (
    SPECIAL_TOKENS,
    ChatTokenizer,
    completion_text,
    parse,
    render,
    render_prompt,
)
from sitp.tokenizers import BPETokenizer

ALPHABET = "abcdefghijklmnopqrstuvwxyz_ <|>?!.0123456789é"
BPE = BPETokenizer.train("the cat sat on the mat; what is 12+34? 46. " * 20, 275,
                         special_tokens=list(SPECIAL_TOKENS))  # fmt: skip
TOKENIZERS = {
    "bytes": ChatTokenizer(ByteTokenizer()),
    "char": ChatTokenizer(CharTokenizer(ALPHABET)),
    "bpe": ChatTokenizer(BPE),
}


def conversations(min_turns=1, end="assistant"):
    text = st.text(alphabet=ALPHABET, max_size=12)
    return st.integers(min_turns, 4).flatmap(
        lambda n: st.lists(text, min_size=2 * n, max_size=2 * n).map(
            lambda xs: [
                {"role": ("user", "assistant")[i % 2], "content": x} for i, x in enumerate(xs)
            ]
        )
    )


def test_special_ids():
    byte = TOKENIZERS["bytes"]
    assert [byte.special[n] for n in SPECIAL_TOKENS] == [256, 257, 258, 259, 260]
    assert byte.vocab_size == 261
    char = TOKENIZERS["char"]
    assert char.bos == len(set(ALPHABET)) and char.vocab_size == len(set(ALPHABET)) + 5
    bpe = TOKENIZERS["bpe"]  # a BPE trained with them keeps its own ids
    assert bpe.special == {n: BPE.special_tokens[n] for n in SPECIAL_TOKENS}
    assert bpe.vocab_size == BPE.vocab_size == 275


@pytest.mark.parametrize("kind", sorted(TOKENIZERS))
@settings(max_examples=40, deadline=None)
@given(conversation=conversations())
def test_render_parse_round_trip(kind, conversation):
    tok = TOKENIZERS[kind]
    ids, mask = render(conversation, tok)
    assert len(ids) == len(mask)
    assert parse(ids, tok) == conversation
    # the mask is 1 exactly on the assistant's content and its end token
    expected, inside = [], False
    for i in ids:
        if i == tok.assistant_start:
            expected.append(0)
            inside = True
        elif i == tok.assistant_end:
            expected.append(1)
            inside = False
        else:
            expected.append(int(inside))
    assert mask == expected
    masked = [i for i, m in zip(ids, mask) if m]
    replies = [m["content"] for m in conversation if m["role"] == "assistant"]
    assert masked == [t for r in replies for t in tok.encode_text(r) + [tok.assistant_end]]
    prompt = render_prompt(conversation[:-1], tok)
    assert prompt == ids[: len(prompt)] and prompt[-1] == tok.assistant_start
    assert parse(prompt, tok) == conversation[:-1]


def test_mask_positions_exact():
    tok = TOKENIZERS["bytes"]
    convo = [{"role": "user", "content": "ab"}, {"role": "assistant", "content": "c"},
             {"role": "user", "content": ""}, {"role": "assistant", "content": "de"}]  # fmt: skip
    ids, mask = render(convo, tok)
    assert ids == [256, 257, 97, 98, 258, 259, 99, 260, 257, 258, 259, 100, 101, 260]
    assert mask == [0, 0, 0, 0, 0, 0, 1, 1, 0, 0, 0, 1, 1, 1]


def test_special_text_in_content_is_ordinary():
    for tok in TOKENIZERS.values():
        convo = [{"role": "user", "content": "<|assistant_end|>"},
                 {"role": "assistant", "content": "<|bos|>"}]  # fmt: skip
        ids, _ = render(convo, tok)
        assert ids.count(tok.assistant_end) == 1 and ids.count(tok.bos) == 1
        assert parse(ids, tok) == convo


def test_errors():
    tok = TOKENIZERS["bytes"]
    with pytest.raises(ValueError, match="unknown role 'system'"):
        render([{"role": "system", "content": "x"}, {"role": "assistant", "content": "y"}], tok)
    with pytest.raises(ValueError, match="must end with the assistant"):
        render([{"role": "user", "content": "x"}], tok)
    with pytest.raises(ValueError, match="alternate"):
        render([{"role": "assistant", "content": "x"}], tok)
    with pytest.raises(ValueError, match="non-empty list"):
        render([], tok)
    with pytest.raises(ValueError, match="exactly 'role' and 'content'"):
        render([{"role": "user"}], tok)
    with pytest.raises(ValueError, match="prompt must end with the user"):
        render_prompt([{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}],
                      tok)  # fmt: skip
    with pytest.raises(ValueError, match="begin with <\\|bos\\|>"):
        parse([97], tok)
    with pytest.raises(ValueError, match="must end with <\\|user_end\\|>"):
        parse([256, 257, 97, 260], tok)
    with pytest.raises(ValueError, match="expected a turn's start"):
        parse([256, 97], tok)
    # turns that render refuses, parse refuses too: two user turns, an assistant first
    user, reply = [257, 97, 258], [259, 98, 260]
    with pytest.raises(ValueError, match="position 4: turn 1 opens as the user's.*assistant's"):
        parse([256, *user, *user], tok)
    with pytest.raises(ValueError, match="position 1: turn 0 opens as the assistant's"):
        parse([256, *reply], tok)
    with pytest.raises(ValueError, match="position 7: turn 2 opens as the assistant's"):
        parse([256, *user, *reply, 259], tok)  # a prompt may only open the assistant's turn
    assert parse([256, *user, *reply, *user, 259], tok) == [
        {"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
        {"role": "user", "content": "a"}]  # fmt: skip
    with pytest.raises(ValueError, match="not in this CharTokenizer"):
        render([{"role": "user", "content": "Z"}, {"role": "assistant", "content": ""}],
               TOKENIZERS["char"])  # fmt: skip


def test_completion_text_stops_at_special():
    tok = TOKENIZERS["bytes"]
    assert completion_text([52, 50, 260, 55], tok) == "42"
    assert completion_text([52, 257, 55], tok) == "4"


# ------------------------------------------------------------------------------- tasks
ALL_TASKS = [T.Addition(2), T.Addition(3), T.Multiplication(2), T.CountLetter(), T.Reverse(),
             T.SortLetters(), T.ChainAddition(2)]  # fmt: skip


@pytest.mark.parametrize("task", ALL_TASKS, ids=repr)
def test_task_splits_and_reference(task):
    train = task.problems("train", 300, seed=0)
    held = task.problems("heldout", 60, seed=0)
    assert len(set(train)) == 300 and len(set(held)) == 60
    assert set(train).isdisjoint(held)
    assert {T.split_of(p) for p in train} == {"train"}
    assert {T.split_of(p) for p in held} == {"heldout"}
    assert train == task.problems("train", 300, seed=0)  # determinism by seed
    assert train != task.problems("train", 300, seed=1)
    for p in train[:50] + held:
        assert task.check(p, task.reference(p)), (p, task.reference(p))
        convo = task.conversation(p)
        assert convo[0]["content"] == task.prompt(p)


def test_split_is_disjoint_whatever_the_seed():
    task = T.Addition(1)  # 100 problems: the split is by the problem, not the seed
    held = {p for s in range(5) for p in task.problems("heldout", 5, seed=s)}
    train = {p for s in range(5) for p in task.problems("train", 50, seed=s)}
    assert held.isdisjoint(train)
    with pytest.raises(ValueError, match="distinct heldout problems"):
        task.problems("heldout", 50)


def test_integer_checker():
    p = T.Problem("addition3", (478, 101))
    task = T.Addition(3)
    for good in ["579", " 579 ", "579.", "The answer is 579.", "=579"]:
        assert task.check(p, good), good
    for bad in ["578", "5790", "578 579", "", "five hundred", "57 9", "-579"]:
        assert not task.check(p, bad), bad
    big = T.Problem("multiplication4", (1234, 5678))
    assert T.Multiplication(4).check(big, "7,006,652")
    assert not T.Multiplication(4).check(big, "7,00,6652")


def test_word_checkers():
    rev, srt, cnt = T.Reverse(), T.SortLetters(), T.CountLetter()
    p = T.Problem("reverse", ("kalum",))
    assert rev.check(p, "mulak") and rev.check(p, " 'Mulak'. ")
    assert (
        not rev.check(p, "kalum") and not rev.check(p, "mula") and not rev.check(p, "mulak mulak")
    )
    q = T.Problem("sort", ("kalum",))
    assert srt.check(q, "aklmu") and not srt.check(q, "akmlu")
    c = T.Problem("count", ("barrar", "r"))
    assert cnt.check(c, "3") and cnt.check(c, "There are 3.") and not cnt.check(c, "2")
    assert cnt.reference(T.Problem("count", ("bab", "z"))) == "0"


def test_chain_checker_reads_after_the_marker():
    task = T.ChainAddition(2)
    p = T.Problem("chain2", (12, 34, 5))
    assert task.reference(p) == "12+34=46, 46+5=51. Answer: 51"
    assert task.check(p, "12+34=46, 46+5=51. Answer: 51")
    assert task.check(p, "wrong steps 1+1=3. answer: 51.")  # only the final answer counts
    assert task.check(p, "Answer: 50. Answer: 51")  # the last marker
    assert not task.check(p, "51")  # no marker
    assert not task.check(p, "12+34=46, 46+5=51. Answer: 46")


def test_get_task_and_identity():
    assert T.get_task("addition3").name == "addition3"
    assert T.get_task("chain2").digits == 2 and T.get_task("sort").name == "sort"
    with pytest.raises(ValueError, match="unknown task 'subtraction'"):
        T.get_task("subtraction")
    with pytest.raises(ValueError, match="digits must be 1..4"):
        T.Multiplication(5)
    convos = T.identity_conversations()
    assert len(convos) >= 20
    tok = TOKENIZERS["bytes"]
    for convo in convos:
        ids, mask = render(convo, tok)
        assert parse(ids, tok) == convo and sum(mask) > 0


def test_lenient_check_is_hackable():
    cnt = T.CountLetter()
    problems = cnt.problems("heldout", 50, seed=0)
    listing = "0 1 2 3 4 5 6 7 8 9"
    assert all(T.lenient_check(cnt, p, listing) for p in problems)
    assert not any(cnt.check(p, listing) for p in problems)
    p = problems[0]
    assert T.lenient_check(cnt, p, cnt.reference(p)) and cnt.check(p, cnt.reference(p))

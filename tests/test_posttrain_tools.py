"""sitp.posttrain.tools and the engine's tool hook: the calculator, the call mid-decode,
the loss mask on the tool's tokens, and a tiny run end to end."""

import random

import numpy as np
import pytest

import sitp
from sitp.data.tokens import ByteTokenizer
from sitp.models.engine import Engine
from sitp.models.gpt import GPT, GPTConfig
from sitp.posttrain.chat import ChatTokenizer, completion_text, parse, render, render_prompt
from sitp.posttrain.evaluate import evaluate
from sitp.posttrain.rl import greedy_replies, sample_group
from sitp.posttrain.sft import IGNORE, collate, sft
from sitp.posttrain.tasks import get_task
from sitp.posttrain.tools import (
    MAX_DEPTH,
    MAX_LENGTH,
    CalcError,
    Calculator,
    calc,
    expression,
    tool_conversation,
)

TOK = ChatTokenizer(ByteTokenizer(), tools=True)


# --- the evaluator -------------------------------------------------------------------


def random_expression(rng, depth=0):
    """A random expression as (text, value), the value computed from the tree, not parsed."""
    if depth > 3 or rng.random() < 0.3:
        n = rng.randrange(10 ** rng.randint(1, 4))
        return str(n), n
    kind = rng.choice(["+", "-", "*", "(", "n"])
    if kind == "(":
        text, value = random_expression(rng, depth + 1)
        return f"({text})", value
    if kind == "n":  # unary minus on a parenthesised expression or a number
        text, value = random_expression(rng, depth + 1)
        text = text if text.isdigit() else f"({text})"
        return f"-{text}", -value
    (a, va), (b, vb) = random_expression(rng, depth + 1), random_expression(rng, depth + 1)
    # parenthesise both operands, so that the text's value is the tree's
    a, b = f"({a})", f"({b})"
    space = " " if rng.random() < 0.3 else ""
    value = {"+": va + vb, "-": va - vb, "*": va * vb}[kind]
    return f"{a}{space}{kind}{space}{b}", value


def test_calc_agrees_with_python_arithmetic_on_random_expressions():
    rng = random.Random(0)
    for _ in range(400):
        text, value = random_expression(rng)
        if len(text) <= MAX_LENGTH:
            assert calc(text) == value, text


def test_calc_precedence_and_associativity():
    # the operators without parentheses: Python's integer arithmetic is the reference
    rng = random.Random(1)
    for _ in range(300):
        terms = [str(rng.randrange(100)) for _ in range(rng.randint(1, 6))]
        ops = [rng.choice("+-*") for _ in terms[1:]]
        text = terms[0] + "".join(o + t for o, t in zip(ops, terms[1:]))
        # the reference: * first, then + and - left to right
        sums, signs, product = [], [1], int(terms[0])
        for o, t in zip(ops, terms[1:]):
            if o == "*":
                product *= int(t)
            else:
                sums.append(signs[-1] * product)
                signs.append(1 if o == "+" else -1)
                product = int(t)
        sums.append(signs[-1] * product)
        assert calc(text) == sum(sums), text
    assert calc("10-4-3") == 3 and calc("2*3+4*5") == 26 and calc("-2*-3") == 6


@pytest.mark.parametrize(
    "text",
    ["", "   ", "1+", "+1", "(1", "1)", "()", "2**3", "1/2", "1 2", "a", "1+x", "1e3", "1.5",
     "(" * (MAX_DEPTH + 2) + "1" + ")" * (MAX_DEPTH + 2), "-" * (MAX_DEPTH + 2) + "1",
     "1+" * MAX_LENGTH + "1", "__import__('os')"],
)  # fmt: skip
def test_calc_refuses_malformed_input(text):
    with pytest.raises(CalcError) as info:
        calc(text)
    assert isinstance(info.value, ValueError) and str(info.value)


def test_calc_refuses_a_non_string():
    with pytest.raises(CalcError, match="str"):
        calc(12)


def test_calculator_answers_and_marks_errors():
    tool = Calculator(TOK)
    enc = TOK.encode_text
    call = [TOK.calc_start, *enc("12*(3+4)"), TOK.calc_end]
    assert tool(enc("so ") + call) == [TOK.result_start, *enc("84"), TOK.result_end]
    error = [TOK.result_start, *enc("error"), TOK.result_end]
    assert tool([TOK.calc_start, *enc("2**3"), TOK.calc_end]) == error  # malformed
    assert tool([*enc("7"), TOK.calc_end]) == error  # no call opened
    assert tool([TOK.calc_start, TOK.bos, TOK.calc_end]) == error  # a special token inside
    assert [answer for _, answer in tool.calls] == ["84", "error", "error", "error"]
    with pytest.raises(ValueError, match="tools=True"):
        Calculator(ChatTokenizer(ByteTokenizer()))


# --- the chat format with tools -------------------------------------------------------


def test_tool_tokens_are_opt_in():
    plain = ChatTokenizer(ByteTokenizer())
    assert plain.vocab_size == 261 and plain.calc_start is None and not plain.tools
    assert TOK.vocab_size == 265
    assert [TOK.calc_start, TOK.calc_end, TOK.result_start, TOK.result_end] == [261, 262, 263, 264]
    convo = [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}]
    assert render(convo, TOK) == render(convo, plain)  # the five keep their ids
    with pytest.raises(ValueError, match="tools=True"):
        render(tool_conversation(get_task("addition1"), get_task("addition1").problems(
            "train", 1)[0]), plain)  # fmt: skip


def test_render_parse_round_trip_with_calls():
    task = get_task("multiplication2")
    for p in task.problems("train", 20, seed=3):
        convo = tool_conversation(task, p)
        ids, mask = render(convo, TOK)
        assert parse(ids, TOK) == convo
        reply = ids[ids.index(TOK.assistant_start) + 1 :]
        assert completion_text(reply, TOK) == task.reference(p)
        assert task.check(p, completion_text(reply, TOK))
    chain = get_task("chain1")
    p = chain.problems("train", 1)[0]
    assert expression(chain, p) == "+".join(map(str, p.args))
    ids, _ = render(tool_conversation(chain, p), TOK)
    assert chain.check(p, completion_text(ids[ids.index(TOK.assistant_start) + 1 :], TOK))
    with pytest.raises(ValueError, match="not an arithmetic task"):
        expression(get_task("count"), get_task("count").problems("train", 1)[0])


def test_completion_text_without_tools_is_unchanged():
    plain = ChatTokenizer(ByteTokenizer())
    assert completion_text([52, 50, 260, 55], plain) == "42"
    assert completion_text([52, 257, 55], plain) == "4"
    # with tools: calls and results are left out, an unclosed one runs to the end
    assert completion_text([TOK.calc_start, 52, TOK.calc_end, 53, TOK.assistant_end], TOK) == "5"
    assert completion_text([53, TOK.result_start, 52, 52], TOK) == "5"


def test_sft_mask_excludes_the_tools_tokens():
    task = get_task("multiplication2")
    p = task.problems("train", 1, seed=0)[0]
    ids, mask = render(tool_conversation(task, p), TOK)
    r0, r1 = ids.index(TOK.result_start), ids.index(TOK.result_end)
    c0 = ids.index(TOK.calc_start)
    assert all(m == 0 for m in mask[r0 : r1 + 1])  # <|result|> value <|/result|>
    assert all(m == 1 for m in mask[c0:r0])  # <|calc|> expression <|/calc|>
    assert all(m == 1 for m in mask[r1 + 1 :])  # the answer and <|assistant_end|>
    _, targets_BT = collate([(ids, mask)], pad_id=TOK.bos, block_size=64)
    targets = targets_BT.tolist()[0]  # position t predicts ids[t + 1]
    kept = [ids[t + 1] for t, y in enumerate(targets) if y != IGNORE]
    value = TOK.encode_text(str(task.value(*p.args)))
    call = [TOK.calc_start, *TOK.encode_text(expression(task, p)), TOK.calc_end]
    assert kept == call + value + [TOK.assistant_end]
    assert TOK.result_start not in kept and TOK.result_end not in kept


# --- the engine: a call mid-decode ------------------------------------------------------


class ProgramCache:
    """The stub's cache: every token each row was fed, as a KV cache would hold them."""

    def __init__(self, B, padding=None):
        self.seen = [[] for _ in range(B)]
        self.pad = padding or [0] * B

    def repeat_interleave(self, n):
        out = ProgramCache(0)
        out.seen = [list(s) for s in self.seen for _ in range(n)]
        out.pad = [p for p in self.pad for _ in range(n)]
        return out


class ProgramModel:
    """A stub model that writes a fixed program of tokens from what it was fed.

    It reads the user's text as an expression, writes ``<|calc|>`` expression
    ``<|/calc|>``, and once it has been fed a result, copies the result's text and ends
    its turn: what it writes after the call depends only on the tokens fed back, so the
    test sees whether the engine spliced them in (through the cache, or the whole
    sequence without it).
    """

    block_size = 96

    def __init__(self, tok):
        self.tok, self.fed_uncached = tok, []

    def make_kv_cache(self, B, padding=None):
        return ProgramCache(B, padding)

    def eval(self):
        return self

    def next_token(self, history):
        t = self.tok
        expr = history[history.index(t.user_start) + 1 : history.index(t.user_end)]
        reply = history[len(history) - history[::-1].index(t.assistant_start) :]
        script = [t.calc_start, *expr, t.calc_end]
        if len(reply) < len(script):
            return script[len(reply)]
        if t.result_end in reply:
            r0, r1 = reply.index(t.result_start), reply.index(t.result_end)
            copy = reply[r0 + 1 : r1]
            done = len(reply) - r1 - 1
            return copy[done] if done < len(copy) else t.assistant_end
        return t.bos  # no result fed back: a token the test would see

    def __call__(self, idx_BT, kv_cache=None):
        rows = idx_BT.tolist()
        if kv_cache is not None:
            for b, row in enumerate(rows):
                kv_cache.seen[b] += row
            histories = [s[p:] for s, p in zip(kv_cache.seen, kv_cache.pad)]
        else:
            self.fed_uncached.append(len(rows[0]))
            histories = rows
        V = self.tok.vocab_size
        logits = np.zeros((len(rows), len(rows[0]), V), dtype=np.float32)
        for b, h in enumerate(histories):
            logits[b, -1, self.next_token(h)] = 1.0
        return sitp.tensor(logits), None


def expected_reply(text):
    try:
        value = str(calc(text))
    except CalcError:
        value = "error"
    enc = TOK.encode_text
    return [TOK.calc_start, *enc(text), TOK.calc_end, TOK.result_start, *enc(value),
            TOK.result_end, *enc(value), TOK.assistant_end]  # fmt: skip


def prompt(text):
    return render_prompt([{"role": "user", "content": text}], TOK)


def test_engine_splices_the_result_in_a_batch_with_the_cache():
    texts = ["6*7", "12*(3+4)-5", "2**3", "-5+100*2", "9"]  # calls end at different steps
    want = [expected_reply(t) for t in texts]
    n = max(map(len, want))
    tool = Calculator(TOK)
    out = Engine(ProgramModel(TOK)).generate([prompt(t) for t in texts], n, temperature=0.0,
                                              tool=tool)  # fmt: skip
    for text, row, w in zip(texts, out, want):
        reply = row[len(prompt(text)) :]
        assert reply[: len(w)] == w, text
    # each call ran once, in the order the rows closed them (the shortest call first)
    assert sorted(tool.calls) == sorted(zip(texts, ["42", "79", "error", "195", "9"]))


def test_engine_splices_the_result_one_row_with_and_without_the_cache():
    text = "12*(3+4)-5"
    w = expected_reply(text)
    idx_1T = sitp.tensor([prompt(text)])
    for use_cache in (True, False):
        model = ProgramModel(TOK)
        out = Engine(model).generate(idx_1T, len(w), temperature=0.0, use_cache=use_cache,
                                     tool=Calculator(TOK))  # fmt: skip
        assert out.tolist()[0][idx_1T.size(1) :] == w
        if not use_cache:  # every step reread the whole sequence, the result included
            assert model.fed_uncached == list(range(idx_1T.size(1), idx_1T.size(1) + len(w)))


def test_engine_without_the_tool_is_unchanged():
    # the stub without a tool: no result is fed back, so it writes <|bos|> after the call
    text = "6*7"
    out = Engine(ProgramModel(TOK)).generate([prompt(text)], 8, temperature=0.0)
    reply = out[0][len(prompt(text)) :]
    assert reply == [TOK.calc_start, *TOK.encode_text(text), TOK.calc_end] + [TOK.bos] * 3


def test_engine_samples_and_replies_helpers_pass_the_tool():
    text = "6*7"
    w = expected_reply(text)
    model = ProgramModel(TOK)
    replies = sample_group(model, prompt(text), 3, len(w), temperature=0.0,
                           stop_ids=(TOK.assistant_end,), tool=Calculator(TOK))  # fmt: skip
    assert replies == [w] * 3
    got = greedy_replies(model, [prompt("6*7"), prompt("2*3")], len(w), (TOK.assistant_end,),
                         tool=Calculator(TOK))  # fmt: skip
    assert got == [w, expected_reply("2*3")]
    num = Engine(model).generate([prompt(text)], len(w), temperature=0.0, num_samples=2,
                                 tool=Calculator(TOK))  # fmt: skip
    assert [row[len(prompt(text)) :] for row in num] == [w, w]


class ForcedTool:
    """A tool whose call ends at a given token and always answers with ``answer``."""

    def __init__(self, end_id, answer):
        self.end_id, self.answer = end_id, answer

    def __call__(self, ids):
        return list(self.answer)


def test_forced_tokens_go_through_a_real_gpts_kv_cache():
    # a tiny GPT: its cached logits after the forced tokens equal a full forward pass
    sitp.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=TOK.vocab_size, block_size=32, n_layer=1, n_head=2,
                          n_embd=16, rope=True)).eval()  # fmt: skip
    idx_1T = sitp.tensor([prompt("6*7")])
    first = Engine(model).generate(idx_1T, 1, temperature=0.0).tolist()[0][-1]
    tool = ForcedTool(first, [TOK.result_start, 52, 50, TOK.result_end])
    cached = list(Engine(model).stream(idx_1T, 8, temperature=0.0, tool=tool))
    full = list(Engine(model).stream(idx_1T, 8, temperature=0.0, tool=tool, use_cache=False))
    tokens = [int(n.item()) for n, _ in cached]
    assert tokens == [int(n.item()) for n, _ in full]
    assert tokens[:5] == [first, TOK.result_start, 52, 50, TOK.result_end]
    for (_, a), (_, b) in zip(cached, full):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-4, atol=1e-5)
    with sitp.no_grad():  # the logits after the splice: the model's over the whole sequence
        seq = sitp.tensor([idx_1T.tolist()[0] + tokens[:-1]])
        np.testing.assert_allclose(cached[-1][1].numpy(), model(seq)[0][:, -1].numpy(),
                                   rtol=1e-4, atol=1e-5)  # fmt: skip


# --- end to end ----------------------------------------------------------------------------


def test_tiny_tool_sft_and_evaluation_run():
    task = get_task("multiplication1")
    sitp.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=TOK.vocab_size, block_size=40, n_layer=1, n_head=2,
                          n_embd=16, rope=True))  # fmt: skip
    convos = [tool_conversation(task, p) for p in task.problems("train", 40, seed=0)]
    losses = sft(model, convos, TOK, steps=4, lr=1e-2, batch_size=8, seed=0)
    assert len(losses) == 4 and all(np.isfinite(losses))
    held = task.problems("heldout", 4, seed=0)
    tool = Calculator(TOK)
    out = evaluate(model, TOK, task, held, max_new_tokens=16, tool=tool)
    assert out["problems"] == 4 and 0.0 <= out["pass@1"] <= 1.0
    lo, hi = out["pass@1_ci"]
    assert 0.0 <= lo <= out["pass@1"] <= hi <= 1.0

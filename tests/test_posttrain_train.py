"""sitp.posttrain.sft, .rl and .evaluate: masked SFT, GRPO, pass@k, against torch and by hand."""

import itertools
import math

import numpy as np
import pytest
import torch

import sitp
from sitp.data.tokens import ByteTokenizer, CharTokenizer
from sitp.models.gpt import GPT, GPTConfig
from sitp.posttrain import evaluate as E
from sitp.posttrain import rl
from sitp.posttrain.chat import ChatTokenizer, render
from sitp.posttrain.sft import IGNORE, collate, masked_loss, sft
from sitp.posttrain.tasks import Addition

TOK = ChatTokenizer(ByteTokenizer())


def tiny_gpt(vocab, block=32, seed=0):
    sitp.manual_seed(seed)
    return GPT(GPTConfig(vocab_size=vocab, block_size=block, n_layer=1, n_head=2, n_embd=16))


def convo(user, reply):
    return [{"role": "user", "content": user}, {"role": "assistant", "content": reply}]


# --------------------------------------------------------------------------------- SFT
def test_collate_targets():
    a, b = render(convo("abc", "d"), TOK), render(convo("x", "yz"), TOK)
    idx, tgt = collate([a, b], pad_id=TOK.bos, block_size=16)
    assert idx.tolist() == [a[0][:-1], b[0][:-1] + [TOK.bos]]
    # a: bos us a b c ue as d ae -> the targets with mask 1: d, ae
    assert tgt.tolist()[0] == [IGNORE] * 6 + [ord("d"), TOK.assistant_end]
    assert tgt.tolist()[1] == [IGNORE] * 4 + [ord("y"), ord("z"), TOK.assistant_end, IGNORE]
    with pytest.raises(ValueError, match="more than block_size 4"):
        collate([a], TOK.bos, block_size=4)
    with pytest.raises(ValueError, match="no assistant token"):
        collate([([1, 2, 3], [0, 0, 0])], TOK.bos, 8)


def test_masked_loss_ignores_the_user_and_matches_torch():
    model = tiny_gpt(TOK.vocab_size)
    rendered = [render(convo("hello", "ok"), TOK), render(convo("a", "bcd"), TOK)]
    idx, tgt = collate(rendered, TOK.bos, model.block_size)
    logits, _ = model(idx)
    loss = masked_loss(logits, tgt)
    # a user token's target changed: the loss does not change
    ids, mask = rendered[0]
    changed = list(ids)
    changed[3] = ord("Q")  # a user token (mask 0), read as a target at position 2
    assert mask[3] == 0
    _, tgt2 = collate([(changed, mask), rendered[1]], TOK.bos, model.block_size)
    assert masked_loss(logits, tgt2).item() == loss.item()
    # the loss and its gradient wrt the logits against a hand-masked torch cross-entropy
    leaf = sitp.tensor(logits.detach().numpy(), requires_grad=True)
    masked_loss(leaf, tgt).backward()
    t_logits = torch.tensor(logits.detach().numpy(), requires_grad=True)
    t_tgt = torch.tensor(tgt.numpy())
    keep = t_tgt != IGNORE
    logp = torch.log_softmax(t_logits, dim=-1)
    picked = logp.gather(-1, t_tgt.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    t_loss = -(picked * keep).sum() / keep.sum()
    t_loss.backward()
    assert abs(loss.item() - t_loss.item()) < 1e-5
    np.testing.assert_allclose(leaf.grad.numpy(), t_logits.grad.numpy(), atol=1e-6)
    assert np.all(leaf.grad.numpy()[~keep.numpy()] == 0)


def test_sft_learns_a_reply():
    tok = ChatTokenizer(CharTokenizer("abc?!"))
    model = tiny_gpt(tok.vocab_size, block=16)
    data = [convo("a?", "b!"), convo("b?", "c!"), convo("c?", "a!")]
    losses = sft(model, data, tok, steps=60, lr=1e-2, batch_size=3, seed=0)
    assert len(losses) == 60 and losses[-1] < 0.3 * losses[0]
    with pytest.raises(ValueError, match="longer than the model's block_size"):
        sft(model, [convo("a" * 20, "b")], tok, steps=1)


# ---------------------------------------------------------------------------------- RL
def test_group_advantages_by_hand():
    r = [1.0, 0.0, 0.0, 0.0]
    mean = 0.25
    std = math.sqrt((0.75**2 + 3 * 0.25**2) / 4)
    expected = [(x - mean) / (std + 1e-6) for x in r]
    np.testing.assert_allclose(rl.group_advantages(r), expected, rtol=1e-12)
    assert rl.group_advantages([0.5, 0.5]).tolist() == [0.0, 0.0]
    with pytest.raises(ValueError, match="non-empty 1-D"):
        rl.group_advantages([])


def torch_grpo_loss(logp, old, adv, mask, eps, ref, beta):
    ratio = torch.exp(logp - old)
    a = adv[:, None]
    per = -torch.minimum(ratio * a, torch.clamp(ratio, 1 - eps, 1 + eps) * a)
    q = ref - logp
    per = per + beta * (torch.exp(q) - q - 1)
    return (per * mask).sum() / mask.sum()


def test_grpo_loss_gradient_against_torch():
    rng = np.random.default_rng(0)
    B, T = 4, 6
    logp = -rng.uniform(0.1, 3, (B, T)).astype(np.float32)
    old = (logp + rng.normal(0, 0.3, (B, T))).astype(np.float32)  # some ratios clip
    ref = (logp + rng.normal(0, 0.5, (B, T))).astype(np.float32)
    adv = rng.normal(0, 1, B).astype(np.float32)
    mask = (rng.uniform(size=(B, T)) < 0.7).astype(np.float32)
    s_logp = sitp.tensor(logp, requires_grad=True)
    loss, stats = rl.grpo_loss(s_logp, sitp.tensor(old), sitp.tensor(adv), sitp.tensor(mask),
                               0.2, sitp.tensor(ref), 0.1)  # fmt: skip
    loss.backward()
    t_logp = torch.tensor(logp, requires_grad=True)
    t_loss = torch_grpo_loss(t_logp, torch.tensor(old), torch.tensor(adv), torch.tensor(mask),
                             0.2, torch.tensor(ref), 0.1)  # fmt: skip
    t_loss.backward()
    assert abs(loss.item() - t_loss.item()) < 1e-5
    np.testing.assert_allclose(s_logp.grad.numpy(), t_logp.grad.numpy(), atol=1e-6)
    ratio = np.exp(logp - old)
    assert stats["clip_frac"] == pytest.approx((np.abs(ratio - 1) > 0.2)[mask > 0].mean())
    q = ref - logp
    assert stats["kl"] == pytest.approx(((np.exp(q) - q - 1) * mask).sum() / mask.sum(), 1e-5)
    assert 0 < stats["clip_frac"] < 1


def test_equal_rewards_give_zero_gradient():
    model = tiny_gpt(4, block=8)
    opt = sitp.optim.SGD(model.parameters(), lr=0.1)
    before = [p.detach().numpy().copy() for p in model.parameters()]
    gen = sitp.Generator().manual_seed(0)
    stats = rl.grpo_step(model, opt, [[0], [0, 2]], lambda i, c: 1.0, group_size=4,
                         max_new_tokens=3, generator=gen)  # fmt: skip
    assert stats["reward"] == 1.0 and stats["zero_groups"] == 2 and stats["loss"] == 0.0
    for p, b in zip(model.parameters(), before):
        assert p.grad is None or not np.any(p.grad.numpy())
        np.testing.assert_array_equal(p.detach().numpy(), b)


def test_grpo_raises_the_rewarded_token():
    """A 2-token task: after prompt 0 the reply is one token, rewarded when it is 1."""
    model = tiny_gpt(2, block=4, seed=1)
    opt = sitp.optim.AdamW(model.parameters(), lr=3e-2)
    gen = sitp.Generator().manual_seed(0)

    def prob_of_1():
        with sitp.no_grad():
            logits, _ = model(sitp.tensor([[0]]))
        return float(sitp.nn.functional.softmax(logits[0, -1], dim=-1)[1].item())

    p0 = prob_of_1()
    rewards = []
    for _ in range(15):
        stats = rl.grpo_step(model, opt, [[0]] * 2, lambda i, c: float(c[0] == 1),
                             group_size=8, max_new_tokens=1, generator=gen)  # fmt: skip
        rewards.append(stats["reward"])
    p1 = prob_of_1()
    print(f"p(rewarded token): {p0:.3f} before, {p1:.3f} after 15 GRPO steps")
    assert p1 > 0.9 > p0 + 0.3, (p0, p1)
    assert np.mean(rewards[-3:]) > np.mean(rewards[:3])


def test_grpo_with_reference_and_epochs():
    model, ref = tiny_gpt(5, block=8, seed=0), tiny_gpt(5, block=8, seed=3)
    opt = sitp.optim.AdamW(model.parameters(), lr=1e-1)
    gen = sitp.Generator().manual_seed(1)
    stats = rl.grpo_step(model, opt, [[0, 1]], lambda i, c: float(c.count(2)), group_size=6,
                         max_new_tokens=4, ref_model=ref, kl_coef=0.1, epochs=3,
                         stop_ids=(4,), generator=gen)  # fmt: skip
    assert stats["kl"] > 0 and 0 <= stats["clip_frac"] <= 1 and stats["tokens"] > 0
    with pytest.raises(ValueError, match="temperature > 0"):
        rl.grpo_step(model, opt, [[0]], lambda i, c: 0.0, temperature=0.0)


def test_sample_group_stops_and_logprobs_match_the_engine():
    model = tiny_gpt(6, block=10).eval()
    gen = sitp.Generator().manual_seed(2)
    replies = rl.sample_group(model, [0, 1], 5, 6, temperature=1.0, stop_ids=(3,), generator=gen)
    for r in replies:
        assert 1 <= len(r) <= 6 and (3 not in r[:-1])
    logp, mask = rl.completion_logprobs(model, [[0, 1]] * 5, replies, temperature=0.7)
    assert mask.sum().item() == sum(len(r) for r in replies)
    # position by position, against the model's own logits on each full sequence
    for b, r in enumerate(replies):
        seq = [0, 1] + r
        with sitp.no_grad():
            logits, _ = model(sitp.tensor([seq[:-1]]))
        ref = torch.log_softmax(torch.tensor(logits.numpy()[0]) / 0.7, dim=-1)
        for t, tok in enumerate(r):
            assert abs(logp[b, 1 + t].item() - ref[1 + t, tok].item()) < 1e-5


def test_greedy_replies_equal_one_prompt_at_a_time():
    """Batched by prompt length (here in batches of 3, so a length spans two batches) and
    stopped when every row has stopped: the replies of greedy decoding one by one."""
    model = tiny_gpt(8, block=12, seed=4).double().eval()
    rng = np.random.default_rng(0)
    prompts = [rng.integers(0, 8, size=int(n)).tolist() for n in rng.integers(1, 5, size=14)]
    stop = (2, 5)  # common enough that many rows stop before the cap
    got = rl.greedy_replies(model, prompts, 6, stop_ids=stop, batch_size=3)
    want = [rl.sample_group(model, p, 1, 6, temperature=0.0, stop_ids=stop)[0] for p in prompts]
    assert got == want
    assert any(r[-1] in stop for r in got) and any(len(r) < 6 for r in got)
    with pytest.raises(ValueError, match="leaves no room in block_size 12"):
        rl.greedy_replies(model, [[0] * 13], 3)


# ---------------------------------------------------------------------------- evaluate
@pytest.mark.parametrize("gained,lost", [(0, 0), (3, 0), (7, 2), (2, 7), (10, 10), (31, 9)])
def test_paired_test_is_the_exact_sign_test(gained, lost):
    """Against the definition: the share of all 2^n ways to split n disagreements that are
    at least as lopsided as the one seen."""
    before = [0] * gained + [1] * lost + [1] * 5 + [0] * 4  # 5 both solved, 4 neither
    after = [1] * gained + [0] * lost + [1] * 5 + [0] * 4
    out = E.paired_test(before, after)
    n = gained + lost
    worst = abs(gained - lost)
    ways = sum(math.comb(n, k) for k in range(n + 1) if abs(2 * k - n) >= worst)
    assert (out["gained"], out["lost"]) == (gained, lost)
    assert out["p_value"] == pytest.approx(ways / 2**n)
    with pytest.raises(ValueError, match="3 and 2 problems"):
        E.paired_test([1, 0, 1], [1, 0])


@pytest.mark.parametrize("n,c,k", [(n, c, k) for n in range(1, 7) for c in range(n + 1)
                                   for k in range(1, n + 1)])  # fmt: skip
def test_pass_at_k_brute_force(n, c, k):
    samples = [True] * c + [False] * (n - c)
    subsets = list(itertools.combinations(range(n), k))
    brute = sum(any(samples[i] for i in s) for s in subsets) / len(subsets)
    assert E.pass_at_k(n, c, k) == pytest.approx(brute, abs=1e-12)


def test_wilson_interval_inverts_the_score_test():
    z = 1.959964
    for s, n in [(0, 10), (3, 10), (10, 10), (47, 120)]:
        lo, hi = E.wilson_interval(s, n, z)
        grid = np.linspace(0, 1, 200001)
        inside = grid[np.abs(s / n - grid) <= z * np.sqrt(grid * (1 - grid) / n)]
        assert lo == pytest.approx(inside.min(), abs=1e-4)
        assert hi == pytest.approx(inside.max(), abs=1e-4)
    with pytest.raises(ValueError):
        E.wilson_interval(3, 2)


def test_bootstrap_interval():
    values = [0.0] * 30 + [1.0] * 70
    lo, hi = E.bootstrap_interval(values, seed=0)
    assert lo < 0.7 < hi and hi - lo < 0.25
    assert (lo, hi) == E.bootstrap_interval(values, seed=0)
    assert E.bootstrap_interval([0.5] * 5) == (0.5, 0.5)


def test_evaluate_counts_the_checker():
    task = Addition(1)
    problems = task.problems("heldout", 5, seed=0)
    model = tiny_gpt(TOK.vocab_size, block=32)
    out = E.evaluate(model, TOK, task, problems, max_new_tokens=4)
    assert out["problems"] == 5 and len(out["correct"]) == 5
    right = sum(task.check(p, t) for p, t in zip(problems, out["first_replies"]))
    assert out["pass@1"] == right / 5
    assert out["pass@1_ci"] == E.wilson_interval(right, 5)
    gen = sitp.Generator().manual_seed(0)
    out = E.evaluate(model, TOK, task, problems, n_samples=4, ks=(1, 4), temperature=1.0,
                     max_new_tokens=4, generator=gen)  # fmt: skip
    assert out["pass@4"] >= out["pass@1"]
    with pytest.raises(ValueError, match="greedy decoding gives one reply"):
        E.evaluate(model, TOK, task, problems, n_samples=2)

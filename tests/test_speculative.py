"""Section 5.4's sampling filters and speculative decoding.

Top-p and min-p keep what a direct numpy reading of their definitions keeps, and draws
follow the filtered distribution. Speculative decoding is exact in distribution: its
tokens follow the target model's distribution whatever the draft, which a chi-square
test checks on a vocabulary of 3 (and the same test refuses the draft's distribution,
so it can fail); greedy, it returns the target's own greedy tokens.
"""

import math
import types

import numpy as np
import pytest

import sitp
from sitp.models.engine import Engine, sample_next, sampling_probs
from sitp.models.gpt import GPT, GPTConfig


def chi2_sf(x, df):
    """P(X >= x) for X chi-square with df degrees of freedom: 1 - P(df/2, x/2), the
    regularised lower incomplete gamma function summed as its power series. Far in the
    tail, where the series would overflow, Chernoff's bound (x/df)^(df/2) e^((df-x)/2)
    instead: an upper bound, so a test that the tail is small stays sound."""
    a, z = df / 2, x / 2
    if z > 300:
        return math.exp(a * math.log(x / df) + (df - x) / 2)
    term = total = 1.0 / a
    n = 0
    while term > 1e-15 * total:
        n += 1
        term *= z / (a + n)
        total += term
    return 1.0 - math.exp(a * math.log(z) - z - math.lgamma(a)) * total


def chi2_stat(counts, probs):
    expected = np.asarray(probs) * np.sum(counts)
    return float(np.sum((np.asarray(counts) - expected) ** 2 / expected))


def reference_filter(p, top_p=None, min_p=None):
    """The definitions read directly: the nucleus is the most likely tokens, in order, up
    to the first whose cumulative mass reaches top_p (and any tied with it)."""
    p = np.asarray(p, dtype=np.float64).copy()
    if top_p is not None:
        order = np.argsort(-p, kind="stable")
        mass, cut = 0.0, None
        for i in order:
            mass += p[i]
            if mass >= top_p:
                cut = p[i]
                break
        p[p < (cut if cut is not None else 0.0)] = 0.0
    if min_p is not None:
        p[p < min_p * p.max()] = 0.0
    return p / p.sum()


P4 = [0.5, 0.3, 0.15, 0.05]


@pytest.mark.parametrize(
    "top_p, min_p",
    [(0.7, None), (0.8, None), (0.95, None), (1.0, None), (None, 0.25), (None, 0.5),
     (0.9, 0.5), (0.01, None)],
)  # fmt: skip
def test_top_p_and_min_p_keep_what_their_definitions_keep(top_p, min_p):
    logits = sitp.tensor([np.log(P4), np.log(P4[::-1])], dtype=sitp.float32)
    got = sampling_probs(logits, top_p=top_p, min_p=min_p).numpy()
    for row, p in zip(got, (P4, P4[::-1])):
        np.testing.assert_allclose(row, reference_filter(p, top_p, min_p), atol=1e-6)


def test_draws_follow_the_filtered_distribution():
    logits = sitp.tensor([np.log(P4)] * 4000, dtype=sitp.float32)
    g = sitp.Generator().manual_seed(0)
    for kw in (dict(top_p=0.7), dict(min_p=0.25), dict(top_k=3, temperature=0.5)):
        want = sampling_probs(logits[:1], **kw).numpy()[0]
        draws = sample_next(logits, generator=g, **kw)[:, 0].numpy()
        counts = np.bincount(draws, minlength=4)
        kept = want > 0
        assert counts[~kept].sum() == 0, (kw, counts)
        stat = chi2_stat(counts[kept], want[kept])
        assert chi2_sf(stat, kept.sum() - 1) > 1e-3, (kw, counts, want)


def test_sampling_arguments_are_checked():
    logits = sitp.zeros((1, 4))
    for kw, words in ((dict(top_p=0.0), "top_p"), (dict(top_p=1.5), "top_p"),
                      (dict(min_p=-0.1), "min_p"), (dict(temperature=-1), "temperature")):  # fmt: skip
        with pytest.raises(ValueError, match=words):
            sampling_probs(logits, **kw)
    assert chi2_sf(2.0, 2) == pytest.approx(math.exp(-1.0))  # df 2: the exponential


def test_top_p_keeps_the_nucleus_of_a_sort_ties_included():
    """The nucleus is the tokens a sort and a cumulative sum keep, on rows of every shape
    (numpy's sort the oracle); tokens tied with the last one it needs are kept too."""
    rng = np.random.default_rng(0)
    for trial in range(60):
        V, B = int(rng.integers(2, 50)), int(rng.integers(1, 4))
        x = rng.normal(size=(B, V)) * rng.uniform(0.1, 5)
        if trial % 3 == 0:
            x = np.round(x, 1)  # tied logits: kept or dropped together
        p = sitp.tensor(x, dtype=sitp.float32).softmax(-1)
        for top_p in (0.05, 0.5, 0.9, 0.99):
            kept = sampling_probs(sitp.tensor(x, dtype=sitp.float32), top_p=top_p).numpy() > 0
            for row in range(B):
                q = p[row].numpy()
                desc = np.sort(q)[::-1]
                before = np.cumsum(desc, dtype=np.float32) - desc
                floor = desc[int((before < top_p).sum()) - 1]
                assert (kept[row] == (q >= floor)).all(), (trial, top_p, x[row])
    logits = sitp.tensor([[2.0, 1.0, 1.0, -1.0]])
    kept = sampling_probs(logits, top_p=0.75)[0].numpy()
    assert (kept > 0).tolist() == [True, True, True, False]  # the tie with the 2nd kept too
    assert abs(kept.sum() - 1) < 1e-6


def test_top_p_on_a_gpt2_sized_vocabulary_matches_a_sort():
    """50,257 tokens: the nucleus is the tokens a sort and a cumulative sum keep."""
    rng = np.random.default_rng(1)
    x = rng.normal(size=(2, 50_257)) * 3
    probs = sampling_probs(sitp.tensor(x, dtype=sitp.float32), top_p=0.9).numpy()
    p = sitp.tensor(x, dtype=sitp.float32).softmax(-1).numpy().astype(np.float64)
    for row in range(2):
        desc = np.sort(p[row])[::-1]
        n_keep = int(((np.cumsum(desc) - desc) < 0.9).sum())
        assert (probs[row] > 0).sum() == n_keep
        assert set(np.flatnonzero(probs[row])) == set(np.argsort(-p[row])[:n_keep])
        assert abs(probs[row].sum() - 1) < 1e-5


class Markov:
    """A language model whose next token depends only on the last one: logits_VV[last].

    It has the engine's interface (a cache that counts positions) and costs one lookup
    per call, so that thousands of speculative runs take a second.
    """

    def __init__(self, logits_VV, block_size=16):
        self.logits_VV, self.block_size = logits_VV, block_size

    def make_kv_cache(self, batch_size, padding=None):
        return types.SimpleNamespace(pos=0)

    def __call__(self, idx_BT, kv_cache=None):
        kv_cache.pos += idx_BT.size(1)
        assert kv_cache.pos <= self.block_size
        return self.logits_VV[idx_BT], None


def test_speculative_tokens_follow_the_target_distribution():
    rng = np.random.default_rng(0)
    target_VV, draft_VV = rng.normal(size=(3, 3)), rng.normal(size=(3, 3))
    engine = Engine(Markov(sitp.tensor(target_VV, dtype=sitp.float32)))
    draft = Markov(sitp.tensor(draft_VV, dtype=sitp.float32))
    g = sitp.Generator().manual_seed(1)
    runs, counts, rounds = 1500, np.zeros(27), []
    for _ in range(runs):
        out, r = engine.speculative(sitp.tensor([[0]]), 3, draft, k=2, generator=g)
        a, b, c = out[0, 1:].tolist()
        counts[9 * a + 3 * b + c] += 1
        rounds += r

    def joint(logits_VV):
        p = np.exp(logits_VV) / np.exp(logits_VV).sum(1, keepdims=True)
        return np.array([p[0, a] * p[a, b] * p[b, c]
                         for a in range(3) for b in range(3) for c in range(3)])  # fmt: skip

    assert chi2_sf(chi2_stat(counts, joint(target_VV)), 26) > 1e-3
    assert chi2_sf(chi2_stat(counts, joint(draft_VV)), 26) < 1e-6  # the test can fail
    kept = [j for n, j in rounds if n == 2]
    assert {0, 1, 2} <= set(kept)  # refusals at each place, and whole rounds kept


def gpt(n_layer, seed):
    sitp.manual_seed(seed)
    cfg = GPTConfig(block_size=32, vocab_size=11, n_layer=n_layer, n_head=2, n_embd=16, rope=True)
    model = GPT(cfg).eval()
    with sitp.no_grad():
        for p in model.parameters():
            p.add_(sitp.randn(p.shape) * 0.3)
    return model


def test_greedy_speculative_decoding_returns_the_targets_greedy_tokens():
    target, draft = gpt(2, 0), gpt(1, 1)
    prompt = sitp.tensor([[1, 4, 2, 8]])
    want = Engine(target).generate(prompt, 20, temperature=0.0)
    for k in (1, 3, 5):
        got, rounds = Engine(target).speculative(prompt, 20, draft, k=k, temperature=0.0)
        assert got.tolist() == want.tolist(), k
        assert sum(j + 1 for _, j in rounds) == 20
    _, rounds = Engine(target).speculative(prompt, 20, target, k=4, temperature=0.8)
    assert all(j == n for n, j in rounds)  # a draft equal to the target: every proposal kept
    with pytest.raises(ValueError, match="one sequence"):
        Engine(target).speculative(prompt.repeat(2, 1), 3, draft)
    Engine(target).speculative(prompt, 29, draft)  # 4 + 29 - 1 = 32 positions: fits
    with pytest.raises(ValueError, match="need 33 positions"):
        Engine(target).speculative(prompt, 30, draft)


def test_top_k_keeps_the_k_largest_and_their_ties():
    g = sitp.Generator().manual_seed(3)
    logits = sitp.randint(0, 6, (50, 12), generator=g).to(sitp.float32)  # many ties
    for k in (1, 3, 7, 11):
        v_BK, _ = sitp.topk(logits, k)
        want = sitp.nn.functional.softmax(
            logits.masked_fill(logits < v_BK[:, -1:], float("-inf")), dim=-1
        )
        got = sampling_probs(logits, top_k=k)
        np.testing.assert_array_equal(got.numpy(), want.numpy())
        counts = (logits.numpy()[:, None, :] > logits.numpy()[:, :, None]).sum(-1)
        np.testing.assert_array_equal(got.numpy() > 0, counts < k)  # fewer than k above

"""Chapter 1: the counting bigram model against plain-Python and numpy oracles."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest

import sitp
from sitp.data import Vocab, load_names
from sitp.models.bigram import BigramCounts, bigram_pairs

WORDS = ["emma", "olivia", "ava", "isabella", "sophia", "mia", "amelia", "anna"]


def python_nll(words, smoothing):
    """NLL of the smoothed bigram model with dicts and floats, no tensors."""
    vocab = Vocab(words)
    pairs = Counter()
    for w in words:
        chars = "." + w + "."
        pairs.update(zip(chars, chars[1:]))
    rows = Counter()
    for (a, _), k in pairs.items():
        rows[a] += k
    V = len(vocab)
    total = sum(pairs.values())
    return (
        -sum(
            k * math.log((k + smoothing) / (rows[a] + smoothing * V)) for (a, _), k in pairs.items()
        )
        / total
    )


def test_pairs_cover_every_character_and_the_end():
    vocab = Vocab(WORDS)
    ix1, ix2 = bigram_pairs(WORDS, vocab)
    assert len(ix1) == len(ix2) == sum(len(w) + 1 for w in WORDS)
    assert ix1.dtype == sitp.int64
    assert [vocab.itos[i] for i in ix2[:5].tolist()] == list("emma.")
    assert [vocab.itos[i] for i in ix1[:5].tolist()] == list(".emma")


def test_counts_match_numpy():
    vocab = Vocab(WORDS)
    model = BigramCounts(vocab).fit(WORDS)
    ix1, ix2 = bigram_pairs(WORDS, vocab)
    N = np.zeros((len(vocab), len(vocab)), dtype=np.int64)
    np.add.at(N, (ix1.numpy(), ix2.numpy()), 1)
    assert (model.counts.numpy() == N).all()
    assert model.counts.dtype == sitp.int64


@pytest.mark.parametrize("smoothing", [0.0, 0.5, 1.0, 10.0])
def test_nll_matches_plain_python(smoothing):
    model = BigramCounts(Vocab(WORDS), smoothing=smoothing).fit(WORDS)
    assert model.nll(WORDS) == pytest.approx(python_nll(WORDS, smoothing), abs=1e-5)
    assert model.perplexity(WORDS) == pytest.approx(math.exp(model.nll(WORDS)))
    assert sitp.allclose(model.probs.sum(1), sitp.ones(len(model.vocab)))


def test_unsmoothed_model_is_the_maximum_likelihood():
    """Any other row-stochastic table has a higher NLL on the data it was fitted to."""
    vocab = Vocab(WORDS)
    mle = BigramCounts(vocab, smoothing=0.0).fit(WORDS)
    best = mle.nll(WORDS)
    for alpha in (0.01, 0.1, 1.0):
        assert BigramCounts(vocab, smoothing=alpha).fit(WORDS).nll(WORDS) > best


def test_unseen_bigram_has_infinite_nll_without_smoothing():
    vocab = Vocab(WORDS + ["bob"])
    model = BigramCounts(vocab, smoothing=0.0).fit(WORDS)
    assert math.isinf(model.nll(["bob"]))
    assert math.isfinite(BigramCounts(vocab, smoothing=1.0).fit(WORDS).nll(["bob"]))


def test_sampling_is_reproducible_and_uses_the_vocabulary():
    model = BigramCounts(Vocab(WORDS)).fit(WORDS)
    a = model.sample(20, generator=sitp.Generator().manual_seed(3))
    b = model.sample(20, generator=sitp.Generator().manual_seed(3))
    assert a == b
    letters = set("".join(WORDS))
    assert all(set(name) <= letters for name in a)


def test_low_temperature_is_greedy():
    """As T -> 0 the sampler follows the argmax of each row."""
    words = ["ab", "ab", "ab", "ac"]
    model = BigramCounts(Vocab(words), smoothing=0.0).fit(words)
    names = model.sample(10, temperature=0.01, generator=sitp.Generator().manual_seed(0))
    assert names == ["ab"] * 10


def test_first_character_frequencies_converge():
    words = ["ab", "ab", "ab", "b"]  # after '.': 'a' with probability 3/4
    model = BigramCounts(Vocab(words), smoothing=0.0).fit(words)
    names = model.sample(2000, generator=sitp.Generator().manual_seed(1))
    share_a = sum(name.startswith("a") for name in names) / len(names)
    assert abs(share_a - 0.75) < 0.03


def test_census_corpus_numbers_quoted_in_chapter_1():
    """The numbers the chapter's prose quotes for the offline corpus."""
    words = load_names("offline")
    vocab = Vocab(words)
    model = BigramCounts(vocab, smoothing=1.0).fit(words)
    assert len(words) == 5163
    assert model.counts.sum().item() == 36_122
    assert model.nll(words) == pytest.approx(2.3423, abs=5e-5)
    assert model.perplexity(words) == pytest.approx(10.40, abs=5e-3)
    mle = BigramCounts(vocab, smoothing=0.0).fit(words)
    assert mle.nll(words) == pytest.approx(2.3346, abs=5e-5)

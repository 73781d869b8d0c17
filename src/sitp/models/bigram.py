"""The bigram language model by counting (chapter 1).

A bigram model predicts the next character from the current one alone. Fitting it
by maximum likelihood is counting: ``N[i, j]`` is how often character ``j``
follows character ``i`` in the corpus, and row ``i`` of ``P``, the counts
normalised to sum to one, is the model's distribution of the next character.

Example:
    >>> from sitp.data import Vocab
    >>> from sitp.models.bigram import BigramCounts
    >>> words = ["emma", "ava", "anna"]
    >>> model = BigramCounts(Vocab(words), smoothing=0.0).fit(words)
    >>> int(model.counts.sum())  # len(word) + 1 bigrams a name
    14
    >>> model.vocab.itos
    ['.', 'a', 'e', 'm', 'n', 'v']
    >>> [round(p, 4) for p in model.probs[0].tolist()]  # after '.': 'a' 2 of 3, 'e' 1 of 3
    [0.0, 0.6667, 0.3333, 0.0, 0.0, 0.0]
    >>> round(model.nll(words), 4)
    0.6738
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import sitp
from sitp.data import Vocab, build_context_dataset


# --8<-- [start:pairs]
def bigram_pairs(words: Sequence[str], vocab: Vocab) -> tuple[sitp.Tensor, sitp.Tensor]:
    """Every (current, next) pair of character indices of ``'.' + word + '.'``.

    Returns:
        ``(ix1_N, ix2_N)``, two int64 tensors of length N, the total of
        ``len(word) + 1`` over the words.
    """
    X_N1, Y_N = build_context_dataset(words, vocab, block_size=1)
    return X_N1[:, 0], Y_N


# --8<-- [end:pairs]


class BigramCounts:
    """A bigram language model fitted by counting.

    Args:
        vocab: the character vocabulary; ``'.'`` (index 0) starts and ends a name.
        smoothing: a pseudo-count added to every cell before normalising
            ("add-one smoothing" for 1.0), so that no bigram has probability 0.

    Attributes:
        counts: ``(V, V)`` int64 tensor, ``counts[i, j]`` = how often j follows i.
        probs: ``(V, V)`` float32 tensor, the smoothed counts with rows summing to 1.
    """

    def __init__(self, vocab: Vocab, smoothing: float = 1.0):
        self.vocab = vocab
        self.smoothing = smoothing
        V = len(vocab)
        self.counts = sitp.zeros((V, V), dtype=sitp.int64)
        self.probs = sitp.full((V, V), 1.0 / V)

    # --8<-- [start:fit]
    def fit(self, words: Sequence[str]) -> "BigramCounts":
        """Counts the bigrams of ``words`` and normalises the rows. Returns self."""
        ix1_N, ix2_N = bigram_pairs(words, self.vocab)
        V = len(self.vocab)
        N_VV = sitp.zeros((V, V), dtype=sitp.int64)
        # N[ix1[n], ix2[n]] += 1 for every n; repeated pairs add up.
        N_VV.index_put_((ix1_N, ix2_N), sitp.ones(len(ix1_N), dtype=sitp.int64), accumulate=True)
        self.counts = N_VV
        smoothed_VV = N_VV.float() + self.smoothing
        self.probs = smoothed_VV / smoothed_VV.sum(1, keepdim=True)  # rows sum to 1
        return self

    # --8<-- [end:fit]

    # --8<-- [start:nll]
    def nll(self, words: Sequence[str]) -> float:
        """Average negative log-likelihood per bigram of ``words``, in nats."""
        ix1_N, ix2_N = bigram_pairs(words, self.vocab)
        return -self.probs[ix1_N, ix2_N].log().mean().item()

    def perplexity(self, words: Sequence[str]) -> float:
        """``exp(nll)``: the number of equally likely choices the model hesitates among."""
        return math.exp(self.nll(words))

    # --8<-- [end:nll]

    # --8<-- [start:sample]
    def sample(
        self,
        num_names: int,
        temperature: float = 1.0,
        generator: sitp.Generator | None = None,
        max_len: int = 50,
    ) -> list[str]:
        """Draws names character by character, starting from and stopping at ``'.'``.

        Args:
            num_names: how many names to draw.
            temperature: the logits ``log P`` are divided by it before the softmax:
                below 1 sharpens every row, above 1 flattens it; 1 samples ``P`` itself.
            generator: a ``sitp.Generator`` for reproducible draws.
            max_len: a name is cut at this many characters.
        """
        P_VV = (self.probs.log() / temperature).softmax(1)
        names = []
        for _ in range(num_names):
            ix, out = 0, []
            while len(out) < max_len:
                ix = sitp.multinomial(P_VV[ix], 1, replacement=True, generator=generator).item()
                if ix == 0:  # '.' ends the name
                    break
                out.append(self.vocab.itos[ix])
            names.append("".join(out))
        return names

    # --8<-- [end:sample]

"""A synthetic language whose entropy is known exactly: the floor a model's loss can reach.

Chapter 5.5. A scaling law has an irreducible term, the loss no model can go below,
and on natural text nobody knows it. Here the text is drawn from a seeded Markov
chain of order ``k`` over ``V`` letters, so the probability of every next letter given
the past is a number in a table, and the entropy per letter, the floor, is a sum over
that table:

* **the table.** A context is the last ``k`` letters, numbered
  ``c = x[t-k] V^(k-1) + ... + x[t-1]``; row ``c`` of ``P_CV`` is the distribution of
  the next letter. Its logits add one term per lag, each a random ``V x V`` matrix
  with a Zipfian spectrum (singular values ``1, 1/2, 1/3, ...``: a few strong
  regularities and a long tail of weak ones, which a narrow model can only partly
  represent), and a term for each pair of the last two letters, drawn at random (which
  a model can only learn by seeing that pair often);
* **the stationary distribution** ``pi_C`` of the contexts: what the chain settles
  into, found by propagating a distribution through the table until it stops moving;
* **the entropy rate** ``h = sum_c pi(c) H(P[c])``, in nats per letter; and the block
  entropies ``H_j`` of ``j`` consecutive letters, which give the exact best loss of a
  predictor that sees only the last ``j - 1`` letters, and so the floor of an
  evaluation in windows of ``T`` letters (:meth:`MarkovLanguage.window_floor`).

Sampling runs many chains side by side, each started from ``pi``, and writes them one
after another; :func:`write_language_shards` writes them as 5.2's token shards, in an
alphabet of letters that :class:`~sitp.data.tokens.CharTokenizer` numbers in the
generator's own order. :class:`LetterBPE` is 5.1's byte-level BPE trained on the
language's text, its ids renumbered so that the letters come first, for a sweep that
reads the language through merged tokens instead of letters.

Example:
    >>> lang = MarkovLanguage(vocab_size=8, order=2, lag_weights=(1.0, 0.6), seed=0)
    >>> lang.P_CV.shape, round(float(lang.pi_C.sum()), 12)
    ((64, 8), 1.0)
    >>> bool(lang.entropy_rate() < lang.block_entropies()[0] < np.log(8))
    True
"""

from __future__ import annotations

import hashlib
import json
import os
import string
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from sitp.data.tokens import (
    CharTokenizer,
    TokenShards,
    _reusable,
    _ShardWriter,
    tokenizer_id,
    write_shards,
)
from sitp.tokenizers import BPETokenizer

#: The letters of the language, in ASCII order, so that CharTokenizer's ids are ours.
ALPHABET = string.digits + string.ascii_uppercase + string.ascii_lowercase  # 62


@dataclass(frozen=True)
class LanguageConfig:
    vocab_size: int = 32  # V: letters
    order: int = 3  # k: the chain's memory, in letters
    zipf: float = 1.0  # singular value i of each lag's matrix is i ** -zipf
    lag_weights: tuple = (1.0, 0.6, 0.4)  # the strength of lag 1, 2, ... (k of them)
    pair_weight: float = 0.8  # the strength of the random term of the last two letters
    temperature: float = 0.6  # logits are divided by it: lower is more predictable
    seed: int = 0

    def __post_init__(self):
        if not 2 <= self.vocab_size <= len(ALPHABET):
            raise ValueError(f"vocab_size must lie in [2, {len(ALPHABET)}], got {self.vocab_size}")
        if self.order < 1:
            raise ValueError(f"order must be at least 1, got {self.order}")
        if self.vocab_size**self.order > 2**22:
            raise ValueError(
                f"{self.vocab_size}^{self.order} contexts is too large a table; lower "
                f"vocab_size or order"
            )
        if len(self.lag_weights) != self.order:
            raise ValueError(
                f"lag_weights needs one weight per lag ({self.order}), got {len(self.lag_weights)}"
            )
        if self.temperature <= 0 or self.zipf < 0 or self.pair_weight < 0:
            raise ValueError("temperature must be > 0, zipf and pair_weight >= 0")


def _random_orthogonal(rng, V):
    q, r = np.linalg.qr(rng.standard_normal((V, V)))
    return q * np.sign(np.diag(r))  # uniform over orthogonal matrices


class MarkovLanguage:
    """An order-``k`` Markov chain over ``V`` letters, with its exact entropy.

    Args:
        config: a :class:`LanguageConfig`; or its fields as keywords.

    Attributes:
        P_CV: (V^k, V) float64, the next letter's distribution for each context.
        pi_C: (V^k,) float64, the stationary distribution of the contexts.
    """

    def __init__(self, config: LanguageConfig | None = None, **fields):
        self.config = config if config is not None else LanguageConfig(**fields)
        c = self.config
        V, k = c.vocab_size, c.order
        self.V, self.k, self.num_contexts = V, k, V**k
        rng = np.random.default_rng(c.seed)
        spectrum_V = np.arange(1, V + 1, dtype=np.float64) ** -c.zipf
        spectrum_V *= V / np.linalg.norm(spectrum_V)  # entries of variance about 1
        digits_CK = self.context_letters(np.arange(self.num_contexts))  # x[t-k] .. x[t-1]
        logits_CV = np.zeros((self.num_contexts, V))
        for lag, weight in enumerate(c.lag_weights, start=1):  # lag 1: the last letter
            M_VV = (_random_orthogonal(rng, V) * spectrum_V) @ _random_orthogonal(rng, V).T
            logits_CV += weight * M_VV[digits_CK[:, k - lag]]
        if k >= 2 and c.pair_weight:  # one random row per pair (x[t-2], x[t-1])
            pair_QV = rng.standard_normal((V * V, V))
            logits_CV += c.pair_weight * pair_QV[digits_CK[:, k - 2] * V + digits_CK[:, k - 1]]
        logits_CV /= c.temperature
        logits_CV -= logits_CV.max(axis=1, keepdims=True)
        P_CV = np.exp(logits_CV)
        self.P_CV = P_CV / P_CV.sum(axis=1, keepdims=True)
        self.pi_C = self.stationary()

    # ------------------------------------------------------------------ the chain
    def context_letters(self, c_N) -> np.ndarray:
        """(N, k): the letters x[t-k] .. x[t-1] of each context number."""
        c_N = np.asarray(c_N, dtype=np.int64)
        powers_K = self.V ** np.arange(self.k - 1, -1, -1)
        return (c_N[:, None] // powers_K) % self.V

    def step(self, dist_C) -> np.ndarray:
        """A distribution over contexts, one letter later: context c and letter x lead
        to the context (c without its oldest letter, then x)."""
        joint_CV = dist_C[:, None] * self.P_CV  # P(context c, next letter x)
        return joint_CV.reshape(self.V, -1).sum(axis=0)  # sum out the oldest letter

    def stationary(self, tol=1e-13, max_steps=100_000) -> np.ndarray:
        """The fixed point of :meth:`step`, by propagating the uniform distribution."""
        dist_C = np.full(self.num_contexts, 1.0 / self.num_contexts)
        for _ in range(max_steps):
            new_C = self.step(dist_C)
            if np.abs(new_C - dist_C).sum() < tol:
                return new_C / new_C.sum()
            dist_C = new_C
        raise RuntimeError(f"the chain did not settle in {max_steps} steps")

    # ------------------------------------------------------------------ entropies
    def entropy_rate(self) -> float:
        """h, nats per letter: the expected entropy of the next letter given its context,
        under the stationary distribution; no model can average less."""
        with np.errstate(divide="ignore", invalid="ignore"):
            plogp_CV = np.where(self.P_CV > 0, self.P_CV * np.log(self.P_CV), 0.0)
        return float(-(self.pi_C * plogp_CV.sum(axis=1)).sum())

    def marginal(self, j: int) -> np.ndarray:
        """(V^j,): the stationary probability of each run of j consecutive letters (j <= k)."""
        if not 1 <= j <= self.k:
            raise ValueError(f"marginal needs 1 <= j <= order {self.k}, got {j}")
        return self.pi_C.reshape(self.V ** (self.k - j), self.V**j).sum(axis=0)  # newest j

    def block_entropies(self) -> list[float]:
        """[H_1, ..., H_k]: the entropy of j consecutive letters, in nats.

        H_j - H_(j-1) is the best mean loss of a predictor that sees j - 1 letters
        (j <= k); with k letters or more it is the entropy rate.
        """
        out = []
        for j in range(1, self.k + 1):
            p = self.marginal(j)
            p = p[p > 0]
            out.append(float(-(p * np.log(p)).sum()))
        return out

    def window_floor(self, block_size: int) -> float:
        """The best possible mean loss over the T targets of a window of T + 1 letters.

        Target j (1..T) is predicted from the j letters before it, from the start of
        the window: for j < k the best loss is H_(j+1) - H_j, for j >= k it is h. The
        mean is ``(H_k - H_1 + (T - k + 1) h) / T``, which tends to h as T grows.
        """
        T = block_size
        if T < self.k:
            raise ValueError(f"block_size {T} is shorter than the order {self.k}")
        H = self.block_entropies()
        return (H[-1] - H[0] + (T - self.k + 1) * self.entropy_rate()) / T

    # ------------------------------------------------------------------- sampling
    def sample(self, num_tokens: int, seed: int = 0, chains: int = 64) -> np.ndarray:
        """``num_tokens`` letters (int64): ``chains`` runs of the chain, one after another.

        Each run starts from a context drawn from ``pi`` (so every position is
        stationary), and the runs are drawn side by side, one letter of each per step.
        Where one run ends and the next begins (``chains - 1`` places) the text does
        not follow the table.
        """
        if num_tokens < self.k * chains:
            raise ValueError(f"{num_tokens} tokens is fewer than {chains} chains of order {self.k}")
        rng = np.random.default_rng(seed)
        length = -(-num_tokens // chains)
        c_N = rng.choice(self.num_contexts, size=chains, p=self.pi_C)
        out_NL = np.empty((chains, length), dtype=np.int64)
        out_NL[:, : self.k] = self.context_letters(c_N)
        cdf_CV = np.cumsum(self.P_CV, axis=1)
        tail = self.num_contexts // self.V  # contexts per oldest letter
        for t in range(self.k, length):
            u_N = rng.random(chains)
            x_N = np.minimum((u_N[:, None] > cdf_CV[c_N]).sum(axis=1), self.V - 1)
            out_NL[:, t] = x_N
            c_N = (c_N % tail) * self.V + x_N  # drop the oldest letter, append x
        return out_NL.reshape(-1)[:num_tokens]

    def log_loss(self, x_BT, y_BT) -> np.ndarray:
        """(B, T): -log p(y[b, j] | x[b, 0..j]), the generator's own loss on each target.

        The best any predictor that sees the same window can do: for j + 1 < k
        letters of context it uses the stationary marginals, then the table.
        """
        x_BT, y_BT = np.asarray(x_BT, dtype=np.int64), np.asarray(y_BT, dtype=np.int64)
        B, T = x_BT.shape
        seq_BS = np.concatenate([x_BT, y_BT[:, -1:]], axis=1)  # the window's T + 1 letters
        out_BT = np.empty((B, T))
        marg = [None] + [self.marginal(j) for j in range(1, self.k + 1)]
        for j in range(1, T + 1):  # target seq[:, j]
            if j < self.k:  # p(x_0..x_j) / p(x_0..x_(j-1))
                num = _index(seq_BS[:, : j + 1], self.V)
                den = _index(seq_BS[:, :j], self.V)
                out_BT[:, j - 1] = -np.log(marg[j + 1][num] / marg[j][den])
            else:
                c_B = _index(seq_BS[:, j - self.k : j], self.V)
                out_BT[:, j - 1] = -np.log(self.P_CV[c_B, seq_BS[:, j]])
        return out_BT

    def losses_by_context(self, x_N) -> np.ndarray:
        """(k, N): row j - 1 holds -log p(x[t] | the j letters before it), for j = 1..k.

        Entries with fewer than j letters before them (t < j) are NaN. For j < k the
        probability is a ratio of stationary marginals, for j = k the table's.
        """
        x_N = np.asarray(x_N, dtype=np.int64)
        out_KN = np.full((self.k, x_N.size), np.nan)
        for j in range(1, self.k + 1):
            runs_NJ = np.lib.stride_tricks.sliding_window_view(x_N, j + 1)  # x[t-j] .. x[t]
            if j < self.k:
                joint, before = self.marginal(j + 1), self.marginal(j)
                p_N = joint[_index(runs_NJ, self.V)] / before[_index(runs_NJ[:, :-1], self.V)]
            else:
                p_N = self.P_CV[_index(runs_NJ[:, :-1], self.V), runs_NJ[:, -1]]
            out_KN[j - 1, j:] = -np.log(p_N)
        return out_KN

    # --------------------------------------------------------------- as a corpus
    @property
    def alphabet(self) -> str:
        return ALPHABET[: self.V]

    def tokenizer(self) -> CharTokenizer:
        """The letters as 5.2's CharTokenizer; its ids are the generator's."""
        return CharTokenizer(self.alphabet)

    def documents(self, num_tokens, seed=0, chains=64) -> Iterator[str]:
        """The sample as ``chains`` strings of letters, one per run of the chain."""
        letters_N = np.frombuffer(self.alphabet.encode("ascii"), dtype=np.uint8)
        tokens_N = self.sample(num_tokens, seed, chains)
        length = -(-num_tokens // chains)
        for i in range(0, num_tokens, length):
            yield letters_N[tokens_N[i : i + length]].tobytes().decode("ascii")

    def fingerprint(self) -> str:
        """A hash of the config: it names the corpus in the shards' meta.json."""
        text = json.dumps(asdict(self.config), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]


class LetterBPE:
    """5.1's byte-level BPE, trained on the language's text, with the letters' ids first.

    A byte-level BPE has 256 byte tokens, and this language writes ``V`` of them. The
    ids are renumbered: letter ``i`` of the alphabet is id ``i`` (the
    :class:`~sitp.data.tokens.CharTokenizer`'s id), merge ``m`` is id ``V + m``, and
    the bytes the language never writes are not in the vocabulary, so a model's table
    has ``V + merges`` rows, as the character model's has ``V``.

    The language has no words to cut the text at, so the pre-split is pieces of at most
    :attr:`PIECE` letters (GPT-4's pattern would cut the digits from the capitals); no
    merge crosses a piece's edge. 5.1's encoder joins a piece's parts in time that grows
    as the square of its length, which rules out a whole document as one piece.

    Args:
        bpe: a :class:`~sitp.tokenizers.BPETokenizer` trained on the language's text
            (:meth:`train`), without special tokens.
        alphabet: the language's letters, in id order.

    Example:
        >>> lang = MarkovLanguage(vocab_size=8, order=2, lag_weights=(1.0, 0.6), seed=0)
        >>> tok = LetterBPE.train("\\n".join(lang.documents(4096)), lang.alphabet, 12)
        >>> tok.vocab_size, tok.decode(tok.encode("0123")), int(tok.lengths_V[:8].max())
        (12, '0123', 1)
    """

    PIECE = 64  # letters

    def __init__(self, bpe: BPETokenizer, alphabet: str):
        if bpe.special_tokens:
            raise ValueError("LetterBPE takes a BPE without special tokens")
        letters = list(alphabet.encode("ascii"))
        self.bpe, self.alphabet, self.V = bpe, alphabet, len(letters)
        self.vocab_size = self.V + len(bpe.merges)
        self.from_ids = np.array(letters + list(range(256, 256 + len(bpe.merges))), np.int64)
        self.to_ids = np.full(256 + len(bpe.merges), -1, np.int64)  # a BPE id -> ours
        self.to_ids[self.from_ids] = np.arange(self.vocab_size)
        #: (vocab_size,) letters per token
        self.lengths_V = np.array([len(bpe.vocab[i]) for i in self.from_ids], np.int64)
        merges = json.dumps([alphabet, bpe.pattern, bpe.merges]).encode()
        self.name = f"letter-bpe-{self.vocab_size}-{hashlib.sha256(merges).hexdigest()[:16]}"

    @classmethod
    def train(cls, text: str, alphabet: str, vocab_size: int) -> LetterBPE:
        """Learns ``vocab_size - len(alphabet)`` merges from ``text`` (documents joined by
        line breaks, which no piece crosses)."""
        merges = vocab_size - len(alphabet)
        if merges < 0:
            raise ValueError(f"vocab_size {vocab_size} is smaller than the {len(alphabet)} letters")
        pattern = f".{{1,{cls.PIECE}}}"  # pieces of up to PIECE characters, no line break
        return cls(BPETokenizer.train(text, 256 + merges, pattern=pattern), alphabet)

    def encode(self, text: str) -> list[int]:
        ids_N = self.to_ids[np.asarray(self.bpe.encode_ordinary(text), np.int64)]
        if ids_N.size and ids_N.min() < 0:
            raise ValueError(f"the text holds characters outside the alphabet {self.alphabet!r}")
        return ids_N.tolist()

    def decode_bytes(self, ids) -> bytes:
        return self.bpe.decode_bytes(self.from_ids[np.asarray(ids, np.int64)].tolist())

    def decode(self, ids) -> str:
        return self.decode_bytes(ids).decode("ascii")

    def __repr__(self) -> str:
        return f"LetterBPE(vocab_size={self.vocab_size}: {self.V} letters, {len(self.bpe.merges)} merges)"


def _index(letters_BJ, V) -> np.ndarray:
    """The number of each row of letters, oldest first (base V)."""
    out = np.zeros(letters_BJ.shape[0], dtype=np.int64)
    for j in range(letters_BJ.shape[1]):
        out = out * V + letters_BJ[:, j]
    return out


def write_language_shards(
    lang: MarkovLanguage,
    out_dir: str | os.PathLike,
    train_tokens: int,
    val_tokens: int,
    *,
    seed: int = 0,
    shard_size: int = 2**20,
    tokenizer=None,
) -> TokenShards:
    """Samples the language into 5.2's shards: ``train_tokens``, then ``val_tokens``.

    The two parts are drawn from different seeds (independent runs of the chain). The
    training part fills shards of ``shard_size`` tokens; the validation part is one
    shard. A directory already written for the same language, sizes and seed is reused.

    With a ``tokenizer`` other than the letters' (a :class:`LetterBPE`), the sizes
    count letters, each run of the chain is encoded as one document, and the training
    part ends in a shorter shard where its tokens run out, so that no shard mixes the
    two parts.
    """
    if tokenizer is not None:
        return _write_encoded(lang, out_dir, train_tokens, val_tokens, seed, shard_size,
                              tokenizer)  # fmt: skip
    if val_tokens < 2 or train_tokens < 2:
        raise ValueError(f"need at least 2 tokens a split, got {train_tokens} and {val_tokens}")
    if val_tokens > shard_size:
        raise ValueError(f"val_tokens {val_tokens} must fit in one shard of {shard_size}")
    train_tokens = -(-train_tokens // shard_size) * shard_size  # whole shards, then val

    def documents():
        yield from lang.documents(train_tokens, seed=2 * seed)
        yield from lang.documents(val_tokens, seed=2 * seed + 1)

    source = f"markov-{lang.fingerprint()}-{train_tokens}-{val_tokens}-{seed}"
    return write_shards(documents(), lang.tokenizer(), out_dir, shard_size=shard_size,
                        source=source)  # fmt: skip


def _write_encoded(lang, out_dir, train_letters, val_letters, seed, shard_size, tokenizer):
    """:func:`write_language_shards` through a tokenizer: each part encoded, then flushed."""
    out_dir = Path(out_dir)
    key = {"how": "language", "source": f"markov-{lang.fingerprint()}-{train_letters}-"
           f"{val_letters}-{seed}", "tokenizer": tokenizer_id(tokenizer),
           "shard_size": shard_size}  # fmt: skip
    if (reused := _reusable(out_dir, key)) is not None:
        return reused
    writer = _ShardWriter(out_dir, tokenizer, shard_size)
    for split, letters, part_seed in (("train", train_letters, 2 * seed),
                                      ("val", val_letters, 2 * seed + 1)):  # fmt: skip
        for doc in lang.documents(letters, seed=part_seed):
            writer.add(tokenizer.encode(doc), split)
        writer.flush(split)
    if sum(shard.split == "val" for shard in writer.shards) != 1:
        raise ValueError(f"the validation part must fit in one shard of {shard_size} tokens")
    return writer.finish(key)


__all__ = ["ALPHABET", "LanguageConfig", "LetterBPE", "MarkovLanguage", "write_language_shards"]

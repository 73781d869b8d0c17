"""A byte-level BPE tokenizer: training, encoding, decoding, special tokens, save and load.

The text is split by a regular expression into chunks (words with their leading space,
runs of digits, punctuation, whitespace); each chunk is UTF-8 bytes, one token per byte to
begin with. Training joins, over and over, the most frequent adjacent pair of tokens into
a new token (a *merge*), never across two chunks. Token ``b < 256`` is the byte ``b``;
merge ``m`` makes token ``256 + m``; the special tokens come after the merged ones.

The counting and merging loops are numba code in :mod:`sitp.tokenizers.kernels`.
Encoding joins the parts of a chunk in the order tiktoken does (the pair that makes the
lowest-ranked token first), so ``BPETokenizer.mergeable_ranks()`` given to
``tiktoken.Encoding`` encodes to the same ids.

The saved form is one JSON file, ``tokenizer.json`` in a directory::

    {"format": "sitp-bpe", "version": 1,
     "pattern": "<the pre-split regex>",
     "merges": [[104, 101], [32, 116], ...],   # merge m makes token 256 + m
     "special_tokens": {"<|endoftext|>": 4351}}

Example:
    >>> from sitp.tokenizers import BPETokenizer
    >>> tok = BPETokenizer.train("the cat sat on the mat " * 20, vocab_size=260)
    >>> [tok.decode([t]) for t in range(256, 260)]
    ['at', 'he', 'the', ' the']
    >>> tok.encode(" the cat")
    [259, 32, 99, 256]
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import regex

from sitp.serialization import write_atomically
from sitp.tokenizers import kernels

# --8<-- [start:pattern]
#: The pre-split of GPT-4's tokenizer: tiktoken's ``cl100k_base`` pattern (tiktoken_ext/
#: openai_public.py), one alternative a line. ``?+``, ``++`` are possessive: they never
#: give back what they matched.
GPT4_PATTERN = "|".join(
    [
        r"""'(?i:[sdmt]|ll|ve|re)""",  # English contractions: 's 't 'm 'd 'll 've 're
        r"""[^\r\n\p{L}\p{N}]?+\p{L}++""",  # a word, with one leading space or symbol
        r"""\p{N}{1,3}+""",  # digits, at most three at a time
        r""" ?[^\s\p{L}\p{N}]++[\r\n]*+""",  # punctuation, then any line breaks
        r"""\s++$""",  # whitespace that ends the text
        r"""\s*[\r\n]""",  # whitespace up to a line break
        r"""\s+(?!\S)""",  # whitespace, leaving the last space to the next word
        r"""\s""",  # one whitespace character
    ]
)
# --8<-- [end:pattern]

FORMAT = "sitp-bpe"
VERSION = 1
FILENAME = "tokenizer.json"
_CACHE_LIMIT = 1 << 20  # chunks whose encodings are kept


class BPETokenizer:
    """A trained byte-level BPE: merges, a pre-split pattern and special tokens.

    Build one with :meth:`train` or :meth:`load`; the constructor takes the merges.

    Args:
        merges: the merges in order, pairs of token ids: merge ``m`` joins tokens
            ``merges[m]`` into token ``256 + m``.
        special_tokens: names of special tokens (e.g. ``"<|endoftext|>"``) and their
            ids, which must be ``256 + len(merges)``, ``257 + len(merges)``, ...
        pattern: the pre-split regex (``regex`` syntax); :data:`GPT4_PATTERN` by default.
    """

    def __init__(
        self,
        merges: Iterable[tuple[int, int]],
        special_tokens: dict[str, int] | None = None,
        pattern: str = GPT4_PATTERN,
    ):
        self.merges = [(int(a), int(b)) for a, b in merges]
        self.pattern = pattern
        self._compiled = regex.compile(pattern)
        vocab = [bytes([b]) for b in range(256)]
        for m, (a, b) in enumerate(self.merges):
            if not (0 <= a < 256 + m and 0 <= b < 256 + m):
                raise ValueError(
                    f"merge {m} joins ({a}, {b}), but only tokens 0..{255 + m} exist before it"
                )
            vocab.append(vocab[a] + vocab[b])
        self.special_tokens = dict(special_tokens or {})
        expected = range(len(vocab), len(vocab) + len(self.special_tokens))
        if sorted(self.special_tokens.values()) != list(expected):
            raise ValueError(
                f"special token ids must be {expected.start}..{expected.stop - 1} "
                f"(after the {len(vocab)} byte and merged tokens), got {self.special_tokens}"
            )
        self.vocab = vocab  # token id -> its bytes (the ordinary tokens)
        self._special_by_id = {i: s for s, i in self.special_tokens.items()}
        self._rank = {t: i for i, t in enumerate(vocab)}
        if len(self._rank) != len(vocab):
            raise ValueError("two merges make the same token; the merges are not a BPE")
        self._join_keys, self._join_vals = self._join_table()
        self._cache: dict[str, list[int]] = {}

    # -- the vocabulary -------------------------------------------------------------------

    @property
    def vocab_size(self) -> int:
        """The number of token ids: 256 bytes, the merged tokens, the special tokens."""
        return len(self.vocab) + len(self.special_tokens)

    def mergeable_ranks(self) -> dict[bytes, int]:
        """Token bytes -> id, the ``mergeable_ranks`` of ``tiktoken.Encoding``."""
        return dict(self._rank)

    def _join_table(self):
        """Every way two tokens join into a token: (left, right) -> joined, as a hash table.

        A token made by one merge can also be reached from other splits of its bytes (if
        both halves are tokens); tiktoken joins by bytes, so encoding must know them all.
        """
        lefts, rights, joined = [], [], []
        for t in range(256, len(self.vocab)):
            word = self.vocab[t]
            for k in range(1, len(word)):
                left, right = self._rank.get(word[:k]), self._rank.get(word[k:])
                if left is not None and right is not None:
                    lefts.append(left)
                    rights.append(right)
                    joined.append(t)
        return kernels.join_table(
            np.array(lefts, np.int32), np.array(rights, np.int32), np.array(joined, np.int64)
        )

    # -- training -------------------------------------------------------------------------

    # --8<-- [start:train]
    @classmethod
    def train(
        cls,
        text: str,
        vocab_size: int,
        special_tokens: Iterable[str] = (),
        pattern: str = GPT4_PATTERN,
    ) -> BPETokenizer:
        """Learns ``vocab_size - 256 - len(special_tokens)`` merges from ``text``.

        The special tokens are cut out of the text before training (they are never
        merged) and get the last ids.

        Raises:
            ValueError: ``vocab_size`` leaves no room for the 256 bytes and the special
                tokens, or the text runs out of pairs before reaching it.
        """
        special_tokens = list(dict.fromkeys(special_tokens))
        num_merges = vocab_size - 256 - len(special_tokens)
        if num_merges < 0:
            raise ValueError(
                f"vocab_size={vocab_size} is too small: a byte-level BPE has 256 byte tokens"
                f" and {len(special_tokens)} special tokens, so vocab_size >= "
                f"{256 + len(special_tokens)}"
            )
        chunks = Counter()  # each distinct chunk of the text and how often it occurs
        compiled = regex.compile(pattern)
        for part in _split_special(text, special_tokens)[::2]:
            chunks.update(compiled.findall(part))
        words = [chunk.encode("utf-8") for chunk in chunks]
        lengths = np.array([len(word) for word in words], np.int64)
        starts = np.zeros(len(words), np.int64)
        np.cumsum(lengths[:-1], out=starts[1:])
        ids = np.frombuffer(b"".join(words), np.uint8).astype(np.int32)
        counts = np.array(list(chunks.values()), np.int64)
        merges = kernels.train_merges(ids, starts, lengths, counts, num_merges, 256)
        if len(merges) < num_merges:
            raise ValueError(
                f"the text has no pair left to merge after {len(merges)} merges: "
                f"vocab_size can be at most {256 + len(merges) + len(special_tokens)} for it"
            )
        first_special = 256 + num_merges
        specials = {s: first_special + k for k, s in enumerate(special_tokens)}
        return cls(merges.tolist(), specials, pattern)

    # --8<-- [end:train]

    # -- encoding and decoding ------------------------------------------------------------

    # --8<-- [start:encode]
    def encode_ordinary(self, text: str) -> list[int]:
        """The ids of ``text``, reading special tokens' names as plain text."""
        chunks = self._compiled.findall(text)
        cache = self._cache
        missing = list({c: None for c in chunks if c not in cache})
        if missing:
            self._encode_chunks(missing)
        ids: list[int] = []
        for chunk in chunks:
            ids.extend(cache[chunk])
        if len(cache) > _CACHE_LIMIT:
            cache.clear()
        return ids

    def _encode_chunks(self, chunks: list[str]) -> None:
        """Encodes chunks into the cache: a chunk that is a token is that token; the rest
        go through the numba loop (:func:`sitp.tokenizers.kernels.encode_pieces`) at once."""
        rest = []
        for chunk in chunks:
            word = chunk.encode("utf-8")
            token = self._rank.get(word)
            if token is not None:
                self._cache[chunk] = [token]
            else:
                rest.append((chunk, word))
        if not rest:
            return
        words = [word for _, word in rest]
        offsets = np.zeros(len(words) + 1, np.int64)
        np.cumsum([len(word) for word in words], out=offsets[1:])
        data = np.frombuffer(b"".join(words), np.uint8)
        ids, ends = kernels.encode_pieces(data, offsets, self._join_keys, self._join_vals)
        ids = ids.tolist()
        begin = 0
        for (chunk, _), end in zip(rest, ends.tolist()):
            self._cache[chunk] = ids[begin:end]
            begin = end

    # --8<-- [end:encode]

    def encode(self, text: str, allowed_special: str | Iterable[str] = "none") -> list[int]:
        """The ids of ``text``; the special tokens named in ``allowed_special`` become theirs.

        Args:
            text: the text.
            allowed_special: ``"all"``, ``"none"`` or the names of the special tokens
                that may appear in the text.

        Raises:
            ValueError: the text holds a special token that is not allowed (pass it in
                ``allowed_special``, or use :meth:`encode_ordinary` to read it as text),
                or ``allowed_special`` names a token this tokenizer does not have.
        """
        if allowed_special == "all":
            allowed = set(self.special_tokens)
        elif allowed_special == "none":
            allowed = set()
        elif isinstance(allowed_special, str):
            raise ValueError(
                f"allowed_special must be 'all', 'none' or a set of token names, "
                f"not the string {allowed_special!r}"
            )
        else:
            allowed = set(allowed_special)
            unknown = allowed - set(self.special_tokens)
            if unknown:
                raise ValueError(
                    f"unknown special tokens {sorted(unknown)}; this tokenizer has "
                    f"{sorted(self.special_tokens) or 'none'}"
                )
        for name in set(self.special_tokens) - allowed:
            if name in text:
                raise ValueError(
                    f"the text contains the special token {name!r}; pass "
                    f"allowed_special={{{name!r}}} to encode it as one, or use "
                    f"encode_ordinary to encode it as text"
                )
        parts = _split_special(text, sorted(allowed))
        ids: list[int] = []
        for k, part in enumerate(parts):
            if k % 2:
                ids.append(self.special_tokens[part])
            elif part:
                ids.extend(self.encode_ordinary(part))
        return ids

    def decode_bytes(self, ids: Iterable[int]) -> bytes:
        """The bytes of the tokens ``ids`` (a special token gives its name's UTF-8)."""
        vocab, special, out = self.vocab, self._special_by_id, []
        for i in ids:
            if 0 <= i < len(vocab):
                out.append(vocab[i])
            elif i in special:
                out.append(special[i].encode("utf-8"))
            else:
                raise ValueError(
                    f"token id {i!r} is out of range: this tokenizer's ids are "
                    f"0..{self.vocab_size - 1}"
                )
        return b"".join(out)

    def decode(self, ids: Iterable[int], errors: str = "replace") -> str:
        """The text of the tokens ``ids``.

        A slice of a token list may end inside a character's UTF-8 bytes; ``errors``
        says what to do then, as in ``bytes.decode`` (``"replace"``: write U+FFFD).
        """
        return self.decode_bytes(ids).decode("utf-8", errors=errors)

    # -- save and load --------------------------------------------------------------------

    def save(self, directory: str | os.PathLike) -> Path:
        """Writes ``tokenizer.json`` into ``directory`` (created), atomically; returns its path."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / FILENAME
        state = {
            "format": FORMAT,
            "version": VERSION,
            "pattern": self.pattern,
            "merges": self.merges,
            "special_tokens": self.special_tokens,
        }
        write_atomically(path, json.dumps(state, ensure_ascii=False).encode("utf-8"))
        return path

    @classmethod
    def load(cls, directory: str | os.PathLike) -> BPETokenizer:
        """Reads a tokenizer saved by :meth:`save` (a directory, or its ``tokenizer.json``)."""
        path = Path(directory)
        if path.is_dir():
            path = path / FILENAME
        if not path.is_file():
            raise FileNotFoundError(f"no saved tokenizer at {path}")
        state = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(state, dict) or state.get("format") != FORMAT:
            raise ValueError(f"{path} is not a sitp BPE tokenizer (format {FORMAT!r})")
        if state.get("version") != VERSION:
            raise ValueError(f"{path} has version {state.get('version')}; this sitp reads 1")
        return cls(state["merges"], state["special_tokens"], state["pattern"])

    def __repr__(self) -> str:
        return (
            f"BPETokenizer(vocab_size={self.vocab_size}, merges={len(self.merges)}, "
            f"special_tokens={sorted(self.special_tokens)})"
        )


def _split_special(text: str, specials: list[str]) -> list[str]:
    """``text`` cut at the special tokens: [text, special, text, special, ..., text]."""
    if not specials:
        return [text]
    alternatives = "|".join(regex.escape(s) for s in sorted(specials, key=len, reverse=True))
    return regex.split(f"({alternatives})", text)

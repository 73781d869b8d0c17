"""Token data at scale: a corpus encoded once into ``uint16`` shards, read through ``np.memmap``.

Chapter 5.2. A language model reads the same corpus thousands of times, so it is
tokenized once, up front, and the token ids are kept on disk as raw ``uint16``
arrays ("shards"), two bytes a token. A training step then needs only B windows of
T + 1 tokens; :class:`TokenShards` maps the shards into memory with ``np.memmap`` and
slices those windows out, so the operating system reads the few pages they touch and
a corpus larger than RAM trains as easily as a small one.

* a tokenizer is any object with ``encode(str) -> list[int]``,
  ``decode(list[int]) -> str`` and ``vocab_size`` (:class:`Tokenizer`);
  :class:`CharTokenizer` (the sorted characters of a text, nanoGPT's
  ``shakespeare_char``) and :class:`ByteTokenizer` (the 256 byte values) are two;
* :func:`write_shards` encodes a stream of documents into shards of ``shard_size``
  tokens, one at a time, the last ``val_shards`` of them for validation;
  :func:`encode_text` cuts one text into a training and a validation part (nanoGPT's
  90/10), so that the last shard(s) are validation; :func:`prepare_shakespeare` does
  that for tinyshakespeare, in the sitp cache;
* :meth:`TokenShards.get_batch` samples ``(B, T + 1)`` windows at random, as nanoGPT's
  ``get_batch``; :class:`ShardStream` reads the shards in order, one at a time, and can
  be resumed;
* :func:`bits_per_byte` and :func:`estimate_bpb` turn a loss per token into bits per
  byte of text, the number that compares models with different tokenizers.

On disk, a directory holds ``shard_000000.bin``, ``shard_000001.bin``, ... (no header:
the bytes are the ``uint16`` ids, little-endian) and ``meta.json``, the sidecar that
says what they are: the format, the vocabulary size, the tokenizer's id, and each
shard's split, number of tokens and number of bytes of text (:func:`text_bytes`). Each file is written
atomically (temporary file, then rename) and ``meta.json`` last, so a directory with a
``meta.json`` is complete. Asking again for the same corpus, tokenizer and sharding
finds the matching ``meta.json`` and skips the encoding.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np

import sitp
from sitp.data.download import cache_dir, load_tinyshakespeare
from sitp.serialization import write_atomically

#: The version of the on-disk layout; a directory of another format is encoded again.
FORMAT = "sitp-tokens/1"
#: Two bytes a token: vocabularies up to 65,536 (GPT-2's 50,257 fits).
DTYPE = np.dtype("<u2")
META = "meta.json"


# ----------------------------------------------------------------------- tokenizers
@runtime_checkable
class Tokenizer(Protocol):
    """What the shards need of a tokenizer (``sitp.tokenizers``' BPE is one)."""

    vocab_size: int

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: list[int]) -> str: ...


class CharTokenizer:
    """One token per distinct character of a text, in sorted order (nanoGPT's
    ``shakespeare_char``: tinyshakespeare has 65).

    Example:
        >>> tok = CharTokenizer("hello world")
        >>> tok.vocab_size, tok.encode("hold"), tok.decode([3, 5, 4, 2])
        (8, [3, 5, 4, 1], 'hole')
    """

    def __init__(self, text: str):
        self.chars = sorted(set(text))
        self.stoi = {ch: i for i, ch in enumerate(self.chars)}
        self.vocab_size = len(self.chars)
        digest = hashlib.sha256("".join(self.chars).encode("utf-8")).hexdigest()
        self.name = f"char-{digest[:16]}"  # the tokenizer id of the shards' meta.json

    def encode(self, text: str) -> list[int]:
        try:
            return [self.stoi[ch] for ch in text]
        except KeyError as error:
            raise ValueError(
                f"character {error.args[0]!r} is not in this CharTokenizer's "
                f"{self.vocab_size} characters"
            ) from None

    def decode(self, ids) -> str:
        return "".join(self.chars[i] for i in _ints(ids))


class ByteTokenizer:
    """One token per byte of the UTF-8 encoding: 256 tokens, any text.

    Example:
        >>> tok = ByteTokenizer()
        >>> tok.encode("né"), tok.decode([110, 195, 169])
        ([110, 195, 169], 'né')
    """

    vocab_size = 256
    name = "bytes"

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, ids) -> str:
        return self.decode_bytes(ids).decode("utf-8", errors="replace")

    def decode_bytes(self, ids) -> bytes:
        return bytes(_ints(ids))


def _ints(ids) -> list[int]:
    return ids.tolist() if hasattr(ids, "tolist") else list(ids)


def tokenizer_id(tokenizer) -> str:
    """A string that names the tokenizer in ``meta.json``, so the cache knows it.

    A tokenizer's own ``name`` attribute if it has one; else its class name and a hash
    of the text of each of its tokens (``decode([i])`` for every id): two tokenizers
    with the same tokens get the same id. For a BPE, whose encoding depends on the
    order of its merges as well, give it a ``name`` that includes them.
    """
    name = getattr(tokenizer, "name", None)
    if isinstance(name, str) and name:
        return name
    pieces = [tokenizer.decode([i]) for i in range(tokenizer.vocab_size)]
    digest = hashlib.sha256(json.dumps(pieces).encode("utf-8")).hexdigest()
    return f"{type(tokenizer).__name__}-{digest[:16]}"


def text_bytes(tokenizer, ids: list[int]) -> int:
    """How many bytes of UTF-8 text the ids stand for.

    ``len(tokenizer.decode_bytes(ids))`` when the tokenizer has ``decode_bytes``
    (tiktoken's name for it; :class:`ByteTokenizer` has it), which is exact for any
    cut of the ids; else ``len(decode(ids).encode("utf-8"))``, exact for a character
    tokenizer, and for a byte-level one unless the ids begin or end inside a character.
    """
    decode_bytes = getattr(tokenizer, "decode_bytes", None)
    if decode_bytes is not None:
        return len(decode_bytes(ids))
    return len(tokenizer.decode(ids).encode("utf-8"))


def _check_tokenizer(tokenizer) -> None:
    if not isinstance(tokenizer, Tokenizer):
        raise TypeError(
            f"a tokenizer needs encode(str), decode(list[int]) and vocab_size; "
            f"got {type(tokenizer).__name__}"
        )
    if not 1 <= tokenizer.vocab_size <= 2**16:
        raise ValueError(
            f"uint16 shards hold vocabularies of up to 65,536 tokens; this tokenizer has "
            f"{tokenizer.vocab_size:,}"
        )


# -------------------------------------------------------------------- writing shards
@dataclass
class Shard:
    """One file of tokens: its name, its split and what it holds."""

    file: str  # e.g. "shard_000003.bin", relative to the directory
    split: str  # "train" or "val"
    num_tokens: int
    num_bytes: int  # bytes of UTF-8 text that its tokens decode to


class _ShardWriter:
    """Collects token ids and writes a shard whenever ``shard_size`` of them are in hand."""

    def __init__(self, out_dir: Path, tokenizer, shard_size: int):
        if shard_size < 2:
            raise ValueError(f"shard_size must be at least 2 tokens, got {shard_size}")
        self.out_dir, self.tokenizer, self.shard_size = out_dir, tokenizer, shard_size
        self.pending: list[np.ndarray] = []  # token ids not yet in a shard
        self.special: list[np.ndarray] = []  # which of them are separators
        self.num_pending = 0
        self.shards: list[Shard] = []
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / META).unlink(missing_ok=True)  # incomplete until the new meta.json
        for old in out_dir.glob("shard_*.bin"):  # an earlier encoding's shards
            old.unlink()

    def add(self, ids, split: str, special: bool = False) -> None:
        """Appends token ids; ``special`` ones (a separator) count no bytes of text."""
        ids_N = np.asarray(ids, dtype=np.int64).reshape(-1)
        if ids_N.size and (ids_N.min() < 0 or ids_N.max() >= self.tokenizer.vocab_size):
            raise ValueError(
                f"token ids must lie in [0, {self.tokenizer.vocab_size}); got "
                f"{ids_N.min()}..{ids_N.max()}"
            )
        self.pending.append(ids_N.astype(DTYPE))
        self.special.append(np.full(ids_N.size, special))
        self.num_pending += ids_N.size
        while self.num_pending >= self.shard_size:
            self.flush(split, self.shard_size)

    def flush(self, split: str, count: int | None = None) -> None:
        """Writes the first ``count`` pending tokens (all of them by default) as a shard."""
        if self.num_pending == 0:
            return
        tokens_N, special_N = np.concatenate(self.pending), np.concatenate(self.special)
        count = tokens_N.size if count is None else count
        shard_N = tokens_N[:count]
        self.pending, self.special = [tokens_N[count:]], [special_N[count:]]
        self.num_pending = tokens_N.size - count
        name = f"shard_{len(self.shards):06d}.bin"
        write_atomically(self.out_dir / name, shard_N.tobytes())
        num_bytes = text_bytes(self.tokenizer, shard_N[~special_N[:count]].tolist())
        self.shards.append(Shard(name, split, int(shard_N.size), num_bytes))

    def finish(self, key: dict) -> TokenShards:
        meta = {
            "format": FORMAT,
            "key": key,
            "dtype": DTYPE.str,
            "vocab_size": self.tokenizer.vocab_size,
            "tokenizer": key["tokenizer"],
            "num_tokens": sum(s.num_tokens for s in self.shards),
            "shards": [asdict(s) for s in self.shards],
        }
        write_atomically(self.out_dir / META, json.dumps(meta, indent=1).encode("utf-8"))
        return TokenShards(self.out_dir)


def _reusable(out_dir: Path, key: dict) -> TokenShards | None:
    """The shards in ``out_dir`` if its meta.json was written for ``key`` and the files fit."""
    try:
        shards = TokenShards(out_dir)
    except (OSError, ValueError):
        return None
    if shards.meta.get("key") != key:
        return None
    for shard in shards.shards:
        path = out_dir / shard.file
        if not path.is_file() or path.stat().st_size != shard.num_tokens * DTYPE.itemsize:
            return None
    shards.reused = True
    return shards


def write_shards(
    documents: Iterable[str],
    tokenizer,
    out_dir: str | os.PathLike,
    *,
    shard_size: int = 2**24,
    val_shards: int = 1,
    separator: int | None = None,
    source: str | None = None,
) -> TokenShards:
    """Encodes a stream of documents into shards; the last ``val_shards`` are validation.

    Documents are encoded one at a time and their ids appended to a buffer that is
    written out every ``shard_size`` tokens, so memory holds one shard, never the
    corpus. Every shard but the last has exactly ``shard_size`` tokens.

    Args:
        documents: the texts, in order (a generator is fine).
        tokenizer: see :class:`Tokenizer`; its vocabulary must fit in ``uint16``.
        out_dir: the directory of the shards; created if needed.
        shard_size: tokens per shard (the default, 2**24, is a 32 MiB file).
        val_shards: how many shards, from the end, are the validation split.
        separator: a token id written before each document (an end-of-text token), or
            None for none; it counts no bytes of text.
        source: a name of the corpus that changes when it does (a hash). With it, a
            directory already encoded from the same source, tokenizer and sharding is
            reused (``.reused`` is then True) and ``documents`` is not read; without
            it, the corpus is always encoded.

    Returns:
        The :class:`TokenShards` of ``out_dir``.
    """
    _check_tokenizer(tokenizer)
    if val_shards < 1:
        raise ValueError(f"val_shards must be at least 1, got {val_shards}")
    out_dir = Path(out_dir)
    key = {
        "how": "documents",
        "source": source,
        "tokenizer": tokenizer_id(tokenizer),
        "shard_size": shard_size,
        "val_shards": val_shards,
        "separator": separator,
    }
    if source is not None and (reused := _reusable(out_dir, key)) is not None:
        return reused
    writer = _ShardWriter(out_dir, tokenizer, shard_size)
    for text in documents:
        if separator is not None:
            writer.add([separator], "train", special=True)
        writer.add(tokenizer.encode(text), "train")
    writer.flush("train")
    if len(writer.shards) <= val_shards:
        raise ValueError(
            f"the corpus filled {len(writer.shards)} shard(s) of {shard_size:,} tokens; "
            f"{val_shards} of them are for validation and at least one must be left for "
            f"training: lower shard_size"
        )
    for shard in writer.shards[-val_shards:]:
        shard.split = "val"
    return writer.finish(key)


def encode_text(
    text: str,
    tokenizer,
    out_dir: str | os.PathLike,
    *,
    val_fraction: float = 0.1,
    shard_size: int = 2**24,
) -> TokenShards:
    """Encodes one text into shards: the first part for training, the rest for validation.

    The text is cut at character ``int(len(text) * (1 - val_fraction))``, as nanoGPT's
    ``prepare.py`` cuts tinyshakespeare (90/10), and each part is encoded and sharded on
    its own: the training shards come first, then the validation ones, and no shard
    mixes the two. With a character tokenizer the split is nanoGPT's, token for token.
    A directory already encoded from the same text (its SHA-256), tokenizer and
    sharding is reused.

    Returns:
        The :class:`TokenShards` of ``out_dir``.

    Example:
        >>> import tempfile
        >>> text = "First Citizen:\\nBefore we proceed any further, hear me speak.\\n"
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     shards = encode_text(text, CharTokenizer(text), tmp, shard_size=16)
        ...     [(s.split, s.num_tokens) for s in shards.shards]
        [('train', 16), ('train', 16), ('train', 16), ('train', 6), ('val', 7)]
    """
    _check_tokenizer(tokenizer)
    if not 0 < val_fraction < 1:
        raise ValueError(f"val_fraction must lie strictly between 0 and 1, got {val_fraction}")
    out_dir = Path(out_dir)
    key = {
        "how": "text",
        "source": hashlib.sha256(text.encode("utf-8")).hexdigest(),
        "tokenizer": tokenizer_id(tokenizer),
        "shard_size": shard_size,
        "val_fraction": val_fraction,
    }
    if (reused := _reusable(out_dir, key)) is not None:
        return reused
    cut = int(len(text) * (1 - val_fraction))
    writer = _ShardWriter(out_dir, tokenizer, shard_size)
    for split, part in (("train", text[:cut]), ("val", text[cut:])):
        if not part:
            raise ValueError(f"the {split} part of a text of {len(text)} characters is empty")
        writer.add(tokenizer.encode(part), split)
        writer.flush(split)
    return writer.finish(key)


def prepare_shakespeare(
    tokenizer=None, out_dir: str | os.PathLike | None = None, *, shard_size: int = 2**20
):
    """tinyshakespeare encoded into shards (once; later calls reuse them).

    Args:
        tokenizer: by default a :class:`CharTokenizer` of the corpus (65 characters).
        out_dir: by default ``<sitp cache>/tokens/shakespeare-<tokenizer id>``.
        shard_size: tokens per shard; the default, 2**20, gives one training shard of
            1,003,854 characters and one validation shard of 111,540 (nanoGPT's split).

    Returns:
        ``(shards, tokenizer)``.
    """
    text = load_tinyshakespeare()
    tokenizer = CharTokenizer(text) if tokenizer is None else tokenizer
    _check_tokenizer(tokenizer)
    if out_dir is None:
        out_dir = cache_dir() / "tokens" / f"shakespeare-{tokenizer_id(tokenizer)}"
    return encode_text(text, tokenizer, out_dir, shard_size=shard_size), tokenizer


# -------------------------------------------------------------------- reading shards
class TokenShards:
    """A directory of shards, opened through its ``meta.json``.

    Args:
        root: the directory (written by :func:`write_shards` or :func:`encode_text`).

    Attributes:
        shards: the :class:`Shard` records, in order.
        vocab_size, tokenizer: the vocabulary size and the tokenizer id of the tokens.
        reused: True when the call that returned this object found the shards encoded.
    """

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)
        path = self.root / META
        try:
            self.meta = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise FileNotFoundError(f"{path} does not exist: no complete shards there") from None
        if self.meta.get("format") != FORMAT or self.meta.get("dtype") != DTYPE.str:
            raise ValueError(f"{path} is not a {FORMAT} directory of {DTYPE} tokens")
        self.shards = [Shard(**s) for s in self.meta["shards"]]
        self.vocab_size: int = self.meta["vocab_size"]
        self.tokenizer: str = self.meta["tokenizer"]
        self.reused = False
        self._maps: dict[str, np.memmap] = {}

    def split(self, split: str) -> list[Shard]:
        """The shards of one split, in order."""
        found = [s for s in self.shards if s.split == split]
        if not found:
            raise ValueError(
                f"{self.root} has no {split!r} shards (its splits: "
                f"{sorted({s.split for s in self.shards})})"
            )
        return found

    def num_tokens(self, split: str) -> int:
        return sum(s.num_tokens for s in self.split(split))

    def num_bytes(self, split: str) -> int:
        return sum(s.num_bytes for s in self.split(split))

    def open(self, shard: Shard) -> np.memmap:
        """The shard's tokens, mapped read-only: nothing is read until it is indexed."""
        return np.memmap(self.root / shard.file, dtype=DTYPE, mode="r", shape=(shard.num_tokens,))

    def memmap(self, shard: Shard) -> np.memmap:
        """:meth:`open`, kept for the next call (each map holds a file descriptor)."""
        if shard.file not in self._maps:
            self._maps[shard.file] = self.open(shard)
        return self._maps[shard.file]

    # --8<-- [start:get_batch]
    def get_batch(
        self,
        split: str,
        batch_size: int,
        block_size: int,
        generator: sitp.Generator | None = None,
    ):
        """B random windows of T + 1 tokens: inputs ``x`` and targets ``y`` shifted by one.

        Every start position of every shard of the split is equally likely (a window
        stays inside one shard); with one shard this is nanoGPT's ``get_batch``. Only
        the B windows are read from disk.

        Returns:
            ``(x, y)``: int64 tensors of shape (B, T); ``y[b, t] == x[b, t + 1]``.
        """
        shards = [s for s in self.split(split) if s.num_tokens > block_size]
        if not shards:
            raise ValueError(f"no {split!r} shard holds a window of {block_size} + 1 tokens")
        starts_S = np.array([s.num_tokens - block_size for s in shards])  # windows per shard
        ends_S = np.cumsum(starts_S)
        r_B = sitp.randint(int(ends_S[-1]), (batch_size,), generator=generator).numpy()
        shard_B = np.searchsorted(ends_S, r_B, side="right")  # which shard each start is in
        offset_B = r_B - (ends_S[shard_B] - starts_S[shard_B])  # where in it
        window_BT1 = np.empty((batch_size, block_size + 1), dtype=np.int64)
        for b in range(batch_size):
            tokens = self.memmap(shards[shard_B[b]])
            window_BT1[b] = tokens[offset_B[b] : offset_B[b] + block_size + 1]  # reads T+1
        x_BT = sitp.tensor(window_BT1[:, :-1])  # tokens i .. i+T-1
        y_BT = sitp.tensor(window_BT1[:, 1:])  # tokens i+1 .. i+T
        return x_BT, y_BT

    # --8<-- [end:get_batch]

    def __repr__(self) -> str:
        splits = {s.split for s in self.shards}
        parts = ", ".join(
            f"{k}: {len(self.split(k))} shards, {self.num_tokens(k):,} tokens"
            for k in sorted(splits, key=["train", "val"].index)
        )
        return f"TokenShards({str(self.root)!r}; vocab {self.vocab_size}; {parts})"


# --8<-- [start:stream]
class ShardStream:
    """Batches read in order, one shard open at a time: for corpora larger than RAM.

    Each batch is the next ``B * T + 1`` tokens of the current shard, cut into B rows
    (llm.c's and nanochat's loaders work this way); consecutive batches overlap by one
    token, and a shard's tail too short for a batch is skipped. At the end of the last
    shard the stream starts again from the first (``loop=True``) or stops. Its position
    is two integers, so a run can save and restore it (:meth:`state_dict`).

    Example:
        >>> import tempfile
        >>> text = "abcdefghijklmnopqrstuvwxyz" * 4
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     tok = CharTokenizer(text)
        ...     shards = encode_text(text, tok, tmp, shard_size=40)
        ...     stream = ShardStream(shards, "train", batch_size=2, block_size=4)
        ...     x, y = next(stream)
        ...     tok.decode(x[0]), tok.decode(y[0]), tok.decode(x[1]), stream.state_dict()
        ('abcd', 'bcde', 'efgh', {'shard': 0, 'pos': 8})
    """

    def __init__(
        self, shards: TokenShards, split: str, batch_size: int, block_size: int, loop=True
    ):
        self.shards, self.loop = shards, loop
        self.B, self.T = batch_size, block_size
        self.files = [s for s in shards.split(split) if s.num_tokens >= self.B * self.T + 1]
        if not self.files:
            raise ValueError(f"no {split!r} shard holds a batch of {self.B} x {self.T} + 1 tokens")
        self.shard, self.pos = 0, 0
        self._tokens, self._open = None, None  # the one shard mapped now

    def __iter__(self) -> Iterator:
        return self

    def __next__(self):
        need = self.B * self.T + 1
        if self.pos + need > self.files[self.shard].num_tokens:  # on to the next shard
            self.shard, self.pos = self.shard + 1, 0
            if self.shard == len(self.files):
                if not self.loop:
                    self.shard -= 1
                    self.pos = self.files[self.shard].num_tokens
                    raise StopIteration
                self.shard = 0
        if self._open != self.shard:  # map the new shard; the old map is released
            self._tokens, self._open = self.shards.open(self.files[self.shard]), self.shard
        buf = np.asarray(self._tokens[self.pos : self.pos + need], dtype=np.int64)
        self.pos += self.B * self.T
        x_BT = sitp.tensor(buf[:-1].reshape(self.B, self.T))
        y_BT = sitp.tensor(buf[1:].reshape(self.B, self.T))
        return x_BT, y_BT

    def state_dict(self) -> dict:
        return {"shard": self.shard, "pos": self.pos}

    def load_state_dict(self, state: dict) -> None:
        self.shard, self.pos = int(state["shard"]), int(state["pos"])


# --8<-- [end:stream]


# ------------------------------------------------------------------ bits per byte
# --8<-- [start:bpb]
def bits_per_byte(loss: float, num_tokens: int, num_bytes: int) -> float:
    """A mean loss in nats per token, as bits per byte of text.

    Nats to bits is a division by ln 2; per token to per byte is a product by tokens
    per byte. A tokenizer with longer tokens has a higher loss per token but fewer
    tokens per byte; bits per byte does not care how the text was cut.

    >>> round(bits_per_byte(1.0, num_tokens=100, num_bytes=100), 4)  # one byte a token
    1.4427
    """
    if num_bytes <= 0 or num_tokens <= 0:
        raise ValueError(f"need positive counts, got {num_tokens} tokens and {num_bytes} bytes")
    return loss * num_tokens / num_bytes / math.log(2)


@sitp.no_grad()
def estimate_bpb(
    model, shards: TokenShards, split: str, batch_size: int, block_size: int, max_batches=None
):
    """The model's mean loss over a split (in order, no sampling) and its bits per byte.

    The model is called as ``model(x, y)`` and returns ``(logits, mean loss)``, as the
    book's GPT does. The loss is converted with the split's own tokens per byte.

    Returns:
        ``(loss in nats per token, bits per byte)``.
    """
    was_training = model.training
    model.eval()
    stream = ShardStream(shards, split, batch_size, block_size, loop=False)
    total, count = 0.0, 0
    for x_BT, y_BT in stream:
        _, loss = model(x_BT, y_BT)
        total += loss.item() * y_BT.numel()
        count += y_BT.numel()
        if max_batches is not None and count >= max_batches * batch_size * block_size:
            break
    model.train(was_training)
    mean = total / count
    return mean, bits_per_byte(mean, shards.num_tokens(split), shards.num_bytes(split))


# --8<-- [end:bpb]

__all__ = [
    "ByteTokenizer",
    "CharTokenizer",
    "Shard",
    "ShardStream",
    "TokenShards",
    "Tokenizer",
    "bits_per_byte",
    "encode_text",
    "estimate_bpb",
    "prepare_shakespeare",
    "text_bytes",
    "tokenizer_id",
    "write_shards",
]

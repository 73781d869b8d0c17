"""From a list of names to training examples: splits, context windows, batches.

Three ways to cut names into (input, target) pairs, one per family of models:

* :func:`build_context_dataset` — a fixed window of the last ``block_size``
  characters predicts the next one (n-gram counts, the Bengio MLP, WaveNet).
* :func:`build_sequence_dataset` — one row per name; every position predicts
  the next character (RNNs and transformers, makemore's scheme).
* :func:`get_batch` — random windows of a single token stream, with the
  target shifted by one (nanoGPT's scheme); :func:`build_token_stream` makes
  the stream.

Each is computed with numpy (the ``_arrays`` helpers: data preparation is
bookkeeping, not a kernel) and handed to the caller as a sitp tensor of dtype
int64, ready for ``C[X]`` embedding lookups and ``cross_entropy(logits, Y)``.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import numpy as np

import sitp
from sitp.data.vocab import Vocab

#: The padding of sequence targets. Pass ``ignore_index=-1`` to ``cross_entropy``
#: so these positions are skipped, as makemore does (PyTorch's default is -100).
IGNORE_INDEX = -1


def split_words(
    words: Sequence[str], fractions: Sequence[float] = (0.8, 0.1, 0.1), seed: int = 42
) -> tuple[list[str], ...]:
    """Shuffles the words and cuts them into train, validation and test lists.

    The shuffle is Python's ``random.Random(seed).shuffle``, so a seed gives
    the same split on every machine. With the defaults this is the split of
    the makemore lectures (``random.seed(42); random.shuffle(words)``, then
    cuts at 80% and 90%). Part ``i`` ends at ``int(n * (f_0 + ... + f_i))``;
    the last part takes the rest.

    Args:
        words: the corpus; it is not modified.
        fractions: the share of each part; they must sum to 1.
        seed: seed of the shuffle.

    Returns:
        One list per fraction, usually ``(train, val, test)``.

    Example:
        >>> train, val, test = split_words([str(i) for i in range(10)], seed=0)
        >>> len(train), len(val), len(test)
        (8, 1, 1)
    """
    if any(f < 0 for f in fractions) or abs(sum(fractions) - 1.0) > 1e-9:
        raise ValueError(f"fractions must be non-negative and sum to 1, got {tuple(fractions)}")
    shuffled = list(words)
    random.Random(seed).shuffle(shuffled)
    n = len(shuffled)
    cuts, total = [0], 0.0
    for f in fractions[:-1]:
        total += f
        cuts.append(int(n * total))
    cuts.append(n)
    return tuple(shuffled[a:b] for a, b in zip(cuts, cuts[1:]))


def _context_arrays(
    words: Sequence[str], vocab: Vocab, block_size: int
) -> tuple[np.ndarray, np.ndarray]:
    """The numpy form of :func:`build_context_dataset`.

    >>> vocab = Vocab(["ab"])
    >>> X, Y = _context_arrays(["ab"], vocab, block_size=2)
    >>> X.tolist(), Y.tolist(), X.dtype
    ([[0, 0], [0, 1], [1, 2]], [1, 2, 0], dtype('int64'))
    """
    if block_size < 1:
        raise ValueError(f"block_size must be at least 1, got {block_size}")
    X, Y = [], []
    for word in words:
        context = [0] * block_size  # start with block_size boundary tokens
        for ix in vocab.encode(word) + [0]:  # every name ends with '.'
            X.append(context)
            Y.append(ix)
            context = context[1:] + [ix]  # slide the window by one
    X_NT = np.array(X, dtype=np.int64).reshape(len(X), block_size)
    Y_N = np.array(Y, dtype=np.int64)
    return X_NT, Y_N


def _sequence_arrays(
    words: Sequence[str], vocab: Vocab, block_size: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """The numpy form of :func:`build_sequence_dataset`.

    >>> X, Y = _sequence_arrays(["ab", "b"], Vocab(["ab"]))
    >>> X.tolist()
    [[0, 1, 2], [0, 2, 0]]
    >>> Y.tolist()
    [[1, 2, 0], [2, 0, -1]]
    """
    longest = max((len(w) for w in words), default=0)
    T = longest + 1 if block_size is None else block_size
    if T < longest + 1:
        raise ValueError(f"block_size {T} is too small: the longest word needs {longest + 1}")
    X_NT = np.zeros((len(words), T), dtype=np.int64)  # padded with '.'
    Y_NT = np.full((len(words), T), IGNORE_INDEX, dtype=np.int64)  # padded with ignore_index
    for row, word in enumerate(words):
        ix = vocab.encode(word)
        X_NT[row, 1 : 1 + len(ix)] = ix  # '.' then the word
        Y_NT[row, : len(ix)] = ix  # the word, shifted left by one...
        Y_NT[row, len(ix)] = 0  # ...then the closing '.'
    return X_NT, Y_NT


def _token_stream_array(words: Sequence[str], vocab: Vocab) -> np.ndarray:
    """The numpy form of :func:`build_token_stream`.

    >>> vocab = Vocab(["ab"])
    >>> vocab.decode(_token_stream_array(["ab", "b"], vocab))
    '.ab.b.'
    """
    tokens = [0]
    for word in words:
        tokens += vocab.encode(word) + [0]
    return np.array(tokens, dtype=np.int64)


def _window_arrays(
    data: np.ndarray, starts_B: np.ndarray, block_size: int
) -> tuple[np.ndarray, np.ndarray]:
    """The windows of :func:`get_batch` that start at ``starts_B``, in numpy.

    >>> X, Y = _window_arrays(np.arange(10), np.array([0, 5]), block_size=3)
    >>> X.tolist(), Y.tolist()
    ([[0, 1, 2], [5, 6, 7]], [[1, 2, 3], [6, 7, 8]])
    """
    offsets_T = np.arange(block_size)
    X_BT = data[starts_B[:, None] + offsets_T]  # (B, T): tokens i .. i+T-1
    Y_BT = data[starts_B[:, None] + offsets_T + 1]  # (B, T): tokens i+1 .. i+T
    return X_BT.astype(np.int64), Y_BT.astype(np.int64)


def _to_tensor(array: np.ndarray) -> sitp.Tensor:
    """A sitp tensor holding the array (int64 stays int64)."""
    return sitp.tensor(array)


def build_context_dataset(words: Sequence[str], vocab: Vocab, block_size: int = 3):
    """Context windows for next-character prediction, makemore's scheme.

    Each name is padded on the left with ``block_size`` boundary tokens and
    closed with one; every character (the closing ``'.'`` included) becomes a
    target, and the ``block_size`` tokens before it its context. A name of
    length ``L`` gives ``L + 1`` examples.

    Args:
        words: the names.
        vocab: their vocabulary (``'.'`` is index 0).
        block_size: how many previous characters the model sees.

    Returns:
        ``(X, Y)``: X of shape ``(N, block_size)`` and Y of shape ``(N,)``,
        both int64, where N is the total of ``len(word) + 1`` over the words.

    Example:
        >>> vocab = Vocab(["emma"])
        >>> X, Y = build_context_dataset(["emma"], vocab, block_size=3)
        >>> X.shape, Y.shape, X.dtype
        (sitp.Size([5, 3]), sitp.Size([5]), sitp.int64)
        >>> [vocab.decode(x) + " -> " + vocab.itos[int(y)] for x, y in zip(X.tolist(), Y.tolist())]
        ['... -> e', '..e -> m', '.em -> m', 'emm -> a', 'mma -> .']
    """
    X_NT, Y_N = _context_arrays(words, vocab, block_size)
    return _to_tensor(X_NT), _to_tensor(Y_N)


def build_sequence_dataset(words: Sequence[str], vocab: Vocab, block_size: int | None = None):
    """One row per name, for sequence models: every position predicts the next.

    Row ``X[i]`` is ``'.'`` followed by the name, padded with ``'.'`` (index
    0); row ``Y[i]`` is X shifted left by one: the name, its closing ``'.'``,
    then ``-1`` (:data:`IGNORE_INDEX`), which ``cross_entropy(...,
    ignore_index=-1)`` skips.

    Args:
        words: the names.
        vocab: their vocabulary.
        block_size: the row length T; by default the longest name plus one.

    Returns:
        ``(X, Y)``, both of shape ``(len(words), T)`` and dtype int64.

    Raises:
        ValueError: if a name does not fit, that is ``len(name) + 1 > T``.

    Example:
        >>> vocab = Vocab(["emma", "ava"])
        >>> X, Y = build_sequence_dataset(["emma", "ava"], vocab)
        >>> X.tolist()
        [[0, 2, 3, 3, 1], [0, 1, 4, 1, 0]]
        >>> Y.tolist()
        [[2, 3, 3, 1, 0], [1, 4, 1, 0, -1]]
    """
    X_NT, Y_NT = _sequence_arrays(words, vocab, block_size)
    return _to_tensor(X_NT), _to_tensor(Y_NT)


def build_token_stream(words: Sequence[str], vocab: Vocab):
    """All names as one 1-D stream of tokens, each name closed by ``'.'``.

    The stream starts with ``'.'`` too, so every name follows a boundary:
    ``".emma.ava."``. Feed it to :func:`get_batch`.

    Returns:
        A 1-D int64 tensor of ``1 + sum(len(w) + 1 for w in words)`` tokens.

    Example:
        >>> vocab = Vocab(["emma", "ava"])
        >>> build_token_stream(["emma", "ava"], vocab).tolist()
        [0, 2, 3, 3, 1, 0, 1, 4, 1, 0]
    """
    return _to_tensor(_token_stream_array(words, vocab))


def get_batch(data, batch_size: int, block_size: int, generator: sitp.Generator | None = None):
    """A random batch of windows of a token stream, with targets shifted by one.

    Draws ``batch_size`` start positions ``i`` with
    ``sitp.randint(len(data) - block_size, (batch_size,), generator=generator)``;
    row ``b`` of X is ``data[i : i + block_size]`` and row ``b`` of Y is
    ``data[i + 1 : i + block_size + 1]``. This is nanoGPT's ``get_batch``.
    Windows cross name boundaries; the ``'.'`` tokens tell the model where
    one name ends.

    Args:
        data: a 1-D stream of token indices, a tensor or an array (see
            :func:`build_token_stream`).
        batch_size: B, the number of windows.
        block_size: T, the length of each window.
        generator: a ``sitp.Generator``; None uses the default generator,
            which ``sitp.manual_seed`` seeds.

    Returns:
        ``(X, Y)``, both of shape ``(B, T)`` and dtype int64.

    Example:
        >>> vocab = Vocab(["emma", "ava"])
        >>> stream = build_token_stream(["emma", "ava"], vocab)
        >>> g = sitp.Generator().manual_seed(0)
        >>> X, Y = get_batch(stream, batch_size=4, block_size=3, generator=g)
        >>> X.shape, Y.shape
        (sitp.Size([4, 3]), sitp.Size([4, 3]))
        >>> bool((X[:, 1:] == Y[:, :-1]).all())  # Y is X shifted by one
        True
    """
    data = np.asarray(data.numpy() if isinstance(data, sitp.Tensor) else data).reshape(-1)
    if len(data) <= block_size:
        raise ValueError(f"a stream of {len(data)} tokens has no window of {block_size} + 1 tokens")
    starts_B = sitp.randint(len(data) - block_size, (batch_size,), generator=generator)
    X_BT, Y_BT = _window_arrays(data, starts_B.numpy(), block_size)
    return _to_tensor(X_BT), _to_tensor(Y_BT)

"""The character vocabulary: a two-way table between characters and integers.

A character-level language model reads and writes integers, not letters.
``Vocab`` numbers the characters of a corpus the way makemore does: the
boundary token ``'.'`` gets index 0, and the letters follow in sorted order,
so for lower-case names ``a`` is 1 and ``z`` is 26.

The one token ``'.'`` marks both the start and the end of a name, which is
why no name may contain a ``'.'`` itself.
"""

from __future__ import annotations

from collections.abc import Iterable

#: The token that marks where a name starts and where it ends.
BOUNDARY = "."


class Vocab:
    """A character vocabulary with the boundary token ``'.'`` at index 0.

    Args:
        words: the corpus; every distinct character of it gets an index.

    Attributes:
        itos: list of characters; ``itos[i]`` is the character with index ``i``.
        stoi: dict from character to index, the inverse of ``itos``.

    Example:
        >>> vocab = Vocab(["emma", "ava"])
        >>> vocab.itos
        ['.', 'a', 'e', 'm', 'v']
        >>> vocab.stoi["m"], len(vocab)
        (3, 5)
        >>> vocab.encode("emma")
        [2, 3, 3, 1]
        >>> vocab.decode([0, 1, 4, 1, 0])
        '.ava.'
    """

    def __init__(self, words: Iterable[str]):
        chars = set()
        for word in words:
            if BOUNDARY in word:
                raise ValueError(f"word {word!r} contains the boundary token {BOUNDARY!r}")
            chars.update(word)
        self.itos: list[str] = [BOUNDARY] + sorted(chars)
        self.stoi: dict[str, int] = {ch: i for i, ch in enumerate(self.itos)}

    def __len__(self) -> int:
        """The number of tokens, the boundary token included."""
        return len(self.itos)

    def encode(self, text: str) -> list[int]:
        """Turns a string into a list of indices.

        Raises:
            KeyError: if ``text`` has a character that is not in the vocabulary.
        """
        return [self.stoi[ch] for ch in text]

    def decode(self, indices: Iterable[int]) -> str:
        """Turns a sequence of indices (ints, or a 1-D array or tensor) into a string."""
        if hasattr(indices, "tolist"):  # numpy arrays and tensors
            indices = indices.tolist()
        return "".join(self.itos[i] for i in indices)

    def __repr__(self) -> str:
        return f"Vocab({''.join(self.itos)!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Vocab) and self.itos == other.itos

"""Samplers, as in ``torch.utils.data.sampler``: the order in which a ``DataLoader``
reads a map-style dataset.

A sampler is an iterable of indices (``BatchSampler``: of lists of indices). The random
ones draw from a ``sitp.Generator``; given the same generator state they repeat their
draws, but the numbers are not PyTorch's for the same seed (see :mod:`sitp.random`).

>>> import sitp
>>> from sitp.utils.data import BatchSampler, SequentialSampler
>>> list(BatchSampler(SequentialSampler(range(5)), batch_size=2, drop_last=False))
[[0, 1], [2, 3], [4]]
"""

from __future__ import annotations

import warnings

import numpy as np

from sitp import random as _random
from sitp._tensor.creation import as_tensor
from sitp.dtypes import float64


def _is_int(n) -> bool:
    return isinstance(n, (int, np.integer)) and not isinstance(n, bool)


def _check_positive_int(name: str, value) -> None:
    """torch's ValueError for a count that is not a positive integer."""
    if not _is_int(value) or value <= 0:
        raise ValueError(f"{name} should be a positive integer value, but got {name}={value}")


def _check_bool(name: str, value, error=ValueError) -> None:
    """torch's error (ValueError, or TypeError where torch raises that) for a non-bool flag."""
    if not isinstance(value, bool):
        raise error(f"{name} should be a boolean value, but got {name}={value}")


def _fresh_generator():
    """A generator seeded from the default one, as PyTorch's samplers make when given none."""
    seed = int(_random.randint(0, 2**62, (1,)).item())
    return _random.Generator().manual_seed(seed)


class Sampler:
    """Base class: a subclass defines ``__iter__`` (indices) and usually ``__len__``."""

    def __init__(self, data_source=None) -> None:
        if data_source is not None:
            warnings.warn(
                "`data_source` argument is not used and will be removed in 2.2.0."
                "You may still have custom implementation that utilizes it.",
                stacklevel=2,
            )

    def __iter__(self):
        raise NotImplementedError


class SequentialSampler(Sampler):
    """0, 1, ..., len(data_source) - 1."""

    def __init__(self, data_source) -> None:
        self.data_source = data_source

    def __iter__(self):
        return iter(range(len(self.data_source)))

    def __len__(self) -> int:
        return len(self.data_source)


class RandomSampler(Sampler):
    """Random indices: a permutation, or ``num_samples`` draws with replacement.

    Without replacement and with ``num_samples`` larger than the dataset, whole
    permutations follow one another (the last one cut short), as in PyTorch. With
    ``generator=None`` each pass seeds a fresh generator from the default one, so
    ``sitp.manual_seed`` makes the order reproducible.
    """

    def __init__(
        self, data_source, replacement: bool = False, num_samples=None, generator=None
    ) -> None:
        self.data_source, self.replacement = data_source, replacement
        self._num_samples, self.generator = num_samples, generator
        _check_bool("replacement", self.replacement, TypeError)
        _check_positive_int("num_samples", self.num_samples)

    @property
    def num_samples(self) -> int:
        return len(self.data_source) if self._num_samples is None else self._num_samples

    def __iter__(self):
        n = len(self.data_source)
        generator = self.generator if self.generator is not None else _fresh_generator()
        if self.replacement:
            for _ in range(self.num_samples // 32):
                yield from _random.randint(0, n, (32,), generator=generator).tolist()
            yield from _random.randint(0, n, (self.num_samples % 32,), generator=generator).tolist()
        else:
            for _ in range(self.num_samples // n):
                yield from _random.randperm(n, generator=generator).tolist()
            yield from _random.randperm(n, generator=generator).tolist()[: self.num_samples % n]

    def __len__(self) -> int:
        return self.num_samples


class SubsetRandomSampler(Sampler):
    """The given indices in a random order (a new permutation each pass)."""

    def __init__(self, indices, generator=None) -> None:
        self.indices, self.generator = indices, generator

    def __iter__(self):
        for i in _random.randperm(len(self.indices), generator=self.generator).tolist():
            yield self.indices[i]

    def __len__(self) -> int:
        return len(self.indices)


class WeightedRandomSampler(Sampler):
    """``num_samples`` indices drawn with probabilities proportional to ``weights``."""

    def __init__(self, weights, num_samples: int, replacement: bool = True, generator=None) -> None:
        _check_positive_int("num_samples", num_samples)
        _check_bool("replacement", replacement)
        weights = as_tensor(weights, dtype=float64)
        if weights.ndim != 1:
            raise ValueError(
                f"weights should be a 1d sequence but given weights have shape "
                f"{tuple(weights.shape)}"
            )
        self.weights, self.num_samples = weights, int(num_samples)
        self.replacement, self.generator = replacement, generator

    def __iter__(self):
        drawn = _random.multinomial(
            self.weights, self.num_samples, self.replacement, generator=self.generator
        )
        yield from iter(drawn.tolist())

    def __len__(self) -> int:
        return self.num_samples


class BatchSampler(Sampler):
    """Lists of ``batch_size`` indices from ``sampler``; the last one shorter unless
    ``drop_last``."""

    def __init__(self, sampler, batch_size: int, drop_last: bool) -> None:
        _check_positive_int("batch_size", batch_size)
        _check_bool("drop_last", drop_last)
        self.sampler, self.batch_size, self.drop_last = sampler, int(batch_size), drop_last

    def __iter__(self):
        batch = []
        for idx in self.sampler:
            batch.append(idx)
            if len(batch) == self.batch_size:
                yield batch
                batch = []
        if batch and not self.drop_last:
            yield batch

    def __len__(self) -> int:
        n = len(self.sampler)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)


__all__ = [
    "BatchSampler",
    "RandomSampler",
    "Sampler",
    "SequentialSampler",
    "SubsetRandomSampler",
    "WeightedRandomSampler",
]

"""Datasets, as in ``torch.utils.data.dataset``: ``Dataset``, ``IterableDataset``,
``TensorDataset``, ``ConcatDataset``, ``Subset`` and ``random_split``."""

from __future__ import annotations

import bisect
import itertools
import math
import warnings

from sitp._tensor.tensor import Tensor
from sitp.random import randperm


class Dataset:
    """Anything with ``__getitem__(i)`` and ``__len__()`` (a map-style dataset).

    A subclass may also define ``__getitems__(indices)``, returning the list of samples
    at ``indices``; ``DataLoader`` then fetches a batch with one call, as PyTorch does.
    """

    def __getitem__(self, index):
        raise NotImplementedError("Subclasses of Dataset should implement __getitem__.")

    def __add__(self, other: "Dataset") -> "ConcatDataset":
        return ConcatDataset([self, other])


class IterableDataset(Dataset):
    """A dataset that is a stream: it defines ``__iter__`` instead of ``__getitem__``."""

    def __iter__(self):
        raise NotImplementedError("Subclasses of IterableDataset should implement __iter__.")


class TensorDataset(Dataset):
    """Row i of each tensor, as a tuple; all tensors share their first dim."""

    def __init__(self, *tensors: Tensor):
        if not tensors:
            raise ValueError("TensorDataset needs at least one tensor")
        for t in tensors:
            if not isinstance(t, Tensor):
                raise TypeError(f"TensorDataset takes tensors, got {type(t).__name__}")
        n = tensors[0].shape[0]
        for t in tensors:
            if t.shape[0] != n:
                raise ValueError(
                    f"Size mismatch between tensors: first dims {[t.shape[0] for t in tensors]}"
                )
        self.tensors = tensors

    def __getitem__(self, index):
        return tuple(t[index] for t in self.tensors)

    def __len__(self):
        return self.tensors[0].shape[0]


class ConcatDataset(Dataset):
    """The datasets one after another."""

    def __init__(self, datasets):
        self.datasets = list(datasets)
        if not self.datasets:
            raise ValueError("datasets should not be an empty iterable")
        for d in self.datasets:
            if isinstance(d, IterableDataset):
                raise ValueError("ConcatDataset does not support IterableDataset")
        self.cumulative_sizes = list(itertools.accumulate(len(d) for d in self.datasets))

    def __len__(self):
        return self.cumulative_sizes[-1]

    def __getitem__(self, idx):
        if idx < 0:
            if -idx > len(self):
                raise ValueError("absolute value of index should not exceed dataset length")
            idx = len(self) + idx
        i = bisect.bisect_right(self.cumulative_sizes, idx)
        start = self.cumulative_sizes[i - 1] if i > 0 else 0
        return self.datasets[i][idx - start]


class Subset(Dataset):
    """The samples of ``dataset`` at ``indices``, in that order."""

    def __init__(self, dataset, indices):
        self.dataset, self.indices = dataset, indices

    def __getitem__(self, idx):
        if isinstance(idx, list):
            return self.dataset[[self.indices[i] for i in idx]]
        return self.dataset[self.indices[idx]]

    def __getitems__(self, indices):
        if callable(getattr(self.dataset, "__getitems__", None)):
            return self.dataset.__getitems__([self.indices[i] for i in indices])
        return [self.dataset[self.indices[i]] for i in indices]

    def __len__(self):
        return len(self.indices)


def random_split(dataset, lengths, generator=None):
    """Split ``dataset`` into non-overlapping random subsets of the given lengths.

    ``lengths`` are counts summing to ``len(dataset)``, or fractions summing to 1 (the
    items left over by rounding down go one each to the first subsets, as in PyTorch).
    The permutation comes from ``generator`` (the default generator if None), so it is
    reproducible, but it is not PyTorch's permutation for the same seed.
    """
    lengths = list(lengths)
    total = sum(lengths)
    if math.isclose(total, 1) and total <= 1:
        counts = []
        for i, frac in enumerate(lengths):
            if frac < 0 or frac > 1:
                raise ValueError(f"Fraction at index {i} is not between 0 and 1")
            counts.append(int(math.floor(len(dataset) * frac)))
        for i in range(len(dataset) - sum(counts)):
            counts[i % len(counts)] += 1
        for i, n in enumerate(counts):
            if n == 0:
                warnings.warn(
                    f"Length of split at index {i} is 0. This might result in an empty dataset.",
                    stacklevel=2,
                )
        lengths = counts
    if sum(lengths) != len(dataset):
        raise ValueError("Sum of input lengths does not equal the length of the input dataset!")
    indices = randperm(sum(lengths), generator=generator).tolist()
    return [
        Subset(dataset, indices[end - n : end])
        for end, n in zip(itertools.accumulate(lengths), lengths)
    ]


__all__ = ["ConcatDataset", "Dataset", "IterableDataset", "Subset", "TensorDataset", "random_split"]

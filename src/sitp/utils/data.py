"""``Dataset``, ``TensorDataset`` and ``DataLoader``, as in ``torch.utils.data``."""

from __future__ import annotations

import math

from ..tensor import Tensor


class Dataset:
    """Anything with ``__getitem__(i)`` and ``__len__()``."""

    def __getitem__(self, index):
        raise NotImplementedError

    def __len__(self):
        raise NotImplementedError


class TensorDataset(Dataset):
    """Row i of each tensor, as a tuple; all tensors share their first dim."""

    def __init__(self, *tensors: Tensor):
        if not tensors:
            raise ValueError("TensorDataset needs at least one tensor")
        n = tensors[0].shape[0]
        for t in tensors:
            if t.shape[0] != n:
                raise ValueError(
                    f"Size mismatch between tensors: first dims {[t.shape[0] for t in tensors]}")
        self.tensors = tensors

    def __getitem__(self, index):
        return tuple(t[index] for t in self.tensors)

    def __len__(self):
        return self.tensors[0].shape[0]


def default_collate(batch):
    """Stack a list of samples: tensors stack, tuples collate field by field."""
    from ..creation import tensor
    from ..functional_core import stack

    first = batch[0]
    if isinstance(first, Tensor):
        return stack(batch)
    if isinstance(first, (tuple, list)):
        return type(first)(default_collate(list(field)) for field in zip(*batch))
    if isinstance(first, dict):
        return {k: default_collate([b[k] for b in batch]) for k in first}
    return tensor(batch)


class DataLoader:
    """Iterate over a dataset in batches, optionally shuffled with a generator.

    For a :class:`TensorDataset` a batch is gathered with one indexing op per
    tensor instead of stacking single rows.
    """

    def __init__(self, dataset, batch_size: int = 1, shuffle: bool = False, drop_last: bool = False,
                 generator=None, collate_fn=None, num_workers: int = 0, **kwargs):
        if batch_size is None or batch_size <= 0:
            raise ValueError(f"batch_size should be a positive integer value, but got batch_size={batch_size}")
        self.dataset, self.batch_size, self.shuffle = dataset, batch_size, shuffle
        self.drop_last, self.generator = drop_last, generator
        self.collate_fn = collate_fn or default_collate

    def __len__(self):
        n = len(self.dataset)
        return n // self.batch_size if self.drop_last else math.ceil(n / self.batch_size)

    def __iter__(self):
        from ..creation import arange
        from ..random import randperm

        n = len(self.dataset)
        order = randperm(n, generator=self.generator) if self.shuffle else arange(n)
        for start in range(0, n, self.batch_size):
            idx = order[start:start + self.batch_size]
            if self.drop_last and idx.shape[0] < self.batch_size:
                return
            if isinstance(self.dataset, TensorDataset) and self.collate_fn is default_collate:
                yield tuple(t[idx] for t in self.dataset.tensors)
            else:
                yield self.collate_fn([self.dataset[i] for i in idx.tolist()])

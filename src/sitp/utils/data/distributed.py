"""``DistributedSampler``, as ``torch.utils.data.distributed``: each rank of a data-parallel
job reads its own share of a map-style dataset (chapter 7.2).

The dataset's indices are shuffled once per epoch with a seed every rank knows
(``seed + epoch``), padded (or cut, with ``drop_last``) to a multiple of the number of
ranks, and dealt out like cards: rank ``r`` takes positions ``r, r + p, r + 2p, ...``.
The ranks' shares are disjoint and together cover the dataset, so one epoch on ``p`` ranks
sees each example once (padding repeats a few).

The shuffle is torch's own permutation for that seed, not one from :mod:`sitp.random`:
a sampler built with the same arguments gives the same indices under ``import torch``
and ``import sitp as torch``, so the two libraries split a dataset across ranks alike.

>>> from sitp.utils.data.distributed import DistributedSampler
>>> [list(DistributedSampler(range(5), num_replicas=2, rank=r, shuffle=False)) for r in (0, 1)]
[[0, 2, 4], [1, 3, 0]]
"""

from __future__ import annotations

import math

import numpy as np

from sitp import distributed as dist
from sitp.utils.data.sampler import Sampler


def _torch_randperm(n: int, seed: int) -> list[int]:
    """The permutation ``torch.randperm(n, generator=torch.Generator().manual_seed(seed))``
    returns on the CPU, as a list.

    torch shuffles with Fisher-Yates: for ``i`` from 0 to ``n - 2`` it swaps position
    ``i`` with ``i + z % (n - i)``, where ``z`` is the next 32-bit output of a Mersenne
    Twister (mt19937) seeded with the low 32 bits of ``seed``. numpy's ``MT19937`` with its
    legacy seeding is that same engine, so its raw outputs are torch's draws.
    """
    bits = np.random.MT19937(0)
    bits._legacy_seeding(seed & 0xFFFFFFFF)  # mt19937's own init_genrand, as torch seeds it
    z = bits.random_raw(max(n - 1, 0)).astype(np.uint64)
    swap_with = z % np.arange(n, 1, -1, dtype=np.uint64) + np.arange(n - 1, dtype=np.uint64)
    order = list(range(n))
    for i, j in enumerate(swap_with.tolist()):
        order[i], order[j] = order[j], order[i]
    return order


class DistributedSampler(Sampler):
    """The indices of one rank's share of ``dataset`` (``torch.utils.data.DistributedSampler``).

    Args:
        dataset: a map-style dataset (anything with ``len``).
        num_replicas: the number of ranks sharing it; by default the process group's
            world size.
        rank: this rank's number, in ``[0, num_replicas)``; by default the process
            group's rank.
        shuffle: shuffle the indices, with ``seed + epoch`` (call :meth:`set_epoch`
            at the start of every epoch, or each epoch repeats the first one's order).
        seed: the shuffle's seed; it must be the same on every rank.
        drop_last: cut the tail so that every rank gets the same number of indices
            without repeats; otherwise the first indices are repeated to pad.
    """

    def __init__(
        self,
        dataset,
        num_replicas: int | None = None,
        rank: int | None = None,
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = False,
    ) -> None:
        if num_replicas is None:
            num_replicas = dist.get_world_size()
        if rank is None:
            rank = dist.get_rank()
        if rank >= num_replicas or rank < 0:
            raise ValueError(
                f"Invalid rank {rank}, rank should be in the interval [0, {num_replicas - 1}]"
            )
        self.dataset = dataset
        self.num_replicas = num_replicas
        self.rank = rank
        self.epoch = 0
        self.drop_last = drop_last
        n = len(dataset)
        if drop_last and n % num_replicas != 0:
            self.num_samples = math.ceil((n - num_replicas) / num_replicas)  # cut the tail
        else:
            self.num_samples = math.ceil(n / num_replicas)  # pad to a multiple of the ranks
        self.total_size = self.num_samples * num_replicas
        self.shuffle = shuffle
        self.seed = seed

    def __iter__(self):
        n = len(self.dataset)
        indices = _torch_randperm(n, self.seed + self.epoch) if self.shuffle else list(range(n))
        if not self.drop_last:
            padding = self.total_size - len(indices)
            if padding <= len(indices):
                indices += indices[:padding]
            else:  # fewer examples than ranks: repeat the whole list
                indices += (indices * math.ceil(padding / len(indices)))[:padding]
        else:
            indices = indices[: self.total_size]
        assert len(indices) == self.total_size
        # deal the cards: rank r takes every num_replicas-th index from position r
        indices = indices[self.rank : self.total_size : self.num_replicas]
        assert len(indices) == self.num_samples
        return iter(indices)

    def __len__(self) -> int:
        return self.num_samples

    def set_epoch(self, epoch: int) -> None:
        """Set the epoch the next ``__iter__`` shuffles for (``seed + epoch``)."""
        self.epoch = epoch

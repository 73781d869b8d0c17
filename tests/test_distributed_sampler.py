"""DistributedSampler against torch's: the same indices on every rank for the same
arguments, in one process (given num_replicas and rank, neither needs a process group)."""

import pytest
import torch
from torch.utils.data.distributed import DistributedSampler as TorchSampler

import sitp
import sitp.utils.data
from sitp.utils.data.distributed import DistributedSampler, _torch_randperm


@pytest.mark.parametrize("n", [0, 1, 2, 3, 7, 10, 64, 101])
@pytest.mark.parametrize("replicas", [1, 2, 3, 4, 8])
@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("drop_last", [False, True])
def test_indices_equal_torch(n, replicas, shuffle, drop_last):
    data = list(range(n))
    for rank in range(replicas):
        for seed, epoch in ((0, 0), (5, 3)):
            ours = DistributedSampler(data, replicas, rank, shuffle, seed, drop_last)
            theirs = TorchSampler(data, replicas, rank, shuffle, seed, drop_last)
            ours.set_epoch(epoch)
            theirs.set_epoch(epoch)
            assert len(ours) == len(theirs)
            assert list(ours) == list(theirs), (rank, seed, epoch)


def test_the_ranks_cover_the_dataset_once_per_epoch():
    data = list(range(12))
    shares = [list(DistributedSampler(data, num_replicas=3, rank=r, seed=1)) for r in range(3)]
    assert sorted(sum(shares, [])) == data
    first = DistributedSampler(data, num_replicas=3, rank=0, seed=1)
    first.set_epoch(1)
    assert list(first) != shares[0]  # another epoch, another order


def test_permutation_is_torch_randperm():
    for n in (1, 2, 50, 1000):
        for seed in (0, 7, 2**40 + 3):
            g = torch.Generator().manual_seed(seed)
            assert _torch_randperm(n, seed) == torch.randperm(n, generator=g).tolist()


def test_exported_where_torch_has_it():
    assert sitp.utils.data.DistributedSampler is DistributedSampler
    assert sitp.utils.data.distributed.DistributedSampler is DistributedSampler


@pytest.mark.parametrize("rank", [-1, 2])
def test_bad_rank_is_torch_error(rank):
    with pytest.raises(ValueError) as theirs:
        TorchSampler(range(4), num_replicas=2, rank=rank)
    with pytest.raises(ValueError) as ours:
        DistributedSampler(range(4), num_replicas=2, rank=rank)
    assert str(ours.value) == str(theirs.value)

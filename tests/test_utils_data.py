"""``sitp.utils.data`` against ``torch.utils.data``: the dotted submodules, the samplers,
``DataLoader``'s batches, collation and argument errors.

Deterministic orders (sequential samplers, batch samplers, given samplers) must give the
same batches as torch. Random samplers draw other numbers than torch's for a seed, so
they are checked for what they promise: a permutation, draws in range, reproducibility
with a generator, and the distribution of weighted draws.
"""

import collections
import importlib

import numpy as np
import pytest
import torch
import torch.utils.data as tud

import sitp
import sitp.utils.data as sud


def assert_same_batch(s, t):
    """A sitp batch and a torch batch have the same structure, types and values."""
    if isinstance(t, torch.Tensor):
        assert isinstance(s, sitp.Tensor), type(s)
        assert tuple(s.shape) == tuple(t.shape)
        assert str(s.dtype).split(".")[-1] == str(t.dtype).split(".")[-1]
        np.testing.assert_array_equal(s.numpy(), t.numpy())
    elif isinstance(t, dict):
        assert isinstance(s, dict) and list(s) == list(t)
        for k in t:
            assert_same_batch(s[k], t[k])
    elif isinstance(t, (list, tuple)):
        assert type(s) is type(t) and len(s) == len(t), (type(s), type(t))
        for a, b in zip(s, t):
            assert_same_batch(a, b)
    else:
        assert s == t


@pytest.mark.parametrize(
    "name",
    [
        "sitp.utils.data.dataloader",
        "sitp.utils.data.dataset",
        "sitp.utils.data.sampler",
        "sitp.nn.modules",
    ],
)
def test_torch_dotted_submodules_exist(name):
    module = importlib.import_module(name)
    torch_module = importlib.import_module(name.replace("sitp", "torch", 1))
    wanted = {
        "sitp.utils.data.dataloader": ["DataLoader", "default_collate", "get_worker_info"],
        "sitp.utils.data.dataset": [
            "Dataset",
            "IterableDataset",
            "TensorDataset",
            "Subset",
            "ConcatDataset",
            "random_split",
        ],
        "sitp.utils.data.sampler": [
            "Sampler",
            "SequentialSampler",
            "RandomSampler",
            "SubsetRandomSampler",
            "WeightedRandomSampler",
            "BatchSampler",
        ],
        "sitp.nn.modules": ["Module", "Linear", "Embedding"],
    }[name]
    for attr in wanted:
        assert hasattr(torch_module, attr), attr  # the names are torch's
        assert hasattr(module, attr), f"{name} lacks {attr}"
    from sitp.utils.data import DataLoader, Dataset, TensorDataset  # noqa: F401

    assert sud.dataloader.DataLoader is sud.DataLoader


class Squares:
    """A map-style dataset of (x, x**2, dict) samples, the same for both libraries."""

    def __init__(self, lib, n=7):
        self.lib, self.n = lib, n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        x = self.lib.tensor([float(i), -float(i)])
        return x, i * i, {"f": i / 2, "name": f"s{i}", "arr": np.full(2, i, np.int64)}


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(),
        dict(batch_size=3),
        dict(batch_size=3, drop_last=True),
        dict(batch_size=None),
        dict(batch_size=2, num_workers=2, pin_memory=True),
    ],
)
def test_sequential_batches_equal_torch(kwargs):
    s = list(sud.DataLoader(Squares(sitp), **kwargs))
    t = list(tud.DataLoader(Squares(torch), **kwargs))
    assert len(s) == len(t) == len(sud.DataLoader(Squares(sitp), **kwargs))
    for a, b in zip(s, t):
        assert_same_batch(a, b)


def test_given_sampler_and_batch_sampler_equal_torch():
    order = [4, 0, 6, 6, 2]
    for kwargs in [dict(sampler=order, batch_size=2), dict(batch_sampler=[[1, 2], [5], [0, 3, 4]])]:
        s = list(sud.DataLoader(Squares(sitp), **kwargs))
        t = list(tud.DataLoader(Squares(torch), **kwargs))
        assert len(s) == len(t)
        for a, b in zip(s, t):
            assert_same_batch(a, b)


def test_tensor_dataset_batches_equal_torch():
    x = np.arange(20.0, dtype=np.float32).reshape(10, 2)
    y = np.arange(10)
    for kwargs in [
        dict(batch_size=4),
        dict(batch_size=4, drop_last=True),
        dict(batch_sampler=tud.BatchSampler(tud.SequentialSampler(range(10)), 3, False)),
    ]:
        s = list(sud.DataLoader(sud.TensorDataset(sitp.tensor(x), sitp.tensor(y)), **kwargs))
        t = list(tud.DataLoader(tud.TensorDataset(torch.tensor(x), torch.tensor(y)), **kwargs))
        assert len(s) == len(t)
        for a, b in zip(s, t):
            assert_same_batch(a, b)


def test_collate_fn_and_getitems_are_used():
    seen = []

    class Rows(sud.Dataset):
        def __len__(self):
            return 5

        def __getitem__(self, i):
            raise AssertionError("__getitems__ should fetch the batch")

        def __getitems__(self, indices):
            seen.append(list(indices))
            return [i * 10 for i in indices]

    out = list(sud.DataLoader(Rows(), batch_size=2, collate_fn=lambda b: sum(b)))
    assert out == [10, 50, 40] and seen == [[0, 1], [2, 3], [4]]


def test_default_collate_matches_torch():
    Point = collections.namedtuple("Point", "x y")
    cases = [
        [1.5, 2.5],
        [1, 2],
        [True, False],
        ["a", "b"],
        [(1, 2.0), (3, 4.0)],
        [[1, 2], [3, 4]],
        [{"a": 1, "b": [1.0, 2.0]}, {"a": 2, "b": [3.0, 4.0]}],
        [Point(1, 2.0), Point(3, 4.0)],
        [np.array([1.0, 2.0]), np.array([3.0, 4.0])],
        [np.float32(1.0), np.float32(2.0)],
    ]
    for batch in cases:
        assert_same_batch(sud.default_collate(batch), tud.default_collate(batch))
    s = sud.default_collate([sitp.tensor([1.0]), sitp.tensor([2.0])])
    t = tud.default_collate([torch.tensor([1.0]), torch.tensor([2.0])])
    assert_same_batch(s, t)
    p = sud.default_collate([Point(1, 2.0), Point(3, 4.0)])
    assert type(p) is Point


def test_default_collate_errors_like_torch():
    for batch, err in [([[1, 2], [3]], RuntimeError), ([object(), object()], TypeError)]:
        with pytest.raises(err):
            tud.default_collate(batch)
        with pytest.raises(err, match="equal size|default_collate"):
            sud.default_collate(batch)


BAD_LOADERS = [
    dict(shuffle=True, sampler=[0, 1]),
    dict(batch_sampler=[[0]], batch_size=2),
    dict(batch_sampler=[[0]], shuffle=True),
    dict(batch_sampler=[[0]], sampler=[0]),
    dict(batch_sampler=[[0]], drop_last=True),
    dict(batch_size=None, drop_last=True),
    dict(num_workers=-1),
    dict(timeout=-1),
    dict(prefetch_factor=2),
    dict(persistent_workers=True),
    dict(batch_size=0),
    dict(batch_size=-3),
    dict(drop_last="yes"),
]


@pytest.mark.parametrize("kwargs", BAD_LOADERS, ids=lambda k: ",".join(k))
def test_loader_argument_errors_like_torch(kwargs):
    with pytest.raises(ValueError) as t_err:
        tud.DataLoader(list(range(4)), **kwargs)
    with pytest.raises(ValueError) as s_err:
        sud.DataLoader(list(range(4)), **kwargs)
    # the same message, up to sitp's wording of the spaces torch's messages lack
    assert " ".join(str(s_err.value).split())[:40] == " ".join(str(t_err.value).split())[:40]


def test_loader_rejects_unknown_keywords():
    with pytest.raises(TypeError):
        tud.DataLoader([1, 2], batchsize=2)
    with pytest.raises(TypeError, match="batchsize"):
        sud.DataLoader([1, 2], batchsize=2)
    with pytest.raises(TypeError, match="shufle"):
        sud.DataLoader([1, 2], shufle=True)


def test_shuffle_is_a_permutation_reproducible_with_a_generator():
    ds = list(range(23))

    def epoch(g):
        return [
            i
            for b in sud.DataLoader(ds, batch_size=5, shuffle=True, generator=g)
            for i in b.tolist()
        ]

    a = epoch(sitp.Generator().manual_seed(1))
    assert sorted(a) == ds and a != ds
    assert epoch(sitp.Generator().manual_seed(1)) == a
    assert epoch(sitp.Generator().manual_seed(2)) != a
    sitp.manual_seed(5)
    b = epoch(None)
    sitp.manual_seed(5)
    assert epoch(None) == b and sorted(b) == ds  # no generator: the default one's seed


def test_random_sampler_num_samples_and_replacement():
    ds = list(range(10))
    g = sitp.Generator().manual_seed(0)
    s = list(sud.RandomSampler(ds, num_samples=25, generator=g))
    assert len(s) == 25 and sorted(s[:10]) == ds and sorted(s[10:20]) == ds
    assert len(set(s[20:])) == 5  # the last, cut permutation has no repeats
    r = list(sud.RandomSampler(ds, replacement=True, num_samples=1000, generator=g))
    assert len(r) == 1000 == len(sud.RandomSampler(ds, replacement=True, num_samples=1000))
    assert set(r) == set(ds)  # all in range, every one drawn
    assert len(tud.RandomSampler(ds, replacement=True, num_samples=1000)) == 1000
    for kwargs, err in [
        (dict(replacement=1), TypeError),
        (dict(num_samples=0), ValueError),
        (dict(num_samples=2.5), ValueError),
    ]:
        with pytest.raises(err):
            tud.RandomSampler(ds, **kwargs)
        with pytest.raises(err):
            sud.RandomSampler(ds, **kwargs)


def test_subset_random_sampler():
    idx = [3, 9, 11, 20]
    g = sitp.Generator().manual_seed(4)
    s = list(sud.SubsetRandomSampler(idx, generator=g))
    assert sorted(s) == idx and len(sud.SubsetRandomSampler(idx)) == 4


def test_weighted_random_sampler_follows_the_weights():
    w = [0.0, 1.0, 3.0, 0.0]
    g = sitp.Generator().manual_seed(0)
    s = list(sud.WeightedRandomSampler(w, 4000, generator=g))
    counts = np.bincount(s, minlength=4)
    assert counts[0] == counts[3] == 0
    assert abs(counts[2] / counts[1] - 3.0) < 0.4
    no_rep = list(sud.WeightedRandomSampler([1.0, 1.0, 1.0, 0.0], 3, replacement=False))
    assert sorted(no_rep) == [0, 1, 2]
    for args, kwargs in [(([1.0], 0), {}), (([1.0], 1), dict(replacement=0)), (([[1.0]], 1), {})]:
        with pytest.raises(ValueError):
            tud.WeightedRandomSampler(*args, **kwargs)
        with pytest.raises(ValueError):
            sud.WeightedRandomSampler(*args, **kwargs)


@pytest.mark.parametrize("n,bs,drop", [(10, 3, False), (10, 3, True), (9, 3, True), (2, 5, False)])
def test_batch_sampler_equals_torch(n, bs, drop):
    s = sud.BatchSampler(sud.SequentialSampler(range(n)), bs, drop)
    t = tud.BatchSampler(tud.SequentialSampler(range(n)), bs, drop)
    assert list(s) == list(t) and len(s) == len(t)


def test_subset_and_random_split_sizes_like_torch():
    ds = list(range(11))
    for lengths in [[3, 8], [0.5, 0.5], [0.3, 0.3, 0.4]]:
        s = sud.random_split(ds, lengths, generator=sitp.Generator().manual_seed(0))
        t = tud.random_split(ds, lengths, generator=torch.Generator().manual_seed(0))
        assert [len(p) for p in s] == [len(p) for p in t]
        assert sorted(i for p in s for i in p) == ds
    with pytest.raises(ValueError):
        tud.random_split(ds, [3, 3])
    with pytest.raises(ValueError, match="Sum of input lengths"):
        sud.random_split(ds, [3, 3])
    sub = sud.Subset(ds, [5, 1])
    assert [sub[0], sub[1]] == [5, 1] and len(sub) == 2
    cat = sud.ConcatDataset([[0, 1], [2, 3, 4]])
    assert [cat[i] for i in range(len(cat))] == [0, 1, 2, 3, 4] and cat[-1] == 4


def test_iterable_dataset_batches_like_torch():
    class Stream(sud.IterableDataset):
        def __iter__(self):
            return iter(range(7))

    class TStream(tud.IterableDataset):
        def __iter__(self):
            return iter(range(7))

    for kwargs in [dict(batch_size=3), dict(batch_size=3, drop_last=True), dict(batch_size=None)]:
        s = list(sud.DataLoader(Stream(), **kwargs))
        t = list(tud.DataLoader(TStream(), **kwargs))
        assert len(s) == len(t)
        for a, b in zip(s, t):
            assert_same_batch(a, b)
    for kwargs in [dict(shuffle=True), dict(sampler=[0]), dict(batch_sampler=[[0]])]:
        with pytest.raises(ValueError):
            tud.DataLoader(TStream(), **kwargs)
        with pytest.raises(ValueError, match="IterableDataset"):
            sud.DataLoader(Stream(), **kwargs)


def test_workers_run_in_process_with_the_same_batches():
    calls = []
    ds = list(range(6))
    plain = [b.tolist() for b in sud.DataLoader(ds, batch_size=4)]
    loader = sud.DataLoader(
        ds,
        batch_size=4,
        num_workers=3,
        worker_init_fn=calls.append,
        prefetch_factor=4,
        persistent_workers=True,
    )
    assert [b.tolist() for b in loader] == plain
    assert calls == [0, 1, 2] and sud.get_worker_info() is None

"""Claims of chapter 2.1 and 2.2 that the pages check against numpy, checked here
against PyTorch too: strides and offsets of views, which views fail, broadcasting,
promotion, and the semantics of gathers and scatters."""

import math

import numpy as np
import pytest

import sitp
from sitp.strides import view_strides

torch = pytest.importorskip("torch")


def _pair(shape):
    n = math.prod(shape)
    return sitp.arange(n).view(*shape), torch.arange(n).view(*shape)


VIEWS = {
    "transpose": lambda x: x.transpose(0, -1),
    "permute": lambda x: x.permute(2, 0, 1),
    "permute-slice": lambda x: x.permute(2, 0, 1)[1:, :, ::2],
    "slice": lambda x: x[1:, ::2],
    "int-index": lambda x: x[1],
    "column": lambda x: x[:, 2],
    "unsqueeze": lambda x: x.unsqueeze(1),
    "expand": lambda x: x[..., :1].expand(*x.shape),
    "split-view": lambda x: x.transpose(0, 1).view(2, 2, *x.shape[:1], *x.shape[2:]),
}


def _view_applies(name, shape):
    """permute(2, 0, 1) needs three dimensions; split-view splits a dim 1 of size 4."""
    if name in ("permute", "permute-slice"):
        return len(shape) == 3
    if name == "split-view":
        return shape[1] == 4
    return True


# Each view on each shape it applies to (the others are not collected).
VIEW_CASES = [(n, s) for n in sorted(VIEWS) for s in [(3, 4), (2, 3, 4)] if _view_applies(n, s)]


def test_every_view_is_checked_on_some_shape():
    assert {name for name, _ in VIEW_CASES} == set(VIEWS)


@pytest.mark.parametrize("name, shape", VIEW_CASES, ids=[f"{n}-{s}" for n, s in VIEW_CASES])
def test_views_have_pytorch_metadata(name, shape):
    xs, xt = _pair(shape)
    ys, yt = VIEWS[name](xs), VIEWS[name](xt)
    assert tuple(ys.shape) == tuple(yt.shape)
    assert ys.storage_offset() == yt.storage_offset()
    assert ys.is_contiguous() == yt.is_contiguous()
    # strides of size-1 dims are irrelevant and may differ
    assert [s for s, n in zip(ys.stride(), ys.shape) if n != 1] == [
        s for s, n in zip(yt.stride(), yt.shape) if n != 1
    ]
    assert ys.tolist() == yt.tolist()


@pytest.mark.parametrize(
    "make, shape",
    [
        (lambda x: x.T, (12,)),
        (lambda x: x.T, (2, 2, 3)),
        (lambda x: x[:, :2], (6,)),
        (lambda x: x[1:], (8,)),
        (lambda x: x[:, 1:3], (3, 2, 1)),
        (lambda x: x[:, :2], (3, 1, 2)),
    ],
)
def test_view_succeeds_exactly_when_pytorch_view_does(make, shape):
    xs, xt = _pair((3, 4))
    ys, yt = make(xs), make(xt)
    strides = view_strides(ys.shape, ys.stride(), shape)
    try:
        expected = yt.view(shape).stride()
    except RuntimeError:
        expected = None
    assert strides == (None if expected is None else tuple(expected))


def test_promotion_matches_pytorch():
    cases = [
        (
            sitp.tensor([1, 2]),
            sitp.tensor([0.5, 1.5]),
            torch.tensor([1, 2]),
            torch.tensor([0.5, 1.5]),
        ),
        (
            sitp.ones(2),
            sitp.ones(2, dtype=sitp.float64),
            torch.ones(2),
            torch.ones(2, dtype=torch.float64),
        ),
        (
            sitp.ones(2),
            sitp.tensor(1.0, dtype=sitp.float64),
            torch.ones(2),
            torch.tensor(1.0, dtype=torch.float64),
        ),
    ]
    for a, b, ta, tb in cases:
        assert (a + b).dtype.name == str((ta + tb).dtype).removeprefix("torch.")
    assert (sitp.ones(2) * 2.5).dtype is sitp.float32
    assert str((torch.ones(2) * 2.5).dtype) == "torch.float32"
    assert (sitp.tensor([1, 2]) / sitp.tensor([2, 2])).dtype is sitp.float32


def test_scatter_semantics_match_pytorch():
    idx = [0, 1, 1, 4]
    z, zt = sitp.zeros(5), torch.zeros(5)
    z[sitp.tensor(idx)] += 1.0
    zt[torch.tensor(idx)] += 1.0
    assert z.tolist() == zt.tolist()
    a, at = sitp.zeros(5), torch.zeros(5)
    a.index_put_((sitp.tensor(idx),), sitp.tensor([1.0, 2.0, 3.0, 4.0]), accumulate=True)
    at.index_put_((torch.tensor(idx),), torch.tensor([1.0, 2.0, 3.0, 4.0]), accumulate=True)
    assert a.tolist() == at.tolist()


def test_softmax_with_masks_matches_pytorch():
    x = np.array([[1000.0, 1001.0, -math.inf], [-math.inf] * 3, [0.0, 1.0, 2.0]], np.float32)
    for log in (False, True):
        got = (sitp.tensor(x).log_softmax(-1) if log else sitp.tensor(x).softmax(-1)).numpy()
        want = (torch.tensor(x).log_softmax(-1) if log else torch.tensor(x).softmax(-1)).numpy()
        np.testing.assert_allclose(got, want, rtol=1e-6, equal_nan=True)

"""The losses of sitp.nn (modules in sitp.nn.modules.loss, functions in sitp.nn.functional)
against torch 2.13: the same inputs, every reduction, the loss and the gradients of its
input (and target where torch differentiates it), float64, and torch's errors."""

import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import sitp
from helpers import np_of
from sitp import nn
from sitp.nn import functional as F

REDUCTIONS = ["mean", "sum", "none"]


def rng(seed):
    return np.random.default_rng(seed)


def pair(a, grad=True):
    """The same array as a sitp and a torch tensor (float ones require grad)."""
    g = grad and a.dtype.kind == "f"
    return sitp.tensor(a, requires_grad=g), torch.tensor(a, requires_grad=g)


def close(s, t, rtol=1e-10, atol=1e-12):
    tt = t.detach().numpy()
    ss = np_of(s)
    assert ss.shape == tt.shape, f"shape {ss.shape} vs torch {tt.shape}"
    np.testing.assert_allclose(ss, tt, rtol=rtol, atol=atol)


def both(sfn, tfn, arrays, grads=None):
    """Run sitp's and torch's loss on the same arrays; compare the loss and the gradients
    of the float arrays (``grads``: which positions; all floats by default)."""
    ps = [
        pair(a, grad=grads is None or i in grads) if a is not None else (None, None)
        for i, a in enumerate(arrays)
    ]
    s_out = sfn(*[p[0] for p in ps])
    t_out = tfn(*[p[1] for p in ps])
    close(s_out, t_out)
    gen = rng(99).standard_normal(tuple(t_out.shape))
    s_out.backward(sitp.tensor(gen))
    t_out.backward(torch.tensor(gen))
    for s, t in ps:
        if t is not None and t.requires_grad:
            close(s.grad, t.grad)


# ------------------------------------------------------------------ elementwise
ELEMENTWISE = [
    ("l1_loss", "L1Loss", {}),
    ("mse_loss", "MSELoss", {}),
    ("smooth_l1_loss", "SmoothL1Loss", {"beta": 1.0}),
    ("smooth_l1_loss", "SmoothL1Loss", {"beta": 0.3}),
    ("smooth_l1_loss", "SmoothL1Loss", {"beta": 0.0}),
    ("huber_loss", "HuberLoss", {"delta": 1.0}),
    ("huber_loss", "HuberLoss", {"delta": 0.4}),
]


@pytest.mark.parametrize("fn, cls, kw", ELEMENTWISE)
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_elementwise_losses_match_torch(fn, cls, kw, reduction):
    r = rng(1)
    x, y = r.standard_normal((3, 5, 7)), r.standard_normal((3, 5, 7))
    both(
        lambda a, b: getattr(F, fn)(a, b, reduction=reduction, **kw),
        lambda a, b: getattr(TF, fn)(a, b, reduction=reduction, **kw),
        [x, y],
    )
    both(
        lambda a, b: getattr(nn, cls)(reduction=reduction, **kw)(a, b),
        lambda a, b: getattr(torch.nn, cls)(reduction=reduction, **kw)(a, b),
        [x, y],
    )


@pytest.mark.parametrize("fn", ["l1_loss", "mse_loss", "huber_loss"])
def test_elementwise_weight_matches_torch(fn):
    r = rng(2)
    x, y, w = r.standard_normal((4, 6)), r.standard_normal((4, 6)), r.random((4, 6))
    for red in REDUCTIONS:
        both(
            lambda a, b, c: getattr(F, fn)(a, b, reduction=red, weight=c),
            lambda a, b, c: getattr(TF, fn)(a, b, reduction=red, weight=c),
            [x, y, w],
            grads={0, 1},
        )


def test_elementwise_broadcast_warns_like_torch_and_bad_shapes_raise():
    r = rng(3)
    x, y = r.standard_normal((4, 3)), r.standard_normal((1, 3))
    for fn in ["l1_loss", "smooth_l1_loss", "huber_loss"]:
        with pytest.warns(UserWarning, match="different to the input size"):
            s = getattr(F, fn)(sitp.tensor(x), sitp.tensor(y))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            t = getattr(TF, fn)(torch.tensor(x), torch.tensor(y))
        close(s, t)
        with pytest.raises(RuntimeError, match=r"\(4, 3\).*\(5,\)"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            getattr(F, fn)(sitp.tensor(x), sitp.zeros(5, dtype=sitp.float64))
    with pytest.raises(RuntimeError, match="negative values for beta"):
        F.smooth_l1_loss(sitp.tensor(x), sitp.tensor(x), beta=-1.0)
    with pytest.raises(RuntimeError, match="non-positive values for delta"):
        F.huber_loss(sitp.tensor(x), sitp.tensor(x), delta=0.0)
    with pytest.raises(ValueError, match="Weights and input must have the same size"):
        F.l1_loss(sitp.tensor(x), sitp.tensor(x), weight=sitp.ones(3, dtype=sitp.float64))
    with pytest.raises(ValueError, match="not a valid value for reduction"):
        nn.L1Loss(reduction="avg")(sitp.tensor(x), sitp.tensor(x))


# ------------------------------------------------------------------ nll_loss
def _logp(r, shape):
    return torch.tensor(r.standard_normal(shape)).log_softmax(1).numpy()


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("shape", [(6, 5), (3, 5, 7), (3, 5, 4, 2)])
def test_nll_loss_matches_torch(reduction, weighted, shape):
    r = rng(4)
    x = _logp(r, shape)
    t = r.integers(0, shape[1], (shape[0],) + shape[2:])
    t.flat[::4] = -100  # ignored entries
    w = r.random(shape[1]) + 0.5 if weighted else None
    kw = dict(reduction=reduction)
    both(
        lambda a, b, c: F.nll_loss(a, b, weight=c, **kw),
        lambda a, b, c: TF.nll_loss(a, b, weight=c, **kw),
        [x, t, w],
        grads={0},
    )
    both(
        lambda a, b, c: nn.NLLLoss(weight=c, **kw)(a, b),
        lambda a, b, c: torch.nn.NLLLoss(weight=c, **kw)(a, b),
        [x, t, w],
        grads={0},
    )


def test_nll_loss_ignore_index_unbatched_and_all_ignored():
    r = rng(5)
    x = _logp(r, (6, 4))
    t = np.array([1, 3, 3, 0, 2, 3])
    both(
        lambda a, b: nn.NLLLoss(ignore_index=3)(a, b),
        lambda a, b: torch.nn.NLLLoss(ignore_index=3)(a, b),
        [x, t],
    )
    both(lambda a, b: F.nll_loss(a, b), lambda a, b: TF.nll_loss(a, b), [x[0], np.array(2)])
    s = F.nll_loss(sitp.tensor(x), sitp.tensor(np.full(6, -100)))
    tt = TF.nll_loss(torch.tensor(x), torch.tensor(np.full(6, -100)))
    assert np.isnan(s.item()) and np.isnan(tt.item())


def test_nll_loss_errors_like_torch():
    x = sitp.randn(4, 5)
    with pytest.raises(
        ValueError, match=r"Expected input batch_size \(4\) to match target batch_size \(3\)"
    ):
        F.nll_loss(x, sitp.tensor([0, 1, 2]))
    with pytest.raises(IndexError, match=r"Target 5 is out of bounds"):
        nn.NLLLoss()(x, sitp.tensor([0, 1, 5, 2]))
    with pytest.raises(IndexError, match=r"Target -1 is out of bounds"):
        nn.NLLLoss()(x, sitp.tensor([0, 1, -1, 2]))
    with pytest.raises(RuntimeError, match=r"expects a target of shape \(2, 3\), got \(2, 4\)"):
        F.nll_loss(sitp.randn(2, 5, 3), sitp.zeros(2, 4, dtype=sitp.int64))
    with pytest.raises(RuntimeError, match="int64"):
        F.nll_loss(x, sitp.zeros(4))
    with pytest.raises(RuntimeError, match=r"for all 5 classes.*shape: \[3\]"):
        F.nll_loss(x, sitp.tensor([0, 1, 2, 3]), weight=sitp.ones(3))


# --------------------------------------------------------- BCE with logits
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_bce_with_logits_matches_torch(reduction):
    r = rng(6)
    x = r.standard_normal((3, 5)) * 4
    y = r.random((3, 5))
    w, pw = r.random((3, 5)) + 0.5, r.random(5) * 3
    kw = dict(reduction=reduction)
    for weight, pos in [(None, None), (w, None), (None, pw), (w, pw)]:
        both(
            lambda a, b, c, d: F.binary_cross_entropy_with_logits(a, b, c, pos_weight=d, **kw),
            lambda a, b, c, d: TF.binary_cross_entropy_with_logits(a, b, c, pos_weight=d, **kw),
            [x, y, weight, pos],
            grads={0, 1},
        )
        both(
            lambda a, b, c, d: nn.BCEWithLogitsLoss(c, pos_weight=d, **kw)(a, b),
            lambda a, b, c, d: torch.nn.BCEWithLogitsLoss(c, pos_weight=d, **kw)(a, b),
            [x, y, weight, pos],
            grads={0, 1},
        )
    with pytest.raises(
        ValueError, match=r"Target size \(\(3, 4\)\) must be the same as input size"
    ):
        nn.BCEWithLogitsLoss()(sitp.tensor(x), sitp.zeros(3, 4, dtype=sitp.float64))


def test_loss_buffers_are_in_state_dict_like_torch():
    w, pw = np.ones(5), np.full(5, 2.0)
    s = nn.BCEWithLogitsLoss(sitp.tensor(w), pos_weight=sitp.tensor(pw))
    t = torch.nn.BCEWithLogitsLoss(torch.tensor(w), pos_weight=torch.tensor(pw))
    assert list(s.state_dict()) == list(t.state_dict())
    assert list(nn.NLLLoss(sitp.tensor(w)).state_dict()) == list(
        torch.nn.NLLLoss(torch.tensor(w)).state_dict()
    )


# ------------------------------------------------------------------ kl_div
@pytest.mark.parametrize("reduction", ["batchmean", "sum", "none", "mean"])
@pytest.mark.parametrize("log_target", [False, True])
def test_kl_div_matches_torch(reduction, log_target):
    r = rng(7)
    x = _logp(r, (4, 6))
    p = torch.tensor(r.standard_normal((4, 6)) * 2).softmax(1).numpy()
    p[0, 1] = 0.0  # a zero-probability target counts 0
    y = np.log(p + 1e-3) if log_target else p
    kw = dict(reduction=reduction, log_target=log_target)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # 'mean' warns in both
        both(
            lambda a, b: F.kl_div(a, b, **kw),
            lambda a, b: TF.kl_div(a, b, **kw),
            [x, y],
            grads={0, 1} if log_target else {0},
        )
        both(
            lambda a, b: nn.KLDivLoss(**kw)(a, b),
            lambda a, b: torch.nn.KLDivLoss(**kw)(a, b),
            [x, y],
            grads={0},
        )


def test_kl_div_mean_warns_broadcasts_silently_and_module_path():
    x = sitp.zeros(2, 3)
    with pytest.warns(UserWarning, match="batchmean"):
        F.kl_div(x, x)
    r = rng(8)
    a, b = r.standard_normal((4, 3)), r.random((1, 3))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # neither library warns about the broadcast
        both(
            lambda a, b: F.kl_div(a, b, reduction="sum"),
            lambda a, b: TF.kl_div(a, b, reduction="sum"),
            [a, b],
            grads={0},
        )
    with pytest.raises(RuntimeError, match=r"\(4, 3\) and \(5,\) cannot be broadcast"):
        F.kl_div(sitp.zeros(4, 3), sitp.zeros(5), reduction="sum")
    assert nn.NLLLoss is sitp.nn.modules.loss.NLLLoss
    assert nn.KLDivLoss.__module__ == "sitp.nn.modules.loss"

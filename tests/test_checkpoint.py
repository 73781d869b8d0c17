"""sitp.utils.checkpoint: activation recomputation against torch.utils.checkpoint.

The gradients through a checkpointed stack equal those without it (and torch's, with the
same weights); with dropout the recomputation draws the same masks; the activations the
graph keeps shrink to the checkpointed pieces' inputs.
"""

from __future__ import annotations

import inspect

import numpy as np
import pytest
import torch
import torch.utils.checkpoint

import sitp
from sitp.utils.checkpoint import checkpoint, checkpoint_sequential, saved_tensor_bytes

WIDTH, DEPTH, BATCH = 16, 6, 8


def _stack(lib, dropout=0.0):
    layers = []
    for _ in range(DEPTH):
        layers += [lib.nn.Linear(WIDTH, WIDTH), lib.nn.Tanh()]
        if dropout:
            layers.append(lib.nn.Dropout(dropout))
    return lib.nn.Sequential(*layers)


def _twins():
    sitp.manual_seed(0)
    ours = _stack(sitp).double()
    theirs = _stack(torch).double()
    theirs.load_state_dict({k: torch.tensor(v.numpy()) for k, v in ours.state_dict().items()})
    return ours, theirs


def _grads(model):
    return [p.grad.numpy().copy() for p in model.parameters()]


def test_signatures_match_torch():
    for ours, theirs in (
        (checkpoint, torch.utils.checkpoint.checkpoint),
        (checkpoint_sequential, torch.utils.checkpoint.checkpoint_sequential),
    ):
        assert set(inspect.signature(theirs).parameters) <= set(
            inspect.signature(ours).parameters
        ), ours.__name__
    assert sitp.utils.checkpoint.checkpoint is checkpoint


@pytest.mark.parametrize("segments", [1, 2, 3])
def test_gradients_equal_torch_and_no_checkpoint(segments):
    ours, theirs = _twins()
    x = np.random.default_rng(1).standard_normal((BATCH, WIDTH))
    xs, xt = sitp.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    half = len(ours) // 2

    def first_half_ours(h):
        return ours[:half](h)

    # one checkpoint around the first half, checkpoint_sequential around the second
    h = checkpoint(first_half_ours, xs, use_reentrant=False)
    checkpoint_sequential(ours[half:], segments, h, use_reentrant=False).square().sum().backward()
    ht = torch.utils.checkpoint.checkpoint(lambda h: theirs[:half](h), xt, use_reentrant=False)
    torch.utils.checkpoint.checkpoint_sequential(
        theirs[half:], segments, ht, use_reentrant=False
    ).square().sum().backward()
    for a, b in zip(ours.parameters(), theirs.parameters()):
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(xs.grad.numpy(), xt.grad.numpy(), rtol=1e-10, atol=1e-12)
    # and bit for bit the gradients without checkpointing: the same ops on the same values
    g_ckpt, gx = _grads(ours), xs.grad.numpy().copy()
    ours.zero_grad()
    x2 = sitp.tensor(x, requires_grad=True)
    ours(x2).square().sum().backward()
    for a, b in zip(g_ckpt, _grads(ours)):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(gx, x2.grad.numpy())


@pytest.mark.parametrize("lib", ["sitp", "torch"])
def test_dropout_masks_repeat(lib):
    """With preserve_rng_state (the default) the recomputation draws the forward's masks:
    the gradients equal those of the same seed without checkpointing. Torch, the same."""
    L = sitp if lib == "sitp" else torch
    ck = sitp.utils.checkpoint if lib == "sitp" else torch.utils.checkpoint
    L.manual_seed(0)
    model = _stack(L, dropout=0.3).double()
    x = L.tensor(np.random.default_rng(2).standard_normal((BATCH, WIDTH)))
    L.manual_seed(5)
    ck.checkpoint_sequential(model, 3, x, use_reentrant=False).sum().backward()
    with_ckpt = [p.grad.numpy().copy() for p in model.parameters()]
    model.zero_grad()
    L.manual_seed(5)
    model(x).sum().backward()
    for a, p in zip(with_ckpt, model.parameters()):
        np.testing.assert_array_equal(a, p.grad.numpy())
    # without preserving the state the second draw differs, and so do the gradients
    model.zero_grad()
    L.manual_seed(5)
    ck.checkpoint_sequential(
        model, 3, x, use_reentrant=False, preserve_rng_state=False
    ).sum().backward()
    assert any(not np.array_equal(a, p.grad.numpy()) for a, p in zip(with_ckpt, model.parameters()))


def test_parameters_get_gradients_when_the_input_needs_none():
    ours, _ = _twins()
    x = sitp.tensor(np.ones((2, WIDTH)))  # requires_grad False: the parameters still learn
    checkpoint(ours, x, use_reentrant=False).sum().backward()
    assert all(p.grad is not None for p in ours.parameters())


def test_saved_activations_shrink():
    """Without checkpointing the graph keeps every layer's activations; checkpointed in
    k pieces it keeps the pieces' inputs and the last piece's activations."""
    ours, _ = _twins()
    x = sitp.tensor(np.random.default_rng(3).standard_normal((BATCH, WIDTH)))
    plain = saved_tensor_bytes(ours(x).square().sum())
    kept = {
        k: saved_tensor_bytes(checkpoint_sequential(ours, k, x).square().sum()) for k in (2, 3, 6)
    }
    act = BATCH * WIDTH * 8  # one float64 activation
    assert plain >= 2 * DEPTH * act  # each Linear keeps its input, each Tanh its output
    for k, b in kept.items():
        assert b < plain, (k, b, plain)
    # k pieces keep k - 1 inputs plus the last piece's activations: fewest near sqrt(depth)
    assert kept[3] < kept[2] and kept[3] < kept[6], kept
    # and it never changes the loss
    np.testing.assert_array_equal(
        ours(x).detach().numpy(), checkpoint_sequential(ours, 3, x).detach().numpy()
    )


def test_refusals():
    with pytest.raises(NotImplementedError, match="debug"):
        checkpoint(lambda t: t, sitp.ones(1), debug=True)
    with pytest.raises(TypeError, match="callable"):
        checkpoint(3, sitp.ones(1))
    with pytest.raises(ValueError, match="segments"):
        checkpoint_sequential(_stack(sitp), 0, sitp.ones(1, WIDTH))

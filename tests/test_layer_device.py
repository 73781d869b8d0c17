"""A layer built with ``device=`` puts its parameters and buffers there, as in torch
(``device="cuda"`` runs in numba's CUDA simulator when no GPU answers), and computes
the same outputs as the layer built on the CPU from the same seed."""

import numpy as np
import pytest
import torch

import sitp

LAYERS = {
    "Linear": (lambda L, **k: L.nn.Linear(4, 3, **k), (2, 4), "float"),
    "Conv1d": (lambda L, **k: L.nn.Conv1d(2, 3, 3, **k), (2, 2, 5), "float"),
    "LayerNorm": (lambda L, **k: L.nn.LayerNorm(4, **k), (2, 4), "float"),
    "BatchNorm1d": (lambda L, **k: L.nn.BatchNorm1d(4, **k), (3, 4), "float"),
    "Embedding": (lambda L, **k: L.nn.Embedding(5, 3, padding_idx=1, **k), (2, 3), "index"),
    "RNNCell": (lambda L, **k: L.nn.RNNCell(4, 3, **k), (2, 4), "float"),
    "GRUCell": (lambda L, **k: L.nn.GRUCell(4, 3, **k), (2, 4), "float"),
}


def _input(lib, shape, kind, device=None):
    rng = np.random.default_rng(0)
    arr = (
        rng.integers(0, 5, shape)
        if kind == "index"
        else rng.standard_normal(shape).astype(np.float32)
    )
    return lib.tensor(arr, device=device)


@pytest.mark.parametrize("name", sorted(LAYERS))
def test_device_cpu_is_accepted_like_torch(name):
    make, _, _ = LAYERS[name]
    for lib in (torch, sitp):
        m = make(lib, device="cpu")
        assert all(t.device.type == "cpu" for t in [*m.parameters(), *m.buffers()])


@pytest.mark.parametrize("name", sorted(LAYERS))
def test_device_cuda_puts_the_state_there(name):
    make, shape, kind = LAYERS[name]
    sitp.manual_seed(0)
    cpu = make(sitp)
    sitp.manual_seed(0)
    gpu = make(sitp, device="cuda")
    state = [*gpu.parameters(), *gpu.buffers()]
    assert state and all(t.device.type == "cuda" for t in state), [t.device for t in state]
    for a, b in zip(cpu.state_dict().values(), gpu.state_dict().values()):
        np.testing.assert_array_equal(a.numpy(), b.cpu().numpy())
    out_cpu = cpu(_input(sitp, shape, kind))
    out_gpu = gpu(_input(sitp, shape, kind, device="cuda"))
    assert out_gpu.device.type == "cuda"
    np.testing.assert_allclose(
        out_gpu.detach().cpu().numpy(), out_cpu.detach().numpy(), rtol=1e-5, atol=1e-6
    )


def test_unknown_device_is_refused():
    with pytest.raises((RuntimeError, ValueError)):
        torch.nn.Linear(2, 2, device="tpu0")
    with pytest.raises((RuntimeError, ValueError)):
        sitp.nn.Linear(2, 2, device="tpu0")

"""Regressions found with torch-style code: ``triu``/``tril`` of tensors holding inf or
nan, and ``load_state_dict`` of CPU tensors into a module on another device (the CUDA
simulator stands in for a GPU when none answers)."""

import math

import numpy as np
import pytest
import torch

import sitp


# ------------------------------------------------------------------ triu / tril
@pytest.mark.parametrize("method", ["triu", "tril"])
@pytest.mark.parametrize("diagonal", [-1, 0, 1, 3])
@pytest.mark.parametrize("fill", [-math.inf, math.inf, math.nan])
def test_triangle_zeroes_inf_and_nan_as_torch(method, diagonal, fill):
    # the causal-mask idiom: full((T, T), -inf).triu(1) is 0 below the diagonal
    for shape, dtype in (((3, 3), "float32"), ((2, 3, 4), "float64")):
        x = np.full(shape, fill, dtype=dtype)
        x[..., 0, -1] = 2.5  # a finite entry, kept or zeroed like the others
        ours = getattr(sitp.tensor(x), method)(diagonal)
        theirs = getattr(torch.tensor(x), method)(diagonal)
        assert ours.dtype == getattr(sitp, dtype)
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())


@pytest.mark.parametrize("method", ["triu", "tril"])
def test_triangle_gradient_and_integer_tensors_as_torch(method):
    x = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)
    w = np.random.default_rng(1).standard_normal((2, 3, 4)).astype(np.float32)
    xs, xt = sitp.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    (getattr(xs, method)(1) * sitp.tensor(w)).sum().backward()
    (getattr(xt, method)(1) * torch.tensor(w)).sum().backward()
    np.testing.assert_array_equal(xs.grad.numpy(), xt.grad.numpy())
    ints = np.arange(12).reshape(3, 4)
    for dtype in (np.int64, np.bool_):
        ours = getattr(sitp.tensor(ints.astype(dtype)), method)(-1)
        theirs = getattr(torch.tensor(ints.astype(dtype)), method)(-1)
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    with pytest.raises(RuntimeError, match=f"{method}: input tensor must have at least 2"):
        getattr(sitp.ones(3), method)()


# ------------------------------------------------------- load_state_dict across devices
def test_load_state_dict_copies_cpu_tensors_into_a_module_on_the_gpu():
    sitp.manual_seed(0)
    saved = sitp.nn.Linear(3, 2)
    sitp.manual_seed(1)
    model = sitp.nn.Linear(3, 2).to("cuda")
    model.load_state_dict(saved.state_dict())  # CPU tensors into cuda parameters
    assert all(p.device.type == "cuda" for p in model.parameters())
    # torch (CPU here) loads the same numbers
    ref = torch.nn.Linear(3, 2)
    ref.load_state_dict({k: torch.tensor(v.numpy()) for k, v in saved.state_dict().items()})
    for name, p in model.named_parameters():
        np.testing.assert_array_equal(p.detach().cpu().numpy(), getattr(ref, name).detach().numpy())
    # and back: the GPU model's state dict into a CPU module
    cpu_model = sitp.nn.Linear(3, 2)
    cpu_model.load_state_dict(model.state_dict())
    assert cpu_model.weight.device.type == "cpu"
    np.testing.assert_array_equal(cpu_model.weight.detach().numpy(), saved.weight.detach().numpy())

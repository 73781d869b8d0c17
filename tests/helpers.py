"""Shared helpers for differential tests against numpy and PyTorch."""

from __future__ import annotations

import numpy as np
import torch

import sitp


def np_of(t: sitp.Tensor) -> np.ndarray:
    return np.array(t.detach().numpy())


def pair(arr: np.ndarray, requires_grad: bool = False):
    """The same data as a sitp tensor and a torch tensor."""
    s = sitp.tensor(arr)
    t = torch.tensor(arr)
    if requires_grad:
        s.requires_grad_(True)
        t.requires_grad_(True)
    return s, t


def assert_close(s, t, rtol=1e-5, atol=1e-6):
    """Compare a sitp tensor (or number) with a torch tensor (or number)."""
    if isinstance(t, torch.Tensor):
        tt = t.detach().numpy()
        ss = np_of(s)
        assert ss.shape == tt.shape, f"shape {ss.shape} vs torch {tt.shape}"
        if tt.dtype == np.bool_ or np.issubdtype(tt.dtype, np.integer):
            np.testing.assert_array_equal(ss, tt)
        else:
            np.testing.assert_allclose(ss, tt, rtol=rtol, atol=atol)
    else:
        np.testing.assert_allclose(s, t, rtol=rtol, atol=atol)


def non_contiguous(arr: np.ndarray, kind: int):
    """A sitp view with the values of ``arr`` but non-trivial strides.

    kind 0: plain; 1: a transpose of a contiguous copy; 2: a slice with a step
    of a bigger tensor.
    """
    if kind == 0 or arr.ndim == 0:
        return sitp.tensor(arr)
    if kind == 1:
        base = sitp.tensor(np.ascontiguousarray(np.swapaxes(arr, 0, -1)))
        return base.transpose(0, -1)
    big = np.zeros((arr.shape[0] * 2,) + arr.shape[1:], arr.dtype)
    big[::2] = arr
    return sitp.tensor(big)[::2]


def host_device_copies(monkeypatch, device_array_type):
    """A list that records "h2d"/"d2h" for every host<->device copy from now on.

    Wraps numba's ``cuda.to_device`` and the device array type's ``copy_to_host``;
    call ``monkeypatch.undo()`` to stop recording.
    """
    from numba import cuda

    copies = []
    real_to_device = cuda.to_device
    monkeypatch.setattr(
        cuda, "to_device", lambda *a, **k: copies.append("h2d") or real_to_device(*a, **k)
    )
    real_to_host = device_array_type.copy_to_host
    monkeypatch.setattr(
        device_array_type,
        "copy_to_host",
        lambda self, *a, **k: copies.append("d2h") or real_to_host(self, *a, **k),
    )
    return copies

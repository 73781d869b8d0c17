"""PyTorch-style ``repr`` for tensors (``tensor([[1., 2.], [3., 4.]])``)."""

from __future__ import annotations

import numpy as np

from sitp.dtypes import bool_, float32, int64


def _float_formatter(values: np.ndarray):
    finite = values[np.isfinite(values)]
    if finite.size == 0:
        return lambda v: str(v).replace("inf", "inf")
    amax = np.abs(finite).max()
    nonzero = np.abs(finite[finite != 0])
    amin = nonzero.min() if nonzero.size else 0.0
    integral = np.all(finite == np.round(finite))
    if integral and amax < 1e8:
        return lambda v: f"{v:.0f}." if np.isfinite(v) else str(v)
    if amax >= 1e8 or (amin and amin < 1e-4) or (amin and amax / amin > 1e3 and amax >= 1e3):
        return lambda v: f"{v:.4e}"
    return lambda v: f"{v:.4f}"


def tensor_repr(t) -> str:
    a = t._np()
    if t.dtype.is_floating_point:
        fmt = _float_formatter(a.astype(np.float64).reshape(-1)) if a.size else str
        body = np.array2string(
            a,
            separator=", ",
            prefix="tensor(",
            threshold=1000,
            edgeitems=3,
            max_line_width=80,
            formatter={"float_kind": fmt},
        )
    elif t.dtype is bool_:
        body = np.array2string(
            a,
            separator=", ",
            prefix="tensor(",
            threshold=1000,
            formatter={"bool": lambda v: "True" if v else "False"},
        )
    else:
        body = np.array2string(a, separator=", ", prefix="tensor(", threshold=1000)
    extras = []
    if a.size == 0 and a.ndim > 1:
        extras.append(f"size={tuple(t.shape)}")
    if t.dtype not in (float32, int64, bool_) or (a.size == 0 and t.dtype is not float32):
        extras.append(f"dtype=sitp.{t.dtype.name}")
    if t.grad_fn is not None:
        extras.append(f"grad_fn=<{t.grad_fn.name()}>")
    elif t.requires_grad:
        extras.append("requires_grad=True")
    return "tensor(" + body + "".join(", " + e for e in extras) + ")"

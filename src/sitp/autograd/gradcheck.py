"""Gradient checking: the engine's backward against central differences (chapter 4.1).

Every ``backward`` in ``sitp/autograd/derivatives.py`` was written by hand, and a wrong one
fails silently: training still runs, only worse. :func:`gradcheck` catches it
by computing each derivative twice, once by the engine (reverse mode, one
backward pass per output entry) and once numerically (two forward passes per
input entry, in float64), and comparing them entry by entry::

    numerical  J[i, j] ~ (f(x + eps e_j)[i] - f(x - eps e_j)[i]) / (2 eps)
    analytical J[i, j] = (e_i^T J)[j]        (backward with gradient=e_i)

:func:`numerical_grad` is the first formula alone, for a scalar function: the
teaching version of the same idea.
"""

from __future__ import annotations

import warnings

import numpy as np

from sitp._tensor import creation
from sitp._tensor.tensor import Tensor
from sitp.autograd.engine import grad
from sitp.autograd.grad_mode import enable_grad, no_grad

__all__ = [
    "GradcheckError",
    "gradcheck",
    "numerical_grad",
    "numerical_jacobian",
    "analytical_jacobian",
]


class GradcheckError(RuntimeError):
    """Raised by :func:`gradcheck` when the engine's and the numerical derivatives differ."""


# --8<-- [start:numerical_grad]
def numerical_grad(f, x, eps: float = 1e-6):
    """The gradient of a scalar function ``f`` at ``x`` by central differences.

    ``df/dx_j ~ (f(x + eps e_j) - f(x - eps e_j)) / (2 eps)``: two evaluations
    of ``f`` per entry of ``x``, with an error of order ``eps**2`` (truncation)
    plus order ``machine epsilon / eps`` (round-off).

    Args:
        f: a function of one argument returning a number or a one-entry tensor.
        x: a Python float, or a tensor (use float64: float32 round-off swamps
            any ``eps`` small enough to be accurate).
        eps: the step.

    Returns:
        A float if ``x`` is a float, else a tensor of ``x``'s shape and dtype.

    >>> import math
    >>> round(numerical_grad(math.sin, 0.0), 8)
    1.0
    >>> import sitp
    >>> x = sitp.tensor([1.0, 2.0, 3.0], dtype=sitp.float64)
    >>> numerical_grad(lambda t: (t * t).sum(), x)
    tensor([2.0000, 4.0000, 6.0000], dtype=sitp.float64)
    """
    if not _is_tensor(x):
        return (float(f(x + eps)) - float(f(x - eps))) / (2 * eps)
    base = x.detach().numpy().astype(np.float64).copy()
    flat = base.reshape(-1)
    grad = np.zeros(flat.shape, dtype=np.float64)
    for j in range(flat.size):
        old = flat[j]
        flat[j] = old + eps
        up = float(f(creation.tensor(base, dtype=x.dtype)))
        flat[j] = old - eps
        down = float(f(creation.tensor(base, dtype=x.dtype)))
        flat[j] = old
        grad[j] = (up - down) / (2 * eps)
    return creation.tensor(grad.reshape(base.shape), dtype=x.dtype)


# --8<-- [end:numerical_grad]


def _is_tensor(x) -> bool:
    return isinstance(x, Tensor)


def _as_tuple(x):
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)


def _outputs(fn, inputs):
    """Run ``fn`` and keep its floating point tensor outputs, as a tuple."""
    out = _as_tuple(fn(*inputs))
    return tuple(o for o in out if _is_tensor(o) and o.dtype.is_floating_point)


def numerical_jacobian(fn, inputs, i: int, eps: float = 1e-6):
    """d(every output entry)/d(every entry of ``inputs[i]``) by central differences.

    Returns one float64 array per floating point output of ``fn``, of shape
    ``(output.numel(), inputs[i].numel())``: column j is
    ``(f(x + eps e_j) - f(x - eps e_j)) / (2 eps)`` with only input i moved.
    """
    x = inputs[i]
    base = x.detach().numpy().astype(np.float64).copy()
    flat = base.reshape(-1)

    def run():
        moved = list(inputs)
        moved[i] = creation.tensor(base, dtype=x.dtype)
        with no_grad():
            outs = _outputs(fn, moved)
        return [o.detach().numpy().astype(np.float64).reshape(-1) for o in outs]

    sizes = [int(np.prod(s)) for s in _outputs_shapes(fn, inputs)]
    jacobians = [np.zeros((m, flat.size), dtype=np.float64) for m in sizes]
    for j in range(flat.size):
        old = flat[j]
        flat[j] = old + eps
        up = run()
        flat[j] = old - eps
        down = run()
        flat[j] = old
        for J, u, d in zip(jacobians, up, down):
            J[:, j] = (u - d) / (2 * eps)
    return jacobians


def _outputs_shapes(fn, inputs):
    with no_grad():
        return [tuple(o.shape) for o in _outputs(fn, inputs)]


def analytical_jacobian(fn, inputs, i: int):
    """d(every output entry)/d(every entry of ``inputs[i]``) by the engine.

    One forward pass, then one backward pass per output entry ``k`` with
    ``gradient=`` the one-hot vector e_k: that pass yields row k of the
    Jacobian (the vector-Jacobian product e_k^T J). Same layout as
    :func:`numerical_jacobian`.
    """
    x = inputs[i]
    with enable_grad():
        outs = _outputs(fn, inputs)
    jacobians = []
    for out in outs:
        m = out.numel()
        J = np.zeros((m, x.numel()), dtype=np.float64)
        if not out.requires_grad:  # the output does not depend on any input
            jacobians.append(J)
            continue
        for k in range(m):
            onehot = np.zeros(m, dtype=out.dtype.np)
            onehot[k] = 1
            seed = creation.tensor(onehot.reshape(tuple(out.shape)), dtype=out.dtype)
            g = grad(out, x, grad_outputs=seed, retain_graph=True)
            if g is not None:
                if tuple(g.shape) != tuple(x.shape):
                    raise GradcheckError(
                        f"the gradient for input {i} has shape {tuple(g.shape)}, "
                        f"but the input has shape {tuple(x.shape)}"
                    )
                J[k] = g.detach().numpy().astype(np.float64).reshape(-1)
        jacobians.append(J)
    return jacobians


def _unravel(flat_index: int, shape) -> tuple:
    return tuple(int(v) for v in np.unravel_index(flat_index, shape)) if shape else ()


def _reentrant_and_dtypes(fn, inputs, i: int, nondet_tol: float, check_dtypes: bool):
    """torch's reentrancy check (two backward passes of the all-ones seed through every
    output agree within ``nondet_tol``) and, if asked, the gradient's dtype; returns
    what is wrong, or None."""
    x, passes = inputs[i], []
    for _ in range(2):
        with enable_grad():
            outs = [o for o in _outputs(fn, inputs) if o.requires_grad]
        if not outs:
            return None
        total = outs[0].sum()
        for o in outs[1:]:
            total = total + o.sum()
        g = grad(total, x, allow_unused=True)
        if g is None:
            return None
        if check_dtypes and g.dtype is not x.dtype:
            return f"Gradient has dtype mismatch: input {i} is {x.dtype}, its gradient {g.dtype}"
        passes.append(g.detach().numpy().astype(np.float64))
    worst = float(np.max(np.abs(passes[0] - passes[1]), initial=0.0))
    if not worst <= nondet_tol:
        return (
            f"Backward is not reentrant: two backward passes for input {i} differ by "
            f"{worst:.3g}, more than nondet_tol={nondet_tol}"
        )
    return None


# --8<-- [start:gradcheck]
def gradcheck(
    func,
    inputs,
    *,
    eps: float = 1e-6,
    atol: float = 1e-5,
    rtol: float = 1e-3,
    raise_exception: bool = True,
    nondet_tol: float = 0.0,
    check_undefined_grad: bool = True,
    check_grad_dtypes: bool = False,
    check_batched_grad: bool = False,
    check_batched_forward_grad: bool = False,
    check_forward_ad: bool = False,
    check_backward_ad: bool = True,
    fast_mode: bool = False,
    masked=None,
) -> bool:
    """Check the engine's gradients of ``fn`` against central differences.

    For every input that requires grad, builds the full Jacobian of every
    floating point output twice, numerically and by backward passes, and
    checks ``|analytical - numerical| <= atol + rtol * |numerical|`` entry by
    entry, as ``torch.autograd.gradcheck`` does.

    Args:
        fn: a function of the inputs returning a tensor or a tuple of tensors.
        inputs: a tensor or a tuple of arguments for ``fn``; the float64
            tensors with ``requires_grad=True`` are checked, the others are
            passed through unchanged.
        eps: the step of the central differences.
        atol, rtol: the tolerances.
        raise_exception: raise :class:`GradcheckError` on a mismatch (default)
            or return False.
        nondet_tol: how far two backward passes over the same inputs may differ
            (sitp's are deterministic: the default 0 asks for equal bits).
        check_undefined_grad: always on in sitp: the Jacobian is built one output
            at a time, so the backward of an op with several outputs runs with the
            other outputs' gradients undefined (None); False raises NotImplementedError.
        check_grad_dtypes: also check that each gradient has its input's dtype.
        check_backward_ad: False checks nothing but that ``func`` runs.
        check_batched_grad: a mode of torch's that sitp lacks (True raises
            NotImplementedError), as are the next four.
        check_batched_forward_grad: see ``check_batched_grad``.
        check_forward_ad: see ``check_batched_grad``.
        fast_mode: see ``check_batched_grad``.
        masked: see ``check_batched_grad``.

    Returns:
        True if every derivative agrees.

    >>> import sitp
    >>> x = sitp.randn(3, dtype=sitp.float64, requires_grad=True)
    >>> gradcheck(lambda t: t.tanh() * t, (x,))
    True
    """
    fn = func
    for name, asked in (
        ("check_batched_grad", check_batched_grad),
        ("check_batched_forward_grad", check_batched_forward_grad),
        ("check_forward_ad", check_forward_ad),
        ("fast_mode", fast_mode),
        ("masked", bool(masked)),
        ("check_undefined_grad=False", not check_undefined_grad),
    ):
        if asked:
            raise NotImplementedError(f"gradcheck({name}): sitp does not have this mode")
    inputs = _as_tuple(inputs)
    if not check_backward_ad:
        _outputs(fn, inputs)
        return True
    checked = [i for i, x in enumerate(inputs) if _is_tensor(x) and x.requires_grad]
    if not checked:
        raise ValueError("gradcheck expects at least one input tensor with requires_grad=True")
    for i in checked:
        if inputs[i].dtype.name != "float64":
            warnings.warn(
                f"input {i} is {inputs[i].dtype}, not float64: central differences in "
                f"single precision are too inexact for these tolerances",
                stacklevel=2,
            )
    shapes = _outputs_shapes(fn, inputs)
    for i in checked:
        numerical = numerical_jacobian(fn, inputs, i, eps)
        analytical = analytical_jacobian(fn, inputs, i)
        problem = _reentrant_and_dtypes(fn, inputs, i, nondet_tol, check_grad_dtypes)
        if problem:
            if raise_exception:
                raise GradcheckError(problem)
            return False
        for k, (num, ana) in enumerate(zip(numerical, analytical)):
            excess = np.abs(ana - num) - (atol + rtol * np.abs(num))
            bad = ~(excess <= 0)  # NaN counts as a mismatch
            if not bad.any():
                continue
            row, col = np.unravel_index(
                int(np.nanargmax(np.where(bad, np.nan_to_num(excess, nan=np.inf), -np.inf))),
                num.shape,
            )
            where_out = _unravel(row, shapes[k])
            where_in = _unravel(col, tuple(inputs[i].shape))
            msg = (
                f"Jacobian mismatch for output {k} with respect to input {i}: "
                f"{int(bad.sum())} of {bad.size} entries differ; the worst is "
                f"d output{list(where_out)} / d input{list(where_in)}: "
                f"numerical {num[row, col]:.8g} vs analytical {ana[row, col]:.8g} "
                f"(atol={atol}, rtol={rtol}, eps={eps})"
            )
            if num.size <= 64:
                msg += (
                    f"\nnumerical:\n{np.array2string(num, precision=6)}"
                    f"\nanalytical:\n{np.array2string(ana, precision=6)}"
                )
            if raise_exception:
                raise GradcheckError(msg)
            return False
    return True


# --8<-- [end:gradcheck]

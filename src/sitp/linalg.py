"""``sitp.linalg``: the most used of ``torch.linalg``, with autograd.

Norms are composed of sitp's tensor ops (so they run on any device) inside a
:class:`~sitp.autograd.function.Function` whose backward is torch's: the gradient of a norm
at a zero vector is 0, not the NaN that differentiating ``sqrt(sum(x * x))`` gives.
``inv``, ``solve`` and ``det`` factor each matrix of a batch as P A = L U by Gaussian
elimination with partial pivoting, a numba kernel on the host (a CUDA tensor is
copied there and the result copied back); their backward passes are the matrix
calculus identities

    d(A^-1) = -A^-1 dA A^-1        ->  grad_A = -A^-T g A^-T
    X = A^-1 B                     ->  grad_B = A^-T g,  grad_A = -grad_B X^T
    d(det A) = det A tr(A^-1 dA)   ->  grad_A = g det(A) A^-T

Not implemented, and saying so: the singular-value norms (``ord='nuc'``, ``2``, ``-2``
of a matrix), complex tensors, and the gradient of ``det`` at a singular matrix.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from sitp._tensor.creation import _from_numpy_owned, _place
from sitp._tensor.tensor import Tensor
from sitp.autograd.function import Function
from sitp.strides import broadcast_shapes, normalize_dim

__all__ = [
    "LinAlgError",
    "vector_norm",
    "matrix_norm",
    "norm",
    "inv",
    "solve",
    "det",
    "matmul",
    "vecdot",
]


class LinAlgError(RuntimeError):
    """A matrix that the operation cannot handle (singular), as ``torch.linalg.LinAlgError``
    (a subclass of RuntimeError there too)."""


# ----------------------------------------------------------------------------- kernels
@njit(cache=True)
def lu_factor(a, piv):
    """Overwrite each matrix ``a[b]`` (n x n) with its LU factors, L below the diagonal
    (unit diagonal implied) and U on and above it, row k swapped with ``piv[b, k]`` at
    step k. Returns per matrix the permutation's sign, and in ``info[b]`` the first zero
    pivot's index + 1 (0: nonsingular)."""
    nb, n = a.shape[0], a.shape[1]
    sign = np.ones(nb, a.dtype)
    info = np.zeros(nb, np.int64)
    for b in range(nb):
        for k in range(n):
            p = k
            m = abs(a[b, k, k])
            for i in range(k + 1, n):
                v = abs(a[b, i, k])
                if v > m:
                    m = v
                    p = i
            piv[b, k] = p
            if p != k:
                for j in range(n):
                    t = a[b, k, j]
                    a[b, k, j] = a[b, p, j]
                    a[b, p, j] = t
                sign[b] = -sign[b]
            d = a[b, k, k]
            if d == 0:
                if info[b] == 0:
                    info[b] = k + 1
                continue
            for i in range(k + 1, n):
                f = a[b, i, k] / d
                a[b, i, k] = f
                if f != 0:
                    for j in range(k + 1, n):
                        a[b, i, j] -= f * a[b, k, j]
    return sign, info


@njit(cache=True)
def lu_solve(lu, piv, x):
    """Overwrite each ``x[b]`` (n x k) with A^-1 x[b], A's factors from :func:`lu_factor`."""
    nb, n, k = x.shape[0], x.shape[1], x.shape[2]
    for b in range(nb):
        for r in range(n):  # the row swaps, in order
            p = piv[b, r]
            if p != r:
                for c in range(k):
                    t = x[b, r, c]
                    x[b, r, c] = x[b, p, c]
                    x[b, p, c] = t
        for i in range(n):  # L y = P x (unit diagonal)
            for j in range(i):
                f = lu[b, i, j]
                if f != 0:
                    for c in range(k):
                        x[b, i, c] -= f * x[b, j, c]
        for i in range(n - 1, -1, -1):  # U x = y
            for j in range(i + 1, n):
                f = lu[b, i, j]
                if f != 0:
                    for c in range(k):
                        x[b, i, c] -= f * x[b, j, c]
            d = lu[b, i, i]
            for c in range(k):
                x[b, i, c] /= d


# ----------------------------------------------------------------------------- helpers
def _check_float(name, t):
    if not isinstance(t, Tensor):
        raise TypeError(f"linalg.{name}(): argument 'A' must be Tensor, not {type(t).__name__}")
    if not t.dtype.is_floating_point:
        raise RuntimeError(
            f"linalg.{name}: Expected a floating point tensor as input. Got {t.dtype}"
        )


def _check_square(name, A):
    _check_float(name, A)
    if A.ndim < 2:
        raise RuntimeError(f"linalg.{name}: The input tensor A must have at least 2 dimensions.")
    if A.shape[-1] != A.shape[-2]:
        raise RuntimeError(
            f"linalg.{name}: A must be batches of square matrices, but they are "
            f"{A.shape[-2]} by {A.shape[-1]} matrices"
        )


def _host(t):
    """A writable float copy of ``t``'s values as (batch, rows, cols), and its batch shape."""
    arr = np.array(t.detach()._np(), dtype=t.dtype.np, copy=True, order="C")
    return arr.reshape((-1,) + arr.shape[-2:]), tuple(t.shape[:-2])


def _tensor(arr, like):
    arr = np.array(arr, dtype=like.dtype.np, order="C")  # (ascontiguousarray makes 0-d 1-d)
    return _place(_from_numpy_owned(arr), like.device)


def _factor(name, A, need_nonsingular=True):
    a, batch = _host(A)
    piv = np.empty(a.shape[:2], np.int64)
    sign, info = lu_factor(a, piv)
    if need_nonsingular and info.any():
        b = int(np.flatnonzero(info)[0])
        where = f"(Batch element {b}): " if batch else ""
        raise LinAlgError(
            f"linalg.{name}: {where}The diagonal element {int(info[b])} is zero, "
            f"the {'inversion' if name == 'inv' else 'solve'} could not be "
            f"completed because the input matrix is singular."
        )
    return a, piv, sign, info, batch


def _solve_host(name, A, B):
    """A^-1 B for (batch, n, n) A and (batch, n, k) B of the same batch shape."""
    lu, piv, _, _, batch = _factor(name, A)
    x, _ = _host(B)
    lu_solve(lu, piv, x)
    return _tensor(x.reshape(tuple(B.shape)), B)


def _inv_host(name, A):
    lu, piv, _, _, batch = _factor(name, A)
    n = A.shape[-1]
    x = np.broadcast_to(np.eye(n, dtype=A.dtype.np), lu.shape).copy()
    lu_solve(lu, piv, x)
    return _tensor(x.reshape(tuple(A.shape)), A)


# ------------------------------------------------------------------- inv, solve, det
class _Inv(Function):
    @staticmethod
    def forward(ctx, A):
        out = _inv_host("inv", A)
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, g):
        (X,) = ctx.saved_tensors
        Xt = X.mT
        return -(Xt.matmul(g).matmul(Xt))


def inv(A, *, out=None):
    """The inverse of each square matrix of ``A`` (*, n, n); a singular one raises
    :class:`LinAlgError`."""
    if out is not None:
        raise NotImplementedError("linalg.inv(out=...) is not implemented in sitp")
    _check_square("inv", A)
    return _Inv.apply(A)


class _Solve(Function):
    @staticmethod
    def forward(ctx, A, B):
        X = _solve_host("solve", A, B)
        ctx.save_for_backward(A, X)
        return X

    @staticmethod
    def backward(ctx, g):
        A, X = ctx.saved_tensors
        gB = _solve_host("solve", A.mT, g.contiguous())
        gA = -(gB.matmul(X.mT)) if ctx.needs_input_grad[0] else None
        return gA, gB


def solve(A, B, *, left: bool = True, out=None):
    """X with A X = B (``left=False``: X A = B), for square A (*, n, n) and B (*, n, k),
    or B a batch of vectors (*, n) (when ``B.shape == A.shape[:-1]`` or B is 1-D).
    Batch dimensions broadcast, as in torch."""
    if out is not None:
        raise NotImplementedError("linalg.solve(out=...) is not implemented in sitp")
    _check_square("solve", A)
    _check_float("solve", B)
    if B.dtype is not A.dtype:
        raise RuntimeError(
            f"linalg.solve: Expected A and B to have the same dtype, but found "
            f"A of type {A.dtype} and B of type {B.dtype} instead"
        )
    vector = B.ndim == 1 or (B.ndim == A.ndim - 1 and tuple(B.shape) == tuple(A.shape[:-1]))
    if vector:
        if not left:
            raise RuntimeError(
                "linalg.solve: Vector broadcasting of the left hand side is not "
                "supported for left=False. In this case linalg.solve is "
                "equivalent to B / A.squeeze(-1)"
            )
        B = B.unsqueeze(-1)
    if not left:  # X A = B  <=>  A^T X^T = B^T
        return solve(A.mT, B.mT).mT
    n = A.shape[-1]
    if B.ndim < 2 or B.shape[-2] != n:
        raise RuntimeError(
            f"linalg.solve: Incompatible shapes of A and B for the equation "
            f"AX = B ({A.shape[-2]}x{n} and {B.shape[-2] if B.ndim > 1 else B.shape[0]}"
            f"x{B.shape[-1]})"
        )
    try:
        batch = broadcast_shapes(tuple(A.shape[:-2]), tuple(B.shape[:-2]))
    except (ValueError, RuntimeError) as e:
        raise RuntimeError(
            f"linalg.solve: the batch dimensions of A {tuple(A.shape)} and "
            f"B {tuple(B.shape)} do not broadcast"
        ) from e
    batch = tuple(batch)
    A = A.expand(*batch, n, n) if tuple(A.shape[:-2]) != batch else A
    B = B.expand(*batch, n, B.shape[-1]) if tuple(B.shape[:-2]) != batch else B
    X = _Solve.apply(A, B)
    return X.squeeze(-1) if vector else X


class _Det(Function):
    @staticmethod
    def forward(ctx, A):
        lu, piv, sign, info, batch = _factor("det", A, need_nonsingular=False)
        n = A.shape[-1]
        d = sign * np.prod(lu[:, np.arange(n), np.arange(n)], axis=1) if n else sign
        out = _tensor(d.reshape(batch), A)
        ctx.save_for_backward(A, out)
        return out

    @staticmethod
    def backward(ctx, g):
        A, d = ctx.saved_tensors
        try:
            Ainv = _inv_host("det", A)
        except LinAlgError:
            raise NotImplementedError(
                "linalg.det backward at a singular matrix is not implemented in sitp "
                "(torch goes through the SVD there)"
            ) from None
        return (g * d).unsqueeze(-1).unsqueeze(-1) * Ainv.mT


def det(A, *, out=None):
    """The determinant of each square matrix of ``A`` (*, n, n): the product of U's
    diagonal times the sign of the row permutation."""
    if out is not None:
        raise NotImplementedError("linalg.det(out=...) is not implemented in sitp")
    _check_square("det", A)
    return _Det.apply(A)


# ----------------------------------------------------------------------------- norms
def _dims(dim, ndim):
    if dim is None:
        return tuple(range(ndim))
    dims = (dim,) if isinstance(dim, int) else tuple(dim)
    out = tuple(sorted(normalize_dim(d, max(ndim, 1)) for d in dims))
    if len(set(out)) != len(out):
        raise RuntimeError(f"dim {dims} appears multiple times in the list of dims")
    return out


class _VectorNorm(Function):
    @staticmethod
    def forward(ctx, x, ord, dims, keepdim):
        a = x.abs()
        if ord == math.inf:
            r = a.amax(dims, True)
        elif ord == -math.inf:
            r = a.amin(dims, True)
        elif ord == 0:
            r = (a != 0).sum(dims, keepdim=True).to(x.dtype)
        elif ord == 1:
            r = a.sum(dims, True)
        elif ord == 2:
            r = (a * a).sum(dims, True).sqrt()
        else:
            r = (a**ord).sum(dims, True) ** (1.0 / ord)
        ctx.ord, ctx.dims, ctx.keepdim = ord, dims, keepdim
        ctx.save_for_backward(x, r)
        return r if keepdim else _squeeze(r, dims)

    @staticmethod
    def backward(ctx, g):
        x, r = ctx.saved_tensors
        ord, dims = ctx.ord, ctx.dims
        if not ctx.keepdim:
            for d in dims:
                g = g.unsqueeze(d)
        if ord == 0:  # a count: torch gives no gradient at all (.grad stays None)
            gx = None
        elif ord == 1:
            gx = x.sign() * g
        elif ord == 2:
            gx = x * (g / r).masked_fill(r == 0, 0.0)
        elif ord in (math.inf, -math.inf):
            mask = (x.abs() == r).to(x.dtype)
            gx = x.sign() * mask * (g / mask.sum(dims, keepdim=True))
        else:
            scaled = x.sign() * (x.abs() ** (ord - 1)).masked_fill(x == 0, 0.0)
            gx = scaled * (g / r ** (ord - 1)).masked_fill(r == 0, 0.0)
        return gx, None, None, None


def _squeeze(t, dims):
    for d in sorted(dims, reverse=True):
        t = t.squeeze(d)
    return t


def vector_norm(x, ord=2, dim=None, keepdim: bool = False, *, dtype=None, out=None):
    """The ``ord``-norm of ``x`` over ``dim`` (every entry by default, as one vector):
    (sum |x|^ord)^(1/ord), ``inf``/``-inf`` the largest/smallest magnitude, 0 the count
    of nonzeros."""
    if out is not None:
        raise NotImplementedError("linalg.vector_norm(out=...) is not implemented in sitp")
    _check_float("vector_norm", x)
    if isinstance(ord, str) or not isinstance(ord, (int, float)):
        raise RuntimeError(f"linalg.vector_norm: ord must be a number, got {ord!r}")
    if dtype is not None:
        x = x.to(dtype)
    dims = _dims(dim, x.ndim)
    if x.ndim == 0:  # a scalar: |x|, keeping its shape
        return _VectorNorm.apply(x.reshape(1), ord, (0,), False).reshape(())
    if (ord < 0 or ord == math.inf) and any(x.shape[d] == 0 for d in dims):
        raise RuntimeError(
            f"linalg.vector_norm cannot compute the {ord} norm on an empty "
            f"tensor because the operation does not have an identity"
        )
    return _VectorNorm.apply(x, float(ord), dims, bool(keepdim))


_SVD_ORDS = ("nuc", 2, -2)


def matrix_norm(A, ord="fro", dim=(-2, -1), keepdim: bool = False, *, dtype=None, out=None):
    """The matrix norm of each matrix in ``dim`` (the last two by default): ``'fro'``
    (sqrt of the sum of squares), 1/-1 (largest/smallest column sum of magnitudes),
    ``inf``/``-inf`` (row sums). ``'nuc'``, 2 and -2 need the singular values, which
    sitp does not compute: NotImplementedError."""
    if out is not None:
        raise NotImplementedError("linalg.matrix_norm(out=...) is not implemented in sitp")
    _check_float("matrix_norm", A)
    if A.ndim < 2:
        raise RuntimeError(
            "linalg.matrix_norm: The input tensor A must have at least 2 dimensions."
        )
    if dtype is not None:
        A = A.to(dtype)
    dim = tuple(dim)
    if len(dim) != 2:
        raise RuntimeError(f"linalg.matrix_norm: dim must be a 2-tuple. Got {dim}")
    r, c = (d % A.ndim for d in dim)
    if r == c:
        raise RuntimeError(f"linalg.matrix_norm: dims must be different. Got ({r}, {c})")
    if ord in _SVD_ORDS:
        raise NotImplementedError(
            f"linalg.matrix_norm(ord={ord!r}) needs the singular values, and sitp has no SVD; "
            f"ord='fro', 1, -1, inf and -inf are implemented"
        )
    if ord == "fro":
        return vector_norm(A, 2, (r, c), keepdim)
    if ord in (1, -1):
        sums, pick = vector_norm(A, 1, r, True), c  # column sums, then over columns
    elif ord in (math.inf, -math.inf):
        sums, pick = vector_norm(A, 1, c, True), r  # row sums, then over rows
    else:
        raise RuntimeError(f"linalg.matrix_norm: Order {ord} not supported.")
    res = sums.amax(pick, True) if ord > 0 else sums.amin(pick, True)
    return res if keepdim else _squeeze(res, (r, c))


def norm(A, ord=None, dim=None, keepdim: bool = False, *, out=None, dtype=None):
    """``vector_norm`` when ``dim`` is one dim (or ``A`` is 1-D), ``matrix_norm`` when it
    is two (or ``A`` is 2-D); with neither ``ord`` nor ``dim``, the 2-norm of ``A``
    flattened."""
    if out is not None:
        raise NotImplementedError("linalg.norm(out=...) is not implemented in sitp")
    if isinstance(dim, int):
        dim = (dim,)
    if dim is None:
        if ord is None:
            return vector_norm(A, 2, None, keepdim, dtype=dtype)
        if A.ndim not in (1, 2):
            raise RuntimeError(
                f"linalg.norm: If dim is not specified but ord is, the input "
                f"must be 1D or 2D. Got {A.ndim}D."
            )
        dim = tuple(range(A.ndim))
    dim = tuple(dim)
    if len(dim) == 1:
        if isinstance(ord, str):
            raise RuntimeError(
                f"linalg.vector_norm: ord={ord!r} is a matrix norm; dim must then be a 2-tuple"
            )
        return vector_norm(A, 2 if ord is None else ord, dim, keepdim, dtype=dtype)
    if len(dim) == 2:
        return matrix_norm(A, "fro" if ord is None else ord, dim, keepdim, dtype=dtype)
    raise RuntimeError(
        f"linalg.norm: If dim is specified, it must be of length 1 or 2. Got {list(dim)}"
    )


# ------------------------------------------------------------------- small aliases
def matmul(input, other, *, out=None):
    """``input @ other`` (``torch.linalg.matmul`` is ``torch.matmul``)."""
    if out is not None:
        raise NotImplementedError("linalg.matmul(out=...) is not implemented in sitp")
    return input.matmul(other)


def vecdot(x, y, *, dim: int = -1, out=None):
    """The dot product of ``x`` and ``y`` along ``dim`` (real tensors), broadcasting."""
    if out is not None:
        raise NotImplementedError("linalg.vecdot(out=...) is not implemented in sitp")
    return (x * y).sum(dim)

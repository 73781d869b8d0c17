"""The table of local derivatives: every differentiable op, forward beside backward.

Each op is a :class:`~sitp.autograd.function.Function`. ``forward`` computes with the
CPU backend (``sitp/kernels/cpu/ops.py``) and saves what ``backward`` needs; ``backward``
receives ``grad`` — d(loss)/d(output) — and returns d(loss)/d(input) for each
tensor input, by the chain rule: grad times the op's local derivative.
Backward code runs with recording off and may use any tensor op.

Elementwise ops are rows of two tables, ``UNARY_GRAD`` and ``BINARY_GRAD``:
adding one is adding a row there, and one in ``UNARY_READS`` or ``BINARY_READS`` (the
saved tensors its gradient reads, which are checked for in-place writes).
"""

from __future__ import annotations

import math

from sitp import cuda
from sitp._tensor import creation, dispatch
from sitp.autograd.function import Context, Function, Node, _Edge
from sitp.strides import contiguous_strides, numel


# --8<-- [start:unbroadcast]
def unbroadcast(g, shape):
    """Sum ``g`` down to ``shape``: the backward of broadcasting.

    A dim that broadcasting added (on the left) or stretched from size 1 got
    the same input entry many times, so its gradient is the sum of them all.
    """
    shape = tuple(shape)
    if tuple(g.shape) == shape:
        return g
    lead = g.ndim - len(shape)
    dims = tuple(range(lead)) + tuple(
        lead + i for i, n in enumerate(shape) if n == 1 and g.shape[lead + i] != 1
    )
    if dims:
        g = g.sum(dim=dims, keepdim=True)
    return g.reshape(shape)


# --8<-- [end:unbroadcast]


def _from_output(op, y, g):
    """The gradient of tanh or sigmoid from their output ``y``: the formula in the comment
    beside its row, computed in one pass (the same roundings; three ops and two temporaries
    otherwise). ``g`` may be any view of y's shape (a piece of a stack's gradient)."""
    if g.dtype is not y.dtype:
        g = g.to(y.dtype)
    return dispatch.of(y, g).grad_from_output(op, y, g)


# --8<-- [start:unary_table]
# op name -> d(out)/d(in) times grad, from input x, output y, upstream g and
# the op's parameters p0, p1.
UNARY_GRAD = {
    "neg": lambda x, y, g, p0, p1: -g,
    "exp": lambda x, y, g, p0, p1: g * y,
    "log": lambda x, y, g, p0, p1: g / x,
    "sqrt": lambda x, y, g, p0, p1: g / (2 * y),
    "tanh": lambda x, y, g, p0, p1: _from_output("tanh_backward", y, g),  # g * (1 - y * y)
    "sigmoid": lambda x, y, g, p0, p1: _from_output("sigmoid_backward", y, g),  # g * y * (1 - y)
    "relu": lambda x, y, g, p0, p1: g * (y > 0),
    "abs": lambda x, y, g, p0, p1: g * x.sign(),
    "sin": lambda x, y, g, p0, p1: g * x.cos(),
    "cos": lambda x, y, g, p0, p1: -g * x.sin(),
    "pow": lambda x, y, g, p0, p1: _pow_grad(x, g, p0),
    "clamp": lambda x, y, g, p0, p1: g * _in_range(x, p0, p1),
    "square": lambda x, y, g, p0, p1: g * 2 * x,
    "rsqrt": lambda x, y, g, p0, p1: g * -0.5 * y * y * y,
    "log1p": lambda x, y, g, p0, p1: g / (1 + x),
    "expm1": lambda x, y, g, p0, p1: g * (y + 1),
    "log10": lambda x, y, g, p0, p1: g / (x * math.log(10.0)),
    "log2": lambda x, y, g, p0, p1: g / (x * math.log(2.0)),
    "exp2": lambda x, y, g, p0, p1: g * y * math.log(2.0),
    "reciprocal": lambda x, y, g, p0, p1: -g * y * y,
    "erf": lambda x, y, g, p0, p1: g * (2 / math.sqrt(math.pi)) * (-x * x).exp(),
    "gelu": lambda x, y, g, p0, p1: g * dispatch.of(x).unary("gelu_grad", x),
    "gelu_tanh": lambda x, y, g, p0, p1: g * dispatch.of(x).unary("gelu_tanh_grad", x),
    "silu": lambda x, y, g, p0, p1: g * _silu_grad(x),
    "sign": lambda x, y, g, p0, p1: g * 0,
    "floor": lambda x, y, g, p0, p1: g * 0,
    "ceil": lambda x, y, g, p0, p1: g * 0,
    "round": lambda x, y, g, p0, p1: g * 0,
}
# --8<-- [end:unary_table]


# The saved tensors each row of UNARY_GRAD reads: the input "x", the output "y", both
# ("xy") or neither (""). Unary.forward saves x and y, and backward refuses to run if one
# it reads was written in place since (``ctx._versions``, as torch's "modified by an
# inplace operation" error); a tensor not listed here is not checked, so an in-place
# write to it is allowed. Torch saves, and checks, the same tensors for each op, and
# tests/test_inplace_autograd.py compares every row with torch. A row missing here
# makes sitp check both: safe, but a write that torch allows would raise.
UNARY_READS = {
    "neg": "",
    "exp": "y",
    "log": "x",
    "sqrt": "y",
    "tanh": "y",
    "sigmoid": "y",
    "relu": "y",
    "abs": "x",
    "sin": "x",
    "cos": "x",
    "pow": "x",
    "clamp": "x",
    "square": "x",
    "rsqrt": "y",
    "log1p": "x",
    "expm1": "y",
    "log10": "x",
    "log2": "x",
    "exp2": "y",
    "reciprocal": "y",
    "erf": "x",
    "gelu": "x",
    "gelu_tanh": "x",
    "silu": "x",
    "sign": "",
    "floor": "",
    "ceil": "",
    "round": "",
}
_UNREAD = {"x": (1,), "y": (0,), "": (0, 1), "xy": ()}
_UNARY_UNREAD = {op: _UNREAD[r] for op, r in UNARY_READS.items()}  # op -> positions of (x, y)
# op -> whether its gradient reads (x, y): their versions are checked
_UNARY_KEEP = {op: (0 not in u, 1 not in u) for op, u in _UNARY_UNREAD.items()}


def _pow_grad(x, g, p):
    # d(x^p)/dx = p x^(p-1); for p == 0 it is 0 everywhere (0 * 0^-1 would be NaN at 0)
    if p == 0:
        return creation.zeros_like(g)
    return g * p * x.pow(p - 1)


def _in_range(x, lo, hi):
    m = x == x
    if lo == lo:
        m = m & (x >= lo)
    if hi == hi:
        m = m & (x <= hi)
    return m


def _silu_grad(x):
    s = x.sigmoid()
    return s * (1 + x * (1 - s))


# --8<-- [start:unary_function]
class Unary(Function):
    """y = f(x) for an op named in ``UNARY_GRAD``."""

    @staticmethod
    def forward(ctx, x, op, p0=math.nan, p1=math.nan):
        y = dispatch.of(x).unary(op, x, p0, p1)
        ctx.op, ctx.p0, ctx.p1 = op, p0, p1
        ctx.save_for_backward(x, y)
        v = ctx._versions
        for i in _UNARY_UNREAD.get(op, ()):
            v[i] = None
        return y

    @staticmethod
    def backward(ctx, g):
        x, y = ctx.saved_tensors
        return UNARY_GRAD[ctx.op](x, y, g, ctx.p0, ctx.p1)

    # --8<-- [end:unary_function]

    @classmethod
    def recorded(cls, x, op, p0=math.nan, p1=math.nan):
        """``apply`` for a caller that has checked that grad mode is on and ``x`` requires
        grad (``Tensor.tanh`` and the other elementwise methods): the same forward, Context
        and Node, without the steps of the generic ``apply`` that this case does not need
        (the forward calls the backend only, which records nothing, so grad mode stays on)."""
        y = dispatch.of_tensor(x).unary(op, x, p0, p1)
        ctx = _UnaryContext()
        ctx.needs_input_grad = _UNARY_NEEDS
        ctx.op, ctx.p0, ctx.p1 = op, p0, p1
        ctx.saved_tensors = (x, y)
        keep_x, keep_y = _UNARY_KEEP.get(op, (True, True))
        ctx._versions = [x._vc[0] if keep_x else None, 0 if keep_y else None]
        node = Node(cls, ctx, (x if x.grad_fn is None else _Edge((x.grad_fn, x._output_nr)),))
        if y.dtype.is_floating_point:
            y.requires_grad = True
            y.grad_fn = node
        return y


class _UnaryContext(Context):
    """Unary's Context, its fields in slots (no per-op dict)."""

    __slots__ = ("op", "p0", "p1", "saved_tensors", "_versions")


_UNARY_NEEDS = (True, False, False, False)


# --8<-- [start:binary_table]
# op name -> (grad wrt a, grad wrt b), before un-broadcasting.
BINARY_GRAD = {
    "add": lambda a, b, y, g: (g, g),
    "sub": lambda a, b, y, g: (g, -g),
    "mul": lambda a, b, y, g: (g * b, g * a),
    "div": lambda a, b, y, g: (g / b, -g * a / (b * b)),
    "pow": lambda a, b, y, g: (_pow_grad_base(a, b, g), g * y * _safe_log(a)),
    "maximum": lambda a, b, y, g: _split_ties(g, a > b, a == b),
    "minimum": lambda a, b, y, g: _split_ties(g, a < b, a == b),
    "atan2": lambda a, b, y, g: (g * b / (a * a + b * b), -g * a / (a * a + b * b)),
    "hypot": lambda a, b, y, g: (g * a / y, g * b / y),
    "logaddexp": lambda a, b, y, g: (g * (a - b).sigmoid(), g * (b - a).sigmoid()),
}
# --8<-- [end:binary_table]


# The saved tensors each row of BINARY_GRAD reads, among the inputs "a", "b" and the
# output "y": (those the gradient for a reads, those the gradient for b reads). As
# UNARY_READS: Binary.forward checks only the ones that the wanted gradients read, so
# writing another one in place is allowed, as in torch, which saves the same ones (pow's
# gradients read fewer, but torch saves and checks all three).
BINARY_READS = {
    "add": ("", ""),
    "sub": ("", ""),
    "mul": ("b", "a"),
    "div": ("b", "ab"),
    "pow": ("aby", "aby"),
    "maximum": ("ab", "ab"),
    "minimum": ("ab", "ab"),
    "atan2": ("ab", "ab"),
    "hypot": ("ay", "by"),
    "logaddexp": ("ab", "ab"),
}


def _binary_unread(op, na, nb):
    """Positions in (a, b, y) that the wanted gradients do not read (BINARY_READS);
    ``na``, ``nb``: whether a's and b's gradients are wanted. An op without a row
    reads all three."""
    reads_a, reads_b = BINARY_READS.get(op, ("aby", "aby"))
    read = (reads_a if na else "") + (reads_b if nb else "")
    return tuple(i for i, name in enumerate("aby") if name not in read)


_BINARY_UNREAD = {}  # (op, a needs grad, b needs grad) -> _binary_unread's answer
_BINARY_KEEP = {}  # the same key -> whether each of (a, b, y) is read: its version checked


def _safe_log(a):
    # d(a^b)/db = a^b log a; PyTorch takes it as 0 where a == 0.
    return dispatch.of(a).where(a == 0, a * 0, a.log()) if (a == 0).any().item() else a.log()


def _pow_grad_base(a, b, g):
    # b a^(b-1), and 0 where b == 0 (as torch: 0 * 0^-1 would be NaN at a == 0)
    ga = g * b * a.pow(b - 1)
    if not (b == 0).any().item():
        return ga
    return dispatch.of(ga).where(b == 0, creation.zeros((), dtype=ga.dtype, device=ga.device), ga)


def _split_ties(g, wins, ties):
    # Where a and b are equal, PyTorch gives each half of the gradient.
    half = g * ties * 0.5
    return g * wins + half, g * (~wins & ~ties) + half


class Binary(Function):
    """y = f(a, b) with broadcasting, for an op named in ``BINARY_GRAD``."""

    @staticmethod
    def forward(ctx, a, b, op):
        y = dispatch.of(a, b).binary(op, a, b)
        ctx.op = op
        ctx.save_for_backward(a, b, y)
        v = ctx._versions
        key = (op, ctx.needs_input_grad[0], ctx.needs_input_grad[1])
        unread = _BINARY_UNREAD.get(key)
        if unread is None:
            unread = _BINARY_UNREAD[key] = _binary_unread(*key)
        for i in unread:
            v[i] = None
        return y

    @staticmethod
    def backward(ctx, g):
        a, b, y = ctx.saved_tensors
        ga, gb = BINARY_GRAD[ctx.op](a, b, y, g)
        na, nb = ctx.needs_input_grad[:2]
        return (unbroadcast(ga, a.shape) if na else None, unbroadcast(gb, b.shape) if nb else None)

    @classmethod
    def recorded(cls, a, b, op):
        """``apply`` for ``Tensor._binary``'s call: two tensors, grad mode on, one of them
        requiring grad. The same forward, Context and Node as ``apply`` makes, without its
        generic steps (see :meth:`Unary.recorded`)."""
        y = dispatch.of(a, b).binary(op, a, b)
        na, nb = a.requires_grad, b.requires_grad
        ctx = _BinaryContext()
        ctx.needs_input_grad = (na, nb, False)
        ctx.op = op
        ctx.saved_tensors = (a, b, y)
        key = (op, na, nb)
        keep = _BINARY_KEEP.get(key)
        if keep is None:
            unread = _binary_unread(*key)
            keep = _BINARY_KEEP[key] = tuple(i not in unread for i in range(3))
        ctx._versions = [
            a._vc[0] if keep[0] else None,
            b._vc[0] if keep[1] else None,
            0 if keep[2] else None,
        ]
        node = Node(
            cls,
            ctx,
            (
                (a if a.grad_fn is None else _Edge((a.grad_fn, a._output_nr))) if na else None,
                (b if b.grad_fn is None else _Edge((b.grad_fn, b._output_nr))) if nb else None,
                None,
            ),
        )
        if y.dtype.is_floating_point:
            y.requires_grad = True
            y.grad_fn = node
        return y


class _BinaryContext(Context):
    """Binary's Context, its fields in slots (no per-op dict)."""

    __slots__ = ("op", "saved_tensors", "_versions")


class Where(Function):
    """out = a where cond else b (cond is not differentiable)."""

    @staticmethod
    def forward(ctx, cond, a, b):
        ctx.save_for_backward(cond)
        ctx.shapes = (a.shape, b.shape)
        return dispatch.of(cond, a, b).where(cond, a, b)

    @staticmethod
    def backward(ctx, g):
        (cond,) = ctx.saved_tensors
        zero = g.new_zeros(())
        return (
            None,
            unbroadcast(dispatch.of(g).where(cond, g, zero), ctx.shapes[0]),
            unbroadcast(dispatch.of(g).where(cond, zero, g), ctx.shapes[1]),
        )


class Cast(Function):
    """Convert to another dtype; the gradient converts back."""

    @staticmethod
    def forward(ctx, x, dtype):
        ctx.dtype = x.dtype
        return dispatch.of(x).copy(x, dtype)

    @staticmethod
    def backward(ctx, g):
        return g.to(ctx.dtype)


class ToDevice(Function):
    """Copy between host and GPU memory; the gradient is copied back."""

    @staticmethod
    def forward(ctx, x, target):
        ctx.source = x.device.type
        if target == "cuda":
            cuda._require()
        return dispatch.cuda().to_device(x) if target == "cuda" else dispatch.cuda().to_host(x)

    @staticmethod
    def backward(ctx, g):
        return g.to(ctx.source)


class Clone(Function):
    """A contiguous copy; the gradient passes through unchanged."""

    @staticmethod
    def forward(ctx, x):
        return dispatch.of(x).copy(x)

    @staticmethod
    def backward(ctx, g):
        return g


# --8<-- [start:views]
class View(Function):
    """Same storage, new shape/strides/offset: no data moves."""

    @staticmethod
    def forward(ctx, x, shape, strides, offset):
        ctx.shape = x.shape
        return x._alias(shape, strides, offset)

    @staticmethod
    def backward(ctx, g):
        return g.reshape(ctx.shape)

    @classmethod
    def recorded(cls, x, shape, strides, offset):
        """``apply`` for ``Tensor.view`` and ``reshape`` when grad mode is on and ``x``
        requires grad: the same view, Context and Node, without the generic steps (see
        :meth:`Unary.recorded`; the forward makes a view, which records nothing)."""
        ctx = _ViewContext()
        ctx.needs_input_grad = _VIEW_NEEDS
        ctx.shape = x.shape
        return _record_view(cls, ctx, x, x._alias(shape, strides, offset), 3)


class _ViewContext(Context):
    """View's Context, its field in a slot (no per-op dict)."""

    __slots__ = ("shape",)


_VIEW_NEEDS = (True, False, False, False)


def _record_view(cls, ctx, x, y, n_plain):
    """Record view ``y`` of ``x`` as ``cls.apply`` would (a view's forward records nothing):
    the Node's inputs are ``x`` and ``n_plain`` arguments that are not tensors."""
    edge = x if x.grad_fn is None else _Edge((x.grad_fn, x._output_nr))
    node = Node(cls, ctx, (edge,) + (None,) * n_plain)
    if y.dtype.is_floating_point:
        y.requires_grad = True
        y.grad_fn = node
    return y


class Permute(Function):
    @staticmethod
    def forward(ctx, x, dims):
        ctx.dims = dims
        return x._alias(
            tuple(x._shape[d] for d in dims), tuple(x._strides[d] for d in dims), x._offset
        )

    @classmethod
    def recorded(cls, x, dims):
        """``apply`` when grad mode is on and ``x`` requires grad (``transpose``, ``t``,
        ``permute``): see :meth:`View.recorded`."""
        ctx = _PermuteContext()
        ctx.needs_input_grad = _PERMUTE_NEEDS
        ctx.dims = dims
        shape, strides = x._shape, x._strides
        y = x._alias(tuple([shape[d] for d in dims]), tuple([strides[d] for d in dims]), x._offset)
        return _record_view(cls, ctx, x, y, 1)

    @staticmethod
    def backward(ctx, g):
        inv = [0] * len(ctx.dims)
        for i, d in enumerate(ctx.dims):
            inv[d] = i
        return g.permute(inv)


class _PermuteContext(Context):
    """Permute's Context, its field in a slot."""

    __slots__ = ("dims",)


_PERMUTE_NEEDS = (True, False)


class Expand(Function):
    """Broadcast to a bigger shape with stride-0 dims; backward sums them."""

    @staticmethod
    def forward(ctx, x, shape, strides):
        ctx.shape = x.shape
        return x._alias(shape, strides, x._offset)

    @staticmethod
    def backward(ctx, g):
        return unbroadcast(g, ctx.shape)


class Slice(Function):
    """Basic indexing (ints, slices, None, ...): a view; backward writes g
    into the same window of a zero tensor."""

    @staticmethod
    def forward(ctx, x, shape, strides, offset, key):
        ctx.shape, ctx.dtype, ctx.key = x.shape, x.dtype, key
        # x contiguous: the view's layout is also the window's in backward's zero tensor
        dense = x._strides == contiguous_strides(x._shape)
        ctx.window = (shape, strides, offset - x._offset) if dense else None
        return x._alias(shape, strides, offset)

    @staticmethod
    def backward(ctx, g):
        z = creation.zeros(ctx.shape, dtype=g.dtype, device=g.device)
        if ctx.window is None:
            z[ctx.key] = g
        else:  # the same window, found without parsing the key again
            dispatch.of(z, g).assign(z._alias(*ctx.window), g)
        return z


# --8<-- [end:views]


# --8<-- [start:reductions]
class Sum(Function):
    @staticmethod
    def forward(ctx, x, dims, keepdim):
        ctx.shape, ctx.dims, ctx.keepdim = x.shape, dims, keepdim
        return dispatch.of(x).reduce("sum", x, dims, keepdim)

    @staticmethod
    def backward(ctx, g):
        if not ctx.keepdim:
            g = g.reshape(tuple(1 if d in ctx.dims else n for d, n in enumerate(ctx.shape)))
        return g.expand(ctx.shape)


class MaxAll(Function):
    """max()/min()/amax/amin over dims: the gradient is shared evenly by ties."""

    @staticmethod
    def forward(ctx, x, dims, keepdim, is_max):
        y = dispatch.of(x).reduce("max" if is_max else "min", x, dims, True)
        ctx.save_for_backward(x, y)
        ctx.dims, ctx.keepdim = dims, keepdim
        return y if keepdim else y.reshape(tuple(n for d, n in enumerate(x.shape) if d not in dims))

    @staticmethod
    def backward(ctx, g):
        x, y = ctx.saved_tensors
        if not ctx.keepdim:
            g = g.reshape(y.shape)
        mask = (x == y).to(g.dtype)
        return mask * (g / mask.sum(dim=ctx.dims, keepdim=True))


class MaxDim(Function):
    """max(dim)/min(dim): values and indices; the gradient goes to the index."""

    @staticmethod
    def forward(ctx, x, dim, keepdim, is_max):
        values, indices = dispatch.of(x).argreduce(x, dim, is_max, keepdim)
        ctx.shape, ctx.dim, ctx.keepdim = x.shape, dim, keepdim
        ctx.save_for_backward(indices)
        return values, indices

    @staticmethod
    def backward(ctx, g):
        (indices,) = ctx.saved_tensors
        if not ctx.keepdim:
            g, indices = g.unsqueeze(ctx.dim), indices.unsqueeze(ctx.dim)
        return dispatch.of(g).scatter_add(ctx.shape, ctx.dim, indices, g, g.dtype)


# --8<-- [end:reductions]


# --8<-- [start:softmax]
class Softmax(Function):
    """softmax (log=False) or log_softmax (log=True) along one dim."""

    @staticmethod
    def forward(ctx, x, dim, log):
        y = dispatch.of(x).softmax(x, dim, log)
        ctx.dim, ctx.log = dim, log
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        return dispatch.of(y).softmax_backward(y, g, ctx.dim, ctx.log)


# --8<-- [end:softmax]


# --8<-- [start:matmul]
class MatMul(Function):
    """C = A @ B for (..., M, K) @ (..., K, N), batch dims broadcast.

    dA = dC @ B^T and dB = A^T @ dC, summed over batch dims A or B was
    broadcast along.
    """

    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        na, nb = ctx.needs_input_grad
        ctx._unchecked(*((() if nb else (0,)) + (() if na else (1,))))  # dA reads B, dB reads A
        return dispatch.of(a, b).matmul(a, b)

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.saved_tensors
        na, nb = ctx.needs_input_grad
        mm = dispatch.of(g).matmul
        ga = unbroadcast(mm(g, b.mT), a.shape) if na else None
        if nb and b.ndim == 2 and a.ndim > 2:
            # the sum over batch dims of a^T g is one product of the flattened operands
            K, N = b.shape
            gb = mm(a.reshape(-1, K).mT, g.reshape(-1, N))
        else:
            gb = unbroadcast(mm(a.mT, g), b.shape) if nb else None
        return ga, gb


# --8<-- [end:matmul]


# --8<-- [start:gather]
class Gather(Function):
    @staticmethod
    def forward(ctx, x, dim, index):
        ctx.shape, ctx.dim = x.shape, dim
        ctx.save_for_backward(index)
        return dispatch.of(x).gather(x, dim, index)

    @staticmethod
    def backward(ctx, g):
        (index,) = ctx.saved_tensors
        return dispatch.of(g).scatter_add(ctx.shape, ctx.dim, index, g, g.dtype)


class Take(Function):
    """Indexing dims a..a+k with integer arrays; backward scatter-adds, so an
    index that appears twice receives both gradients."""

    @staticmethod
    def forward(ctx, x, a, idx, idx_shape):
        k = idx.shape[0]
        ctx.shape, ctx.a, ctx.idx = x.shape, a, idx
        out_shape = tuple(x.shape[:a]) + tuple(idx_shape) + tuple(x.shape[a + k :])
        return x._wrap_np(dispatch.of(x).take(x, a, idx), out_shape)

    @staticmethod
    def backward(ctx, g):
        z = creation.zeros(ctx.shape, dtype=g.dtype, device=g.device)
        dispatch.of(z).put(z, ctx.a, ctx.idx, g, True)
        return z


# --8<-- [end:gather]


def _tiled(pieces, ctx):
    """The whole gradient of a split when its pieces' gradients are already the windows of
    one contiguous storage that the split's backward would write (as attention's backward
    makes them for ``qkv.split``): that storage, with no copy. None otherwise."""
    p0 = pieces[0]
    if p0 is None or not hasattr(p0, "_storage"):
        return None
    store, strides = p0._storage, contiguous_strides(ctx.shape)
    if store.size != numel(ctx.shape) or p0._offset != 0:
        return None
    start, st = 0, strides[ctx.dim]
    for n, p in zip(ctx.sizes, pieces):
        if p is None or p._storage is not store or p._strides != strides:
            return None
        if p._offset != start * st or p.dtype is not p0.dtype:
            return None
        start += n
    return p0._alias(ctx.shape, strides, 0)


class Split(Function):
    """Consecutive views along ``dim``, one node with several outputs.

    Backward writes each piece's gradient into its window of one new tensor (a
    piece that got no gradient leaves zeros): one pass, where a view per piece
    would zero-pad each gradient to the full shape and add the pads together.
    """

    @staticmethod
    def forward(ctx, x, sizes, dim):
        ctx.shape, ctx.sizes, ctx.dim = x.shape, sizes, dim
        out, start, st = [], 0, x._strides[dim]
        for n in sizes:
            shape = x._shape[:dim] + (n,) + x._shape[dim + 1 :]
            out.append(x._alias(shape, x._strides, x._offset + start * st))
            start += n
        return tuple(out)

    @staticmethod
    def backward(ctx, g):
        if not isinstance(g, tuple):  # one piece: its gradient is the whole one
            return g
        pieces = g
        whole = _tiled(pieces, ctx)
        if whole is not None:
            return whole
        ref = next(p for p in pieces if p is not None)
        out = (creation.zeros if any(p is None for p in pieces) else creation.empty)(
            ctx.shape, dtype=ref.dtype, device=ref.device
        )
        start, st = 0, out._strides[ctx.dim]
        for n, p in zip(ctx.sizes, pieces):
            if p is not None:
                window = out._alias(p.shape, out._strides, start * st)
                dispatch.of(out).assign(window, p)
            start += n
        return out


class Cat(Function):
    @staticmethod
    def forward(ctx, dim, *tensors):
        t0 = tensors[0]
        sizes = ctx.sizes = [t._shape[dim] for t in tensors]
        ctx.dim = dim
        shape = t0._shape[:dim] + (sum(sizes),) + t0._shape[dim + 1 :]
        out = creation.empty(shape, dtype=t0.dtype, device=t0.device)
        start, st, backend = 0, out._strides[dim], dispatch.of(out)
        for n, t in zip(sizes, tensors):  # each input into its window of out
            backend.assign(out._alias(t._shape, out._strides, start * st), t)
            start += n
        return out

    @staticmethod
    def backward(ctx, g):
        return (None,) + tuple(g.split(ctx.sizes, ctx.dim))


class Stack(Function):
    """Same-shape tensors joined along a new dim ``dim``: one node that copies each input
    into its slot, where ``cat`` of unsqueezed inputs would record a view per input too.
    Backward hands each input its slice of the gradient, a view."""

    @staticmethod
    def forward(ctx, dim, *tensors):
        t0 = tensors[0]
        shape = t0._shape[:dim] + (len(tensors),) + t0._shape[dim:]
        out = creation.empty(shape, dtype=t0.dtype, device=t0.device)
        strides, backend = out._strides, dispatch.of(out)
        slot, st = strides[:dim] + strides[dim + 1 :], strides[dim]
        for i, t in enumerate(tensors):
            backend.assign(out._alias(t._shape, slot, i * st), t)
        ctx.dim = dim
        return out

    @staticmethod
    def backward(ctx, g):
        d, shape, strides = ctx.dim, g._shape, g._strides
        piece, slot, st = shape[:d] + shape[d + 1 :], strides[:d] + strides[d + 1 :], strides[d]
        return (None,) + tuple(g._alias(piece, slot, g._offset + i * st) for i in range(shape[d]))


class Tri(Function):
    """tril/triu: keep one triangle of the last two dims."""

    @staticmethod
    def forward(ctx, x, diagonal, upper):
        ctx.diagonal, ctx.upper = diagonal, upper
        return dispatch.of(x).tri(x, diagonal, upper)

    @staticmethod
    def backward(ctx, g):
        return dispatch.of(g).tri(g, ctx.diagonal, ctx.upper)

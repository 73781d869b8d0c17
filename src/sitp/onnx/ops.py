"""The table from captured calls to ONNX nodes: one converter per backend function and
per fused layer (``sitp/compile/capture.py`` records both kinds).

A converter takes the :class:`~sitp.onnx.builder.Builder` and the node as captured in
each trace (one list entry per trace: the example sizes, then one per dynamic axis), adds
ONNX nodes, and binds the node's results. A call with no entry here, or an op of a
backend function that has none (``binary``'s ``atan2``), is refused with an error that
names it: the exporter never writes a file it could not map op for op.
"""

from __future__ import annotations

import math

import numpy as np

from sitp.compile.graph import HostIndex, Ref
from sitp.onnx.builder import OnnxExporterError


def refuse(op: str, why: str = "no ONNX mapping"):
    raise OnnxExporterError(f"sitp.onnx: cannot export op {op!r} ({why})")


def _arg(nodes, i):
    return [n.args[i] for n in nodes]


def _res(nodes):
    return [n.result for n in nodes]


def _np(ref) -> np.dtype:
    return ref.dtype.np if isinstance(ref, Ref) else np.dtype(ref.np_dtype)


# ------------------------------------------------------------------ elementwise
_UNARY = {
    "neg": "Neg",
    "exp": "Exp",
    "log": "Log",
    "sqrt": "Sqrt",
    "tanh": "Tanh",
    "sigmoid": "Sigmoid",
    "relu": "Relu",
    "abs": "Abs",
    "sin": "Sin",
    "cos": "Cos",
    "sign": "Sign",
    "reciprocal": "Reciprocal",
    "floor": "Floor",
    "ceil": "Ceil",
    "round": "Round",  # half to even, as torch
    "erf": "Erf",
}


def gelu(b, x, dt, tanh: bool) -> str:
    """GELU: ONNX's Gelu from opset 20, else written out with Erf (or Tanh)."""
    if b.opset >= 20:
        return b.node("Gelu", [x], approximate="tanh" if tanh else "none")
    half = b.node("Mul", [x, b.scalar(0.5, dt)])
    if tanh:
        x3 = b.node("Mul", [b.node("Mul", [x, x]), x])
        inner = b.node("Add", [x, b.node("Mul", [x3, b.scalar(0.044715, dt)])])
        t = b.node("Tanh", [b.node("Mul", [inner, b.scalar(math.sqrt(2 / math.pi), dt)])])
    else:
        t = b.node("Erf", [b.node("Mul", [x, b.scalar(1 / math.sqrt(2.0), dt)])])
    return b.node("Mul", [half, b.node("Add", [t, b.scalar(1.0, dt)])])


def unary(b, nodes):
    n0 = nodes[0]
    op, x_ref = n0.args[0], n0.args[1]
    p0 = n0.args[2] if len(n0.args) > 2 else n0.kwargs.get("p0", math.nan)
    p1 = n0.args[3] if len(n0.args) > 3 else n0.kwargs.get("p1", math.nan)
    x = b.ref(_arg(nodes, 1))
    dt = y_dt = _np(x_ref)
    one = lambda: b.scalar(1.0, dt)  # noqa: E731
    if op == "logical_not":
        y, y_dt = b.node("Not", [x if dt == np.bool_ else b.cast(x, np.bool_)]), np.dtype(np.bool_)
    elif op in _UNARY:
        y = b.node(_UNARY[op], [x])
    elif op == "pow":
        y = b.node("Pow", [x, b.scalar(p0, dt)])
    elif op == "clamp":
        lo = b.scalar(p0, dt) if p0 == p0 else ""
        hi = b.scalar(p1, dt) if p1 == p1 else ""
        y = b.node("Clip", [x, lo, hi])
    elif op == "square":
        y = b.node("Mul", [x, x])
    elif op == "rsqrt":
        y = b.node("Reciprocal", [b.node("Sqrt", [x])])
    elif op == "log1p":
        y = b.node("Log", [b.node("Add", [x, one()])])
    elif op == "expm1":
        y = b.node("Sub", [b.node("Exp", [x]), one()])
    elif op in ("gelu", "gelu_tanh"):
        y = gelu(b, x, dt, op == "gelu_tanh")
    elif op == "silu":
        y = b.node("Mul", [x, b.node("Sigmoid", [x])])
    elif op in ("log2", "log10"):
        y = b.node("Div", [b.node("Log", [x]), b.scalar(math.log(2 if op == "log2" else 10), dt)])
    elif op == "exp2":
        y = b.node("Pow", [b.scalar(2.0, dt), x])
    else:
        refuse(op)
    if _np(n0.result) != y_dt:
        y = b.cast(y, _np(n0.result))
    b.bind(_res(nodes), y)


_BINARY = {"add": "Add", "sub": "Sub", "mul": "Mul", "div": "Div", "pow": "Pow"}
_BINARY.update(maximum="Max", minimum="Min")
_COMPARE = {"eq": "Equal", "lt": "Less", "le": "LessOrEqual", "gt": "Greater"}
_COMPARE.update(ge="GreaterOrEqual", logical_and="And", logical_or="Or", logical_xor="Xor")


def binary(b, nodes):
    n0 = nodes[0]
    op = n0.args[0]
    x, y = b.ref(_arg(nodes, 1)), b.ref(_arg(nodes, 2))
    dt = _np(n0.args[1])
    if op in _BINARY:
        z = b.node(_BINARY[op], [x, y])
    elif op == "floordiv" and dt.kind == "f":
        z = b.node("Floor", [b.node("Div", [x, y])])
    elif op == "remainder" and dt.kind in "iu":
        z = b.node("Mod", [x, y], fmod=0)  # the sign of the divisor, as torch
    elif op == "remainder" and dt.kind == "f":
        q = b.node("Floor", [b.node("Div", [x, y])])
        z = b.node("Sub", [x, b.node("Mul", [q, y])])
    elif op == "hypot":
        z = b.node("Sqrt", [b.node("Add", [b.node("Mul", [x, x]), b.node("Mul", [y, y])])])
    elif op == "logaddexp":
        m = b.node("Max", [x, y])
        d = b.node("Neg", [b.node("Abs", [b.node("Sub", [x, y])])])
        z = b.node(
            "Add", [m, b.node("Log", [b.node("Add", [b.node("Exp", [d]), b.scalar(1, dt)])])]
        )
    else:
        refuse(op)
    if _np(n0.result) != dt:
        z = b.cast(z, _np(n0.result))
    b.bind(_res(nodes), z)


def compare(b, nodes):
    n0 = nodes[0]
    op = n0.args[0]
    x, y = b.ref(_arg(nodes, 1)), b.ref(_arg(nodes, 2))
    if op.startswith("logical_"):
        if _np(n0.args[1]) != np.bool_:
            x = b.cast(x, np.bool_)
        if _np(n0.args[2]) != np.bool_:
            y = b.cast(y, np.bool_)
    if op == "ne":
        z = b.node("Not", [b.node("Equal", [x, y])])
    elif op in _COMPARE:
        z = b.node(_COMPARE[op], [x, y])
    else:
        refuse(op)
    b.bind(_res(nodes), z)


def where(b, nodes):
    c, x, y = (b.ref(_arg(nodes, i)) for i in range(3))
    b.bind(_res(nodes), b.node("Where", [c, x, y]))


def copy(b, nodes):
    n0 = nodes[0]
    x = b.ref(_arg(nodes, 0))
    if _np(n0.result) != _np(n0.args[0]):
        x = b.cast(x, _np(n0.result))
    else:
        x = b.node("Identity", [x])
    b.bind(_res(nodes), x)


# ------------------------------------------------------------------ along dims
_REDUCE = {"sum": "ReduceSum", "prod": "ReduceProd", "max": "ReduceMax", "min": "ReduceMin"}


def reduce(b, nodes):
    n0 = nodes[0]
    op, x_ref, dims = n0.args[0], n0.args[1], n0.args[2]
    keep = n0.args[3] if len(n0.args) > 3 else n0.kwargs.get("keepdim", False)
    x = b.ref(_arg(nodes, 1))
    out = _np(n0.result)
    if op in ("any", "all"):
        x = b.cast(b.cast(x, np.bool_), np.int32)
        kind = "ReduceMax" if op == "any" else "ReduceMin"
    elif op in _REDUCE:
        kind = _REDUCE[op]
        if _np(x_ref) != out:
            x = b.cast(x, out)
    else:
        refuse(op)
    if not dims:  # no dims: nothing to reduce (the backend's meaning of ())
        y = b.node("Identity", [x])
    else:
        y = b.reduce(kind, x, dims, bool(keep))
    if _np(n0.result) != np.dtype(np.int32) and op in ("any", "all"):
        y = b.cast(y, out)
    b.bind(_res(nodes), y)


def argreduce(b, nodes):
    n0 = nodes[0]
    dim, is_max = n0.args[1], n0.args[2]
    keep = int(bool(n0.args[3] if len(n0.args) > 3 else n0.kwargs.get("keepdim", False)))
    x = b.ref(_arg(nodes, 0))
    values = b.reduce("ReduceMax" if is_max else "ReduceMin", x, [dim], keep)
    idx = b.node("ArgMax" if is_max else "ArgMin", [x], axis=dim, keepdims=keep)
    b.bind([n.result[0] for n in nodes], values)
    b.bind([n.result[1] for n in nodes], idx)


def softmax(b, nodes):
    n0 = nodes[0]
    dim = n0.args[1]
    log = n0.args[2] if len(n0.args) > 2 else n0.kwargs.get("log", False)
    x = b.ref(_arg(nodes, 0))
    b.bind(_res(nodes), b.node("LogSoftmax" if log else "Softmax", [x], axis=dim))


def cumsum(b, nodes):
    x = b.ref(_arg(nodes, 0))
    b.bind(_res(nodes), b.node("CumSum", [x, b.const(np.asarray(nodes[0].args[1], np.int64))]))


def matmul(b, nodes):
    x, y = b.ref(_arg(nodes, 0)), b.ref(_arg(nodes, 1))
    b.bind(_res(nodes), b.node("MatMul", [x, y]))


def linear(b, nodes):
    """``linear(x, w, bias)`` of the CPU backend: x (M, K) @ w.T + bias, one Gemm."""
    n0 = nodes[0]
    ins = [b.ref(_arg(nodes, 0)), b.ref(_arg(nodes, 1))]
    bias = n0.args[2] if len(n0.args) > 2 else n0.kwargs.get("bias")
    if bias is not None:
        ins.append(b.ref([n.args[2] if len(n.args) > 2 else n.kwargs["bias"] for n in nodes]))
    b.bind(_res(nodes), b.node("Gemm", ins, transB=1))


# ------------------------------------------------------------------ indexing
def _index_rows(b, nodes, i):
    """The index tuples of ``take``'s argument ``i``: one flat int64 tensor per row, and
    the number of tuples m in each trace."""
    idx0 = nodes[0].args[i]
    if isinstance(idx0, HostIndex):
        rows = []
        for j in range(len(idx0.refs)):
            t = b.ref([n.args[i].refs[j] for n in nodes])
            rows.append(b.node("Reshape", [t, b.ints([-1])]))
        ms = [math.prod(n.args[i].refs[0].shape) for n in nodes]
        return rows, ms
    if hasattr(idx0, "np_dtype"):  # a raw index array of the program's constants
        arr = b.ref(_arg(nodes, i))
        k = idx0.shape[0]
        rows = [b.node("Gather", [arr, b.ints([j])], axis=0) for j in range(k)]
        rows = [b.node("Reshape", [r, b.ints([-1])]) for r in rows]
        return rows, [n.args[i].shape[1] for n in nodes]
    refuse("take", "an index that is neither a tensor nor a constant array")


def take(b, nodes):
    """x[..., idx tuples, ...] on dims a .. a+k-1 (advanced indexing): a Gather; k > 1
    index tuples become one index into those dims flattened."""
    n0 = nodes[0]
    x_refs, a = _arg(nodes, 0), n0.args[1]
    x = b.ref(x_refs)
    rows, ms = _index_rows(b, nodes, 2)
    k = len(rows)
    shapes = [tuple(r.shape) for r in x_refs]
    if k == 1:
        y = b.node("Gather", [x, rows[0]], axis=a)
    else:
        sizes = b.dims([s[a : a + k] for s in shapes])
        if not all(d.static for d in sizes):
            refuse("take", "advanced indexing on several dynamic dims")
        lin = None
        for j, row in enumerate(rows):
            n = sizes[j].coef
            neg = b.node("Less", [row, b.ints([0])])  # negative entries count from the end
            row = b.node("Where", [neg, b.node("Add", [row, b.ints([n])]), row])
            lin = row if lin is None else b.node("Add", [b.node("Mul", [lin, b.ints([n])]), row])
        flat = b.dims([s[:a] + (math.prod(s[a : a + k]),) + s[a + k :] for s in shapes])
        x = b.node("Reshape", [x, b.shape(flat)])
        y = b.node("Gather", [x, lin], axis=a)
    b.define(n0.result.value, y, [s[:a] + (m,) + s[a + k :] for s, m in zip(shapes, ms)])


def gather(b, nodes):
    x, idx = b.ref(_arg(nodes, 0)), b.ref(_arg(nodes, 2))
    b.bind(_res(nodes), b.node("GatherElements", [x, idx], axis=nodes[0].args[1]))


def tri(b, nodes):
    n0 = nodes[0]
    x = b.ref(_arg(nodes, 0))
    k = b.const(np.asarray(n0.args[1], np.int64))
    b.bind(_res(nodes), b.node("Trilu", [x, k], upper=int(bool(n0.args[2]))))


# ------------------------------------------------------------------ new buffers
def _filled(b, shapes, value, np_dtype) -> str:
    dims = b.dims(shapes)
    v = b.onnx.numpy_helper.from_array(np.asarray([value], np_dtype))
    return b.node("ConstantOfShape", [b.shape(dims)], value=v)


def fill(b, nodes):
    n0 = nodes[0]
    shapes = [tuple(n.args[0]) for n in nodes]
    y = _filled(b, shapes, n0.args[1], n0.args[2].np)
    b.define(n0.result.value, y, shapes)


def empty(b, nodes):
    """An uninitialised buffer: zeros (a program that reads it before writing it reads
    garbage in sitp; here, zeros)."""
    n0 = nodes[0]
    shapes = [tuple(n.args[0]) for n in nodes]
    b.define(n0.result.value, _filled(b, shapes, 0, n0.args[1].np), shapes)


def new(b, nodes):
    n0 = nodes[0]
    shapes = [tuple(n.args[0]) for n in nodes]
    b.bind(_res(nodes), _filled(b, shapes, 0, n0.args[1].np))


def arange(b, nodes):
    n0 = nodes[0]
    dt = n0.args[3].np
    ends = [n.args[1] for n in nodes]
    if n0.args[0] != 0 or n0.args[2] != 1 or any(float(e) != int(e) for e in ends):
        if any(e != ends[0] for e in ends):
            refuse("arange", "a range that changes with a dynamic axis and does not start at 0")
        y = b.const(np.arange(n0.args[0], ends[0], n0.args[2], dtype=dt))
    else:
        end = b.node("Squeeze", [b.shape(b.dims([[int(e)] for e in ends])), b.ints([0])])
        y = b.node("Range", [b.scalar(0, np.int64), end, b.scalar(1, np.int64)])
        if dt != np.int64:
            y = b.cast(y, dt)
    b.define(n0.result.value, y, [(len(range(0, int(e))),) for e in ends])


def assign(b, nodes):
    """dst[...] = src, dst a view of a buffer: the buffer's next version."""
    n0 = nodes[0]
    dst = _arg(nodes, 0)
    src_refs = _arg(nodes, 1)
    src = b.ref(src_refs)
    if any(tuple(s.shape) != tuple(d.shape) for s, d in zip(src_refs, dst)):
        src = b.node("Expand", [src, b.shape(b.dims([d.shape for d in dst]))])
    if _np(src_refs[0]) != _np(dst[0]):
        src = b.cast(src, _np(dst[0]))
    old, canon = b.value_tensor(n0.writes[0][0])
    b.define(n0.writes[0][1], b.write(old, canon, dst, src), canon)


# ------------------------------------------------------------------ fused layers
def layer_linear(b, nodes):
    """Linear.forward(ctx, x, weight, bias): x @ weight.T + bias."""
    n0 = nodes[0]
    x = b.ref(_arg(nodes, 1))
    w = b.ref(_arg(nodes, 2))
    has_bias = n0.args[3] is not None
    if len(n0.args[1].shape) == 2:
        ins = [x, w] + ([b.ref(_arg(nodes, 3))] if has_bias else [])
        y = b.node("Gemm", ins, transB=1)
    else:
        y = b.node("MatMul", [x, b.node("Transpose", [w], perm=[1, 0])])
        if has_bias:
            y = b.node("Add", [y, b.ref(_arg(nodes, 3))])
    b.bind(_res(nodes), y)


def _norm_axis(shape, n) -> int:
    """The first of the trailing dims of ``shape`` whose product is ``n`` (as a negative axis)."""
    acc = 1
    for k in range(1, len(shape) + 1):
        acc *= shape[-k]
        if acc == n:
            return -k
    raise OnnxExporterError(f"sitp.onnx: a norm over {n} entries of a {tuple(shape)} tensor")


def layer_norm(b, nodes):
    """LayerNorm.forward(ctx, x, weight, bias, n, eps): LayerNormalization (opset 17)."""
    n0 = nodes[0]
    x_ref, w_ref, bias_ref, n, eps = n0.args[1:6]
    axis = _norm_axis(x_ref.shape, n)
    dt = _np(x_ref)
    x = b.ref(_arg(nodes, 1))
    nshape = tuple(x_ref.shape[axis:])
    w = b.ref(_arg(nodes, 2)) if w_ref is not None else b.const(np.ones(nshape, dt))
    ins = [x, w] + ([b.ref(_arg(nodes, 3))] if bias_ref is not None else [])
    y = b.node("LayerNormalization", ins, axis=axis, epsilon=float(eps))
    b.bind(_res(nodes), y)


def rms_norm(b, nodes):
    """RMSNorm.forward(ctx, x, weight, n, eps): x / sqrt(mean(x^2) + eps) * weight."""
    n0 = nodes[0]
    x_ref, w_ref, n, eps = n0.args[1:5]
    axis = _norm_axis(x_ref.shape, n)
    dt = _np(x_ref)
    x = b.ref(_arg(nodes, 1))
    axes = range(len(x_ref.shape) + axis, len(x_ref.shape))
    ms = b.reduce("ReduceMean", b.node("Mul", [x, x]), axes, True)
    y = b.node("Div", [x, b.node("Sqrt", [b.node("Add", [ms, b.scalar(eps, dt)])])])
    if w_ref is not None:
        y = b.node("Mul", [y, b.ref(_arg(nodes, 2))])
    b.bind(_res(nodes), y)


def layer_gelu(b, nodes):
    """GELU.forward(ctx, x, approximate)."""
    n0 = nodes[0]
    x = b.ref(_arg(nodes, 1))
    b.bind(_res(nodes), gelu(b, x, _np(n0.args[1]), n0.args[2] == "tanh"))


def _masked_scores(b, nodes, s, mask_i, scale, causal, L_S, dt):
    """scores * scale, then the mask (bool: keep where True; float: added) and the
    causal mask (query i sees keys j <= i), as torch's scaled_dot_product_attention."""
    s = b.node("Mul", [s, b.scalar(scale, dt)])
    mask = nodes[0].args[mask_i]
    if mask is not None:
        m = b.ref(_arg(nodes, mask_i))
        if _np(mask) == np.bool_:
            s = b.node("Where", [m, s, b.scalar(-np.inf, dt)])
        else:
            s = b.node("Add", [s, m])
    if causal:
        ones = _filled(b, L_S, 1, np.int64)
        keep = b.cast(b.node("Trilu", [ones], upper=0), np.bool_)
        s = b.node("Where", [keep, s, b.scalar(-np.inf, dt)])
    return b.node("Softmax", [s], axis=-1)


def attention(b, nodes):
    """Attention.forward(ctx, q, k, v, mask, scale, causal): softmax(q k^T scale + mask) v."""
    n0 = nodes[0]
    q_ref, k_ref = n0.args[1], n0.args[2]
    scale, causal = n0.args[5], n0.args[6]
    dt = _np(q_ref)
    q, k, v = (b.ref(_arg(nodes, i)) for i in (1, 2, 3))
    r = len(k_ref.shape)
    kt = b.node("Transpose", [k], perm=list(range(r - 2)) + [r - 1, r - 2])
    s = b.node("MatMul", [q, kt])
    L_S = [(n.args[1].shape[-2], n.args[2].shape[-2]) for n in nodes]
    p = _masked_scores(b, nodes, s, 4, scale, causal, L_S, dt)
    b.bind(_res(nodes), b.node("MatMul", [p, v]))


def masked_softmax(b, nodes):
    """MaskedSoftmax.forward(ctx, scores, mask, scale, causal)."""
    n0 = nodes[0]
    s = b.ref(_arg(nodes, 1))
    L_S = [tuple(n.args[1].shape[-2:]) for n in nodes]
    p = _masked_scores(b, nodes, s, 2, n0.args[3], n0.args[4], L_S, _np(n0.args[1]))
    b.bind(_res(nodes), p)


def gru_gates(b, nodes):
    """GRUGates.forward(ctx, gi, gh, h): the step of a GRU cell from its two affine maps
    (gates in PyTorch's order r, z, n): h' = (1 - z) n + z h."""
    n0 = nodes[0]
    gi, gh, h = (b.ref(_arg(nodes, i)) for i in (1, 2, 3))
    H = n0.args[3].shape[-1]
    split = b.ints([H, H, H])
    ir, iz, in_ = b.node("Split", [gi, split], n_out=3, axis=-1)
    hr, hz, hn = b.node("Split", [gh, split], n_out=3, axis=-1)
    r = b.node("Sigmoid", [b.node("Add", [ir, hr])])
    z = b.node("Sigmoid", [b.node("Add", [iz, hz])])
    n = b.node("Tanh", [b.node("Add", [in_, b.node("Mul", [r, hn])])])
    y = b.node("Add", [n, b.node("Mul", [z, b.node("Sub", [h, n])])])
    b.bind(_res(nodes), y)


CONVERTERS = {
    "unary": unary,
    "binary": binary,
    "compare": compare,
    "where": where,
    "copy": copy,
    "reduce": reduce,
    "argreduce": argreduce,
    "softmax": softmax,
    "cumsum": cumsum,
    "matmul": matmul,
    "linear": linear,
    "take": take,
    "gather": gather,
    "tri": tri,
    "fill": fill,
    "empty": empty,
    "_new": new,
    "arange": arange,
    "assign": assign,
    "Linear.forward": layer_linear,
    "LayerNorm.forward": layer_norm,
    "RMSNorm.forward": rms_norm,
    "GELU.forward": layer_gelu,
    "Attention.forward": attention,
    "MaskedSoftmax.forward": masked_softmax,
    "GRUGates.forward": gru_gates,
}


def convert(b, nodes) -> None:
    """Adds the ONNX nodes of one captured call (``nodes``: the call in each trace)."""
    n0 = nodes[0]
    fn = CONVERTERS.get(n0.fn)
    if fn is None:
        name = n0.fn
        if name.endswith(".backward"):
            refuse(name, "a backward pass; export the forward in eval mode under no_grad")
        refuse(name.removesuffix(".forward"))
    _same_numbers(n0, nodes)
    fn(b, nodes)


def _floats(a, out: list) -> list:
    if isinstance(a, float):
        out.append(a)
    elif isinstance(a, (list, tuple)):
        for x in a:
            _floats(x, out)
    return out


def _same_numbers(n0, nodes) -> None:
    """The float arguments (an exponent, a scale, a fill value) are written from the
    first trace: they must not change with a dynamic axis."""
    want = _floats(list(n0.args) + list(n0.kwargs.values()), [])
    for n in nodes[1:]:
        got = _floats(list(n.args) + list(n.kwargs.values()), [])
        if any(g != w and not (g != g and w != w) for g, w in zip(got, want)):
            raise OnnxExporterError(
                f"sitp.onnx: a number argument of {n0.op!r} changes with a dynamic axis "
                f"({want} and {got}); export with static sizes"
            )

"""Rules: decompose a fused layer into primitives, then fuse primitives into a GEMM (6.2).

Two kinds of rewrite, each a pattern on the graph and a replacement, written once for
every model rather than for one:

* **Decompositions** (:func:`decompose`) replace an opaque layer call by the backend's
  primitives, so that fusion sees inside it. ``GELU.forward(x)`` becomes one pointwise
  ``unary("gelu", x)`` and ``GELU.backward(g)`` becomes ``g * unary("gelu_grad", x)``,
  reading the forward's ``x`` instead of its Context (as PyTorch's decompositions
  and AOTAutograd's joint graph do). The pointwise nodes then fuse with their
  neighbours like any others. ``GRUGates.forward(gi, gh, h)`` becomes the cell's
  dozen ops on column slices of gi and gh (one generated kernel), and
  ``GRUGates.backward(g)`` recomputes r, z and n from gi, gh and h and ends in one
  ``pack`` node: the three gates' gradients stored side by side in the rows of
  d(gi) and of d(gh), and dh, by one loop nest (``codegen.generate``).
* **GEMM epilogues** (:func:`gemm_epilogues`): a matrix product whose result a generated
  pointwise kernel reads, over the same rows, runs that kernel's loop body on each block
  of rows right after the block's register tiles are stored, while it is in L1
  (``codegen.generate_gemm``). Two products have the rule: a ``Linear.forward``
  (``h = x W^T + b``, stored, since the backward reads it too; then the kernel on h)
  and the input gradient of a ``Linear.backward`` (``dx = g W``, then the kernel on dx,
  its only reader: dx itself is never stored). A GPT's MLP gets both
  from the GELU's decomposition: ``gelu(x W1^T + b1)`` in the forward and
  ``(g W2) * gelu'(h)`` in the backward, the two hand-written kernels that
  ``lower.lower_mlp`` had for them.
"""

from __future__ import annotations

import numba
import numpy as np

from sitp.compile import codegen, lower, tune
from sitp.compile.dynamic import prod
from sitp.compile.graph import CtxArg, Graph, Node, Ref, Value, contiguous
from sitp.kernels.cpu import blas

_FLOATS = ("float32", "float64")


# ------------------------------------------------------------------ decompositions
def _gelu_op(approximate: str) -> str | None:
    return {"none": "gelu", "tanh": "gelu_tanh"}.get(approximate)


def _pointwise(g: Graph, fn: str, args: tuple, value: Value, shape, dtype, cls) -> Node:
    """A new pointwise node that writes ``value`` (whole, row-major, of ``shape``)."""
    n = Node(g.new_id(), fn, args, {})
    n.outputs = [value]
    n.result = Ref(value, shape, contiguous(shape), 0, dtype, cls)
    value.producer = n
    return n


def decompose(g: Graph) -> int:
    """Replace ``GELU.forward``/``GELU.backward`` and ``GRUGates.forward``/``.backward``
    nodes by pointwise primitives; returns how many nodes were replaced. A backward is
    decomposed when its Context's producer (in this graph or, for a split backward
    graph, the forward graph's) is the layer's forward, whose inputs it can read; a
    forward when nothing but decomposed backwards reads its Context."""
    live = g.live_values()
    written = {old.id for n in g.nodes for old, _ in n.writes}
    out, count = [], 0
    for n in g.nodes:
        if n.fn == "GRUGates.backward" and (new := _gru_backward(g, n, written)):
            out += new
            count += 1
            continue
        if n.fn == "GELU.backward" and len(n.args) == 2 and not n.kwargs:
            cv, gy = n.args
            fwd = cv.value.producer if isinstance(cv, CtxArg) else None
            res = n.result[0] if isinstance(n.result, tuple) else n.result
            if (
                fwd is not None
                and fwd.fn == "GELU.forward"
                and len(fwd.args) == 3
                and _gelu_op(fwd.args[2]) is not None
                and isinstance(gy, Ref)
                and isinstance(res, Ref)
                and res.contiguous_whole()
                and len(n.outputs) == 1
                and not n.writes
            ):
                x = fwd.args[1]
                if x.dtype.name in _FLOATS and gy.dtype is x.dtype and res.dtype is x.dtype:
                    shape = tuple(res.shape)
                    d = Value(g.new_id(), res.value.size, res.value.np_dtype, "node")
                    op = _gelu_op(fwd.args[2]) + "_grad"
                    t = _pointwise(g, "unary", (op, x), d, shape, x.dtype, res.cls)
                    m = _pointwise(g, "binary", ("mul", gy, t.result), res.value, shape,
                                   x.dtype, res.cls)  # fmt: skip
                    t.where = m.where = n.where
                    out += [t, m]
                    count += 1
                    continue
        out.append(n)
    g.nodes = out
    users = g.users()
    out = []
    for n in g.nodes:
        ctx_v = n.outputs[0] if n.outputs else None
        readers = [u for u in users.get(ctx_v.id, []) if u is not n] if ctx_v else [None]
        free = ctx_v is not None and ctx_v.id not in live and not readers
        if n.fn == "GRUGates.forward" and free and (new := _gru_forward(g, n)):
            out += new
            count += 1
            continue
        if n.fn == "GELU.forward" and len(n.args) == 3 and not n.kwargs:
            cv, x, approximate = n.args
            op = _gelu_op(approximate)
            res = n.result
            if (
                op is not None
                and free
                and isinstance(x, Ref)
                and isinstance(res, Ref)
                and res.contiguous_whole()
                and x.dtype.name in _FLOATS
                and len(n.outputs) == 2
            ):
                m = _pointwise(g, "unary", (op, x), res.value, tuple(res.shape), x.dtype, res.cls)
                m.where = n.where
                out.append(m)
                count += 1
                continue
        out.append(n)
    g.nodes = out
    return count


class _Ops:
    """Appends pointwise nodes over one index space ``shape``, of the dtype and tensor
    class of Ref ``like``, each writing a new Value; returns their results as Refs."""

    def __init__(self, g: Graph, like: Ref, shape, where):
        self.g, self.like, self.shape, self.where = g, like, tuple(shape), where
        self.size, self.np_dtype = prod(self.shape), like.value.np_dtype
        self.nodes = []
        one = Value(g.new_id(), 1, self.np_dtype, "literal", array=np.ones(1, self.np_dtype))
        g.consts.append(one)
        self.one = Ref(one, (), (), 0, like.dtype, like.cls)  # the 1 of 1 - z

    def __call__(self, fn, *args) -> Ref:
        v = Value(self.g.new_id(), self.size, self.np_dtype, "node")
        n = _pointwise(self.g, fn, args, v, self.shape, self.like.dtype, self.like.cls)
        n.where = self.where
        self.nodes.append(n)
        return n.result


def _gru_inputs(n: Node, written):
    """(gi, gh, h, H) of a ``GRUGates.forward`` node the rules can decompose, or None:
    Refs of one float dtype, gi and gh of shape (..., 3H) for h of (..., H), none of
    them written in place (the backward reads them again)."""
    if len(n.args) != 4 or n.kwargs or not isinstance(n.args[0], CtxArg):
        return None
    gi, gh, h = n.args[1:]
    if not all(isinstance(r, Ref) for r in (gi, gh, h)) or not h.shape:
        return None
    H = h.shape[-1]
    if H == 0 or h.dtype.name not in _FLOATS or not (gi.dtype is gh.dtype is h.dtype):
        return None
    if tuple(gi.shape) != tuple(gh.shape) or tuple(gi.shape) != tuple(h.shape[:-1]) + (3 * H,):
        return None
    if any(r.value.id in written for r in (gi, gh, h)):
        return None
    return gi, gh, h, H


def _gate(r: Ref, j: int, H: int) -> Ref:
    """Columns j H .. (j + 1) H of a (..., 3H) view: gate j (r, z, n) of gi or gh."""
    shape = tuple(r.shape[:-1]) + (H,)
    return Ref(r.value, shape, r.strides, r.offset + j * H * r.strides[-1], r.dtype, r.cls)


def _gru_gates(ops: _Ops, gi: Ref, gh: Ref, H: int):
    """r, z, n and h_n of the cell, as ``sitp.kernels.cpu.fused.gru`` computes them."""
    add, sig = (lambda a, b: ops("binary", "add", a, b)), (lambda a: ops("unary", "sigmoid", a))
    r = sig(add(_gate(gi, 0, H), _gate(gh, 0, H)))
    z = sig(add(_gate(gi, 1, H), _gate(gh, 1, H)))
    h_n = _gate(gh, 2, H)
    n = ops("unary", "tanh", add(_gate(gi, 2, H), ops("binary", "mul", r, h_n)))
    return r, z, n, h_n


def _gru_forward(g: Graph, n: Node):
    """``GRUGates.forward``'s primitives, h' = (1 - z) n + z h, or None."""
    parts = _gru_inputs(n, set())
    res = n.result
    if parts is None or not isinstance(res, Ref) or not res.contiguous_whole():
        return None
    gi, gh, h, H = parts
    if len(n.outputs) != 2 or tuple(res.shape) != tuple(h.shape) or res.dtype is not h.dtype:
        return None
    ops = _Ops(g, h, h.shape, n.where)
    r, z, nn, _ = _gru_gates(ops, gi, gh, H)
    keep = ops("binary", "mul", ops("binary", "sub", ops.one, z), nn)
    new = ops("binary", "mul", z, h)
    last = _pointwise(g, "binary", ("add", keep, new), res.value, tuple(res.shape), h.dtype,
                      res.cls)  # fmt: skip
    last.where = n.where
    return ops.nodes + [last]


def _gru_backward(g: Graph, n: Node, written):
    """``GRUGates.backward``'s primitives, ending in one ``pack`` node, or None.

    For upstream gradient g: dh = g z, da_n = g (1 - z)(1 - n^2), da_z = g (h - n) z (1 - z),
    da_r = da_n h_n r (1 - r); d(gi) = (da_r, da_z, da_n), d(gh) = (da_r, da_z, da_n r),
    the three side by side in each row. The pack stores each part at its view of the
    gradient it belongs to; a gradient the backward does not return (None) has none.
    """
    if len(n.args) != 2 or n.kwargs or not isinstance(n.args[0], CtxArg) or n.writes:
        return None
    cv, gy = n.args
    fwd = cv.value.producer
    res = n.result
    if fwd is None or fwd.fn != "GRUGates.forward" or not isinstance(gy, Ref):
        return None
    parts = _gru_inputs(fwd, written)
    if parts is None or not isinstance(res, tuple) or len(res) != 3:
        return None
    gi, gh, h, H = parts
    if gy.dtype is not h.dtype or tuple(gy.shape) != tuple(h.shape):
        return None
    for d, shape in zip(res, (tuple(gi.shape), tuple(gi.shape), tuple(h.shape))):
        if d is not None and not (
            isinstance(d, Ref)
            and d.contiguous_whole()
            and tuple(d.shape) == shape
            and d.value.size == int(np.prod(shape))
            and d.dtype is h.dtype
            and d.value.producer is n
        ):
            return None
    outs = [r for r in res if r is not None]
    if not outs or [r.value for r in outs] != list(n.outputs):
        return None
    ops = _Ops(g, h, h.shape, n.where)
    r, z, nn, h_n = _gru_gates(ops, gi, gh, H)
    mul, sub = (lambda a, b: ops("binary", "mul", a, b)), (lambda a, b: ops("binary", "sub", a, b))
    one_z = sub(ops.one, z)
    dh = mul(gy, z)
    da_n = mul(mul(gy, one_z), sub(ops.one, mul(nn, nn)))
    da_z = mul(mul(mul(gy, sub(h, nn)), z), one_z)
    da_r = mul(mul(mul(da_n, h_n), r), sub(ops.one, r))
    columns = ((da_r, da_z, da_n), (da_r, da_z, mul(da_n, r)), (dh,))  # d(gi), d(gh), dh
    layout, stored = [], []
    for o, ref in enumerate(outs):
        k = res.index(ref)
        for j, part in enumerate(columns[k]):  # gate j at columns j H .. (j + 1) H
            layout.append((o, j * H, contiguous(ref.shape)))
            stored.append(part)
    pack = Node(g.new_id(), "pack", (tuple(layout),) + tuple(stored), {})
    pack.outputs, pack.result, pack.where = list(n.outputs), res, n.where
    for v in pack.outputs:
        v.producer = pack
    pack.lowered = _pack_step  # run as it is only without the fusion pass
    return ops.nodes + [pack]


def _pack_step(node: Node):
    """A ``pack`` node as numpy copies, for a graph compiled without the fusion pass."""
    layout, parts = node.args[0], node.args[1:]
    outs = [(v.id, v.size, v.np_dtype) for v in node.outputs]

    def view(a, r, offset, strides):
        st = tuple(a.itemsize * s for s in strides)
        return np.lib.stride_tricks.as_strided(a[offset:], r.shape, st)

    def step(env):
        bufs = [np.empty(size, dt) for _, size, dt in outs]
        for (o, offset, strides), r in zip(layout, parts):
            view(bufs[o], r, offset, strides)[...] = view(env[r.value.id], r, r.offset, r.strides)
        for (vid, _, _), buf in zip(outs, bufs):
            env[vid] = buf

    return step


# ------------------------------------------------------------------ GEMM epilogues
def _epilogue_kernel(users, value, rows, cols, only: bool):
    """A generated pointwise kernel node that reads ``value`` whole over an index space of
    ``rows`` x ``cols`` entries (its last dim ``cols``): the first such reader, or, with
    ``only``, the reader when it is the only one (the product is then never stored)."""
    us = users.get(value.id, [])
    if only and len(us) != 1:
        return None
    for kn in us:
        k = kn.kernel
        if kn.fn != "kernel" or kn.lowered is not None or k is None:
            continue
        if k.root.fn in ("reduce", "pack") or k.extra or k.epilogue is not None:
            continue
        space = tuple(k.root.result.shape)
        if not space or space[-1] != cols or int(np.prod(space)) != rows * cols:
            continue
        whole = all(  # every read of the product's result is whole, row-major
            r.contiguous_whole() and tuple(r.shape) == space
            for m in k.nodes
            for r in m.refs()
            if r.value is value
        )
        if whole and value.id not in k.virtual:
            return kn
    return None


def gemm_epilogues(g: Graph) -> int:
    """Fuse each ``Linear.forward`` and the input gradient of each ``Linear.backward``
    with the one generated pointwise kernel that reads its product (see the module);
    returns how many pairs were fused. Only products the lowering pass turned into
    steps on arrays qualify (``lower.linear_step``, and the backward of such a step)."""
    users = g.users()
    live = g.live_values()
    pos = {n.id: i for i, n in enumerate(g.nodes)}
    drop, count = set(), 0
    for i, n in enumerate(g.nodes):
        if n.fn == "Linear.forward" and len(n.outputs) == 2 and lower._linear_fits(n):
            c = n.result.value
            M, N = prod(n.result.shape[:-1]), n.result.shape[-1]
        elif n.fn == "Linear.backward" and (parts := lower._linear_backward_parts(n)):
            rdx = parts[2][0]
            if rdx is None or rdx.value.id in live or not lower._is_lowered_linear(parts[0]):
                continue
            c = rdx.value
            M, N = prod(parts[1].shape[:-1]), rdx.shape[-1]
        else:
            continue
        # the forward's product is stored (the backward reads it), the backward's not
        kn = _epilogue_kernel(users, c, M, N, only=n.fn == "Linear.backward")
        if kn is None or kn.id in drop:
            continue
        if any(  # what the kernel reads besides the product is there when the product runs
            v is not c and v.producer is not None and pos.get(v.producer.id, i) >= i
            for v in kn.kernel.leaves
        ):
            continue
        if n.fn == "Linear.forward":
            _fuse_forward(n, kn)
        else:
            _fuse_backward(n, parts, kn)
        drop.add(kn.id)
        count += 1
    g.nodes = [n for n in g.nodes if n.id not in drop]
    return count


def _load(source, name):
    fn = codegen.load(source, name)
    return fn, codegen.load_serial(source, name)


def _standalone(k):
    """The epilogue as a pointwise kernel of its own, reading the product as a leaf: what
    the autotuner's ``fuse="apart"`` runs after the backend's product (``tune.py``).
    Returns (source, its leaves' Value ids, its size arguments); written before
    ``codegen.generate_gemm``, which sets the kernel's leaves and sizes for the GEMM."""
    source = codegen.generate(k)
    return source, [v.id for v in k.leaves], list(k.syms)


def _choices(k, fn, serial, apart_source, kind, has_bias, c_id, leaves):
    """The autotuner's choices for a GEMM with an epilogue (``tune.Choices``): the fused
    kernel (its serial twin, its block size) or the backend's product, then the epilogue
    apart. The call's arrays are the fused kernel's, ``[A, B, bias, *leaves, out, *sizes]``;
    a run returns the product's buffer."""
    source, ids, syms = apart_source
    c_pos = leaves.index(c_id)
    n = len(leaves)
    pos = [leaves.index(i) for i in ids]  # the standalone kernel's leaves among the fused's

    loaded = []  # the standalone kernel and its twin, loaded at the first run apart

    def apart(args, one):
        if not loaded:
            loaded.extend([codegen.load(source, k.name), codegen.load_serial(source, k.name)])
        par, ser = loaded
        run = ser if one and ser is not None else par
        A, B, bias = args[0], args[1], args[2]
        c = blas.matmul(A, B.T if kind == "xwT" else B, bias if has_bias else None)
        c = c.reshape(-1)
        run(*[c if i == c_pos else args[3 + i] for i in pos], args[3 + n], *syms)
        return c

    def fused(version):  # the fused kernel, returning its product's buffer
        def run(*a):
            version(*a)
            return a[3 + c_pos]

        return run

    twin = fused(serial) if serial is not None else None
    return tune.Choices(fused(fn), twin, apart, rows=True)


def _fuse_forward(n, kn):
    """Node ``n`` (a Linear.forward) takes over kernel ``kn``: it writes h and the
    kernel's output, and leaves the Linear's Context."""
    k = kn.kernel
    _, rx, rw, rb = n.args
    M, K = prod(rx.shape[:-1]), rx.shape[-1]
    N = rw.shape[0]
    apart = _standalone(k)
    source = codegen.generate_gemm(k, "xwT", M, K, N, rb is not None, n.result.value)
    k.source = source
    n.kernel = k  # (the graph's table prints the epilogue's ops)
    out_v = k.out
    out_v.producer = n
    n.outputs = n.outputs + [out_v]
    n.args = n.args + tuple(
        Ref(v, (v.size,), (1,), 0, None, None) for v in k.leaves if v is not n.result.value
    )
    n.lowered = lambda node, k=k, src=source, a=apart: _forward_step(node, k, src, a)


def _forward_step(n, k, source, apart):
    cv = n.outputs[0]
    _, rx, rw, rb = n.args[:4]
    rh = n.result
    M, K = int(np.prod(rx.shape[:-1])), rx.shape[-1]
    N = rw.shape[0]
    np_dt = rh.value.np_dtype
    x_shape = tuple(rx.shape)
    h_id, out_v = rh.value.id, k.out
    leaves = [v.id for v in k.leaves]
    syms = list(k.syms)  # the GEMM's size arguments (codegen._Emitter.num)
    small = k.small  # (a dynamic entry's parallel GEMM at a small size: the serial one)
    fn, serial = _load(source, k.name + "_gemm")
    pick = None
    if tune.current():  # tune.py
        choices = _choices(k, fn, serial, apart, "xwT", rb is not None, h_id, leaves)
        pick = tune.picker(source, choices)

    def step(env):
        xa, wa = env[rx.value.id].reshape(M, K), env[rw.value.id].reshape(N, K)
        ba = env[rb.value.id] if rb is not None else np.empty(0, np_dt)
        env[h_id] = np.empty(M * N, np_dt)
        out = np.empty(out_v.size, out_v.np_dtype)
        args = [xa, wa, ba, *[env[i] for i in leaves], out, *syms]
        if pick is None:
            one = small or numba.get_num_threads() == 1
            (serial if serial is not None and one else fn)(*args, 1)
        else:
            env[h_id] = pick(args)(*args)  # the product: the fused kernel's buffer, or apart's
        env[out_v.id] = out
        env[cv.id] = lower._linear_context(
            cv, lower._tensor(rx, env, (M, K)), lower._tensor(rw, env), x_shape
        )

    return step


def _fuse_backward(n, parts, kn):
    """Node ``n`` (a Linear.backward) takes over kernel ``kn``, which reads its dx."""
    k = kn.kernel
    cv, rg, (rdx, rdw, rdb) = parts
    M = prod(rg.shape[:-1])
    N = rg.shape[-1]
    K = rdx.shape[-1]
    apart = _standalone(k)
    source = codegen.generate_gemm(k, "gw", M, N, K, False, rdx.value)
    k.source = source
    n.kernel = k
    out_v = k.out
    out_v.producer = n
    n.outputs = [v for v in n.outputs if v is not rdx.value] + [out_v]
    n.args = n.args + tuple(Ref(v, (v.size,), (1,), 0, None, None) for v in k.leaves
                            if v is not rdx.value)  # fmt: skip
    n.lowered = lambda node, p=parts, k=k, src=source, a=apart: _backward_step(node, p, k, src, a)


def _backward_step(n, parts, k, source, apart):
    cv, rg, (rdx, rdw, rdb) = parts
    np_dt = rg.value.np_dtype
    dx_id, out_v = rdx.value.id, k.out
    size = rdx.value.size
    leaves = [v.id for v in k.leaves]
    syms = list(k.syms)  # the GEMM's size arguments (codegen._Emitter.num)
    small = k.small  # (a dynamic entry's parallel GEMM at a small size: the serial one)
    fn, serial = _load(source, k.name + "_gemm")
    pick = None
    if tune.current():  # tune.py
        pick = tune.picker(source, _choices(k, fn, serial, apart, "gw", False, dx_id, leaves))

    def step(env):
        ctx, x_MK, wa, g = lower._linear_backward_inputs(env, cv, rg)
        lower._weight_grads(env, ctx, x_MK, g, rdw, rdb, np_dt)
        env[dx_id] = np.empty(size, np_dt)
        out = np.empty(out_v.size, out_v.np_dtype)
        args = [g, wa, np.empty(0, np_dt), *[env[i] for i in leaves], out, *syms]
        if pick is None:
            one = small or numba.get_num_threads() == 1
            (serial if serial is not None and one else fn)(*args, 1)
        else:
            pick(args)(*args)
        del env[dx_id]
        env[out_v.id] = out

    return step

"""Code generation (6.3): Python source for a numba kernel per fused group.

A :class:`Kernel` computes one buffer: a pointwise expression over its index space (the
root's shape), or a reduction of such an expression over some dims (the reduction is the
epilogue of the chain: ``sum(exp(x - m), -1)`` is one loop nest), or several pointwise
expressions over one index space, each stored at its own view of the kernel's buffers (a
``pack`` node of ``rules.py``: the GRU's three gate gradients, side by side in the rows
of one gradient, as one loop nest that computes the gates once). The leaves are the
buffers the group reads, each through its view's strides and offset, written into the
source as constants; a broadcast operand simply drops the dims it is broadcast along.

The source is plain Python, to be read: one loop per dim, ``prange`` on the outermost
when the index space is large (with a serial twin of the same loops, which a call on
one thread runs: starting numba's thread pool costs about 20 us), one line per fused
op, each cast to the op's dtype as the eager backend's store does. The scalar functions
are those of ``sitp/kernels/scalar.py`` (the same ones the eager kernels inline), so a
compiled float64 chain gives eager's bits.
The CPU source is written to a file named by its hash under the package's numba cache
directory (``sitp/_env.py``: a directory keyed by the CPU and the kernel sources), and
compiled with ``njit(cache=True)``, so a second session loads it from disk. The same
generator writes a Numba CUDA kernel (``target="cuda"``): one thread per output entry.
"""

from __future__ import annotations

import hashlib
import importlib.util
import math
import os
import sys

import numpy as np

from sitp import _env
from sitp.compile.dynamic import SymInt
from sitp.kernels.scalar import BINARY, COMPARE, UNARY

PARALLEL_MIN = 1 << 16  # entries of the index space from which the outer loop is a prange
SERIAL = "_serial"  # suffix of a parallel kernel's serial twin, which a one-thread call runs

_NP = {
    "float32": "np.float32",
    "float64": "np.float64",
    "int64": "np.int64",
    "bool": "np.bool_",
}
_DIRECT_UNARY = {
    "neg": "(-{x})",
    "exp": "math.exp({x})",
    "tanh": "math.tanh({x})",
    "square": "({x} * {x})",
    "sin": "math.sin({x})",
    "cos": "math.cos({x})",
    "abs": "abs({x})",
}
_VEC32 = {"exp": "exp_f32({x})", "tanh": "tanh_f32({x})", "sigmoid": "sigmoid_f32({x})"}
# GELU and its derivative (the decomposition of the GELU layer, rules.py): the fused
# layer's own element functions, so that the generated loop computes eager's values
_GELU = ("gelu", "gelu_tanh", "gelu_grad", "gelu_tanh_grad")
_DIRECT_BINARY = {"add": "({a} + {b})", "sub": "({a} - {b})", "mul": "({a} * {b})"}
_DIRECT_COMPARE = {
    "eq": "({a} == {b})",
    "ne": "({a} != {b})",
    "lt": "({a} < {b})",
    "le": "({a} <= {b})",
    "gt": "({a} > {b})",
    "ge": "({a} >= {b})",
}


_F_SUFFIX = {"float32": "f32", "float64": "f64"}
_HEADER = [
    "import math",
    "",
    "import numpy as np",
    "from numba import njit, prange",
    "",
    "from sitp.kernels.cpu.kernels import binary, compare, unary",
    "from sitp.kernels.cpu.vecmath import exp_f32",
    "from sitp.compile.scalars import sigmoid_f32, tanh_f32",
]
_GELU_IMPORT = "from sitp.kernels.cpu.fused.gelu import {names}"


def _header(em) -> list:
    """The imports of a CPU source: the GELU element functions only where it calls one."""
    lines = list(_HEADER)
    used = sorted({n for n in em.gelu_used})
    if used:
        lines.append(_GELU_IMPORT.format(names=", ".join(used)))
    return lines


def _lit(p) -> str:
    if isinstance(p, float) and math.isnan(p):
        return "math.nan"
    if isinstance(p, float) and math.isinf(p):
        return "math.inf" if p > 0 else "-math.inf"
    return repr(float(p)) if isinstance(p, float) else repr(p)


def dtype_name(d) -> str:
    return d.name if hasattr(d, "name") and not isinstance(d, np.dtype) else str(d)


class Kernel:
    """One generated kernel: ``nodes`` fused into a loop nest writing ``out`` (a Value).

    ``leaves`` are the Values it reads, in parameter order; ``root`` is the last node (a
    pointwise op or a reduce); ``virtual`` maps a fused value's id to its node.
    """

    def __init__(self, root, nodes, virtual):
        self.root, self.nodes, self.virtual = root, list(nodes), dict(virtual)
        self.out = root.outputs[0]
        self.extra = []  # pointwise nodes whose values the kernel also stores
        self.epilogue = None  # a pointwise kernel applied to the reduced value before its store
        self.leaves = []
        self.name = f"k{root.id}"
        self.fn = None
        self.source = None
        self.syms = []  # the values of its size arguments (codegen._Emitter.num), in order
        self.small = False  # below PARALLEL_MIN: a call runs the serial twin

    def outs(self) -> list:
        if self.root.fn == "pack":  # its buffers, each written at the views its layout names
            return list(self.root.outputs)
        return [self.out] + [n.outputs[0] for n in self.extra]

    def summary(self) -> str:
        ops = " -> ".join(n.op for n in self.nodes)
        return f"{self.name}({', '.join(v.name for v in self.leaves)}): {ops}"


class _Emitter:
    """Builds the body of one kernel: a line per op, memoised by (node, index)."""

    def __init__(self, kernel: Kernel):
        self.k = kernel
        self.lines: list[str] = []
        self.memo: dict = {}
        self.params: dict = {}  # leaf value id -> parameter name
        self.reduced = None  # (value id, variable) of a reduction's result, in an epilogue
        self.target = "cpu"
        self.gelu_used: set = set()
        self.syms: dict = {}  # the polynomial of a SymInt (its .p) -> its argument's name
        kernel.syms = []  # the values of those arguments, in order
        self.unsigned = _symbolic(kernel)  # every index unsigned: see _unsigned

    def num(self, x) -> str:
        """An integer of the source: a literal, or, for a size on the batch size's line
        (a :class:`~sitp.compile.dynamic.SymInt`), the name of an argument that the
        runtime passes, so that every batch size gets the same source."""
        if isinstance(x, SymInt):
            key = x.p
            if key not in self.syms:
                self.syms[key] = f"n{len(self.syms)}"
                self.k.syms.append(int(x))
            return self.syms[key]
        return str(int(x))

    def sym_params(self) -> str:
        return "".join(f", {n}" for n in self.syms.values())

    def param(self, value) -> str:
        if value.id not in self.params:
            self.params[value.id] = f"a{len(self.params)}"
            self.k.leaves.append(value)
        return self.params[value.id]

    def ref(self, r, idx) -> str:
        """The entry of view ``r`` at index ``idx`` (one index expression per dim of r)."""
        if self.reduced is not None and r.value.id == self.reduced[0]:
            return self.reduced[1]
        node = self.k.virtual.get(r.value.id)
        if node is not None:
            return self.node(node, idx)
        terms = [self.num(r.offset)] if r.offset else []
        for i, st, n in zip(idx, r.strides, r.shape):
            if i == "0" or st == 0 or n == 1:
                continue
            terms.append(i if st == 1 and not isinstance(st, SymInt) else f"{i} * {self.num(st)}")
        pos = _unsigned(" + ".join(terms) or "0", [r.offset, *r.strides], self.unsigned)
        key = ("leaf", r.value.id, pos)
        if key not in self.memo:
            name = f"x{len(self.memo)}"
            self.lines.append(f"{name} = {self.param(r.value)}[{pos}]")
            self.memo[key] = name
        return self.memo[key]

    def operand(self, r, idx, shape) -> str:
        """Operand ``r`` of an op whose result has ``shape``, read at ``idx`` (broadcast)."""
        lead = len(shape) - len(r.shape)
        sub = tuple(
            idx[lead + j] if r.shape[j] == shape[lead + j] else "0" for j in range(len(r.shape))
        )
        return self.ref(r, sub)

    def node(self, n, idx) -> str:
        key = (n.id, tuple(idx))
        if key in self.memo:
            return self.memo[key]
        shape = n.result.shape
        fn, a = n.fn, n.args
        if fn == "unary":
            x = self.operand(a[1], idx, shape)
            p0 = a[2] if len(a) > 2 else n.kwargs.get("p0", math.nan)
            p1 = a[3] if len(a) > 3 else n.kwargs.get("p1", math.nan)
            op = a[0]
            if op in _DIRECT_UNARY:
                e = _DIRECT_UNARY[op].format(x=x)
            else:
                e = f"unary({UNARY[op]}, {x}, {_lit(p0)}, {_lit(p1)})"
            if n.result.dtype.name == "float32" and op in _VEC32:
                e = _VEC32[op].format(x=x)  # vectorisable; eager calls libm (a few ulp apart)
            if op in _GELU and self.target == "cpu" and n.result.dtype.name in _F_SUFFIX:
                suffix = _F_SUFFIX[n.result.dtype.name]
                e = f"{op}_{suffix}({_NP[n.result.dtype.name]}({x}))"
                self.gelu_used.add(f"{op}_{suffix}")
        elif fn == "binary":
            x, y = self.operand(a[1], idx, shape), self.operand(a[2], idx, shape)
            op = a[0]
            e = (
                _DIRECT_BINARY[op].format(a=x, b=y)
                if op in _DIRECT_BINARY
                else f"binary({BINARY[op]}, {x}, {y})"
            )
        elif fn == "compare":
            x, y = self.operand(a[1], idx, shape), self.operand(a[2], idx, shape)
            op = a[0]
            e = (
                _DIRECT_COMPARE[op].format(a=x, b=y)
                if op in _DIRECT_COMPARE
                else f"compare({COMPARE[op]}, {x}, {y})"
            )
        elif fn == "where":
            c = self.operand(a[0], idx, shape)
            x, y = self.operand(a[1], idx, shape), self.operand(a[2], idx, shape)
            e = f"({x} if {c} else {y})"
        elif fn == "copy":
            e = self.operand(a[0], idx, shape)
        else:  # pragma: no cover - the fusion pass only fuses the ops above
            raise ValueError(f"cannot generate code for {fn}")
        name = f"t{n.id}"
        self.lines.append(f"{name} = {_NP[n.result.dtype.name]}({e})  # {n.op}")
        self.memo[key] = name
        return name


def _contig(shape):
    st, acc = [], 1
    for n in reversed(shape):
        st.append(acc)
        acc = acc * n  # (a SymInt keeps its line)
    return tuple(reversed(st))


def _pos(idx, shape, num=str, unsigned=False) -> str:
    terms = []
    strides = _contig(shape)
    for i, st, n in zip(idx, strides, shape):
        if n == 1:
            continue
        terms.append(i if st == 1 and not isinstance(st, SymInt) else f"{i} * {num(st)}")
    return _unsigned(" + ".join(terms) or "0", strides, unsigned)


def _unsigned(pos: str, numbers, force=False) -> str:
    """The index of a kernel with size arguments, or of a parallel one, made unsigned:
    numba wraps a signed index that may be negative (``i + len`` when ``i < 0``); with
    every bound a constant, LLVM proves that none is and drops the test, but with a loop
    bound or a stride an argument it cannot, and the test stays in the loop and keeps it
    from vectorising (a GEMM epilogue ran 1.5 times slower). Nor can it in a ``prange``'s
    body, whose index numba's thread scheduler hands in: there the loads became gathers,
    and a parallel GEMM epilogue ran 3.9 times slower than its serial twin on one thread,
    and 2 times slower on two (the GELU backward's, 768 x 512, on the Xeon of 6.4)."""
    if (force or any(isinstance(x, SymInt) for x in numbers)) and not pos.isdigit():
        return f"np.uint64({pos})"
    return pos


def _symbolic(kernel) -> bool:
    """Whether a size of the kernel's views is a :class:`SymInt` (a dynamic entry's)."""
    for n in kernel.nodes:
        views = list(n.refs()) + ([n.result] if hasattr(n.result, "shape") else [])
        for r in views:
            if any(isinstance(x, SymInt) for x in (*r.shape, *r.strides, getattr(r, "offset", 0))):
                return True
        if n.fn == "pack":
            for _, offset, strides in n.args[0]:
                if any(isinstance(x, SymInt) for x in (offset, *strides)):
                    return True
    return False


_INIT = {
    "sum": "0",
    "prod": "1",
    "max": "-math.inf",
    "min": "math.inf",
    "any": "False",
    "all": "True",
}


def _reduce_parts(root):
    """(op, input view, reduced dims, accumulator init, combine line) of a reduce node."""
    op, x, dims = root.args[0], root.args[1], tuple(root.args[2])
    out_dt = root.result.dtype.name
    if op in ("sum", "prod"):
        acc_t = "np.float64" if out_dt in ("float32", "float64") else "np.int64"
        init = f"{acc_t}({_INIT[op]})"
    elif op in ("max", "min"):
        xd = x.dtype.name
        if xd in ("float32", "float64"):
            init = f"{_NP[xd]}({_INIT[op]})"
        else:
            info = np.iinfo(np.int64)
            init = f"np.int64({info.min if op == 'max' else info.max})"
    else:
        init = _INIT[op]
    return op, x, dims, init


def _combine(op, v) -> str:
    if op == "sum":
        return f"acc += {v}"
    if op == "prod":
        return f"acc *= {v}"
    if op == "max":
        return f"if {v} > acc or {v} != {v}:\n    acc = {v}"
    if op == "min":
        return f"if {v} < acc or {v} != {v}:\n    acc = {v}"
    if op == "any":
        return f"acc = acc or ({v} != 0)"
    return f"acc = acc and ({v} != 0)"


def _indent(lines, depth):
    out = []
    for line in lines:
        for part in line.split("\n"):
            out.append("    " * depth + part)
    return out


def generate(kernel: Kernel, target: str = "cpu") -> str:
    """The source of ``kernel`` for ``target`` ("cpu": ``@njit``, "cuda": ``@cuda.jit``)."""
    kernel.leaves = []
    em = _Emitter(kernel)
    em.target = target
    root = kernel.root
    # a kernel with size arguments has its parallel version at every size, so that its
    # source does not change with the size; a call below the threshold runs the serial
    # twin (kernel.small), as a kernel whose size is a constant would have been serial
    space = (root.args[1] if root.fn in ("reduce", "pack") else root.result).shape
    total = int(np.prod(space)) if space else 1
    reduced = tuple(root.args[2]) if root.fn == "reduce" else ()
    has_outer = any(d not in reduced for d in range(len(space)))  # a loop to split
    par = (total >= PARALLEL_MIN or em.unsigned) and has_outer
    em.unsigned |= bool(par and target == "cpu")  # a prange's index: see _unsigned
    kernel.small = total < PARALLEL_MIN
    if root.fn == "reduce":
        out_dt = _NP[root.result.dtype.name]
        op, x, dims, init = _reduce_parts(root)
        space = x.shape
        kept = [d for d in range(len(space)) if d not in dims]
        idx = tuple(f"i{d}" for d in range(len(space)))
        v = em.ref(x, idx)
        body = em.lines
        for j, side in enumerate(kernel.extra):  # also store the reduced values themselves
            body.append(
                f"out{j + 1}[{_pos(idx, space, em.num, em.unsigned)}] = {em.node(side, idx)}"
            )
        kept_shape = tuple(space[d] for d in kept)
        kept_idx = tuple(f"i{d}" for d in kept)
        store = f"out[{_pos(kept_idx, kept_shape, em.num, em.unsigned)}] = {out_dt}(acc)"
        epi = []
        if kernel.epilogue is not None:  # pointwise ops on the reduced value, then the store
            p = kernel.epilogue.root
            it = iter([f"i{d}" for d in kept if space[d] != 1])
            pidx = tuple("0" if n == 1 else next(it) for n in p.result.shape)
            em.lines, em.memo = [], {}
            em.reduced = (kernel.reduced_id, "red")
            ev = em.node(p, pidx)
            epi = [f"red = {out_dt}(acc)"] + em.lines
            store = f"out[{_pos(kept_idx, kept_shape, em.num, em.unsigned)}] = {ev}"
        outer, inner = kept, [d for d in dims]
        n_outer = int(np.prod([space[d] for d in kept])) if kept else 1
    elif root.fn == "pack":  # parts of one index space, each stored at its own view
        if target != "cpu":
            raise NotImplementedError("a pack kernel is generated for the CPU only")
        space = tuple(root.args[1].shape)
        idx = tuple(f"i{d}" for d in range(len(space)))
        stores = []
        for (o, offset, strides), part in zip(root.args[0], root.args[1:]):
            v = em.ref(part, idx)
            terms = [em.num(offset)] if offset else []
            terms += [i if st == 1 and not isinstance(st, SymInt) else f"{i} * {em.num(st)}"
                      for i, st, n in zip(idx, strides, space) if n != 1]  # fmt: skip
            pos = _unsigned(" + ".join(terms) or "0", [offset, *strides], em.unsigned)
            stores.append(f"{'out' if o == 0 else f'out{o}'}[{pos}] = {v}")
        body = em.lines
        store = "\n".join(stores)
        outer, inner, init = list(range(len(space))), [], None
        epi = []
        n_outer = int(np.prod(space)) if space else 1
    else:
        space = root.result.shape
        idx = tuple(f"i{d}" for d in range(len(space)))
        v = em.node(root, idx)
        body = em.lines
        store = f"out[{_pos(idx, space, em.num, em.unsigned)}] = {v}"
        outer, inner, init = list(range(len(space))), [], None
        epi = []
        n_outer = int(np.prod(space)) if space else 1
    n_out = len(root.outputs) if root.fn == "pack" else 1 + len(kernel.extra)
    outs = ", ".join(["out"] + [f"out{j}" for j in range(1, n_out)])
    params = ", ".join(em.params.values())
    params = f"{params}, {outs}" if params else outs
    if target == "cuda":
        return _cuda_source(kernel, space, outer, inner, init, body, epi + [store], v, params, root)
    # a sum or product may be regrouped, so that LLVM vectorises it (eager sums in order:
    # the results differ in the last bits); pointwise kernels keep IEEE order exactly
    fast = (
        ', fastmath={"reassoc"}' if root.fn == "reduce" and root.args[0] in ("sum", "prod") else ""
    )
    loops = []
    depth = 1
    for j, d in enumerate(outer):
        rng = "prange" if (par and j == 0) else "range"
        loops.append("    " * depth + f"for i{d} in {rng}({em.num(space[d])}):")
        depth += 1
    if not outer and not inner:
        loops.append("    " * depth + "i_ = 0")
    if root.fn == "reduce":
        loops.append("    " * depth + f"acc = {init}")
        d0 = depth
        for d in inner:
            loops.append("    " * depth + f"for i{d} in range({em.num(space[d])}):")
            depth += 1
        loops += _indent(body, depth)
        loops += _indent([_combine(op, v)], depth)
        loops += _indent(epi + [store], d0)
    else:
        loops += _indent(body + [store], depth)
    params += em.sym_params()
    lines = _header(em) + [
        "",
        "",
        # numpy's error model: a division has no zero test to branch on, so a serial
        # loop vectorises (Python's model raises ZeroDivisionError, and keeps it scalar)
        f'@njit(cache=True{", parallel=True" if par else ""}{fast}, error_model="numpy")',
        f"def {kernel.name}({params}):",
        f'    """{kernel.summary()}"""',
    ]
    lines += loops
    if par:  # the same loops without the thread pool, for a call on one thread
        lines += [
            "",
            "",
            f'@njit(cache=True{fast}, error_model="numpy")',
            f"def {kernel.name}{SERIAL}({params}):",
            f'    """{kernel.name} on one thread: starting the pool costs more than this."""',
        ]
        lines += [ln.replace(" in prange(", " in range(") for ln in loops]
    del n_outer
    return "\n".join(lines) + "\n"


def generate_gemm(kernel: Kernel, kind: str, M: int, Ka: int, Nc: int, has_bias: bool, c_value):
    """The source of a matrix product ``C`` (M x Nc) whose block of rows, once its register
    tiles are stored, gets ``kernel``'s loop body (a pointwise kernel that reads C whole)
    before the next block is computed: a GEMM with an *epilogue* (rules.py).

    ``kind`` "xwT": C = A B^T (+ bias) for A (M, Ka) and B (Nc, Ka), a Linear's forward
    (B^T packed once in strips of NR columns, as ``_gemm_set`` packs it); "gw": C = A B
    for A (M, Ka) and B (Ka, Nc), a Linear's input gradient (B read in place). The
    function takes A, B, the bias (empty unless ``has_bias``), the kernel's leaves (C
    among them, ``c_value``), its output, its size arguments and ``rb``: a task computes
    ``rb`` blocks of ``SMALL_MR`` rows, then runs the epilogue on them (1 unless the
    autotuner chose more, ``tune.py``). The tasks are split among the threads
    (``prange``) when the product is large; the rows left over are computed after them
    in blocks of ``SMALL_MR``, the last ending flush with the last row. The tiles are the
    CPU backend's (``sitp.kernels.cpu.blas.small``), so C is eager's product, whatever
    ``rb``.
    """
    kernel.leaves = []
    em = _Emitter(kernel)
    root = kernel.root
    space = tuple(root.result.shape)
    nd = len(space)
    idx = tuple(f"i{d}" for d in range(nd))
    par = M * Nc >= PARALLEL_MIN or isinstance(M, SymInt)  # (as in generate)
    kernel.small = M * Nc < PARALLEL_MIN
    # every index unsigned (see _unsigned): a prange's block index, and, in any version,
    # the rows of a block, whose bounds follow ``rb``, an argument LLVM cannot bound
    em.unsigned = True
    v = em.node(root, idx)
    body = em.lines + [f"out[{_pos(idx, space, em.num, em.unsigned)}] = {v}"]
    M, Ka, Nc = em.num(M), em.num(Ka), em.num(Nc)  # the source's names for them
    c_par = em.params[c_value.id]
    params = ", ".join(em.params.values())
    rows = []  # the index of row r in the kernel's leading dims
    if nd == 2:
        rows = ["i0 = r"]
    elif nd > 2:
        rows = ["q = r"]
        for d in reversed(range(nd - 1)):
            # (the leading index needs no modulo; a modulo by a size argument would leave
            # its sign unknown to LLVM, and every index read from it signed: see _unsigned)
            lead = d == 0 and isinstance(space[0], SymInt)
            rows.append(f"i{d} = q" if lead else f"i{d} = q % {em.num(space[d])}")
            if d:
                rows.append(f"q = q // {em.num(space[d])}")

    def epilogue(lo, hi, depth):
        out = ["    " * depth + f"for r in range({lo}, {hi}):"]
        out += _indent(rows + [f"for i{nd - 1} in range({Nc}):"], depth + 1)
        out += _indent(body, depth + 2)
        return out

    def tiles(depth):
        if kind == "xwT":
            return _indent(
                [f"_row_block(A, r0, bp, j_tiles, full, NR, C, {2 if has_bias else 1}, bias)"],
                depth,
            )
        return _indent(
            [
                "for t in range(j_tiles.size):",
                f"    _tile(full[t], A, r0 * {Ka}, {Ka}, 1, B, j_tiles[t], {Nc}, {Ka}, C,"
                f" r0 * {Nc} + j_tiles[t], {Nc}, 1, bias, 0)",
            ],
            depth,
        )

    small = (
        f"gemm_small_set(A, B.T, C, bias, {has_bias})"
        if kind == "xwT"
        else "gemm_small_set(A, B, C, bias, False)"
    )
    name = f"{kernel.name}_gemm"
    lines = _header(em) + [
        "from sitp.compile.kernels import _pack_wt, _row_block",
        # the tiles are compiled functions of their own, with the backend's flags; the
        # epilogue gets the elementwise kernels' (only "contract"), so its values do not
        # depend on which loop LLVM runs: with "afn" and "arcp" too, the vector loop and
        # the scalar one it falls back to when out's and C's addresses are close
        # rounded the GELU differently, and the result changed with the allocator
        "from sitp.kernels.cpu.blas.packed import tile_nr",
        "from sitp.kernels.cpu.vecmath import FASTMATH",
        "from sitp.kernels.cpu.blas.small import SMALL_MR, _column_tiles, _tile, gemm_small_set",
        "",
        "",
        f'@njit(cache=True{", parallel=True" if par else ""}, fastmath=FASTMATH, error_model="numpy")',
        f"def {name}(A, B, bias, {params}, out{em.sym_params()}, rb):",
        f'    """C = A {"B^T" if kind == "xwT" else "B"} ({M} x {Nc}), then on each block of its rows: '
        f'{kernel.summary()}"""',
        f"    C = {c_par}.reshape({M}, {Nc})",
        "    NR = tile_nr(A.dtype)",
        f"    if {M} < SMALL_MR or {Nc} < NR // 2:  # too small for whole tiles",
        f"        {small}",
    ]
    lines += epilogue(0, M, 2)
    lines += [
        "        return",
        f"    j_tiles, full = _column_tiles({Nc}, NR)",
    ]
    if kind == "xwT":
        lines.append("    bp = _pack_wt(B, j_tiles, full, NR)")
    lines += [
        "    BM = SMALL_MR * rb  # the rows of a task: rb blocks of register tiles",
        f"    nb = {M} // BM",
        "    for blk in prange(nb):",
        "        b0 = blk * BM",
        "        for s in range(rb):",
        "            r0 = b0 + s * SMALL_MR",
    ]
    lines += tiles(3)
    lines += epilogue("b0", "b0 + BM", 2)
    lines += [
        "    rest = nb * BM",
        f"    if rest < {M}:  # the last rows: blocks of SMALL_MR, the last ending at the edge",
        f"        for r in range(rest, {M}, SMALL_MR):",
        f"            r0 = min(r, {M} - SMALL_MR)",
    ]
    lines += tiles(3)
    lines += epilogue("rest", M, 2)
    if par:  # the same function without the thread pool, for a call on one thread
        start = next(i for i, ln in enumerate(lines) if ln.startswith("@njit"))
        lines += ["", ""] + [
            ln.replace(" in prange(", " in range(")
            .replace(", parallel=True", "")
            .replace(f"def {name}(", f"def {name}{SERIAL}(")
            for ln in lines[start:]
        ]
    else:
        lines = [ln.replace(" in prange(", " in range(") for ln in lines]
    return "\n".join(lines) + "\n"


def _cuda_source(kernel, space, outer, inner, init, body, store, v, params, root):
    """One thread per entry of the outer index space; the reduced dims loop inside."""
    n = int(np.prod([space[d] for d in outer])) if outer else 1
    lines = [
        "import math",
        "",
        "import numpy as np",
        "from numba import cuda",
        "",
        "from sitp.kernels import scalar",
        "",
        "unary = cuda.jit(device=True)(scalar.unary)",
        "binary = cuda.jit(device=True)(scalar.binary)",
        "compare = cuda.jit(device=True)(scalar.compare)",
        "",
        "",
        "@cuda.jit(device=True)",
        "def exp_f32(x):  # the GPU's expf vectorises by itself: no helper of vecmath",
        "    return math.exp(x)",
        "",
        "",
        "@cuda.jit(device=True)",
        "def tanh_f32(x):",
        "    return math.tanh(x)",
        "",
        "",
        "@cuda.jit(device=True)",
        "def sigmoid_f32(x):",
        "    return 1.0 / (1.0 + math.exp(-x))",
        "",
        "",
        "@cuda.jit",
        f"def {kernel.name}({params}):",
        f'    """{kernel.summary()}"""',
        "    t = cuda.grid(1)",
        f"    if t >= {n}:",
        "        return",
    ]
    rest = "t"
    for d in reversed(outer):
        lines.append(f"    i{d} = {rest} % {space[d]}")
        lines.append(f"    {rest} = {rest} // {space[d]}")
    depth = 1
    if root.fn == "reduce":
        op = root.args[0]
        lines.append(f"    acc = {init}")
        for d in inner:
            lines.append("    " * depth + f"for i{d} in range({space[d]}):")
            depth += 1
        lines += _indent(body, depth)
        lines += _indent([_combine(op, v)], depth)
        lines += _indent(store, 1)
    else:
        lines += _indent(body, 1)
        lines += _indent(store, 1)
    return "\n".join(lines) + "\n"


_loaded: dict = {}


def kernel_dir() -> str:
    """Where generated kernel sources live: beside numba's cache of the package's kernels."""
    d = os.path.join(_env.CACHE_DIR, "sitp-compile")
    os.makedirs(d, exist_ok=True)
    return d


def load(source: str, name: str, target: str = "cpu"):
    """Compile ``source`` (once per process; numba caches the CPU machine code on disk)."""
    # numba's cache does not see an edit of a function the kernel inlines from another
    # file; the directory does: it is named by a hash of every file that compiles code
    # (sitp/_target.py's cache key), scalars.py and this file included
    h = hashlib.sha1(source.encode()).hexdigest()[:16]
    key = (h, target)
    if key in _loaded:
        return _loaded[key]
    path = os.path.join(kernel_dir(), f"{name}_{target}_{h}.py")
    if not os.path.exists(path):
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            f.write(source)
        os.replace(tmp, path)  # atomic: a concurrent session sees the whole file or none
    modname = f"sitp_compiled_{h}_{target}"
    spec = importlib.util.spec_from_file_location(modname, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[modname] = mod  # numba's disk cache finds the kernel's globals by module name
    spec.loader.exec_module(mod)
    fn = getattr(mod, name)
    _loaded[key] = fn
    _loaded[(h, target, SERIAL)] = getattr(mod, name + SERIAL, None)
    return fn


def load_serial(source: str, name: str, target: str = "cpu"):
    """The serial twin of a parallel kernel (None for a serial one), after :func:`load`."""
    load(source, name, target)
    return _loaded[(hashlib.sha1(source.encode()).hexdigest()[:16], target, SERIAL)]


CUDA_THREADS = 128  # threads per block of a generated CUDA kernel


def cuda_grid(kernel: Kernel) -> tuple:
    """(blocks, threads) of a launch of ``kernel``: one thread per entry of its outer
    index space (the entries of a pointwise result, the rows a reduction leaves)."""
    root = kernel.root
    if root.fn == "reduce":
        x, dims = root.args[1], tuple(root.args[2])
        n = int(np.prod([x.shape[d] for d in range(len(x.shape)) if d not in dims])) or 1
    else:
        n = int(np.prod(root.result.shape)) or 1
    return (n + CUDA_THREADS - 1) // CUDA_THREADS, CUDA_THREADS


def cuda_launch(fn, kernel: Kernel, arrays, out):
    """Launch a generated CUDA kernel (one thread per entry of its outer index space)."""
    fn[cuda_grid(kernel)](*arrays, out)

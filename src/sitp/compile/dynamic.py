"""Symbolic sizes (6.1, "Guards"): one compiled entry for every batch size, or every
length of a sequence.

sitp traces with real arrays, so a trace knows numbers, not symbols. After a call whose
inputs differ from a cached signature only in one size ``s`` (the batch, each input in
at most one dim: a GPT's batch or its sequence length), the two
traces are set side by side (:func:`fit`): they must be the same graph, entry for entry,
except for integers (sizes, strides, offsets, the ``n`` of a mean), and every integer
that differs must be ``a * s + c`` with integer ``a`` and ``c``, and no view may have
two dims that change with ``s`` (a ``B x B`` matrix grows as ``s**2``: no line through
two points says so). The entry this makes (:class:`Dynamic`) holds the second trace as a
*template*: at a batch size it has not seen, it copies the template with each such
integer replaced by its value at ``s`` (and a literal ``arange`` of positions by
one of its length at ``s``), a :class:`SymInt` that remembers its line, and
runs the passes on the copy. The code generator writes a ``SymInt`` as a name, one
argument of the kernel (``codegen._Emitter.num``), so that every batch size gets the
same source, which numba compiled once; the runtime passes the values. A size that
arithmetic turns into a plain number is written as a literal: the kernel is still
right for its size, and compiles anew (correct, only slower), which the tests check
does not happen for the models they run. Two traces do not show what Python decided
from a size (``if x.shape[0] > 4``), so the first call at a size the entry has not seen
traces too, and :func:`check` compares that trace with the template at that size: a
size whose graph differs gets a static entry (``dynamic=True`` checks too: a program
run without the check would give a function that branches on a size wrong values).

Two sizes at once (a batch ``s`` and a length ``t``): when two dynamic entries of the
same size ``s`` were made at two values of another size ``t``, each number of the graph
is a line in ``s`` at each ``t``, and :func:`fit2` asks that both coefficients of the
line be lines in ``t``: the number is then ``c + a*s + b*t + d*s*t`` (a flattened
``B*T`` has ``d = 1``), and the two entries become one for every pair of sizes. Two
values of ``t`` cannot tell a square from a line, as two of ``s`` cannot: a view with
two dims that grow with the same size (the ``T x T`` scores of attention written out)
is refused as above, and the checking trace at each new pair of sizes catches the rest.
"""

from __future__ import annotations

import sys

import numpy as np

from sitp.compile.graph import ArrRef, CtxArg, Graph, HostIndex, Node, Ref, Value


class SymInt(int):
    """An integer of a dynamic entry's sizes: ``c + a*s + b*t + d*s*t`` with integer
    coefficients, ``s`` the first dynamic size (a batch) and ``t`` the second (a
    sequence's length; ``b`` and ``d`` are 0 in an entry with one size). Arithmetic with
    plain integers and other SymInts keeps the polynomial while it stays one of that
    form (``s * t`` does, ``s * s`` does not: the result is then a plain int)."""

    def __new__(cls, value, a, c, b=0, d=0):
        o = int.__new__(cls, value)
        o.p = (int(c), int(a), int(b), int(d))
        return o

    @property
    def a(self):
        return self.p[1]

    @property
    def c(self):
        return self.p[0]

    @staticmethod
    def _poly(o):
        if isinstance(o, SymInt):
            return o.p
        if isinstance(o, (int, np.integer)) and not isinstance(o, (bool, np.bool_)):
            return (int(o), 0, 0, 0)
        return None

    def __add__(self, o):
        q = self._poly(o)
        if q is None:
            return int(self) + o
        return _mk(int(self) + int(o), tuple(x + y for x, y in zip(self.p, q)))

    __radd__ = __add__

    def __sub__(self, o):
        q = self._poly(o)
        if q is None:
            return int(self) - o
        return _mk(int(self) - int(o), tuple(x - y for x, y in zip(self.p, q)))

    def __rsub__(self, o):
        q = self._poly(o)
        if q is None:
            return o - int(self)
        return _mk(int(o) - int(self), tuple(y - x for x, y in zip(self.p, q)))

    def __mul__(self, o):
        q = self._poly(o)
        if q is None:
            return int(self) * o
        r = _times(self.p, q)
        return int(self) * int(o) if r is None else _mk(int(self) * int(o), r)

    __rmul__ = __mul__

    def __neg__(self):
        return _mk(-int(self), tuple(-x for x in self.p))

    def __floordiv__(self, o):
        if isinstance(o, int) and not isinstance(o, SymInt) and o:
            if all(x % o == 0 for x in self.p):
                return _mk(int(self) // o, tuple(x // o for x in self.p))
        return int(self) // o


def _times(p, q):
    """The product of two polynomials ``(c, a, b, d)`` in ``s`` and ``t`` (``c + a*s +
    b*t + d*s*t``), or None when it has a square (``s*s``, ``t*t``)."""
    c1, a1, b1, d1 = p
    c2, a2, b2, d2 = q
    if a1 * a2 or a1 * d2 or d1 * a2 or d1 * d2 or b1 * b2 or b1 * d2 or d1 * b2:
        return None
    return (c1 * c2, c1 * a2 + a1 * c2, c1 * b2 + b1 * c2, c1 * d2 + d1 * c2 + a1 * b2 + b1 * a2)


def at(p, s):
    """The polynomial ``p`` at the sizes ``s`` (an int: one size; a pair: two)."""
    c, a, b, d = p
    s, t = s if isinstance(s, tuple) else (s, 0)
    return c + a * s + b * t + d * s * t


def _arange_length(a):
    """n when the flat array ``a`` holds the int64 entries 0, 1, ..., n - 1 (as itself,
    or as their bytes: a raw argument's view), n >= 2; else None."""
    if a.ndim != 1 or not a.flags.c_contiguous or a.nbytes < 16 or a.nbytes % 8:
        return None
    if a.dtype not in (np.dtype(np.int64), np.dtype(np.uint8)):
        return None
    v = a.view(np.int64)
    return v.size if np.array_equal(v, np.arange(v.size)) else None


def _mk(v, p):
    return SymInt(v, p[1], p[0], p[2], p[3]) if any(p[1:]) else int(v)


def prod(xs):
    """The product of ``xs``, keeping a :class:`SymInt`'s line (``np.prod`` drops it)."""
    out = 1
    for x in xs:
        out = out * x
    return out


# ------------------------------------------------------------------ the walk
_SMALL_BYTES = 1 << 16  # a literal array of up to this many bytes is compared by its values


class _Walk:
    """Walk a trace's record (a graph, its Values, Refs and nodes, the extras the
    compiled program needs) in a fixed order: its *skeleton* (everything but numbers)
    and its *numbers* (the ints and floats), and, with ``sub``, a copy with the
    numbers at positions ``sub`` replaced by their value at ``s``."""

    def __init__(self, sub=None, s=None):
        self.memo: dict = {}
        self.skel: list = []
        self.nums: list = []
        self.sub, self.s = sub or {}, s
        self.views: list = []  # the copied Refs and ArrRefs

    def num(self, x):
        k = len(self.nums)
        isf = isinstance(x, (float, np.floating))
        self.nums.append(float(x) if isf else int(x))
        self.skel.append("f" if isf else "i")
        if k in self.sub:
            q = self.sub[k]
            v = at(q, self.s)
            return float(v) if isf else SymInt(v, q[1], q[0], q[2], q[3])
        return x

    def seen(self, o):
        k = self.memo.get(id(o))
        if k is not None:
            self.skel.append(("seen", k[0]))
            return True, k[1]
        return False, None

    def keep(self, o, copy):
        self.memo[id(o)] = (len(self.memo), copy, o)  # (o: kept alive, so ids stay unique)

    def array(self, a, literal):
        """A literal (an array the trace made and nothing else holds: a Python number, an
        index array built in Python) is compared by its values, a size-1 number being a
        number of the graph (the ``n`` of a mean); a view of memory made outside by where
        it lies; any other array by identity."""
        if literal and a.size == 1 and a.dtype.kind in "fiu":
            self.skel.append(("arr1", a.dtype.str, a.shape))
            v = self.num(a.reshape(-1)[0].item())
            return a if len(self.nums) - 1 not in self.sub else np.full(a.shape, v, a.dtype)
        n = _arange_length(a) if literal else None
        if n is not None:  # positions 0, 1, ..., n - 1 (a GPT's): n is a number
            self.skel.append(("arange", a.dtype.str, a.ndim))
            k = len(self.nums)
            m = self.num(n)
            if k not in self.sub:
                return a
            return np.arange(int(m), dtype=np.int64).view(a.dtype).reshape(-1)
        if literal and a.nbytes <= _SMALL_BYTES:
            self.skel.append(("arr", a.dtype.str, a.shape, a.tobytes()))
            return a
        if a.base is not None:
            ptr = a.__array_interface__["data"][0]
            self.skel.append(("mem", ptr, a.shape, a.strides, a.dtype.str))
            return a
        self.skel.append(("obj", id(a)))
        return a

    def go(self, o):
        if o is None or isinstance(o, (bool, np.bool_, str)):
            self.skel.append(("v", o))
            return o
        if isinstance(o, (int, np.integer, float, np.floating)):
            return self.num(o)
        if isinstance(o, tuple):
            self.skel.append(("tuple", len(o)))
            return tuple(self.go(b) for b in o)
        if isinstance(o, np.dtype):
            self.skel.append(("dt", o.str))
            return o
        if isinstance(o, np.ndarray):
            return self.array(o, literal=True)
        if isinstance(o, (set, frozenset)):
            self.skel.append(("set", tuple(sorted(o))))
            return set(o)
        hit, copy = self.seen(o)
        if hit:
            return copy
        if isinstance(o, list):
            out = []
            self.keep(o, out)
            self.skel.append(("list", len(o)))
            out.extend(self.go(b) for b in o)
            return out
        if isinstance(o, dict):
            out = {}
            self.keep(o, out)
            self.skel.append(("dict", tuple(o)))
            for k, v in o.items():
                out[k] = self.go(v)
            return out
        walk = _KINDS.get(type(o))
        if walk is None:  # a tensor, a dtype, a class: the same object in both traces
            self.skel.append(("obj", id(o)))
            return o
        return walk(self, o)


def _value(w, v):
    c = Value.__new__(Value)
    w.keep(v, c)
    w.skel.append(("Value", v.id, v.np_dtype.str, v.kind, v.index))
    c.id, c.np_dtype, c.kind, c.index, c.trace = v.id, v.np_dtype, v.kind, v.index, None
    c.size = w.num(v.size)
    if isinstance(v.array, np.ndarray):
        c.array = w.array(v.array, literal=v.kind in ("literal", "scratch"))
    else:
        c.array = w.go(v.array)
    c.base = w.go(v.base)
    c.producer = w.go(v.producer)
    return c


def _ref(w, r):
    c = Ref.__new__(Ref)
    w.keep(r, c)
    w.skel.append("Ref")
    c.value = w.go(r.value)
    c.shape, c.strides, c.offset = w.go(r.shape), w.go(r.strides), w.go(r.offset)
    c.dtype, c.cls = w.go(r.dtype), w.go(r.cls)
    w.views.append(c)
    return c


def _arr_ref(w, r):
    c = ArrRef.__new__(ArrRef)
    w.keep(r, c)
    w.skel.append(("ArrRef", r.np_dtype.str))
    c.value, c.byte_offset = w.go(r.value), w.go(r.byte_offset)
    c.shape, c.strides, c.np_dtype = w.go(r.shape), w.go(r.strides), r.np_dtype
    w.views.append(c)
    return c


def _host_index(w, h):
    c = HostIndex.__new__(HostIndex)
    w.keep(h, c)
    w.skel.append("HostIndex")
    c.refs = w.go(h.refs)
    return c


def _ctx_arg(w, a):
    c = CtxArg.__new__(CtxArg)
    w.keep(a, c)
    w.skel.append("CtxArg")
    c.value = w.go(a.value)
    return c


def _node(w, n):
    if n.kernel is not None or n.lowered is not None:
        raise ValueError("a template is a graph before its passes")
    c = Node(n.id, n.fn, (), {})
    w.keep(n, c)
    w.skel.append(("Node", n.id, n.fn))
    c.where = n.where
    c.args, c.kwargs = w.go(n.args), w.go(n.kwargs)
    c.outputs, c.writes, c.result = w.go(n.outputs), w.go(n.writes), w.go(n.result)
    return c


def _graph(w, g):
    c = Graph()
    w.keep(g, c)
    w.skel.append(("Graph", g.backward_at, g._next))
    c.backward_at, c._next = g.backward_at, g._next
    c.inputs, c.consts = w.go(g.inputs), w.go(g.consts)
    c.nodes = w.go(g.nodes)  # in program order: a Value's producer is met before it
    c.output, c.grads = w.go(g.output), w.go(g.grads)
    c.extra_live, c.stored = w.go(g.extra_live), w.go(g.stored)
    return c


_KINDS = {
    Value: _value,
    Ref: _ref,
    ArrRef: _arr_ref,
    HostIndex: _host_index,
    CtxArg: _ctx_arg,
    Node: _node,
    Graph: _graph,
}


def walk(record, sub=None, s=None) -> _Walk:
    """Walk ``record``; the walker holds its skeleton, numbers and copy (``.copy``)."""
    w = _Walk(sub, s)
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 20000))
    try:
        w.copy = w.go(record)
    finally:
        sys.setrecursionlimit(limit)
    return w


def copy(record):
    """A copy of a record that the passes may rewrite (arrays and tensors shared)."""
    return walk(record).copy


# ------------------------------------------------------------------ the fit
def fit(r1, s1: int, r2, s2: int):
    """The lines through two records traced at batch sizes ``s1`` and ``s2``:
    ``({number index: (c, a, 0, 0)}, None)`` (the number is ``c + a*s``), or ``(None,
    why not)``."""
    w1, w2 = walk(r1), walk(r2)
    if w1.skel != w2.skel:
        return None, _differ(w1.skel, w2.skel)
    lines = {}
    for k, (v1, v2) in enumerate(zip(w1.nums, w2.nums)):
        if v1 == v2 or (v1 != v1 and v2 != v2):
            continue
        a, rem = divmod(v2 - v1, s2 - s1)
        c = v1 - a * s1
        if rem or a != int(a) or c != int(c):
            return None, (
                f"a number of the graph is not a whole multiple of the batch size plus a "
                f"constant ({v1!r} at {s1}, {v2!r} at {s2})"
            )
        lines[k] = (int(c), int(a), 0, 0)
    why = _square(walk(r2, lines, s2).views)
    return (None, why) if why else (lines, None)


def _square(views) -> str | None:
    """Why not, when a view has two dims that grow with the same size (a ``B x B``
    matrix grows as ``B**2``: no line through two points says so)."""
    for v in views:
        syms = [d.p for d in v.shape if isinstance(d, SymInt)]
        for i, name in ((1, "batch size"), (2, "second size")):
            if sum(bool(q[i] or q[3]) for q in syms) > 1:
                return f"a view {tuple(int(d) for d in v.shape)} has two dims that grow with the {name}"
    return None


def fit2(r1, lines1, t1: int, r2, lines2, t2: int, s2: int):
    """Two dynamic entries of one size ``s``, traced at two values ``t1`` and ``t2`` of a
    second size ``t``, made one entry of both sizes: each number of the graph is a line
    in ``s`` at each ``t`` (``lines1``, ``lines2``: :func:`fit`'s), and its two
    coefficients must be lines in ``t``, so that the number is ``c + a*s + b*t + d*s*t``.
    ``({number index: (c, a, b, d)}, None)`` for the numbers that change, or ``(None,
    why not)``. The records need not be traced at the same ``s`` (``r2``'s is ``s2``)."""
    w1, w2 = walk(r1), walk(r2)
    if w1.skel != w2.skel:
        return None, _differ(w1.skel, w2.skel)
    polys = {}
    for k, (v1, v2) in enumerate(zip(w1.nums, w2.nums)):
        p1 = lines1.get(k, (v1, 0, 0, 0))
        p2 = lines2.get(k, (v2, 0, 0, 0))
        if v1 != v1 and v2 != v2:
            continue
        if p1 == p2:  # the same line at both values of t (a batch size: s itself)
            if p1[1]:
                polys[k] = p1
            continue
        (c1, a1, _, _), (c2, a2, _, _) = p1, p2
        d, rd = divmod(a2 - a1, t2 - t1)
        b, rb = divmod(c2 - c1, t2 - t1)
        if rd or rb or d != int(d) or b != int(b):
            return None, (
                f"a number of the graph is not c + a*s + b*t + d*s*t with whole a, b, c, d "
                f"({p1[1]}*s + {p1[0]} at {t1}, {p2[1]}*s + {p2[0]} at {t2})"
            )
        polys[k] = (int(c1 - b * t1), int(a1 - d * t1), int(b), int(d))
    why = _square(walk(r2, polys, (s2, t2)).views)
    return (None, why) if why else (polys, None)


def check(record, skel, nums, lines, s):
    """None when ``record`` (a trace at sizes ``s``) is the template whose walk gave
    ``skel`` and ``nums`` with the numbers of ``lines`` at ``s``; else why not."""
    w = walk(record)
    if w.skel != skel:
        return _differ(skel, w.skel)
    for k, (got, t) in enumerate(zip(w.nums, nums)):
        if k in lines:
            t = at(lines[k], s)
        if not (got == t or (got != got and t != t)):
            return f"a number of the graph is {got!r}, where the line gives {t!r}"
    return None


def _differ(s1, s2) -> str:
    """Where two skeletons part."""
    for k, (a, b) in enumerate(zip(s1, s2)):
        if a != b:
            return f"the graphs differ beyond their sizes ({str(a)[:60]} and {str(b)[:60]})"
    return "the graphs differ beyond their sizes (one is longer)"


def instantiate(record, lines, s):
    """The record at sizes ``s`` (an int, or a pair): the numbers on a line get their
    :class:`SymInt`."""
    return walk(record, lines, s).copy


def concrete(g: Graph) -> None:
    """Replace, in place, every :class:`SymInt` of graph ``g`` by its plain value, once
    its kernels are generated: the steps then compute with Python's ints (a SymInt's
    arithmetic runs in Python, a few hundred nanoseconds an operation, and the backend
    does many on shapes)."""
    seen: set = set()

    def fix(a):
        if isinstance(a, SymInt):
            return int(a)
        if isinstance(a, tuple):
            return tuple(fix(b) for b in a)
        if isinstance(a, list):
            a[:] = [fix(b) for b in a]
            return a
        if isinstance(a, dict):
            for k in a:
                a[k] = fix(a[k])
            return a
        if id(a) in seen:
            return a
        if isinstance(a, Ref):
            seen.add(id(a))
            a.shape, a.strides, a.offset = fix(a.shape), fix(a.strides), fix(a.offset)
            fix(a.value)
        elif isinstance(a, ArrRef):
            seen.add(id(a))
            a.shape, a.strides, a.byte_offset = fix(a.shape), fix(a.strides), fix(a.byte_offset)
            fix(a.value)
        elif isinstance(a, Value):
            seen.add(id(a))
            a.size = int(a.size)
            fix(a.base)
            fix(a.producer)  # (a step may read the node that made a Value: a Context's)
        elif isinstance(a, Node):
            seen.add(id(a))
            a.args, a.kwargs, a.result = fix(a.args), fix(a.kwargs), fix(a.result)
            fix(a.outputs)
            a.writes = fix(a.writes)
            f = a.lowered  # a lowering's factory holds the nodes it replaced
            if f is not None and getattr(f, "__defaults__", None):
                f.__defaults__ = fix(f.__defaults__)
        elif isinstance(a, HostIndex):
            seen.add(id(a))
            a.refs = fix(a.refs)
        elif isinstance(a, CtxArg):
            seen.add(id(a))
            fix(a.value)
        return a

    fix(g.inputs)
    fix(g.consts)
    for n in g.nodes:
        fix(n)
    g.output = fix(g.output)
    fix(g.grads)

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
size whose graph differs gets a static entry (``dynamic=True`` skips the check).
"""

from __future__ import annotations

import sys

import numpy as np

from sitp.compile.graph import ArrRef, CtxArg, Graph, HostIndex, Node, Ref, Value


class SymInt(int):
    """An integer of one batch size ``s`` that is ``a * s + c``: arithmetic with plain
    integers keeps the line while it stays a line; anything else is a plain int."""

    def __new__(cls, value, a, c):
        o = int.__new__(cls, value)
        o.a, o.c = a, c
        return o

    @staticmethod
    def _lin(o):
        if isinstance(o, SymInt):
            return o.a, o.c
        if isinstance(o, (int, np.integer)) and not isinstance(o, (bool, np.bool_)):
            return 0, int(o)
        return None

    def __add__(self, o):
        lin = self._lin(o)
        if lin is None:
            return int(self) + o
        return _mk(int(self) + int(o), self.a + lin[0], self.c + lin[1])

    __radd__ = __add__

    def __sub__(self, o):
        lin = self._lin(o)
        if lin is None:
            return int(self) - o
        return _mk(int(self) - int(o), self.a - lin[0], self.c - lin[1])

    def __rsub__(self, o):
        lin = self._lin(o)
        if lin is None:
            return o - int(self)
        return _mk(int(o) - int(self), lin[0] - self.a, lin[1] - self.c)

    def __mul__(self, o):
        lin = self._lin(o)
        if lin is None:
            return int(self) * o
        if lin[0] and self.a:  # s**2: not a line
            return int(self) * int(o)
        return _mk(int(self) * int(o), self.a * lin[1] + lin[0] * self.c, self.c * lin[1])

    __rmul__ = __mul__

    def __neg__(self):
        return _mk(-int(self), -self.a, -self.c)

    def __floordiv__(self, o):
        if isinstance(o, int) and not isinstance(o, SymInt) and o and self.a % o == 0:
            if self.c % o == 0:
                return _mk(int(self) // o, self.a // o, self.c // o)
        return int(self) // o


def _arange_length(a):
    """n when the flat array ``a`` holds the int64 entries 0, 1, ..., n - 1 (as itself,
    or as their bytes: a raw argument's view), n >= 2; else None."""
    if a.ndim != 1 or not a.flags.c_contiguous or a.nbytes < 16 or a.nbytes % 8:
        return None
    if a.dtype not in (np.dtype(np.int64), np.dtype(np.uint8)):
        return None
    v = a.view(np.int64)
    return v.size if np.array_equal(v, np.arange(v.size)) else None


def _mk(v, a, c):
    return SymInt(v, a, c) if a else int(v)


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
            a, c = self.sub[k]
            v = a * self.s + c
            return float(v) if isf else SymInt(v, a, c)
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
    ``({number index: (a, c)}, None)``, or ``(None, why not)``."""
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
        lines[k] = (int(a), int(c))
    w = walk(r2, lines, s2)
    for v in w.views:
        if sum(isinstance(d, SymInt) for d in v.shape) > 1:
            return None, (
                f"a view {tuple(int(d) for d in v.shape)} has two dims that grow with the "
                "batch size"
            )
    return lines, None


def check(record, skel, nums, lines, s):
    """None when ``record`` (a trace at batch size ``s``) is the template whose walk gave
    ``skel`` and ``nums`` with the numbers of ``lines`` at ``s``; else why not."""
    w = walk(record)
    if w.skel != skel:
        return _differ(skel, w.skel)
    for k, (got, t) in enumerate(zip(w.nums, nums)):
        if k in lines:
            a, c = lines[k]
            t = a * s + c
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
    """The record at batch size ``s``: the numbers on a line get their :class:`SymInt`."""
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

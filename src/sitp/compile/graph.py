"""The graph that ``sitp.compile`` captures: buffers, views of them, and the backend calls
that read and write them (chapter 6.1).

The graph lives at the level of the backend interface (``sitp/kernels/interface.py``):
a :class:`Value` is one buffer (a flat storage), a :class:`Ref` is a tensor's view of a
buffer (shape, strides, offset, dtype: what a backend reads), and a :class:`Node` is one
call of a backend function, or of a fused kernel of ``sitp/kernels/cpu/fused``, with its
arguments. Views (``reshape``, ``transpose``, ``expand``) are not nodes: they are Refs
with other strides, and a generated kernel bakes those strides in.

A buffer written in place (``assign``, a fused kernel's output argument) gets a new
:class:`Value`, a *version* of the same memory (``Value.base``), so that every Value is
written once and the graph stays a DAG.
"""

from __future__ import annotations

import numpy as np

# The backend functions whose results depend only on their arguments (CSE and constant
# folding may merge or evaluate them); every other call is kept as it was.
PURE = frozenset(
    "unary binary compare where copy reduce argreduce topk softmax softmax_backward cumsum "
    "matmul linear take gather scatter_add tri fill arange".split()
)
POINTWISE = frozenset({"unary", "binary", "compare", "where", "copy"})


class Value:
    """One buffer: ``size`` entries of numpy dtype ``np_dtype``.

    ``kind`` is ``"input"`` (the storage of the ``index``-th input tensor), ``"const"``
    (a storage the function read but did not make: its array is kept in ``array``), or
    ``"node"`` (made or written by ``producer``). ``base`` is the Value whose memory an
    in-place write reuses (None for a new buffer).
    """

    __slots__ = ("id", "size", "np_dtype", "kind", "index", "array", "producer", "base", "trace")

    def __init__(self, id, size, np_dtype, kind, index=None, array=None, producer=None, base=None):
        self.id, self.size, self.np_dtype, self.kind = id, size, np.dtype(np_dtype), kind
        self.index, self.array, self.producer, self.base = index, array, producer, base
        self.trace = None  # the array that held this Value while tracing

    @property
    def name(self) -> str:
        return {"input": "in", "const": "c", "scratch": "c", "literal": "c", "ctx": "ctx"}.get(
            self.kind, "v"
        ) + str(self.id)

    @property
    def nbytes(self) -> int:
        return self.size * self.np_dtype.itemsize

    def root(self) -> "Value":
        v = self
        while v.base is not None:
            v = v.base
        return v

    def __repr__(self) -> str:
        return self.name


class Ref:
    """A tensor's view of a Value: what a backend call reads (``cls`` makes the tensor)."""

    __slots__ = ("value", "shape", "strides", "offset", "dtype", "cls")

    def __init__(self, value, shape, strides, offset, dtype, cls):
        self.value, self.shape, self.strides = value, tuple(shape), tuple(strides)
        self.offset, self.dtype, self.cls = offset, dtype, cls

    def key(self):
        return (self.value.id, self.shape, self.strides, self.offset, self.dtype.name)

    def contiguous_whole(self) -> bool:
        """Whether this view is the whole buffer, row-major from offset 0."""
        return self.offset == 0 and self.strides == contiguous(self.shape)

    def __repr__(self) -> str:
        s = self.value.name
        if not self.contiguous_whole() or int(np.prod(self.shape)) != self.value.size:
            s += f"<{'x'.join(map(str, self.shape))}:{','.join(map(str, self.strides))}@{self.offset}>"
        return s


class ArrRef:
    """A raw numpy view of a Value (the arguments of the fused kernels): byte offset,
    shape and byte strides."""

    __slots__ = ("value", "byte_offset", "shape", "strides", "np_dtype")

    def __init__(self, value, byte_offset, shape, strides, np_dtype):
        self.value, self.byte_offset = value, byte_offset
        self.shape, self.strides, self.np_dtype = tuple(shape), tuple(strides), np.dtype(np_dtype)

    def key(self):
        return (
            "arr",
            self.value.id,
            self.byte_offset,
            self.shape,
            self.strides,
            str(self.np_dtype),
        )

    def __repr__(self) -> str:
        return f"{self.value.name}[{self.byte_offset // self.np_dtype.itemsize}:]"


class HostIndex:
    """An index array that Python computed from tensors' values (advanced indexing,
    ``weight[tokens]``): row j is tensor ``refs[j]``'s entries, flattened. Replayed from
    this call's tensors, so that the graph does not bake the trace's indices in."""

    __slots__ = ("refs",)

    def __init__(self, refs):
        self.refs = tuple(refs)

    def key(self):
        return ("idx",) + tuple(r.key() for r in self.refs)

    def __repr__(self) -> str:
        return "index(" + ", ".join(map(repr, self.refs)) + ")"


class CtxArg:
    """The ``Context`` of a fused layer's forward, passed to its backward: a Value of kind
    ``"ctx"`` (no buffer; the replay keeps the Context object in the environment)."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value

    def key(self):
        return ("ctx", self.value.id)

    def __repr__(self) -> str:
        return f"ctx{self.value.id}"


class Node:
    """One call: ``fn`` (a backend function's name, or ``module.function`` of a fused
    kernel, or ``"kernel"`` for a generated one) on ``args``/``kwargs`` (Refs, ArrRefs
    and plain values). ``outputs`` are the Values it makes, ``writes`` the (old, new)
    Values it writes in place, ``result`` the structure of its return value."""

    __slots__ = (
        "id",
        "fn",
        "args",
        "kwargs",
        "outputs",
        "writes",
        "result",
        "kernel",
        "where",
        "lowered",
        "device",
    )

    def __init__(self, id, fn, args, kwargs):
        self.id, self.fn, self.args, self.kwargs = id, fn, tuple(args), dict(kwargs)
        self.outputs, self.writes, self.result, self.kernel = [], [], None, None
        self.where = None
        self.lowered = None  # a factory of the node's step, set by lower.lower_graph
        self.device = None  # "cuda" for a call of the CUDA backend (None: the CPU's)

    @property
    def op(self) -> str:
        """The op name of a backend call that has one (``"exp"``, ``"add"``, ``"sum"``)."""
        if self.fn in ("unary", "binary", "compare", "reduce") and self.args:
            return self.args[0]
        return self.fn

    @property
    def is_pointwise(self) -> bool:
        return self.fn in POINTWISE

    @property
    def pure(self) -> bool:
        return self.fn in PURE and not self.writes

    def refs(self):
        """The Refs and ArrRefs this node reads, in argument order."""
        out = []
        for a in list(self.args) + list(self.kwargs.values()):
            _collect(a, out)
        return out

    def inputs(self):
        """The Values this node reads (each once)."""
        seen, out = set(), []
        for r in self.refs():
            if r.value.id not in seen:
                seen.add(r.value.id)
                out.append(r.value)
        for old, _ in self.writes:  # a write reads the old version's memory
            if old.id not in seen:
                seen.add(old.id)
                out.append(old)
        return out

    def made(self):
        """The Values this node defines: new buffers and the new versions it writes."""
        return list(self.outputs) + [new for _, new in self.writes]


def _collect(a, out):
    if isinstance(a, (Ref, ArrRef)):
        out.append(a)
    elif isinstance(a, HostIndex):
        out.extend(a.refs)
    elif isinstance(a, CtxArg):
        out.append(a)
    elif isinstance(a, (list, tuple)):
        for b in a:
            _collect(b, out)


def contiguous(shape) -> tuple:
    st, acc = [], 1
    for n in reversed(shape):
        st.append(acc)
        acc *= n
    return tuple(reversed(st))


def _fmt(a) -> str:
    if isinstance(a, (Ref, ArrRef, HostIndex, CtxArg)):
        return repr(a)
    if isinstance(a, (list, tuple)):
        return "(" + ", ".join(_fmt(b) for b in a) + ("," if len(a) == 1 else "") + ")"
    if isinstance(a, np.ndarray):
        return f"array{a.shape}"
    if isinstance(a, float):
        return f"{a:.6g}"
    return repr(a) if not hasattr(a, "name") else str(getattr(a, "name"))


class Graph:
    """The captured program: ``inputs`` (Values of the input tensors, in order), ``nodes``
    (in program order), ``outputs`` (the returned tensors as Refs, in a nested structure)
    and ``grads`` (input index -> Ref of that input's ``.grad`` after the call)."""

    def __init__(self):
        self.inputs: list[Value] = []
        self.consts: list[Value] = []
        self.nodes: list[Node] = []
        self.output = None  # the return value's structure, with Refs for tensors
        self.grads: dict[int, Ref] = {}
        self.extra_live: set = set()  # ids of Values another graph reads (saved for backward)
        self.backward_at = None  # id of the first node the autograd engine traced, if any
        self.stored: set = set()  # ids of Values fusion must store (remat.py's choice)
        self._next = 0

    def new_id(self) -> int:
        self._next += 1
        return self._next

    def output_refs(self) -> list:
        out = []
        _collect_out(self.output, out)
        return out + list(self.grads.values())

    def live_values(self) -> set:
        """Ids of the Values the caller can see after the call: outputs, grads and the
        last version of every input written in place."""
        live = {r.value.id for r in self.output_refs()} | set(self.extra_live)
        for n in self.nodes:
            for old, new in n.writes:
                if new.root().kind in ("input", "const"):
                    live.add(new.id)
        return live

    def users(self) -> dict:
        """Value id -> the nodes that read it."""
        u = {}
        for n in self.nodes:
            for v in n.inputs():
                u.setdefault(v.id, []).append(n)
        return u

    def count(self) -> dict:
        """How many nodes, and how many of them launch a kernel of their own."""
        return {"nodes": len(self.nodes), "kernels": sum(1 for n in self.nodes if n.fn != "fill")}

    def tabular(self) -> str:
        """The graph as a table, one node a line (like ``torch.fx``'s ``print_tabular``)."""
        rows = [("node", "op", "args", "shape", "dtype")]
        for v in self.inputs:
            rows.append((v.name, "input", f"#{v.index}", f"[{v.size}]", str(v.np_dtype)))
        for n in self.nodes:
            args = ", ".join(_fmt(a) for a in n.args)
            if n.kwargs:
                args += ", " + ", ".join(f"{k}={_fmt(v)}" for k, v in n.kwargs.items())
            if n.kernel is not None:
                args = n.kernel.summary()
            made = n.made()
            name = ", ".join(v.name for v in made) or "-"
            shape = ", ".join(f"[{v.size}]" for v in made)
            dtype = ", ".join(str(v.np_dtype) for v in made)
            op = n.fn if n.fn not in ("unary", "binary", "compare", "reduce") else f"{n.fn}.{n.op}"
            if n.fn in ("unary", "binary", "compare", "reduce"):
                args = ", ".join(_fmt(a) for a in n.args[1:])
            rows.append((name, op, args[:70], shape, dtype))
        outs = ", ".join(repr(r) for r in self.output_refs())
        rows.append(("output", "", outs[:70], "", ""))
        widths = [max(len(r[i]) for r in rows) for i in range(5)]
        lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
        lines.insert(1, "  ".join("-" * w for w in widths))
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.tabular()


def _collect_out(o, out):
    if isinstance(o, Ref):
        out.append(o)
    elif isinstance(o, (list, tuple)):
        for b in o:
            _collect_out(b, out)
    elif isinstance(o, dict):
        for b in o.values():
            _collect_out(b, out)

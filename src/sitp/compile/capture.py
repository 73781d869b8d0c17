"""Capture: run the function once on real tensors and record every backend call (6.1).

While :func:`tracing` is active, the functions of the CPU backend (``sitp/kernels/cpu/ops.py``:
the interface's, plus ``linear`` and ``_new``) are replaced by recording wrappers, and so
are the ``forward`` and ``backward`` of the fused layers (the ``Function`` classes of
``sitp/nn/_functions``). The recording sits at the backend module, not in
``sitp._tensor.dispatch.of``, because the fused layers and the creation functions call the
CPU backend directly: a hook in ``dispatch.of`` would not see them, and their results would
look like constants. A fused layer is one opaque node (its forward's ``Context`` is a
Value its backward reads), because it computes part of its result in Python (the mean of
the cross-entropy from the kernel's sums). The fused kernels themselves are never
wrapped: numba functions that call them would see a Python wrapper as a global.

For a call with CUDA tensors (``tracing(tracer, cuda=True)``), the functions of the CUDA
backend (``sitp/kernels/cuda/ops.py``, the same interface) are wrapped too, and their
nodes' ``device`` is "cuda": ``sitp/compile/gpu.py`` runs such a graph on the device.

Each wrapper runs the real call (the trace computes the true result, so the first call
returns eager's values) and appends a :class:`~sitp.compile.graph.Node`. Only the
outermost call is recorded: a backend function that calls another is one node.

The same wrappers see the autograd engine's backward calls, so tracing a function that
calls ``loss.backward()`` records the joint forward-and-backward graph, and the leaves'
``.grad`` become outputs of the graph.

Reading a traced tensor's values in Python (``.item()``, ``bool(t)``, ``.tolist()``,
``.numpy()``, an index tensor) is a *graph break*: the trace goes on with the real value,
but the graph would bake that value in, so the compiled function runs eagerly for that
input signature. :class:`Break` records the reason and the user's ``file:line``.
"""

from __future__ import annotations

import contextlib
import os
import sys

import numpy as np

from sitp import random as _random
from sitp._tensor import dispatch as _dispatch
from sitp._tensor.tensor import Tensor
from sitp.autograd import engine as _engine
from sitp.autograd.function import Function
from sitp.compile.graph import ArrRef, CtxArg, Graph, HostIndex, Node, Ref, Value
from sitp.kernels.cpu import ops as _cpu
from sitp.kernels.interface import FUNCTIONS
from sitp.nn import utils as _nn_utils
from sitp.nn._functions import attention as _l_attention
from sitp.nn._functions import binary_cross_entropy as _l_bce
from sitp.nn._functions import cross_entropy as _l_ce
from sitp.nn._functions import gelu as _l_gelu
from sitp.nn._functions import gru as _l_gru
from sitp.nn._functions import layer_norm as _l_layer_norm
from sitp.nn._functions import linear as _l_linear
from sitp.nn._functions import lstm as _l_lstm
from sitp.nn._functions import recurrent as _l_recurrent
from sitp.nn._functions import rms_norm as _l_rms_norm
from sitp.nn._functions import softmax as _l_softmax
from sitp.optim import adam as _adam

# The fused layers (sitp/nn/_functions): each forward and backward is one opaque node, since
# they compute parts of their results in Python (a loss from the kernel's sums, a scale).
_LAYER_MODULES = (
    _l_attention,
    _l_bce,
    _l_ce,
    _l_gelu,
    _l_gru,
    _l_layer_norm,
    _l_linear,
    _l_lstm,
    _l_recurrent,
    _l_rms_norm,
    _l_softmax,
)
# binary_into (x.add_(y) written straight into x) is traced as the general path runs it: a
# binary op, then an assign into x (_traced_into), so that the graph and its passes see
# the same two nodes either way; grad_from_output (tanh's or sigmoid's gradient) is traced
# as the binary op of its name, which the fuser joins to its neighbours
_OPS = tuple(
    f for f in FUNCTIONS if f not in ("check_errors", "binary_into", "grad_from_output")
) + (
    "linear",
    "_new",
)
_WRITES = {"assign": 0, "put": 0}  # backend functions that write an argument in place
_SITP_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class Break:
    """Why and where a trace could not become a graph."""

    def __init__(self, reason: str, where: str):
        self.reason, self.where = reason, where

    def __str__(self) -> str:
        return f"{self.where}: {self.reason}"

    def __repr__(self) -> str:
        return f"Break({self.reason!r}, {self.where!r})"


def user_frame() -> str:
    """``file:line`` of the innermost frame outside the sitp package (the user's code)."""
    f = sys._getframe(1)
    while f is not None:
        fn = os.path.abspath(f.f_code.co_filename)
        if not fn.startswith(_SITP_DIR):
            return f"{fn}:{f.f_lineno}"
        f = f.f_back
    return "?"


def _ptr(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


class Tracer:
    """Builds a :class:`Graph` from the backend calls made while it is active."""

    def __init__(self):
        self.graph = Graph()
        self.breaks: list[Break] = []
        self.by_storage: dict[int, Value] = {}  # id(storage array) -> its latest Value
        self.keep: list = []  # the trace's arrays, kept alive so that ids stay unique
        self.depth = 0
        self.pending: list = []  # (Ref, where) of tensors whose values Python read (_np)
        self.indices: dict = {}  # id(index array) -> its HostIndex
        self.leaves: list = []  # leaf tensors that require grad, read but not inputs
        self.leaf_guards: list = []  # their layouts, and whether .grad was None at the call
        self.leaf_fresh: list = []  # whether .grad was None when the engine reached them
        self.grad_before: dict = {}  # id(tensor) -> (tensor, .grad was None) before a write
        self.accumulated = False  # whether the engine accumulated into a leaf's .grad
        self.grad_consts = False

    # ------------------------------------------------------------ values
    def _new_value(self, arr, kind, **kw) -> Value:
        v = Value(self.graph.new_id(), arr.size, arr.dtype, kind, **kw)
        v.trace = arr
        self.by_storage[id(arr)] = v
        self.keep.append(arr)
        return v

    def add_input(self, t: Tensor, index: int) -> None:
        s = t._storage
        if id(s) in self.by_storage:  # shares storage with an earlier input
            return
        v = self._new_value(s, "input", index=index)
        self.graph.inputs.append(v)

    def value_of(self, arr: np.ndarray) -> Value:
        """The Value of storage ``arr``; a storage never seen is a constant."""
        v = self.by_storage.get(id(arr))
        if v is None:
            v = self._new_value(arr, "const", array=arr)
            self.graph.consts.append(v)
        return v

    def ref(self, t: Tensor) -> Ref:
        if t.requires_grad and t.grad_fn is None and id(t._storage) not in self.by_storage:
            self.grad_consts = True  # a leaf that requires grad, read but not an input
        return Ref(self.value_of(t._storage), t._shape, t._strides, t._offset, t.dtype, type(t))

    def arr_ref(self, a: np.ndarray) -> ArrRef:
        """A raw array argument: a view of a known buffer, or (never seen) a constant."""
        p = _ptr(a)
        for key, v in self.by_storage.items():
            s = v.trace
            if not isinstance(s, np.ndarray) or s.size == 0:
                continue
            start = _ptr(s)
            if start <= p < start + s.nbytes or (a.size == 0 and p == start):
                return ArrRef(v, p - start, a.shape, a.strides, a.dtype)
        owner = a.base
        if isinstance(owner, np.ndarray) and owner.flags.c_contiguous:
            # a view of memory made outside the function (a parameter's storage): read live
            flat = owner.reshape(-1).view(np.uint8)
            v = self._new_value(flat, "const", array=flat)
            self.graph.consts.append(v)
            return ArrRef(v, p - _ptr(flat), a.shape, a.strides, a.dtype)
        base = a if a.flags.c_contiguous and a.ndim == 1 else np.ascontiguousarray(a).reshape(-1)
        v = self._new_value(base, "scratch", array=base.copy())  # copied fresh per call
        self.graph.consts.append(v)
        return ArrRef(v, 0, a.shape, base.strides if a.ndim == 1 else a.strides, a.dtype)

    def host_index(self, a: np.ndarray):
        """``a`` as rows of tensors Python read (a HostIndex), or None."""
        if id(a) in self.indices:
            return self.indices[id(a)]
        if a.ndim != 2 or a.dtype != np.int64 or not self.pending:
            return None
        refs = []
        for row in a:
            for ref, arr, _ in reversed(self.pending):
                if arr.size == row.size and np.array_equal(arr.reshape(-1), row):
                    refs.append(ref)
                    break
            else:
                return None
        used = {id(r) for r in refs}
        self.pending = [p for p in self.pending if id(p[0]) not in used]
        h = HostIndex(refs)
        self.indices[id(a)] = h
        self.keep.append(a)
        return h

    def _template(self, a):
        if isinstance(a, Tensor):
            return self.ref(a)
        if isinstance(a, np.ndarray) and a.ndim >= 1 and a.dtype != object:
            h = self.host_index(a)
            return h if h is not None else self.arr_ref(a)
        if isinstance(a, (list, tuple)):
            return type(a)(self._template(b) for b in a)
        if _is_device_array(a):  # (a raw device array: the graph would bake it in)
            self.breaks.append(Break("a raw device array passed to a backend call", user_frame()))
        return a

    def _result(self, node: Node, r):
        """The return value's structure; new storages become the node's outputs."""
        if isinstance(r, Tensor):
            known = self.by_storage.get(id(r._storage))
            if known is None:
                known = self._new_value(r._storage, "node", producer=node)
                node.outputs.append(known)
            return Ref(known, r._shape, r._strides, r._offset, r.dtype, type(r))
        if (isinstance(r, np.ndarray) or _is_device_array(r)) and r.ndim == 1:
            known = self.by_storage.get(id(r))
            if known is None:
                known = self._new_value(r, "node", producer=node)
                node.outputs.append(known)
            return ArrRef(known, 0, r.shape, r.strides, r.dtype)
        if isinstance(r, tuple):
            return tuple(self._result(node, b) for b in r)
        return r

    def _write(self, node: Node, old: Value) -> None:
        """``node`` wrote ``old``'s memory in place: a new version takes its place."""
        if old.root().kind == "const":
            self.breaks.append(
                Break(
                    "an in-place write to a tensor that is neither an input nor made "
                    "inside the function",
                    node.where,
                )
            )
        new = Value(self.graph.new_id(), old.size, old.np_dtype, "node", producer=node, base=old)
        new.trace = old.trace
        node.writes.append((old, new))
        for key, v in list(self.by_storage.items()):
            if v is old:
                self.by_storage[key] = new

    def note_leaf(self, t: Tensor) -> None:
        """The engine accumulates into leaf ``t``: a closure's parameter gets its grad."""
        self.accumulated = True
        v = self.by_storage.get(id(t._storage))
        if v is not None and v.kind == "input" or any(t is u for u in self.leaves):
            return
        self.leaves.append(t)
        # The guard is checked when a call starts, so it holds .grad as it was then: a
        # function that sets its parameters' grads to None itself (zero_grad inside) sees
        # None here whatever the call started with.
        at_call = self.grad_before.get(id(t), (t, t.grad is None))[1]
        self.leaf_guards.append((tuple(t._shape), t._strides, t._offset, id(t._storage), at_call))
        self.leaf_fresh.append(t.grad is None)

    def note_grad_write(self, t: Tensor, had_none: bool) -> None:
        """``t.grad`` is assigned: remember what it held before the trace's first write."""
        self.grad_before.setdefault(id(t), (t, had_none))

    # ------------------------------------------------------------ recording
    def call(self, name: str, real, args, kwargs, device=None):
        if self.depth:
            return real(*args, **kwargs)
        node = Node(self.graph.new_id(), name, (), {})
        node.where = user_frame()
        node.device = device
        node.args = tuple(self._template(a) for a in args)
        node.kwargs = {k: self._template(v) for k, v in kwargs.items()}
        self.depth += 1
        try:
            result = real(*args, **kwargs)
        finally:
            self.depth -= 1
        if name in _WRITES:
            self._write(node, node.args[_WRITES[name]].value)
        node.result = self._result(node, result)
        self.graph.nodes.append(node)
        return result

    def layer(self, name, real, ctx, args, kwargs, forward: bool):
        """A fused layer's forward or backward: one node; the Context is a Value."""
        if self.depth:
            return real(ctx, *args, **kwargs)
        node = Node(self.graph.new_id(), name, (), {})
        node.where = user_frame()
        if forward:
            cv = Value(self.graph.new_id(), 0, object, "ctx", producer=node)
            cv.array = tuple(ctx.needs_input_grad) if hasattr(ctx, "needs_input_grad") else None
            self.by_storage[id(ctx)] = cv
            self.keep.append(ctx)
            node.outputs.append(cv)
        else:
            cv = self.by_storage.get(id(ctx))
            if cv is None:
                self.breaks.append(
                    Break(f"{name}: a backward whose forward was not traced", node.where)
                )
                return real(ctx, *args, **kwargs)
        node.args = (CtxArg(cv),) + tuple(self._template(a) for a in args)
        node.kwargs = {k: self._template(v) for k, v in kwargs.items()}
        self.depth += 1
        try:
            result = real(ctx, *args, **kwargs)
        finally:
            self.depth -= 1
        node.result = self._result(node, result)
        self.graph.nodes.append(node)
        return result

    def read_values(self, t: Tensor, what: str, result=None) -> None:
        """Python reads ``t``'s entries: a graph break unless ``t`` is a constant, or (for
        ``_np``) unless the array only becomes an index array of a backend call."""
        v = self.by_storage.get(id(getattr(t, "_storage", None)))
        if v is None or not _depends_on_input(v):
            return
        if what == "Tensor._np()" and result is not None:
            self.pending.append((self.ref(t), np.array(result), user_frame()))
            return
        self.breaks.append(Break(f"{what} reads a tensor's values in Python", user_frame()))

    def finish(self) -> None:
        """Close the trace. A constant that nothing but the graph holds any more (a Python
        number the tensor layer wrapped, a tensor made and dropped inside the function)
        cannot change between calls: it becomes a ``"literal"``, which constant folding
        may use. Values Python read that did not become index arrays are graph breaks."""
        self.keep = [a for a in self.keep if not isinstance(a, np.ndarray)]
        for v in self.graph.consts:
            # held by v.trace, v.array and getrefcount's argument: no tensor holds it
            if v.kind == "const" and sys.getrefcount(v.array) <= 3:
                v.kind = "literal"
        for _, _, where in self.pending:
            self.breaks.append(Break("Tensor values read in Python (a data-dependent step)", where))
        self.pending = []


def _depends_on_input(v: Value) -> bool:
    seen, stack = set(), [v]
    while stack:
        v = stack.pop()
        if v.id in seen:
            continue
        seen.add(v.id)
        if v.kind == "input":
            return True
        if v.base is not None:
            stack.append(v.base)
        if v.producer is not None:
            stack.extend(v.producer.inputs())
    return False


def view_of(storage: np.ndarray, r: ArrRef) -> np.ndarray:
    """Raw view ``r`` of the flat array ``storage``."""
    return np.ndarray(r.shape, r.np_dtype, storage, r.byte_offset, r.strides)


_active: Tracer | None = None


def active() -> Tracer | None:
    return _active


def _is_device_array(a) -> bool:
    """Whether ``a`` is a Numba device array (the storage of a CUDA tensor)."""
    return hasattr(a, "copy_to_host") and not isinstance(a, Tensor)


def _wrap(name, real, device=None):
    def recorded(*args, **kwargs):
        t = _active
        if t is None:
            return real(*args, **kwargs)
        return t.call(name, real, args, kwargs, device)

    recorded.__wrapped__ = real
    recorded.__name__ = getattr(real, "__name__", name)
    return recorded


def _reader(name, real):
    def read(self, *args, **kwargs):
        t = _active
        r = real(self, *args, **kwargs)
        if t is not None and t.depth == 0:
            t.read_values(self, f"Tensor.{name}()", r if name == "_np" else None)
        return r

    return read


def _layer_wrapper(name, real, forward):
    def layer(ctx, *args, **kwargs):
        t = _active
        if t is None:
            return real(ctx, *args, **kwargs)
        return t.layer(name, real, ctx, args, kwargs, forward)

    layer.__wrapped__ = real
    return layer


def layer_classes():
    """The Function classes of the fused layers (``sitp/nn/_functions``)."""
    out = []
    for mod in _LAYER_MODULES:
        for obj in vars(mod).values():
            if (
                isinstance(obj, type)
                and issubclass(obj, Function)
                and obj.__module__ == mod.__name__
            ):
                out.append(obj)
    return out


def _accumulator(real):
    def accumulate(leaf, g, *claimed):
        if _active is not None:
            _active.note_leaf(leaf)
        return real(leaf, g, *claimed)

    return accumulate


def _grad_watch(tracer: Tracer, slot):
    """``Tensor.grad`` while tracing: the slot itself, with its writes reported."""

    def put(t, g):
        try:
            tracer.note_grad_write(t, slot.__get__(t) is None)
        except AttributeError:  # a tensor being made: it had no .grad when the call began
            pass
        slot.__set__(t, g)

    return property(slot.__get__, put, slot.__delete__)


def _breaker(why, real):
    def broken(*args, **kwargs):
        t = _active
        if t is not None and t.depth == 0:
            t.breaks.append(Break(why, user_frame()))
        return real(*args, **kwargs)

    return broken


# Calls the graph cannot hold: they are imported by name (so the wrappers of the backend
# modules do not see them) and compute from tensors' values outside the backends.
_BREAKERS = (
    (_random, "_rng", "random numbers drawn inside the function would be baked into the graph"),
    (_nn_utils, "sum_of_squares", "clip_grad_norm_ reads the gradients' norm in Python"),
    (_adam, "adam_kernel", "an optimizer step inside the function (call step() outside it)"),
    (_adam, "adam_update", "an optimizer step inside the function (call step() outside it)"),
)


def _traced_into(op, dst, b):
    """``_cpu.binary_into`` while tracing: the op, then the write, each a traced call."""
    _cpu.assign(dst, _cpu.binary(op, dst, b))


def _traced_grad(op, y, g):
    """``_cpu.grad_from_output`` while tracing: the binary op it computes, traced."""
    return _cpu.binary(op, y, g)


def _engine_walk(tracer: Tracer, real):
    """The autograd engine's walk, noting where the backward starts (``backward_at``: the
    id of the first node it traces) for the save-or-recompute pass (``remat.py``)."""

    def walk(*args, **kwargs):
        if tracer.graph.backward_at is None:
            tracer.graph.backward_at = tracer.graph._next + 1
        return real(*args, **kwargs)

    return walk


def _traced_into_cuda(op, dst, b):
    """The CUDA backend's ``binary_into`` while tracing, as :func:`_traced_into`."""
    gpu = _dispatch.cuda()
    gpu.assign(dst, gpu.binary(op, dst, b))


def _traced_grad_cuda(op, y, g):
    """The CUDA backend's ``grad_from_output`` while tracing, as :func:`_traced_grad`."""
    return _dispatch.cuda().binary(op, y, g)


@contextlib.contextmanager
def tracing(tracer: Tracer, cuda: bool = False):
    """Record the backend calls made in the block into ``tracer`` (not re-entrant).
    ``cuda``: record the CUDA backend's calls too (each node's ``device`` is "cuda"), for
    a function called on CUDA tensors (``sitp/compile/gpu.py``)."""
    global _active
    if _active is not None:
        raise RuntimeError("sitp.compile: a traced function called a compiled one")
    saved = []
    for name in _OPS:
        real = getattr(_cpu, name)
        saved.append((_cpu, name, real))
        setattr(_cpu, name, _wrap(name, real))
    saved.append((_cpu, "binary_into", _cpu.binary_into))
    _cpu.binary_into = _traced_into
    saved.append((_cpu, "grad_from_output", _cpu.grad_from_output))
    _cpu.grad_from_output = _traced_grad
    if cuda:
        gpu = _dispatch.cuda()
        for name in _OPS:
            real = getattr(gpu, name, None)
            if real is None:  # (the CUDA backend has no ``linear``)
                continue
            saved.append((gpu, name, real))
            setattr(gpu, name, _wrap(name, real, "cuda"))
        saved.append((gpu, "binary_into", gpu.binary_into))
        gpu.binary_into = _traced_into_cuda
        saved.append((gpu, "grad_from_output", gpu.grad_from_output))
        gpu.grad_from_output = _traced_grad_cuda
    for owner, name, why in _BREAKERS:
        real = getattr(owner, name, None)
        if real is None:  # (a name the module does not have in this version)
            continue
        saved.append((owner, name, real))
        setattr(owner, name, _breaker(why, real))
    for cls in layer_classes():
        for which in ("forward", "backward"):
            raw = cls.__dict__[which]
            saved.append((cls, which, raw))
            real = raw.__func__ if isinstance(raw, staticmethod) else raw
            wrapped = _layer_wrapper(f"{cls.__name__}.{which}", real, which == "forward")
            setattr(cls, which, staticmethod(wrapped))
    slot = Tensor.__dict__["grad"]
    saved.append((Tensor, "grad", slot))
    Tensor.grad = _grad_watch(tracer, slot)
    real = _engine._accumulate
    saved.append((_engine, "_accumulate", real))
    setattr(_engine, "_accumulate", _accumulator(real))
    real = _engine._walk
    saved.append((_engine, "_walk", real))
    setattr(_engine, "_walk", _engine_walk(tracer, real))
    for name in ("item", "_np", "numpy"):
        real = getattr(Tensor, name)
        saved.append((Tensor, name, real))
        setattr(Tensor, name, _reader(name, real))
    _active = tracer
    try:
        yield tracer
    finally:
        _active = None
        tracer.grad_before.clear()  # (it holds the tensors it names)
        for owner, name, real in reversed(saved):
            setattr(owner, name, real)

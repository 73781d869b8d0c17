"""Running a captured graph on new inputs (6.1, 6.3).

A :class:`Program` turns a :class:`~sitp.compile.graph.Graph` into a list of steps, each
a Python closure over an *environment* (Value id -> the array that holds it in this
call). A backend call is replayed by calling the same backend function on tensors made
over this call's arrays with the recorded layouts; a generated kernel is called on the
arrays directly. Nothing is recorded for autograd: the graph already holds the backward.
"""

from __future__ import annotations

import numpy as np

from sitp._tensor import dispatch
from sitp._tensor.tensor import Tensor
from sitp.autograd.function import Context
from sitp.compile import capture
from sitp.compile.graph import ArrRef, CtxArg, Graph, HostIndex, Node, Ref
from sitp.kernels.cpu import ops as _cpu


def backend_function(name: str, device=None):
    """The CPU backend's function ``name``, or for ``device="cuda"`` the CUDA backend's
    (unwrapped, in case a trace is running)."""
    f = getattr(_cpu if device is None else dispatch.cuda(), name)
    return getattr(f, "__wrapped__", f)


def make(a, env):
    """The argument of a replayed call: a tensor or a raw view over this call's arrays."""
    if isinstance(a, Ref):
        return a.cls._make(env[a.value.id], a.shape, a.strides, a.offset, a.dtype)
    if isinstance(a, ArrRef):
        return capture.view_of(env[a.value.id], a)
    if isinstance(a, CtxArg):
        return env[a.value.id]
    if isinstance(a, HostIndex):
        rows = [_cpu.as_numpy(make(r, env)).reshape(-1) for r in a.refs]
        return np.ascontiguousarray(np.stack(rows), dtype=np.int64)
    if isinstance(a, (list, tuple)):
        return type(a)(make(b, env) for b in a)
    return a


def _bind(template, r, node, env):
    if isinstance(template, Ref):
        if template.value.producer is node and template.value in node.outputs:
            env[template.value.id] = r._storage
    elif isinstance(template, ArrRef):
        if template.value in node.outputs:
            env[template.value.id] = r
    elif isinstance(template, tuple):
        for t, x in zip(template, r):
            _bind(t, x, node, env)


def layer_function(name: str):
    cls_name, which = name.split(".")
    cls = next(c for c in capture.layer_classes() if c.__name__ == cls_name)
    raw = cls.__dict__[which]
    f = raw.__func__ if isinstance(raw, staticmethod) else raw
    return getattr(f, "__wrapped__", f)


def layer_step(node: Node):
    fn = layer_function(node.fn)
    args, kwargs = node.args, node.kwargs
    forward = node.fn.endswith(".forward")
    cv = node.outputs[0] if forward else None

    def step(env):
        if forward:
            ctx = Context()
            if cv.array is not None:
                ctx.needs_input_grad = cv.array
            env[cv.id] = ctx
        r = fn(*make(args, env), **{k: make(v, env) for k, v in kwargs.items()})
        _bind(node.result, r, node, env)

    return step


def step_of(node: Node):
    if node.fn.endswith((".forward", ".backward")) and node.fn[0].isupper():
        return layer_step(node)
    if node.fn == "assign" and node.device is None and _plain_assign(node):
        return assign_step(node)
    return call_step(node)


def _plain_assign(node: Node) -> bool:
    """An ``assign`` of a view into a view of one shape and dtype, the destination's
    entries each written once (a stack's row, a gradient added up in place)."""
    if len(node.args) != 2 or node.kwargs or len(node.writes) != 1:
        return False
    dst, src = node.args
    if not (isinstance(dst, Ref) and isinstance(src, Ref)) or node.writes[0][0] is not dst.value:
        return False
    return (
        tuple(dst.shape) == tuple(src.shape)
        and dst.dtype is src.dtype
        and dst.value.np_dtype == src.value.np_dtype
        and all(st > 0 or n == 1 for st, n in zip(dst.strides, dst.shape))
        and min(src.strides, default=0) >= 0
    )


def _view(buf: np.ndarray, r: Ref) -> np.ndarray:
    it = buf.itemsize
    return np.ndarray(r.shape, buf.dtype, buf, r.offset * it, tuple(it * st for st in r.strides))


def assign_step(node: Node):
    """A plain ``assign`` as one numpy copy between the two views: the backend's copy,
    without the two tensors and the dispatch its call makes (a few microseconds each,
    for the 12 rows of a stack or the adds of a weight's gradient over 12 steps)."""
    dst, src = node.args
    old, new = node.writes[0]

    def step(env):
        env[new.id] = buf = env[old.id]
        _view(buf, dst)[...] = _view(env[src.value.id], src)

    return step


def call_step(node: Node):
    fn = backend_function(node.fn, node.device)
    args, kwargs, writes = node.args, node.kwargs, node.writes

    def step(env):
        for old, new in writes:
            env[new.id] = env[old.id]
        r = fn(*make(args, env), **{k: make(v, env) for k, v in kwargs.items()})
        _bind(node.result, r, node, env)

    return step


def release_lists(graph: Graph) -> list:
    """For each node, the Value ids no later node reads and the caller does not see:
    the environment drops them after that node, as eager autograd frees a buffer once
    its last reader ran (the memory goes back to the allocator while it is in cache)."""
    live = graph.live_values()
    last = {}
    for i, n in enumerate(graph.nodes):
        for v in n.inputs():
            last[v.id] = i
        for v in n.made():
            last.setdefault(v.id, i)  # made but never read: dropped at once
    drop = [[] for _ in graph.nodes]
    for vid, i in last.items():
        if vid not in live:
            drop[i].append(vid)
    return drop


def _releasing(step, ids):
    def run(env):
        step(env)
        for vid in ids:
            env.pop(vid, None)

    return run


class Program:
    """The steps of a graph, and how to bind inputs and read outputs."""

    def __init__(self, graph: Graph, steps=None, n_slots=0):
        self.graph, self.n_slots = graph, n_slots
        steps = steps if steps is not None else [step_of(n) for n in graph.nodes]
        drops = release_lists(graph) if len(steps) == len(graph.nodes) else [()] * len(steps)
        self.steps = [_releasing(s, d) if d else s for s, d in zip(steps, drops)]
        self.consts = [(v.id, v.array, v.kind == "scratch") for v in graph.consts]
        self._leaf = {}

    def run_env(self, inputs: list, preset=None) -> dict:
        """Run on the flat list of input tensors (and the Values in ``preset``, id ->
        array: what a forward graph saved for this backward one); returns the environment."""
        env = {"slots": [None] * self.n_slots}
        if preset:
            env.update(preset)
        for v in self.graph.inputs:
            env[v.id] = inputs[v.index]._storage
        for vid, arr, scratch in self.consts:
            env[vid] = arr.copy() if scratch else arr
        for step in self.steps:
            step(env)
        return env

    def outputs(self, env):
        return _rebuild(self.graph.output, env)

    def run(self, inputs: list) -> tuple:
        """Run on the flat list of input tensors; returns (output structure, grads)."""
        env = self.run_env(inputs)
        out = _rebuild(self.graph.output, env)
        grads = {i: _tensor(r, env) for i, r in self.graph.grads.items() if i >= 0}
        self._leaf = {i: _tensor(r, env) for i, r in self.graph.grads.items() if i < 0}
        return out, grads

    leaves: list = []  # a closure's leaf tensors that the program gives a .grad
    leaves_set: list = []  # those of them whose .grad was None when the trace reached them

    def leaf_grads(self, grads):
        """(leaf, grad) for the leaves of a closure that the last run computed."""
        return [(self.leaves[-1 - i], g) for i, g in self._leaf.items()]


def _tensor(r: Ref, env) -> Tensor:
    return r.cls._make(env[r.value.id], r.shape, r.strides, r.offset, r.dtype)


def _rebuild(o, env):
    if isinstance(o, Ref):
        return _tensor(o, env)
    if isinstance(o, list):
        return [_rebuild(b, env) for b in o]
    if isinstance(o, tuple):
        return tuple(_rebuild(b, env) for b in o)
    if isinstance(o, dict):
        return {k: _rebuild(b, env) for k, b in o.items()}
    return o


def empty_like_value(v) -> np.ndarray:
    return np.empty(v.size, v.np_dtype)

"""``sitp.compile``: the compiled callable, its guards and its cache (6.1).

The first call with a new *input signature* traces the function (``capture.py``), runs the
passes (``passes.py``) and builds a :class:`~sitp.compile.runtime.Program`; later calls
with the same signature run the program. The signature is the guard: each input tensor's
shape, strides, offset, dtype, device, ``requires_grad`` and whether it has a ``.grad``,
which inputs share a storage, the grad mode, and for a module its ``training`` flag and
its parameters and buffers (read afresh on every call, so an optimizer's in-place updates
are seen). A signature that fails every cached guard compiles again, up to
``cache_size_limit`` (8, as torch._dynamo's) programs; beyond it the function runs eagerly,
with a warning. A trace that met a graph break runs eagerly for that signature.
"""

from __future__ import annotations

import os
import warnings

from sitp._tensor.tensor import Tensor
from sitp.autograd.grad_mode import is_grad_enabled
from sitp.compile import capture, passes
from sitp.nn.modules.module import Module

cache_size_limit = 8


def _flatten(o, out: list) -> None:
    if isinstance(o, Tensor):
        out.append(o)
    elif isinstance(o, (list, tuple)):
        for b in o:
            _flatten(b, out)
    elif isinstance(o, dict):
        for b in o.values():
            _flatten(b, out)


class Entry:
    """One compiled signature: its program, or why it runs eagerly."""

    def __init__(self, key, program=None, breaks=(), reason=None, report=None, leaves=()):
        self.key, self.program, self.breaks = key, program, list(breaks)
        self.leaves = list(leaves)  # (tensor, its guard) of leaves a function read
        self.reason, self.report = reason, report or {}

    @property
    def graph(self):
        return None if self.program is None else self.program.graph


class CompiledFunction:
    """What :func:`compile` returns: call it as the function (or module) it wraps."""

    def __init__(self, fn, *, fuse=True, debug_dir=None, explain=False, passes_on=None):
        self._module = fn if isinstance(fn, Module) else None
        self._fn = fn
        self.fuse, self.debug_dir, self.explain = fuse, debug_dir, explain
        self.passes_on = passes_on
        self.entries: list[Entry] = []
        self._warned = False

    # ----------------------------------------------------------------- guards
    def _inputs(self, args, kwargs) -> list:
        ts: list = []
        _flatten(args, ts)
        _flatten(kwargs, ts)
        if self._module is not None:
            ts.extend(p for _, p in self._module.named_parameters())
            ts.extend(b for _, b in self._module.named_buffers() if isinstance(b, Tensor))
        grads = [t.grad for t in ts if t.requires_grad and t.grad is not None]
        return ts + grads

    def _key(self, ts) -> tuple:
        first = {}
        parts = [is_grad_enabled(), getattr(self._module, "training", None)]
        for i, t in enumerate(ts):
            share = first.setdefault(id(t._storage), i)
            parts.append(
                (
                    tuple(t._shape),
                    t._strides,
                    t._offset,
                    len(t._storage),
                    t.dtype.name,
                    t.is_cuda,
                    t.requires_grad,
                    t.grad is None,
                    share,
                )
            )
        return tuple(parts)

    # ------------------------------------------------------------------ calls
    def __call__(self, *args, **kwargs):
        ts = self._inputs(args, kwargs)
        key = self._key(ts)
        for e in self.entries:
            if e.key == key and all(_leaf_guard(t) == lg for t, lg in e.leaves):
                if e.program is None:
                    return self._fn(*args, **kwargs)
                return self._run(e.program, ts)
        if len(self.entries) >= cache_size_limit:
            if not self._warned:
                warnings.warn(
                    f"sitp.compile: {cache_size_limit} signatures compiled "
                    f"(cache_size_limit); running eagerly from now on",
                    stacklevel=2,
                )
                self._warned = True
            return self._fn(*args, **kwargs)
        return self._trace(key, ts, args, kwargs)

    def _run(self, program, ts):
        """Run the program; outputs carry no autograd graph (the backward ran inside)."""
        out, grads = program.run(ts)
        for i, g in grads.items():
            ts[i].grad = g
        for t, g in program.leaf_grads(grads):
            t.grad = g
        return out

    def _trace(self, key, ts, args, kwargs):
        if any(t.is_cuda for t in ts):
            self._add(Entry(key, reason="CUDA tensors: compiled programs run on the CPU backend"))
            return self._fn(*args, **kwargs)
        tracer = capture.Tracer()
        for i, t in enumerate(ts):
            tracer.add_input(t, i)
        with capture.tracing(tracer):
            result = self._fn(*args, **kwargs)
        tracer.finish()
        g = tracer.graph
        reason = None
        outs: list = []
        _flatten(result, outs)
        backward = any(t.requires_grad and t.grad is not None for t in ts + tracer.leaves)
        if is_grad_enabled() and not backward and any(t.requires_grad for t in outs):
            reason = (
                "an output requires grad: call backward() inside the compiled function "
                "(its joint forward-and-backward graph is compiled), or compile under no_grad"
            )
        if tracer.breaks or reason:
            self._add(Entry(key, breaks=tracer.breaks, reason=reason))
            return result
        g.output = _template(result, tracer)
        for i, t in enumerate(ts):
            if t.requires_grad and t.grad is not None:
                g.grads[i] = tracer.ref(t.grad)
        leaves = list(zip(tracer.leaves, tracer.leaf_guards))
        # a leaf the function read (a closure's parameter) gets its .grad as ts[-1 - k]
        for k, t in enumerate(tracer.leaves):
            if t.grad is not None:
                g.grads[-1 - k] = tracer.ref(t.grad)
        program, report = passes.compile_graph(
            g, fuse=self.fuse, debug_dir=self.debug_dir, only=self.passes_on
        )
        for v in tracer.by_storage.values():
            v.trace = None  # the trace's buffers are not needed any more
        tracer.keep = []
        program.leaves = list(tracer.leaves)
        self._add(Entry(key, program=program, report=report, leaves=leaves))
        return result

    def _add(self, e: Entry) -> None:
        self.entries.append(e)
        if self.explain:
            print(explain_text(self))

    # -------------------------------------------------------------- inspection
    @property
    def graphs(self) -> list:
        """The graph of each compiled signature (after the passes)."""
        return [e.graph for e in self.entries if e.graph is not None]

    @property
    def graph(self):
        gs = self.graphs
        return gs[-1] if gs else None

    @property
    def breaks(self) -> list:
        return [b for e in self.entries for b in e.breaks]

    def __getattr__(self, name):
        mod = self.__dict__.get("_module")
        if mod is None:
            raise AttributeError(name)
        return getattr(mod, name)


def _leaf_guard(t) -> tuple:
    return (tuple(t._shape), t._strides, t._offset, id(t._storage), t.grad is None)


def _template(o, tracer):
    if isinstance(o, Tensor):
        return tracer.ref(o)
    if isinstance(o, list):
        return [_template(b, tracer) for b in o]
    if isinstance(o, tuple):
        return tuple(_template(b, tracer) for b in o)
    if isinstance(o, dict):
        return {k: _template(b, tracer) for k, b in o.items()}
    return o


def explain_text(cf: CompiledFunction) -> str:
    """What was compiled and what runs eagerly, and why (as ``torch._dynamo.explain``)."""
    lines = []
    for i, e in enumerate(cf.entries):
        if e.program is not None:
            r = e.report
            lines.append(
                f"signature {i}: compiled, {r.get('ops_before', '?')} ops -> "
                f"{r.get('steps_after', '?')} steps ({r.get('kernels', 0)} generated kernels)"
            )
        else:
            lines.append(f"signature {i}: runs eagerly")
            if e.reason:
                lines.append(f"  reason: {e.reason}")
            for b in e.breaks:
                lines.append(f"  graph break at {b.where}: {b.reason}")
    return "\n".join(lines)


def compile(fn=None, *, fuse=True, debug_dir=None, explain=False, **options):  # noqa: A001
    """Compile ``fn`` (a function or an ``nn.Module``): the result is called as ``fn`` is.

    ``fuse=False`` keeps every backend call (the graph is replayed, not fused);
    ``debug_dir`` writes each generated kernel's source and each graph there; ``explain``
    prints, at each compile, what was compiled and where the graph broke.
    Unknown options (torch's ``mode=``, ``fullgraph=``, ``dynamic=``) are accepted and ignored.
    """
    if fn is None:
        return lambda f: compile(f, fuse=fuse, debug_dir=debug_dir, explain=explain, **options)
    if not callable(fn):
        raise TypeError(f"sitp.compile expects a function or an nn.Module, got {type(fn).__name__}")
    if debug_dir is not None:
        os.makedirs(debug_dir, exist_ok=True)
    return CompiledFunction(fn, fuse=fuse, debug_dir=debug_dir, explain=explain)


def explain(fn, *args, **kwargs) -> str:
    """Compile ``fn``, call it once on ``args`` and return the explanation text."""
    cf = fn if isinstance(fn, CompiledFunction) else CompiledFunction(fn)
    cf(*args, **kwargs)
    return explain_text(cf)

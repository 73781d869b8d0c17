"""``sitp.compile``: the compiled callable, its guards and its cache (6.1).

The first call with a new *input signature* traces the function (``capture.py``), runs the
passes (``passes.py``) and builds a :class:`~sitp.compile.runtime.Program`; later calls
with the same signature run the program. The signature is the guard: each input tensor's
shape, strides, offset, dtype, device, ``requires_grad`` and whether it has a ``.grad``,
which inputs share a storage, the values of the arguments that are not tensors (they are
baked into the graph), the grad mode, and for a module its ``training`` flag and
its parameters and buffers (read afresh on every call, so an optimizer's in-place updates
are seen). A signature that fails every cached guard compiles again, up to
``cache_size_limit`` (8, as torch._dynamo's) programs; beyond it the function runs eagerly,
with a warning. A trace that met a graph break runs eagerly for that signature.

The trace runs the function itself, so the first call of a signature returns eager's
values. With ``rerun_trace=True`` that call undoes what the trace wrote (the inputs it
wrote in place, the ``.grad`` it set) and runs the program it built, so that every call,
the first included, is the compiled program's: what a training run needs for a resume
to be exact, since a resumed run traces again at a step that the uninterrupted run ran
compiled. It is the default for an ``nn.Module`` (``torch.compile(model)`` in a training
script), and off for a function unless asked for.
"""

from __future__ import annotations

import os
import warnings

import numpy as np

from sitp._tensor.tensor import Tensor
from sitp.autograd import engine
from sitp.autograd.function import Function
from sitp.autograd.grad_mode import is_grad_enabled
from sitp.compile import capture, gpu, passes
from sitp.compile import dynamic as dynamic_mod
from sitp.compile import remat as remat_mod
from sitp.compile import tune as tune_mod
from sitp.compile.graph import Graph, Ref, contiguous
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
    """One compiled signature: its program, or why it runs eagerly. A *dynamic* entry
    (``dynamic``, a :class:`Dynamic`) serves every batch size on its line instead of
    one signature (``key`` None); ``template`` is a static entry's trace, kept for the
    fit that makes one (:mod:`sitp.compile.dynamic`)."""

    def __init__(self, key, program=None, breaks=(), reason=None, report=None, leaves=()):
        self.key, self.program, self.breaks = key, program, list(breaks)
        self.leaves = list(leaves)  # (tensor, its guard) of leaves a function read
        self.reason, self.report = reason, report or {}
        self.dynamic = None
        self.template = None  # (kind, record) of the trace, before the passes

    def matches(self, key, ts) -> bool:
        if self.dynamic is not None:
            ok = self.dynamic.accepts(key, ts)
        else:
            ok = self.key == key
        return ok and all(_leaf_guard(t) == lg for t, lg in self.leaves)

    def program_for(self, key):
        return self.program if self.dynamic is None else self.dynamic.program_at(key)

    @property
    def graph(self):
        return None if self.program is None else self.program.graph


class Dynamic:
    """The program of an entry for every size ``s >= 2`` (6.1, "Guards"): the guard is
    the signature of the template's trace with each number on the size's line evaluated
    at ``s`` (``s``: size ``dim`` of input ``index``: a batch, a sequence's length); the
    program at a new ``s`` runs the passes on the template's graph at ``s``, whose
    kernels have the sources numba compiled already. With ``second`` (an input's index
    and a dim), the entry is for every pair of sizes ``(s, t)``, both at least 2, its
    numbers polynomials of both (:func:`sitp.compile.dynamic.fit2`)."""

    keep = 64  # programs of this many batch sizes are kept (the oldest dropped)

    def __init__(self, cf, kind, record, lines, key, key_lines, index, dim=0, second=None):
        self.cf, self.kind, self.record, self.lines = cf, kind, record, lines
        self.key, self.key_lines, self.index = key, key_lines, index
        self.dim, self.second = dim, second
        w = dynamic_mod.walk(record)
        self.skel, self.nums = w.skel, w.nums
        self.keys: dict = {}  # s -> the signature at s
        self.programs: dict = {}  # s -> its program
        self.reports: dict = {}  # s -> its passes' report
        self.verified: set = set()  # batch sizes whose trace was the template's
        self.rejected: set = set()  # batch sizes whose trace was not

    def size(self, key):
        """The entry's size in signature ``key`` (a pair of sizes with ``second``)."""
        s = _size_of(key, self.index, self.dim)
        if self.second is None or s is None:
            return s
        t = _size_of(key, *self.second)
        return None if t is None else (s, t)

    def accepts(self, key, ts=None) -> bool:
        s = self.size(key)
        if s is None or s in self.rejected or key[1] != self.key[1]:
            return False
        if min(s if isinstance(s, tuple) else (s,)) < 2:
            return False
        want = self.keys.get(s)
        if want is None:
            if len(self.keys) >= 4 * self.keep:  # (a sampler's lengths: each seen once)
                self.keys.clear()
            want = self.keys[s] = dynamic_mod.instantiate(self.key[0], self.key_lines, s)
        return want == key[0]

    def seen(self, key) -> bool:
        return self.size(key) in self.verified

    def verify(self, record, s):
        """None when the trace ``record`` at batch size ``s`` is the template at ``s``
        (the same graph, each number on its line); else why not."""
        why = dynamic_mod.check(record, self.skel, self.nums, self.lines, s)
        (self.rejected if why else self.verified).add(s)
        return why

    def program_at(self, key):
        return self.compile(self.size(key))

    def compile(self, s):
        prog = self.programs.get(s)
        if prog is None:
            record = dynamic_mod.instantiate(self.record, self.lines, s)
            prog, self.reports[s] = self.cf._build(self.kind, record)
            if len(self.programs) >= self.keep:
                self.programs.pop(next(iter(self.programs)))
            self.programs[s] = prog
        return prog


def _size_of(key, index, dim):
    parts = key[0]
    shape = parts[2 + index][0] if 2 + index < len(parts) else ()
    return int(shape[dim]) if len(shape) > dim else None


class CompiledFunction:
    """What :func:`compile` returns: call it as the function (or module) it wraps."""

    def __init__(
        self,
        fn,
        *,
        fuse=True,
        debug_dir=None,
        explain=False,
        passes_on=None,
        fullgraph=False,
        name=None,
        recompile_limit=None,
        rerun_trace=None,
        remat="auto",
        tune=None,
        dynamic=None,
    ):
        if remat not in remat_mod.MODES:
            raise ValueError(f"sitp.compile: remat {remat!r} is not one of {remat_mod.MODES}")
        self.remat = remat
        self.tuner = tune_mod.resolve(tune)
        self._module = fn if isinstance(fn, Module) else None
        self._fn = fn
        self.fuse, self.debug_dir, self.explain = fuse, debug_dir, explain
        self.fullgraph = fullgraph
        self.name = name
        self.recompile_limit = recompile_limit
        self.passes_on = passes_on
        self.rerun_trace = self._module is not None if rerun_trace is None else rerun_trace
        self.entries: list[Entry] = []
        self._warned = False
        self._verify = None  # a dynamic entry this call's trace is checked against
        self._last = None  # the entry of the last trace
        self.dynamic = dynamic  # None/True: a batch size's change makes a dynamic entry

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
        key = (self._key(ts), _static((args, kwargs)))
        self._verify = None
        for e in self.entries:
            if e.matches(key, ts):
                if e.program is None:
                    return self._fn(*args, **kwargs)
                if e.dynamic is None or e.dynamic.seen(key):
                    return self._run(e.program_for(key), ts)
                # a dynamic entry's first call at this batch size: trace it, and run the
                # entry's program if the trace is the template's at this size (a branch
                # of the function on a size would make it another graph)
                self._verify = e
                break
        limit = cache_size_limit if self.recompile_limit is None else self.recompile_limit
        if len(self.entries) >= limit and self._verify is None:
            if not self._warned:
                warnings.warn(
                    f"sitp.compile{f' ({self.name})' if self.name else ''}: {limit} "
                    "signatures compiled (the recompile limit); running eagerly from now on",
                    stacklevel=2,
                )
                self._warned = True
            return self._fn(*args, **kwargs)
        if not self.rerun_trace or any(t.is_cuda for t in ts):
            return self._trace(key, ts, args, kwargs)
        before = [(t, np.array(t._storage, copy=True), t.grad) for t in ts]
        result = self._trace(key, ts, args, kwargs)
        e = self._last
        if e.program is None:  # eager from now on for this signature: the trace's values are
            return result
        program = e.program_for(key)
        written = _written_inputs(program)
        for i, (t, saved, grad) in enumerate(before):  # undo the trace's writes, then run
            if i in written:
                np.copyto(t._storage, saved)
            t.grad = grad
        for t in getattr(program, "leaves_set", ()):  # a closure's leaf whose .grad
            t.grad = None  # the trace set
        return self._run(program, ts)

    def signature_known(self, *args, **kwargs) -> bool:
        """Whether a call with these arguments would find a compiled (or eager) entry,
        rather than trace."""
        ts = self._inputs(args, kwargs)
        key = (self._key(ts), _static((args, kwargs)))
        return any(
            e.matches(key, ts) and (e.dynamic is None or e.dynamic.seen(key)) for e in self.entries
        )

    def _run(self, program, ts):
        """Run the program; outputs carry no autograd graph (the backward ran inside),
        unless it is a forward and backward pair (:class:`Joint`)."""
        if isinstance(program, Joint):
            return program.call(ts)
        out, grads = program.run(ts)
        for i, g in grads.items():
            ts[i].grad = g
        for t, g in program.leaf_grads(grads):
            t.grad = g
        return out

    def _trace(self, key, ts, args, kwargs):
        on_cuda = any(t.is_cuda for t in ts)  # the GPU path (gpu.py): CUDA calls traced too
        tracer = capture.Tracer()
        for i, t in enumerate(ts):
            tracer.add_input(t, i)
        with capture.tracing(tracer, cuda=on_cuda):
            result = self._fn(*args, **kwargs)
        tracer.finish()
        g = tracer.graph
        reason = None
        outs: list = []
        _flatten(result, outs)
        if is_grad_enabled() and not tracer.accumulated and any(t.requires_grad for t in outs):
            if tracer.grad_consts:
                reason = (
                    "an output requires grad and the function reads a tensor that requires "
                    "grad but is not an argument: compile the nn.Module, or pass it in"
                )
            elif not tracer.breaks:
                return self._trace_backward(key, ts, tracer, result, outs, on_cuda)
        if on_cuda and not tracer.breaks and not reason:
            reason = gpu.unsupported(g)
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
        for v in tracer.by_storage.values():
            v.trace = None  # the trace's buffers are not needed any more
        tracer.keep = []
        record = {
            "graph": g,
            "leaves": list(tracer.leaves),
            "leaves_set": [t for t, fresh in zip(tracer.leaves, tracer.leaf_fresh) if fresh],
        }
        if on_cuda:
            record["device"] = "cuda"
        self._add(self._entry(key, "plain", record, leaves))
        return result

    def _build(self, kind, record):
        """The program of a trace's record (the passes rewrite its graph): a Program, or
        for a forward and backward pair a :class:`Joint`; and the passes' report."""
        if kind == "joint":
            return self._build_joint(record)
        if record.get("device") == "cuda":
            program, report = gpu.compile_graph(
                record["graph"], fuse=self.fuse, debug_dir=self.debug_dir
            )
            program.leaves = list(record["leaves"])
            program.leaves_set = list(record["leaves_set"])
            return program, report
        program, report = passes.compile_graph(
            record["graph"],
            fuse=self.fuse,
            debug_dir=self.debug_dir,
            only=self.passes_on,
            remat=None if self.remat == "auto" else self.remat,
            tuner=self.tuner,
        )
        program.leaves = list(record["leaves"])
        program.leaves_set = list(record["leaves_set"])
        return program, report

    def _entry(self, key, kind, record, leaves=()) -> Entry:
        """The entry of a new trace: dynamic when it differs from a static entry's trace
        only in its batch size (:meth:`_fit`), else static, its trace kept for a fit."""
        pending, self._verify = self._verify, None
        cuda = record.get("device") == "cuda"
        if cuda:  # (a CUDA kernel's source has no size arguments: one entry per size)
            found, why = None, None
        elif pending is not None and pending.dynamic.kind == kind:
            s = pending.dynamic.size(key)
            why = pending.dynamic.verify(record, s)
            if why is None:
                pending.dynamic.compile(s)
                return pending
            why = f"at batch size {s} the trace is not the dynamic entry's: {why}"
            found = None
        elif self.dynamic is not False:
            found, why = self._fit(key, kind, record)
        else:
            found, why = None, None
        if found is not None:
            dyn, s = found
            merged = self._merge(dyn, s)
            if merged is not None:
                dyn, s = merged
            e = Entry(None, leaves=leaves)
            e.dynamic = dyn
            dyn.verified.add(s)
            e.program = dyn.compile(s)
            e.report = dict(dyn.reports[s], dynamic=True, input=dyn.index, dim=dyn.dim)
            return e
        template = dynamic_mod.copy(record) if self.dynamic is not False and not cuda else None
        program, report = self._build(kind, record)
        if why:
            report["not_dynamic"] = why
        e = Entry(key, program=program, report=report, leaves=leaves)
        e.template = None if template is None else (kind, template)
        return e

    def _fit(self, key, kind, record):
        """((a :class:`Dynamic`, this size), None) when an earlier static entry's trace
        differs from this one only in one size of its inputs (both at least 2:
        :func:`_batch_change`), the numbers of the two graphs on lines of it; else
        (None, why not or None)."""
        for e in reversed(self.entries):
            if e.template is None or e.template[0] != kind or e.key[1] != key[1]:
                continue
            change = _batch_change(e.key[0], key[0])
            if change is None:
                continue
            index, dim, s1, s2 = change
            key_lines, why = dynamic_mod.fit(e.key[0], s1, key[0], s2)
            if key_lines is None:
                return None, why
            lines, why = dynamic_mod.fit(e.template[1], s1, record, s2)
            if lines is None:
                return None, why
            # the record is the template: each batch size's program is built on a copy
            return (Dynamic(self, kind, record, lines, key, key_lines, index, dim), s2), None
        return None, None

    def _merge(self, dyn, s):
        """A new dynamic entry ``dyn`` (of one size, at ``s``) and an earlier one of the
        same size made at another value of a second size (a batch, at two lengths of a
        sequence): ``(the entry of both sizes, this pair of sizes)``, the earlier entry
        dropped; else None (:func:`sitp.compile.dynamic.fit2`)."""
        for f in reversed(self.entries):
            g = f.dynamic
            if g is None or g.second is not None or g.kind != dyn.kind:
                continue
            if (g.index, g.dim) != (dyn.index, dyn.dim) or g.key[1] != dyn.key[1]:
                continue
            at_s = dynamic_mod.instantiate(g.key[0], g.key_lines, s)
            change = _batch_change(at_s, dyn.key[0])
            if change is None or change[:2] == (dyn.index, dyn.dim):
                continue
            index, dim, t1, t2 = change
            key_polys, _ = dynamic_mod.fit2(
                g.key[0], g.key_lines, t1, dyn.key[0], dyn.key_lines, t2, s
            )
            if key_polys is None:
                continue
            polys, _ = dynamic_mod.fit2(g.record, g.lines, t1, dyn.record, dyn.lines, t2, s)
            if polys is None:
                continue
            both = Dynamic(
                self,
                dyn.kind,
                dyn.record,
                polys,
                dyn.key,
                key_polys,
                dyn.index,
                dyn.dim,
                second=(index, dim),
            )
            self.entries.remove(f)
            return both, (s, t2)
        return None

    def _trace_backward(self, key, ts, tracer, result, outs, on_cuda=False):
        """Outputs that require grad: trace their backward too, from placeholder output
        gradients, and split the joint graph into a forward graph and a backward graph
        (AOTAutograd's plan). A call then runs the forward graph inside one autograd
        Function, whose backward runs the backward graph on what the forward saved."""
        g = tracer.graph
        g.output = _template(result, tracer)
        k = len(g.nodes)
        n_in = len(ts)
        floats = [o for o in outs if o.dtype.is_floating_point]
        diff = [j for j, o in enumerate(floats) if o.requires_grad]
        gouts = []
        for j in diff:
            o = floats[j]
            go = o._make(np.ones(o.numel(), o.dtype.np), o.shape, contiguous(o.shape), 0, o.dtype)
            go = go.cuda() if on_cuda else go  # (outside the trace: not a node)
            tracer.add_input(go, n_in + len(gouts))
            gouts.append(go)
        wrt = [t for t in ts if t.requires_grad]
        with capture.tracing(tracer, cuda=on_cuda):
            total = None
            for j, go in zip(diff, gouts):
                term = (floats[j] * go).sum()
                total = term if total is None else total + term
            grads = engine.grad(total, wrt, retain_graph=True, materialize_grads=True)
        tracer.finish()
        reason = gpu.unsupported(g) if on_cuda and not tracer.breaks else None
        if tracer.breaks or reason:
            self._add(Entry(key, breaks=tracer.breaks, reason=reason))
            return result
        record = {
            "graph": g,
            "k": k,
            "n_in": n_in,
            "diff": diff,
            "needs": [t.requires_grad for t in ts],
            "types": [(tuple(floats[j].shape), floats[j].dtype) for j in diff],
            "grads_out": tuple(tracer.ref(t) for t in grads),
        }
        if on_cuda:
            record["device"] = "cuda"
        for v in tracer.by_storage.values():
            v.trace = None
        tracer.keep = []
        self._add(self._entry(key, "joint", record))
        return result

    def _build_joint(self, record):
        g, k, n_in = record["graph"], record["k"], record["n_in"]
        cuda = record.get("device") == "cuda"
        remat = None if cuda else "mincut" if self.remat == "auto" else self.remat
        if k < len(g.nodes) and self.fuse and remat is not None:
            g.backward_at = g.nodes[k].id
            rep_r = remat_mod.rematerialise(g, remat)  # clones go after the k-th node
        else:
            rep_r = {}
        gf, gb = Graph(), Graph()
        gf.inputs = [v for v in g.inputs if v.index < n_in]
        gb.inputs = list(g.inputs)
        gf.consts = gb.consts = g.consts
        gf.nodes, gb.nodes = g.nodes[:k], g.nodes[k:]
        gf._next = gb._next = g._next
        gf.output = g.output
        gb.output = record["grads_out"]
        # the backward graph's passes first: what the forward must save is what the
        # backward reads after its dead code is gone and its kernels are fused
        if cuda:  # (the GPU path: gpu.py)
            bwd, rep_b = gpu.compile_graph(gb, fuse=self.fuse)
        else:
            bwd, rep_b = passes.compile_graph(gb, fuse=self.fuse, debug_dir=None, tuner=self.tuner)
        made = {v.id for n in gf.nodes for v in n.made()}
        saved = {v.id for n in gb.nodes for v in n.inputs() if v.id in made}
        saved |= {r.value.id for r in gb.output_refs() if r.value.id in made}
        gf.extra_live = saved
        if cuda:
            fwd, rep_f = gpu.compile_graph(
                gf, fuse=self.fuse, debug_dir=self.debug_dir, only=("dce", "fuse")
            )
        else:
            fwd, rep_f = passes.compile_graph(
                gf,
                fuse=self.fuse,
                debug_dir=self.debug_dir,
                only=("dce", "fuse", "plan"),
                tuner=self.tuner,
            )
        types = [(tuple(int(d) for d in shape), dt) for shape, dt in record["types"]]
        aot = Joint(fwd, bwd, saved, record["diff"], record["needs"], types)
        aot.device = record.get("device")
        report = {
            k_: rep_f.get(k_, 0) + rep_b.get(k_, 0)
            for k_ in rep_f
            if isinstance(rep_f[k_], (int, float))
        }
        if cuda:
            report.update(device="cuda", off=rep_f["off"])
        report["saved"] = len(saved)
        report.update(rep_r)
        report["held_bytes"] = remat_mod.kept_bytes(gf.nodes, saved)
        return aot, report

    def _add(self, e: Entry) -> None:
        self._last = e
        if any(e is f for f in self.entries):  # a dynamic entry, checked at a new size
            return
        pending, self._verify = self._verify, None
        if pending is not None:  # the trace broke: this size is not the dynamic entry's
            pending.dynamic.rejected.add(pending.dynamic.size(e.key))
        self.entries.append(e)
        if self.explain:
            print(explain_text(self))
        if self.fullgraph and (e.breaks or e.reason):
            why = "; ".join(f"{b.where}: {b.reason}" for b in e.breaks) or e.reason
            raise RuntimeError(f"sitp.compile(fullgraph=True): the graph breaks at {why}")

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


class Joint:
    """A forward graph and a backward graph, split from one joint trace."""

    device = None  # "cuda" for programs of the GPU path (gpu.py)

    def __init__(self, fwd, bwd, saved, diff, needs, out_types):
        self.fwd, self.bwd, self.saved, self.diff, self.needs = fwd, bwd, saved, diff, needs
        self.out_types = out_types  # (shape, dtype) of each output that requires grad
        self.graph = fwd.graph

    def call(self, ts):
        flat = CompiledGraph.apply(self, *ts)
        flat = flat if isinstance(flat, tuple) else (flat,)
        it = iter(flat)
        return _fill(self.fwd.graph.output, it)


class CompiledGraph(Function):
    """The autograd Function of a compiled forward graph; its backward is the backward graph."""

    @staticmethod
    def forward(ctx, joint, *ts):
        env = joint.fwd.run_env(list(ts))
        ctx.joint, ctx.ts = joint, ts
        ctx.saved_env = {vid: env[vid] for vid in joint.saved}
        flat: list = []
        _flatten(joint.fwd.outputs(env), flat)
        return tuple(flat) if len(flat) != 1 else flat[0]

    @staticmethod
    def backward(ctx, *gs):
        joint = ctx.joint
        if len(gs) == 1 and isinstance(gs[0], (list, tuple)):  # a node with several outputs
            gs = tuple(gs[0])
        gouts = []
        for j, (shape, dtype) in zip(joint.diff, joint.out_types):
            g = gs[j] if j < len(gs) else None
            if g is None:  # an output the loss did not use: a zero gradient
                z = np.zeros(int(np.prod(shape)), dtype.np)
                g = ctx.ts[0]._make(z, shape, contiguous(shape), 0, dtype)
                g = g.cuda() if joint.device == "cuda" else g
            gouts.append(g.contiguous())
        env = joint.bwd.run_env(list(ctx.ts) + gouts, preset=ctx.saved_env)
        grads = iter(joint.bwd.outputs(env))
        return (None,) + tuple(next(grads) if need else None for need in joint.needs)


def _written_inputs(program) -> set:
    """The indices of the inputs that a program (or both graphs of a Joint) writes in place."""
    graphs = (
        [program.fwd.graph, program.bwd.graph] if isinstance(program, Joint) else [program.graph]
    )
    out = set()
    for g in graphs:
        for n in g.nodes:
            for _, new in n.writes:
                root = new.root()
                if root.kind == "input":
                    out.add(root.index)
    return out


def _fill(template, it):
    if isinstance(template, Ref):
        return next(it)
    if isinstance(template, list):
        return [_fill(b, it) for b in template]
    if isinstance(template, tuple):
        return tuple(_fill(b, it) for b in template)
    if isinstance(template, dict):
        return {k: _fill(b, it) for k, b in template.items()}
    return template


def _static(o):
    """The arguments with each tensor replaced by a mark: the other values (a Python
    number, a flag) are baked into the graph, so they are part of the guard."""
    if isinstance(o, Tensor):
        return "<tensor>"
    if isinstance(o, (list, tuple)):
        return (type(o).__name__,) + tuple(_static(b) for b in o)
    if isinstance(o, dict):
        return ("dict",) + tuple((k, _static(v)) for k, v in o.items())
    try:
        hash(o)
    except TypeError:
        return ("id", id(o))
    return (type(o).__name__, o)


def _batch_change(k1, k2):
    """(index, dim, s1, s2) when signatures ``k1`` and ``k2`` (their tensor parts) differ
    in one size of some inputs, each in one dim (the first of them: input ``index``'s
    dim ``dim``, from ``s1`` to ``s2``, both at least 2) and otherwise only in what
    follows from it (strides, offsets, storage lengths); else None. Sizes 0 and 1 stay
    specialised, as in TorchDynamo."""
    if len(k1) != len(k2) or k1[:2] != k2[:2]:
        return None
    found = None
    for i, (a, b) in enumerate(zip(k1[2:], k2[2:])):
        (sa, *ra), (sb, *rb) = a, b
        if len(sa) != len(sb) or ra[3:] != rb[3:]:
            return None
        dims = [d for d, (x, y) in enumerate(zip(sa, sb)) if x != y]
        if len(dims) > 1:
            return None
        if dims and found is None:
            found = (i, dims[0], sa[dims[0]], sb[dims[0]])
    if found is None or min(found[2:]) < 2:
        return None
    return found


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
            d = e.dynamic
            what = "compiled"
            if d is not None:
                what = f"compiled for every size >= 2 of input {d.index}'s dim {d.dim}"
                if d.second is not None:
                    what += f" and of input {d.second[0]}'s dim {d.second[1]}"
                what += " (dynamic)"
            cuda = r.get("device") == "cuda"
            lines.append(
                f"signature {i}: {what}{' for CUDA' if cuda else ''}, "
                f"{r.get('ops_before', '?')} ops -> {r.get('steps_after', '?')} steps "
                f"({r.get('kernels', 0)} generated {'@cuda.jit ' if cuda else ''}kernels)"
            )
            if cuda:
                lines.append(f"  off on the GPU path: {', '.join(r.get('off', ()))}")
            if r.get("not_dynamic"):
                lines.append(f"  not dynamic: {r['not_dynamic']}")
        else:
            lines.append(f"signature {i}: runs eagerly")
            if e.reason:
                lines.append(f"  reason: {e.reason}")
            for b in e.breaks:
                lines.append(f"  graph break at {b.where}: {b.reason}")
    return "\n".join(lines)


#: torch.compile's modes. Each is a performance hint there (CUDA graphs, autotuning);
#: sitp compiles the same program for each, and the two "max-autotune" modes turn its
#: autotuner on (``tune=True``) unless ``tune`` says otherwise.
MODES = (None, "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
AUTOTUNE_MODES = ("max-autotune", "max-autotune-no-cudagraphs")
#: torch.compile's backends that sitp answers: "inductor" (torch's default) is sitp's
#: fusing compiler; "eager" and "aot_eager" replay the captured graph without fusion.
BACKENDS = ("inductor", "sitp", "eager", "aot_eager")


def compile(  # noqa: A001
    model=None,
    *,
    fullgraph: bool = False,
    dynamic=None,
    backend=None,
    mode=None,
    options=None,
    name=None,
    disable: bool = False,
    recompile_limit=None,
    isolate_recompiles: bool = False,
    shapes_spec=None,
    fuse: bool = True,
    debug_dir=None,
    explain: bool = False,
    rerun_trace=None,
    remat="auto",
    tune=None,
):
    """Compile ``model`` (a function or an ``nn.Module``): the result is called as it is.

    torch.compile's parameters: ``fullgraph=True`` makes a graph break an error instead of
    a fall-back to eager; ``backend`` is one of :data:`BACKENDS` ("eager"/"aot_eager"
    replay the graph unfused); ``mode`` one of :data:`MODES`, all compiling the same
    program, the "max-autotune" ones with ``tune=True``; ``disable=True`` returns
    ``model`` itself; ``name`` labels the function in warnings; ``recompile_limit``
    replaces :data:`cache_size_limit` for it. Each compiled function keeps its own cache
    and limit, so ``isolate_recompiles`` changes nothing.
    ``dynamic``: None (the default) compiles the first size as it is and, once a call
    differs from a compiled signature only in one size of its inputs (the batch, a
    sequence's length), one entry for every such size of at least 2
    (:mod:`sitp.compile.dynamic`), whose first call at a new size traces to check that
    the graph is the entry's; False compiles each signature; True does as None (sitp needs
    two sizes to see which numbers follow the size, and a new size is still checked by a
    trace: the fit cannot see a Python branch on a size). A ``shapes_spec`` is refused;
    ``options`` (inductor's settings) must be empty.
    sitp's own: ``fuse=False`` keeps every backend call (the graph is replayed, not
    fused); ``debug_dir`` writes each generated kernel's source and each graph there;
    ``explain`` prints, at each compile, what was compiled and where the graph broke;
    ``rerun_trace=True`` makes the tracing call return the compiled program's results
    too (it undoes the trace's in-place writes and runs the program; see the module):
    the default for an ``nn.Module``, not for a function. ``remat`` chooses what a
    training step's forward keeps for its backward (:mod:`sitp.compile.remat`): None
    (the fusion pass's own choice), "save" (everything the backward reads), "mincut"
    (a minimum cut of the bytes kept, the rest recomputed in the backward), or "auto"
    (the default: "mincut" for a forward whose backward runs later, None for a
    function that runs both). ``tune=True`` searches each generated kernel's thread
    count, fusion into its GEMM and block size at its first call, by timing them, and
    keeps the fastest (:mod:`sitp.compile.tune`; a :class:`~sitp.compile.tune.Tuner` may
    be passed; None: on for the "max-autotune" modes, else the ``SITP_TUNE`` variable,
    off unless set).
    """
    backend = "inductor" if backend is None else backend
    if backend not in BACKENDS:
        raise ValueError(f"sitp.compile: backend {backend!r} is not one of {BACKENDS}")
    if mode not in MODES:
        raise ValueError(f"sitp.compile: mode {mode!r} is not one of {MODES}")
    if dynamic not in (None, True, False):
        raise ValueError(f"sitp.compile: dynamic must be None, True or False, got {dynamic!r}")
    if shapes_spec is not None:
        raise NotImplementedError(
            "sitp.compile(shapes_spec=...): sitp specialises each graph on its shapes"
        )
    if recompile_limit is not None and (
        not isinstance(recompile_limit, int) or recompile_limit < 1
    ):
        raise ValueError(
            f"sitp.compile: recompile_limit must be a positive int, got {recompile_limit!r}"
        )
    if options:
        raise ValueError(
            f"sitp.compile: options {sorted(options)} are inductor's settings, which sitp "
            "does not have"
        )
    if tune is None and mode in AUTOTUNE_MODES:
        tune = True
    fuse = fuse and backend in ("inductor", "sitp")
    if debug_dir is not None and not disable:
        os.makedirs(debug_dir, exist_ok=True)
    settings = dict(
        fuse=fuse,
        debug_dir=debug_dir,
        explain=explain,
        fullgraph=fullgraph,
        name=name,
        recompile_limit=recompile_limit,
        rerun_trace=rerun_trace,
        remat=remat,
        tune=tune,
        dynamic=dynamic,
    )
    if model is None:  # used as @sitp.compile(...)
        return lambda f: f if disable else CompiledFunction(_callable(f), **settings)
    return model if disable else CompiledFunction(_callable(model), **settings)


def _callable(fn):
    if not callable(fn):
        raise TypeError(f"sitp.compile expects a function or an nn.Module, got {type(fn).__name__}")
    return fn


def explain(fn, *args, **kwargs) -> str:
    """Compile ``fn``, call it once on ``args`` and return the explanation text."""
    cf = fn if isinstance(fn, CompiledFunction) else CompiledFunction(fn)
    cf(*args, **kwargs)
    return explain_text(cf)

"""The passes (6.2), each a function from a graph to a (smaller) graph, in this order:

1. :func:`fold_constants`: a pure call whose inputs are all constants made inside the
   function (``fill``, ``arange``, or folded before) is evaluated once, at compile time;
2. :func:`eliminate_common`: two pure calls of one function on the same views of the same
   buffers become one;
3. :func:`eliminate_dead`: a call none of whose results reaches an output (a returned
   tensor, a ``.grad``, an input written in place) is dropped;
   then, for a training step's graph, ``remat.py`` chooses (``remat=``) which values its
   forward keeps for its backward and which the backward recomputes (a minimum cut);
4. :func:`fuse`: chains of pointwise calls (``unary``, ``binary``, ``compare``, ``where``,
   ``copy``), and a reduction fed by such a chain, become one generated kernel each; a
   pointwise result that only fused kernels read is recomputed by each of them instead
   of written to memory, unless a cost model says storing it is cheaper
   (:func:`_choose_stored`);
   Around fusion, the rules of ``rules.py``: before it, layers decomposed into
   primitives that fuse (GELU), and the lowerings of ``lower.py``; after it, each
   matrix product whose result one pointwise kernel reads gets that kernel as its
   epilogue;
5. :func:`plan_memory`: the buffers of the fused kernels' intermediate results share
   memory when their lifetimes do not overlap (a greedy allocator by size and dtype).

:func:`compile_graph` runs them and builds the :class:`~sitp.compile.runtime.Program`.
"""

from __future__ import annotations

import os

import numba
import numpy as np

from sitp.compile import codegen, dynamic, lower, rules, tune
from sitp.compile import remat as remat_mod
from sitp.compile.graph import ArrRef, CtxArg, Graph, HostIndex, Node, Ref
from sitp.compile.runtime import Program, step_of

#: Ops worth storing rather than recomputing in a second kernel.
COSTLY = frozenset(
    "exp log tanh sigmoid erf gelu gelu_tanh pow sin cos silu log1p expm1 sqrt rsqrt div".split()
)
FUSABLE_REDUCE = frozenset({"sum", "prod", "max", "min", "any", "all"})
_KERNEL_DTYPES = frozenset({"float32", "float64", "int64", "bool"})


# ------------------------------------------------------------------ helpers
def _written(g: Graph) -> set:
    """Ids of the Values that some node writes in place (their memory changes later)."""
    return {old.id for n in g.nodes for old, _ in n.writes}


def _substitute(g: Graph, rep: dict) -> None:
    """Point every read of a Value in ``rep`` (id -> Value) at its replacement."""

    def fix(a):
        if isinstance(a, (Ref, ArrRef, CtxArg)) and a.value.id in rep:
            a.value = rep[a.value.id]
        elif isinstance(a, HostIndex):
            for r in a.refs:
                fix(r)
        elif isinstance(a, (list, tuple)):
            for b in a:
                fix(b)
        elif isinstance(a, dict):
            for b in a.values():
                fix(b)

    for n in g.nodes:
        fix(n.args)
        fix(n.kwargs)
        n.writes = [(rep.get(old.id, old), new) for old, new in n.writes]
    fix(g.output)
    fix(list(g.grads.values()))


def _key(a):
    if isinstance(a, (Ref, ArrRef, HostIndex, CtxArg)):
        return a.key()
    if isinstance(a, (list, tuple)):
        return tuple(_key(b) for b in a)
    if isinstance(a, np.ndarray):
        return ("nd", a.dtype.str, a.shape, a.tobytes())
    if isinstance(a, float) and a != a:
        return "nan"
    if hasattr(a, "name") and not isinstance(a, (int, float, str)):
        return ("dtype", a.name)
    return a


# ------------------------------------------------------------------ passes
def fold_constants(g: Graph) -> int:
    """Evaluate pure calls on constants made inside the function; returns how many."""
    written = _written(g)
    const = {v.id: v.array for v in g.consts if v.kind == "literal" and v.id not in written}
    kept, folded = [], 0
    for n in g.nodes:
        ins = n.inputs()
        if n.fn in ("fill", "arange") and not n.writes:
            env = {}
            step_of(n)(env)
            for v in n.outputs:
                if v.id not in written:
                    const[v.id] = env[v.id]
            kept.append(n)
            continue
        if n.pure and ins and all(v.id in const for v in ins) and n.outputs:
            env = dict(const)
            step_of(n)(env)
            for v in n.outputs:
                v.kind, v.array, v.producer = "const", env[v.id], None
                g.consts.append(v)
                if v.id not in written:
                    const[v.id] = env[v.id]
            folded += 1
            continue
        kept.append(n)
    g.nodes = kept
    return folded


def eliminate_common(g: Graph) -> int:
    """Merge pure calls with equal arguments (common subexpressions); returns how many."""
    written = _written(g)
    seen, rep, kept, merged = {}, {}, [], 0
    for n in g.nodes:
        if rep:
            _substitute_node(n, rep)
        if n.pure and n.outputs and not any(v.id in written for v in n.outputs):
            k = (n.fn, _key(n.args), _key(tuple(sorted(n.kwargs.items()))))
            first = seen.get(k)
            if first is not None and len(first.outputs) == len(n.outputs):
                for a, b in zip(n.outputs, first.outputs):
                    rep[a.id] = b
                merged += 1
                continue
            seen[k] = n
        kept.append(n)
    g.nodes = kept
    if rep:
        _substitute(g, rep)
    return merged


def _substitute_node(n: Node, rep: dict) -> None:
    tmp = Graph()
    tmp.nodes = [n]
    _substitute(tmp, rep)


def eliminate_dead(g: Graph) -> int:
    """Drop calls whose results reach no output; returns how many."""
    live = g.live_values()
    kept = []
    for n in reversed(g.nodes):
        side = any(new.root().kind in ("input", "const") for _, new in n.writes)
        if side or any(v.id in live for v in n.made()) or n.fn.endswith(".backward"):
            kept.append(n)
            live |= {v.id for v in n.inputs()}
    dropped = len(g.nodes) - len(kept)
    g.nodes = kept[::-1]
    return dropped


def _positions(size: int, r) -> np.ndarray:
    """The flat positions in its buffer of each entry of view ``r``, in index order."""
    a = np.arange(size, dtype=np.int64)
    return np.lib.stride_tricks.as_strided(
        a[r.offset :], r.shape, tuple(8 * st for st in r.strides), writeable=False
    ).reshape(-1)


def _as_view(pos: np.ndarray, shape, size: int):
    """(strides, offset) of a strided view of a buffer of ``size`` entries whose entries in
    index order sit at ``pos``, or None when they are not one strided view."""
    shape = tuple(shape)
    if pos.size == 0:
        return None
    grid = pos.reshape(shape)
    offset = int(grid.flat[0])
    strides = []
    for d, n in enumerate(shape):
        one = [0] * len(shape)
        if n > 1:
            one[d] = 1
        strides.append(int(grid[tuple(one)]) - offset if n > 1 else 0)
    if offset < 0 or min(strides, default=0) < 0:
        return None
    ref = type("V", (), {"offset": offset, "strides": tuple(strides), "shape": shape})()
    last = offset + sum((n - 1) * st for n, st in zip(shape, strides))
    if last >= size or not np.array_equal(_positions(size, ref), pos):
        return None
    return tuple(strides), offset


def forward_copies(g: Graph) -> int:
    """Copies that only rearrange one buffer: a buffer that ``empty`` makes and ``assign``
    calls fill, entry by entry, from views of one other buffer S (a concatenation of
    S's windows, as the backward of a split builds one gradient from three), is read by
    its readers as a view of S itself, when what each reads is one strided view of S;
    then a ``copy`` that reads S whole in its own layout is S. The copies die (dead code
    afterwards). Returns how many readers now read S."""
    users = g.users()
    live = g.live_values()
    written = _written(g)
    rep, moved = {}, 0
    for e in g.nodes:
        if e.fn != "empty" or len(e.outputs) != 1:
            continue
        cur, n = e.outputs[0], e.outputs[0].size
        src_id = np.full(n, -1, np.int64)
        src_pos = np.full(n, -1, np.int64)
        source = None
        ok = True
        while ok:
            us = users.get(cur.id, [])
            a = us[0] if len(us) == 1 else None
            if a is None or a.fn != "assign" or len(a.args) != 2 or a.kwargs:
                break
            d, s_ = a.args
            if not (isinstance(d, Ref) and isinstance(s_, Ref)) or d.value is not cur:
                break
            if tuple(d.shape) != tuple(s_.shape) or d.dtype is not s_.dtype:
                ok = False
                break
            dst = _positions(n, d)
            if np.any(src_id[dst] != -1):  # an entry written twice
                ok = False
                break
            src = s_.value
            source = src if source is None else source
            if src is not source or src.id in written:
                ok = False
                break
            src_id[dst] = src.id
            src_pos[dst] = _positions(src.size, s_)
            cur = a.writes[0][1]
        if not ok or source is None or np.any(src_id == -1) or cur.id in live:
            continue
        if cur.np_dtype != source.np_dtype:
            continue
        readers = users.get(cur.id, [])
        if not readers or any(u.writes and any(o is cur for o, _ in u.writes) for u in readers):
            continue
        refs = [r for u in readers for r in u.refs() if r.value is cur]
        if not all(isinstance(r, Ref) for r in refs):
            continue
        views = [_as_view(src_pos[_positions(n, r)], r.shape, source.size) for r in refs]
        if any(v is None for v in views):
            continue
        for r, (st, off) in zip(refs, views):
            r.value, r.strides, r.offset = source, st, off
            moved += 1
        for u in readers:  # a copy of S in S's own layout is S
            if u.fn != "copy" or len(u.outputs) != 1 or u.writes or len(u.args) != 1:
                continue
            r = u.args[0]
            v = u.outputs[0]
            if (
                isinstance(r, Ref)
                and r.value is source
                and r.contiguous_whole()
                and int(np.prod(r.shape)) == source.size
                and r.dtype.name == v.np_dtype.name
                and v.id not in live
                and v.id not in written
            ):
                rep[v.id] = source
    if rep:
        g.nodes = [u for u in g.nodes if not (u.outputs and u.outputs[0].id in rep)]
        _substitute(g, rep)
    return moved


def _fusable(n: Node) -> bool:
    if n.fn == "pack":  # rules.py's stores of parts at views of its buffers: a kernel's root
        return not n.writes and all(
            isinstance(r, Ref) and r.dtype.name in _KERNEL_DTYPES for r in n.refs()
        )
    if n.writes or len(n.outputs) != 1 or not isinstance(n.result, Ref):
        return False
    if n.result.dtype.name not in _KERNEL_DTYPES:
        return False
    if any(r.dtype.name not in _KERNEL_DTYPES for r in n.refs() if isinstance(r, Ref)):
        return False
    if n.is_pointwise:
        return all(isinstance(r, Ref) for r in n.refs())
    if n.fn == "reduce":
        return n.args[0] in FUSABLE_REDUCE and isinstance(n.args[1], Ref)
    return False


def fuse(g: Graph, device=None) -> list:
    """Replace fusable chains by generated kernels; returns the kernels. ``device``: fuse
    only the calls of that backend (``Node.device``: None for the CPU's, "cuda")."""
    live = g.live_values() | g.stored  # stored: what remat.py keeps for the backward
    written = _written(g)
    users = g.users()
    fusable = {n.id for n in g.nodes if n.device == device and _fusable(n)}
    producer = {n.outputs[0].id: n for n in g.nodes if n.id in fusable}

    def inlinable(v) -> bool:
        """A pointwise result that every reader can recompute instead of loading."""
        n = producer.get(v.id)
        if n is None or not n.is_pointwise or v.id in live or v.id in written:
            return False
        for u in users.get(v.id, []):
            if u.id not in fusable:
                return False
            for r in u.refs():
                if r.value is v and not (
                    r.contiguous_whole() and tuple(r.shape) == tuple(n.result.shape)
                ):
                    return False
        # the leaves it reads must not change before a reader runs
        return not any(w.id in written for w in n.inputs())

    virtual = {vid: n for vid, n in producer.items() if inlinable(n.outputs[0])}

    def members_of(root, virt):
        out, stack, seen = [], [root], set()
        while stack:
            m = stack.pop()
            if m.id in seen:
                continue
            seen.add(m.id)
            out.append(m)
            stack.extend(virt[v.id] for v in m.inputs() if v.id in virt)
        return out

    _choose_stored(g, fusable, virtual, users, members_of)
    # A stored pointwise value that a reduction reads whole is written by the reduction's
    # kernel as a second output (softmax: sum(e) and e in one pass), if nothing reads it first.
    order = {n.id: i for i, n in enumerate(g.nodes)}
    extra = {}  # reduce node id -> the pointwise node whose value it also stores
    for r in g.nodes:
        if r.id not in fusable or r.fn != "reduce":
            continue
        x = r.args[1]
        p = producer.get(x.value.id)
        if p is None or not p.is_pointwise or x.value.id in virtual or x.value.id in written:
            continue
        if not (x.contiguous_whole() and tuple(x.shape) == tuple(p.result.shape)):
            continue
        if p.id in {q.id for q in extra.values()}:
            continue
        if all(order[u.id] >= order[r.id] for u in users.get(x.value.id, [])):
            extra[r.id] = p
    absorbed = {p.id for p in extra.values()}
    kernels, new_nodes = [], []
    for n in g.nodes:
        if n.id not in fusable:
            new_nodes.append(n)
            continue
        if n.outputs[0].id in virtual or n.id in absorbed:
            continue  # computed inside the kernels that read it
        virt = dict(virtual)
        side = extra.get(n.id)
        if side is not None:
            virt[side.outputs[0].id] = side
        members = sorted(members_of(n, virt), key=lambda m: m.id)
        ids = {m.id for m in members}
        k = Kernel(n, members, {vid: m for vid, m in virt.items() if m.id in ids})
        if side is not None:
            k.extra = [side]
        k.source = codegen.generate(k)
        node = Node(
            n.id, "kernel", tuple(Ref(v, (v.size,), (1,), 0, None, None) for v in k.leaves), {}
        )
        node.outputs = k.outs()
        node.result = n.result
        node.kernel = k
        for v in node.outputs:
            v.producer = node
        new_nodes.append(node)
        kernels.append(k)
    g.nodes = _merge_epilogues(new_nodes, kernels, live | written)
    return [k for k in kernels if not getattr(k, "merged", False)]


def _choose_stored(g, fusable, virtual, users, members_of) -> None:
    """Decide, value by value in program order, which inlinable values are stored after
    all (removed from ``virtual``): a cost model of recomputing against storing.

    Let ``c`` be the number of kernels that would compute a value. It is stored when

    * it is *costly* to compute (its op is in ``COSTLY``: an exp, a tanh, a division, or
      its chain holds such an op deferred below) and either ``c > 1``, or a kernel reads
      it broadcast (a value per row read at every entry of the row would be computed
      once per entry). A costly value whose readers are all inlined pointwise ops of its
      own shape is deferred to them instead: a chain of per-row values (a variance, plus
      epsilon, its rsqrt) is stored once, at its end;
    * or recomputing it reads more bytes than storing it: each of the ``c`` kernels
      reads the chain's leaves (``L`` bytes), where storing reads them once, writes the
      value once (``V`` bytes) and each kernel reads it: ``c L > L + V + c V``.

    Each count is taken with the decisions before it, so once a costly op is stored,
    the cheap ops after it are recomputed from it by each reader (a layer norm's
    normalisation, scale and shift), not stored one by one."""
    order = [n for n in g.nodes if n.id in fusable]
    node_of = {n.id: n for n in order}
    # each kernel (a root: a fusable node that is stored) -> the ids of the nodes it computes
    computes = {
        n.id: {m.id for m in members_of(n, virtual)}
        for n in order
        if n.outputs[0].id not in virtual
    }

    def store(n):
        del virtual[n.outputs[0].id]
        for rid, ids in computes.items():
            if n.id in ids:
                computes[rid] = {m.id for m in members_of(node_of[rid], virtual)}
        computes[n.id] = {m.id for m in members_of(n, virtual)}

    pending = set()  # costly nodes deferred to their readers
    for n in order:
        v = n.outputs[0]
        if v.id not in virtual:
            continue
        c = sum(1 for ids in computes.values() if n.id in ids)
        readers = users.get(v.id, [])
        broadcast = any(u.id in fusable and _space_size(u) > v.size for u in readers)
        chain = members_of(n, virtual)
        costly = n.op in COSTLY or any(m.id in pending for m in chain)
        if costly and (c > 1 or broadcast):
            same_shape = all(
                u.is_pointwise
                and u.outputs[0].id in virtual
                and tuple(u.result.shape) == tuple(n.result.shape)
                for u in readers
            )
            if same_shape and not broadcast:
                pending.add(n.id)
            else:
                store(n)
            continue
        if c > 1:
            leaves = {w.id: w.nbytes for m in chain for w in m.inputs() if w.id not in virtual}
            L = sum(leaves.values())
            if c * L > L + v.nbytes + c * v.nbytes:
                store(n)


def _space_size(n: Node) -> int:
    """Entries of a fusable node's index space (a pack's: one part's)."""
    return int(np.prod(n.args[1].shape if n.fn == "pack" else n.result.shape))


def _merge_epilogues(nodes, kernels, keep) -> list:
    """A reduction whose result only one pointwise kernel reads, over the reduced shape
    (the ``/ n`` of a mean), applies that kernel's ops before its store: one kernel."""
    pos = {n.id: i for i, n in enumerate(nodes)}
    readers = {}
    for n in nodes:
        for v in n.inputs():
            readers.setdefault(v.id, []).append(n)
    drop = set()
    for kn in nodes:
        k = kn.kernel
        if k is None or k.root.fn != "reduce" or k.epilogue is not None:
            continue
        r = k.out
        users = readers.get(r.id, [])
        if r.id in keep or len(users) != 1 or users[0].kernel is None:
            continue
        pn = users[0]
        p = pn.kernel
        if p.root.fn in ("reduce", "pack") or p.extra or p.out.size != r.size or pn.id in drop:
            continue
        x, dims = k.root.args[1], tuple(k.root.args[2])
        kept = [n for d, n in enumerate(x.shape) if d not in dims and n != 1]
        if [n for n in p.root.result.shape if n != 1] != kept:
            continue
        if any(
            v.producer is not None and v.producer in nodes and pos[v.producer.id] > pos[kn.id]
            for v in p.leaves
            if v.id != r.id
        ):
            continue
        k.epilogue, k.reduced_id = p, r.id
        k.virtual.update(p.virtual)
        k.nodes = k.nodes + p.nodes
        k.out = p.out
        k.source = codegen.generate(k)
        kn.outputs = k.outs()
        kn.args = tuple(Ref(v, (v.size,), (1,), 0, None, None) for v in k.leaves)
        kn.result = pn.result
        p.out.producer = kn
        p.merged = True
        drop.add(pn.id)
    return [n for n in nodes if n.id not in drop]


Kernel = codegen.Kernel


def plan_memory(g: Graph) -> dict:
    """Assign the kernels' intermediate buffers to shared slots (greedy, by size and dtype).

    A buffer is planned when only generated kernels read it (an opaque call may keep a
    reference: a layer's Context saves its input) and it is not an output. Returns
    ``{"plan": {value id: slot}, "slots": [(size, dtype)], "bytes_before", "bytes_after"}``.
    """
    live = g.live_values()
    written = _written(g)
    last, readers_ok = {}, {}
    for i, n in enumerate(g.nodes):
        for v in n.inputs():
            last[v.id] = i
            readers_ok[v.id] = readers_ok.get(v.id, True) and n.fn == "kernel"
    plan, slots, free = {}, [], {}
    before = 0
    for i, n in enumerate(g.nodes):
        for v in n.outputs if n.fn == "kernel" else ():
            if v.id not in live and v.id not in written and readers_ok.get(v.id, False):
                before += v.nbytes
                k = (v.size, v.np_dtype.str)
                if free.get(k):
                    plan[v.id] = free[k].pop()
                else:
                    plan[v.id] = len(slots)
                    slots.append(k)
        for v in n.inputs():
            if last.get(v.id) == i and v.id in plan:
                free.setdefault((v.size, v.np_dtype.str), []).append(plan[v.id])
    after = sum(size * np.dtype(dt).itemsize for size, dt in slots)
    return {"plan": plan, "slots": slots, "bytes_before": before, "bytes_after": after}


# ------------------------------------------------------------------ the program
def kernel_step(node: Node, fn, plan, serial=None):
    """Call a generated kernel on this call's arrays; outputs in planned slots or new.
    ``serial``: the kernel's twin without ``prange``, which runs when numba has one thread;
    under an autotuner (:mod:`sitp.compile.tune`) the thread count is the one it chose."""
    leaves = [v.id for v in node.kernel.leaves]
    syms = list(node.kernel.syms)  # its size arguments: this program's batch size
    small = node.kernel.small  # (a dynamic entry's parallel kernel at a small size)
    outs = [(v.id, v.size, v.np_dtype, plan.get(v.id)) for v in node.outputs]
    parallel = fn
    pick = tune.picker(node.kernel.source, tune.Choices(fn, serial)) if tune.current() else None

    def step(env):
        if pick is None:
            one = small or numba.get_num_threads() == 1
            fn = serial if serial is not None and one else parallel
        bufs = []
        for vid, size, dt, slot in outs:
            if slot is None:
                buf = np.empty(size, dt)
            else:
                buf = env["slots"][slot]
                if buf is None:
                    buf = env["slots"][slot] = np.empty(size, dt)
            env[vid] = buf
            bufs.append(buf)
        args = [*[env[i] for i in leaves], *bufs, *syms]
        if pick is not None:
            pick(args)(*args)
        else:
            fn(*args)

    return step


PASSES = ("fold", "cse", "dce", "lower", "fuse", "plan")


def compile_graph(g: Graph, fuse=True, debug_dir=None, only=None, remat=None, tuner=None):
    """Run the passes on ``g``; returns (Program, report of counts and bytes). ``remat``:
    what a training step's forward keeps for its backward (``remat.MODES``); ``tuner``:
    a :class:`sitp.compile.tune.Tuner` that searches each kernel's thread count, fusion and
    block size at its first call (None: the fixed rules)."""
    on = set(PASSES if only is None else only)
    if not fuse:
        on -= {"lower", "fuse", "plan"}
    report = {"ops_before": len(g.nodes)}
    if debug_dir:
        _write(debug_dir, "graph_captured.txt", g.tabular())
    report["folded"] = fold_constants(g) if "fold" in on else 0
    report["cse"] = eliminate_common(g) if "cse" in on else 0
    report["dead"] = eliminate_dead(g) if "dce" in on else 0
    if "dce" in on and forward_copies(g):
        report["dead"] += eliminate_dead(g)
    report.update(remat_mod.rematerialise(g, remat) if fuse else {})
    report["decomposed"] = rules.decompose(g) if "lower" in on else 0
    report["lowered"] = lower.lower_graph(g) if "lower" in on else 0
    kernels = fuse_graph(g) if "fuse" in on else []
    report["epilogues"] = rules.gemm_epilogues(g) if {"lower", "fuse"} <= on else 0
    report["kernels"] = len(kernels)
    plan = (
        plan_memory(g)
        if "plan" in on
        else {"plan": {}, "slots": [], "bytes_before": 0, "bytes_after": 0}
    )
    report.update(bytes_before=plan["bytes_before"], bytes_after=plan["bytes_after"])
    dynamic.concrete(g)  # the kernels are written: the steps get plain ints
    steps = []
    with tune.using(tuner):
        for n in g.nodes:
            if n.lowered is not None:
                steps.append(n.lowered(n))
            elif n.fn == "kernel":
                fn = codegen.load(n.kernel.source, n.kernel.name)
                serial = codegen.load_serial(n.kernel.source, n.kernel.name)
                steps.append(kernel_step(n, fn, plan["plan"], serial))
            else:
                steps.append(step_of(n))
    prog = Program(g, steps, n_slots=len(plan["slots"]))
    report["steps_after"] = len(steps)
    report["held_bytes"] = remat_mod.held_bytes(g)
    if debug_dir:
        _write(debug_dir, "graph_compiled.txt", g.tabular())
        for k in kernels:
            _write(debug_dir, f"{k.name}.py", k.source)
    return prog, report


fuse_graph = fuse


def _write(d, name, text):
    with open(os.path.join(d, name), "w") as f:
        f.write(text + ("" if text.endswith("\n") else "\n"))

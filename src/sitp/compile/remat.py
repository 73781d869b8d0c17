"""Save or recompute: what the forward keeps for the backward (6.2).

A training step's forward makes values that its backward reads again: a normalised
activation, a ``tanh``, a mask. Eager autograd keeps every one of them from the moment
it is made until its backward runs. A value made by cheap pointwise ops from other
values can instead be *recomputed* in the backward, from whatever the forward keeps;
which set of kept values is cheapest is a minimum cut (AOTAutograd's
``min_cut_rematerialization_partition``).

The flow network has two vertices per forward value ``v``, ``v_in -> v_out``, with
capacity the bytes of ``v`` (what keeping it until the backward costs; an input or a
value the caller sees anyway costs nothing). The source feeds, with infinite capacity,
every ``v_in`` whose value cannot be recomputed: an input, a value made by a matrix
product, a reduction or an opaque layer, a value read through a fused layer's Context
(the Context holds that very buffer). Each ``v_out`` whose value a backward node reads
feeds the sink. An infinite edge ``u_out -> v_in`` says "recomputing ``v`` needs
``u``". Every path from the source to the sink is a way for a backward read to be
served; a cut must cross each, and the finite edges it crosses are the values kept.
The cut of least capacity keeps the fewest bytes; every value needed on the sink side
of it is recomputed, in the backward, just before its first reader, where the fusion
pass folds it into the backward's kernels.

:func:`max_flow` is Edmonds-Karp (shortest augmenting paths by breadth-first search);
its graphs have a few hundred vertices. :func:`rematerialise` runs the cut on a graph
with its first backward node marked (``Graph.backward_at``) and rewrites it;
:func:`held_bytes` counts what crosses the boundary in a compiled graph.
"""

from __future__ import annotations

from collections import deque

from sitp.compile.graph import ArrRef, CtxArg, Graph, HostIndex, Node, Ref, Value

#: ``remat=`` settings: None leaves the fusion pass's own choice (it recomputes a
#: pointwise value that only fused kernels read, by its cost model), "save" keeps every
#: value the backward reads, "mincut" keeps the minimum cut's. "auto" (the default) is
#: "mincut" where the backward is a program of its own (a compiled module's forward and
#: backward, split) and None where forward and backward are one graph (a training step):
#: in one graph fusion already recomputes what the cut would, in fewer kernels, and
#: across the split only the cut can (``scripts/bench_remat.py`` measures both).
MODES = ("auto", None, "save", "mincut")
_DTYPES = frozenset({"float32", "float64", "int64", "bool"})


# --8<-- [start:max_flow]
def max_flow(cap: dict, s, t) -> tuple[int, set]:
    """Edmonds-Karp on ``cap`` (u -> {v: capacity}). Returns the flow's value and the
    source side of a minimum cut: the vertices the residual graph still reaches."""
    res = {u: dict(vs) for u, vs in cap.items()}
    for u, vs in cap.items():
        for v in vs:
            res.setdefault(v, {}).setdefault(u, 0)  # the reverse edge, for cancelling
    flow = 0
    while True:
        parent, queue = {s: None}, deque([s])
        while queue and t not in parent:  # breadth first: a shortest augmenting path
            u = queue.popleft()
            for v, c in res.get(u, {}).items():
                if c > 0 and v not in parent:
                    parent[v] = u
                    queue.append(v)
        if t not in parent:
            return flow, set(parent)  # no path left: what s reaches is the cut's side
        path, v = [], t
        while parent[v] is not None:
            path.append((parent[v], v))
            v = parent[v]
        push = min(res[u][v] for u, v in path)
        for u, v in path:
            res[u][v] -= push
            res[v][u] += push
        flow += push


# --8<-- [end:max_flow]


def _recomputable(n: Node, written: set) -> bool:
    """A pointwise call the backward may run again: one output, plain views, kernel
    dtypes, and inputs that nothing overwrites in between."""
    if not n.is_pointwise or n.writes or len(n.outputs) != 1 or not isinstance(n.result, Ref):
        return False
    refs = n.refs()
    if not all(isinstance(r, Ref) for r in refs):
        return False
    if any(r.dtype is not None and r.dtype.name not in _DTYPES for r in refs):
        return False
    return n.result.dtype.name in _DTYPES and not any(v.id in written for v in n.inputs())


def _ctx_held(n: Node) -> list:
    """The Values a fused layer's forward ``n`` may keep in its Context: what it read."""
    return [r.value for r in n.refs() if isinstance(r, Ref)]


def boundary(g: Graph) -> tuple[list, list]:
    """The forward nodes and the backward nodes of ``g``, split at the first node traced
    by the autograd engine (``g.backward_at``, a node id: nodes are numbered in the
    order they were traced, which the passes before this one keep)."""
    b = g.backward_at
    k = next((i for i, n in enumerate(g.nodes) if n.id >= b), len(g.nodes))
    if any(n.id < b for n in g.nodes[k:]):
        raise ValueError("remat: the forward's nodes are not all before the backward's")
    return g.nodes[:k], g.nodes[k:]


# --8<-- [start:network]
def network(g: Graph) -> tuple[dict, dict, dict]:
    """The flow network of ``g``'s forward values. Returns (capacities, the forward
    values by id, their producers that may be recomputed)."""
    fwd, bwd = boundary(g)
    live = g.live_values()
    written = {old.id for n in g.nodes for old, _ in n.writes}
    values, made_by = {}, {}
    for n in fwd:
        for v in n.inputs():
            values.setdefault(v.id, v)
        for v in n.made():
            values[v.id], made_by[v.id] = v, n
    redo = {vid: n for vid, n in made_by.items() if _recomputable(n, written) and vid not in live}
    required, pinned = set(), set()  # read by the backward; read there through a Context
    for n in bwd:
        for v in n.inputs():
            if v.id in made_by and v.kind == "ctx":
                held = [u for u in _ctx_held(made_by[v.id]) if u.id in values]
                pinned.update(u.id for u in held)
                required.update(u.id for u in held)
            elif v.id in values:
                required.add(v.id)
    inf = 1 + sum(v.nbytes for v in values.values())
    cap = {"source": {}}
    for vid, v in values.items():
        free = v.kind != "node" or vid in live  # held by the caller anyway
        cap.setdefault(("in", vid), {})[("out", vid)] = 0 if free else v.nbytes
        if vid not in redo or vid in pinned:
            cap["source"][("in", vid)] = inf
        else:
            for u in redo[vid].inputs():
                cap.setdefault(("out", u.id), {})[("in", vid)] = inf
        if vid in required:
            cap.setdefault(("out", vid), {})["sink"] = inf
    return cap, values, redo


# --8<-- [end:network]


def choose(g: Graph, mode: str) -> tuple[set, set]:
    """The values to keep and the values to recompute in the backward: with "mincut",
    the minimum cut's; with "save", every value the backward reads."""
    cap, values, redo = network(g)
    required = {vid for vid in values if "sink" in cap.get(("out", vid), {})}
    if mode == "save":
        return required, set()
    _, side = max_flow(cap, "source", "sink")
    # a value the backward needs is kept if the cut leaves its v_in on the source side,
    # else recomputed from its producer's inputs, which are needed in turn
    keep, recompute = set(), set()
    stack = list(required)
    while stack:
        vid = stack.pop()
        if vid in keep or vid in recompute:
            continue
        if ("in", vid) in side:
            keep.add(vid)
        else:
            recompute.add(vid)  # only a recomputable v_in is cut off from the source
            stack.extend(u.id for u in redo[vid].inputs())
    return keep, recompute


def _swap(a, clones: dict):
    """``a`` with each view of a recomputed value pointed at its recomputation."""
    if isinstance(a, Ref) and a.value.id in clones:
        return Ref(clones[a.value.id], a.shape, a.strides, a.offset, a.dtype, a.cls)
    if isinstance(a, ArrRef) and a.value.id in clones:
        return ArrRef(clones[a.value.id], a.byte_offset, a.shape, a.strides, a.np_dtype)
    if isinstance(a, HostIndex):
        return HostIndex([_swap(r, clones) for r in a.refs])
    if isinstance(a, (list, tuple)) and not isinstance(a, CtxArg):
        return type(a)(_swap(b, clones) for b in a)
    return a


# --8<-- [start:rematerialise]
def rematerialise(g: Graph, mode: str) -> dict:
    """Decide by ``mode`` (see :data:`MODES`) what the forward keeps for the backward,
    and rewrite ``g``: each recomputed value's pointwise calls are copied into the
    backward before their first reader, which reads the copy. The kept values are
    marked (``g.stored``) so that fusion stores them rather than recomputing them.
    Returns the counts and bytes."""
    if mode is None or g.backward_at is None:
        return {}
    keep, recompute = choose(g, mode)
    fwd, bwd = boundary(g)
    producer = {v.id: n for n in fwd for v in n.made()}
    clones: dict[int, Value] = {}
    out = []

    def redo(v):  # the recomputation of v, its own inputs' first
        if v.id not in recompute or v.id in clones:
            return
        n = producer[v.id]
        for u in n.inputs():
            redo(u)
        c = Node(g.new_id(), n.fn, _swap(n.args, clones), {})
        c.kwargs = {k: _swap(a, clones) for k, a in n.kwargs.items()}
        c.where = n.where
        c.device = n.device
        nv = Value(g.new_id(), v.size, v.np_dtype, "node", producer=c)
        r = n.result
        c.result = Ref(nv, r.shape, r.strides, r.offset, r.dtype, r.cls)
        c.outputs = [nv]
        clones[v.id] = nv
        out.append(c)

    for n in bwd:
        for v in n.inputs():
            redo(v)
        n.args = _swap(n.args, clones)
        n.kwargs = {k: _swap(a, clones) for k, a in n.kwargs.items()}
        out.append(n)
    g.nodes = fwd + out
    g.stored = set(keep)
    return {
        "kept": len(keep),
        "recomputed": len(recompute),
        "kept_bytes": sum(v.nbytes for n in fwd for v in n.made() if v.id in keep),
    }


# --8<-- [end:rematerialise]


def kept_bytes(fwd: list, ids) -> int:
    """Bytes of the Values ``ids`` that the nodes ``fwd`` make, a Context counted as the
    buffers its layer's forward read (those that ``fwd`` made)."""
    made = {v.id: (v, n) for n in fwd for v in n.made()}
    held = {}
    for vid in ids:
        if vid not in made:
            continue
        v, n = made[vid]
        for u in _ctx_held(n) if v.kind == "ctx" else [v]:
            if u.id in made:
                held[u.id] = u.nbytes
    return sum(held.values())


def held_bytes(g: Graph) -> int:
    """Bytes that a compiled graph holds from its forward into its backward: the values
    forward nodes make that backward nodes read, and the buffers a fused layer's Context
    keeps (what that layer's forward read, if the forward made it).

    After the passes, a node is a forward node when it makes a Value numbered before the
    backward (a generated kernel keeps its root's output; a decomposed layer, its
    result), or makes nothing and is itself numbered before it."""
    if g.backward_at is None:
        return 0
    b = g.backward_at

    def forward(n):
        made = n.made()
        return any(v.id < b for v in made) if made else n.id < b

    fwd = [n for n in g.nodes if forward(n)]
    return kept_bytes(fwd, {v.id for n in g.nodes if not forward(n) for v in n.inputs()})

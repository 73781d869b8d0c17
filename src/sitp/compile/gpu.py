"""The GPU path of ``sitp.compile`` (6.3): a function called on CUDA tensors.

The trace records the CUDA backend's calls (``capture.tracing(..., cuda=True)``: each
node's ``device`` is "cuda"), so the graph is the same graph as on the CPU, its buffers
device arrays. :func:`compile_graph` runs the passes that do not depend on the device
(constant folding, common subexpressions, dead code, forwarded copies) and the fusion
pass over the CUDA calls; each fused group is generated for ``target="cuda"`` (one
thread per entry of its outer index space, the reduced dims looped inside) and launched
on this call's device arrays. Every other node replays the backend call it recorded
(the CUDA backend's own kernels, a fused layer's forward and backward). The program's
environment holds device arrays, so the outputs are CUDA tensors. A forward whose outputs require grad is split
into a forward and a backward program as on the CPU (``api.Joint``), both built here.

What the CPU path has and this one does not yet, so that it is off here rather than
wrong: the hand lowerings of ``lower.py`` and the GEMM epilogues and decompositions of
``rules.py`` (their kernels are CPU code), the memory plan (a kernel's buffers are
allocated at each call, by numba's allocator), the autotuner, the save-or-recompute pass
of a training step (the forward saves what the backward reads), dynamic batch sizes (the
CUDA source has no size arguments), and ``rerun_trace`` (the first call of a signature
returns the trace's values, eager's). :func:`unsupported` names what makes a graph run
eagerly instead.
"""

from __future__ import annotations

import numpy as np

from sitp.compile import codegen, passes
from sitp.compile.graph import Graph, HostIndex, Ref
from sitp.compile.runtime import Program, step_of

#: What the CPU path does that a CUDA program does not (``explain`` prints it).
OFF = (
    "lowerings (lower.py)",
    "GEMM epilogues and decompositions (rules.py)",
    "memory plan",
    "autotuning",
    "remat",
    "dynamic batch sizes",
    "rerun_trace",
)


def _has_host_index(a) -> bool:
    if isinstance(a, HostIndex):
        return True
    if isinstance(a, (list, tuple)):
        return any(_has_host_index(b) for b in a)
    if isinstance(a, dict):
        return any(_has_host_index(b) for b in a.values())
    return False


def unsupported(g: Graph):
    """Why graph ``g`` (traced on CUDA tensors) cannot run as a CUDA program, or None."""
    for n in g.nodes:
        if _has_host_index(n.args) or _has_host_index(n.kwargs):
            return (
                f"CUDA tensors: {n.fn} takes an index computed in Python from tensors' "
                "values, which the CUDA path does not replay"
            )
    return None


def _device():
    from numba import cuda  # late: the CUDA backend (and numba.cuda) is imported already

    return cuda


def kernel_step(node, fn, counter: list):
    """Launch generated CUDA kernel ``fn`` on this call's device arrays; a leaf that is a
    host array (a Python number the tensor layer wrapped, a 0-d CPU tensor) is copied to
    the device, once for a literal, at each call for a constant that may change."""
    cuda = _device()
    k = node.kernel
    leaves = [(v.id, v.kind == "literal") for v in k.leaves]
    outs = [(v.id, v.size, v.np_dtype) for v in node.outputs]
    grid = codegen.cuda_grid(k)
    cached: dict = {}

    def step(env):
        args = []
        for vid, literal in leaves:
            a = env[vid]
            if isinstance(a, np.ndarray):
                d = cached.get(vid) if literal else None
                if d is None:
                    d = cuda.to_device(np.ascontiguousarray(a))
                    if literal:
                        cached[vid] = d
                a = d
            args.append(a)
        bufs = []
        for vid, size, dt in outs:
            env[vid] = buf = cuda.device_array(max(size, 1), dtype=dt)
            bufs.append(buf)
        fn[grid](*args, *bufs)
        counter[0] += 1

    return step


def compile_graph(g: Graph, fuse=True, debug_dir=None, only=None):
    """The passes for a graph of CUDA calls; returns (Program, report). ``only``: the
    passes to run, of "fold", "cse", "dce", "fuse" (a training step's forward graph runs
    "dce" and "fuse" only, as on the CPU). The program's ``launches`` counts the
    generated kernels' launches (``launches[0]``)."""
    on = {"fold", "cse", "dce", "fuse"} if only is None else set(only)
    report = {"ops_before": len(g.nodes), "device": "cuda", "off": list(OFF)}
    if debug_dir:
        passes._write(debug_dir, "graph_captured.txt", g.tabular())
    report["folded"] = passes.fold_constants(g) if "fold" in on else 0
    report["cse"] = passes.eliminate_common(g) if "cse" in on else 0
    report["dead"] = passes.eliminate_dead(g) if "dce" in on else 0
    if "dce" in on and passes.forward_copies(g):
        report["dead"] += passes.eliminate_dead(g)
    report.update(decomposed=0, lowered=0, epilogues=0, bytes_before=0, bytes_after=0)
    kernels = passes.fuse(g, device="cuda") if fuse and "fuse" in on else []
    report["kernels"] = len(kernels)
    counter = [0]
    steps = []
    for n in g.nodes:
        if n.fn == "kernel":
            k = n.kernel
            k.source = codegen.generate(k, target="cuda")
            # (the leaves in the CUDA source's order: the parameters of the launch)
            n.args = tuple(Ref(v, (v.size,), (1,), 0, None, None) for v in k.leaves)
            n.device = "cuda"
            fn = codegen.load(k.source, k.name, target="cuda")
            steps.append(kernel_step(n, fn, counter))
        else:
            steps.append(step_of(n))
    prog = Program(g, steps)
    prog.launches = counter
    report["steps_after"] = len(steps)
    if debug_dir:
        passes._write(debug_dir, "graph_compiled.txt", g.tabular())
        for k in kernels:
            passes._write(debug_dir, f"{k.name}_cuda.py", k.source)
    return prog, report

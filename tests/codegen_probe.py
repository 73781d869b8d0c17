"""Compile sitp's hot CPU kernels for the target in the environment and describe their code.

Run by tests/test_codegen.py in a subprocess whose environment names the target
(``NUMBA_CPU_NAME``, ``NUMBA_CPU_FEATURES``) and a private, empty ``NUMBA_CACHE_DIR``,
so every kernel is compiled afresh and numba keeps its machine code. Prints one JSON
object: the target sitp sees, and for each kernel the vector FMAs by register width,
packed vector arithmetic by width, gathers and scatters, and stack spills.

The target's code is compiled, never run: the host may lack its instructions (an AVX2
host probing AVX-512 code would stop on an illegal instruction). Which kernels to
compile, and for which argument types, is learnt first on the host's own target: a
child process (``--signatures``, the host's code and sitp's usual cache) runs the
GEMMs, checking them against numpy, and the small training step below, and hands
back each kernel's place (module and name, or the source sitp.compile generated) with
the numba signatures it was called with. The target process compiles exactly those
(``Dispatcher.compile``) and reads their assembly.

The kernels' description is a function of the sources, the compiler and the target
alone; where ``SITP_CODEGEN_REPORTS`` names a folder, it is kept there under a key of
all three (:func:`saved_kernels_path`) and read back instead of compiling again, as
numba's own cache is. An edit of any kernel source changes the key.

``--all`` also runs (on the host) a tiny GPT-style training step (linear, GELU, layer norm,
attention, cross-entropy, reductions, AdamW), which compiles the other hot kernels.
"""

import hashlib
import importlib
import json
import os
import pickle
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

import sitp
from sitp.kernels.cpu import blas
from sitp.kernels.cpu.blas import packed

WIDTH = {"x": 128, "y": 256, "z": 512}


def describe(asm):
    fma = {WIDTH[w]: len(re.findall(rf"\bvfmadd\w*\s+[^\n]*%{w}mm", asm)) for w in "xyz"}
    packed_ops = {
        WIDTH[w]: len(
            re.findall(rf"\bv?(?:add|sub|mul|div|max|min|fmadd\w*)p[sd]\s+[^\n]*%{w}mm", asm)
        )
        for w in "xyz"
    }
    sse = len(re.findall(r"^\s*(?:add|sub|mul|div|max|min)p[sd]\s", asm, re.M))  # non-VEX SSE2
    return {
        "fma": fma,
        "packed": packed_ops,
        "sse_packed": sse,
        "gather_scatter": len(re.findall(r"\bv(?:p?gather|p?scatter)\w*", asm)),
        "spills": len(re.findall(r"-byte (?:Spill|Reload)", asm)),
    }


def module_kernel(module, attr):
    """Where a kernel defined in sitp's sources lives, for :func:`locate`."""
    return ("module", module, attr)


def locate(where):
    """The dispatcher at ``where``: ("module", module, attribute) or ("source", text, name)."""
    if where[0] == "module":
        return getattr(importlib.import_module(where[1]), where[2])
    from sitp.compile import codegen

    return codegen.load(where[1], where[2])


def signatures(places):
    """Each kernel's place and the signatures it was compiled for in this process."""
    return {name: (where, list(locate(where).signatures)) for name, where in places.items()}


def host_signatures():
    """:func:`signatures` from a child process that runs the kernels on the host's target."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("NUMBA_CPU_", "SITP_CODEGEN_REPORTS")) and k != "NUMBA_CACHE_DIR"
    }
    args = [a for a in sys.argv[1:] if a == "--all"]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "signatures.pickle"
        proc = subprocess.run(
            [sys.executable, __file__, "--signatures", str(path), *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        if proc.returncode != 0:
            sys.stderr.write(proc.stdout[-2000:] + proc.stderr[-3000:])
            raise SystemExit(f"the host's run of the kernels failed ({proc.returncode})")
        return pickle.loads(path.read_bytes())


def kernels(found):
    """Compile each kernel's signatures for this process's target and describe the code."""
    out = {}
    for name, (where, sigs) in found.items():
        d = locate(where)
        for sig in sigs:
            d.compile(sig)
            key = f"{name}[{','.join(str(a) for a in sig)}]"
            out[key] = describe(d.inspect_asm(sig))
    return out


def gemm_kernels():
    rng = np.random.default_rng(0)
    for dt in (np.float32, np.float64):
        nr = packed.NR * 4 // np.dtype(dt).itemsize
        Ap = rng.standard_normal((37, packed.MR)).astype(dt)
        Bp = rng.standard_normal((37, nr)).astype(dt)
        C = np.zeros((packed.MR + 1, nr + 3), dt)
        blas.micro_kernel(Ap, Bp, C, 1, 3)
        np.testing.assert_allclose(C[1:, 3:], Ap.T @ Bp, rtol=1e-4, atol=1e-4)
        A = rng.standard_normal((2 * packed.MR + 3, 29)).astype(dt)
        B = rng.standard_normal((29, 2 * nr + 5)).astype(dt)
        C = np.zeros((A.shape[0], B.shape[1]), dt)
        blas.gemm_small(A, B, C)
        np.testing.assert_allclose(C, A @ B, rtol=1e-4, atol=1e-4)
        # the storing tiles in float32 only: float64's are the same template at half the
        # lanes, and each of these signatures costs seconds of compilation per target
        for A_ in (A, np.asfortranarray(A)) if dt == np.float32 else ():
            C = np.empty((A.shape[0], B.shape[1]), dt)
            blas.gemm_small_set(A_, B, C, C[0, :0], False)
            np.testing.assert_allclose(C, A @ B, rtol=1e-4, atol=1e-4)
    return {
        name: module_kernel(blas.__name__, name)
        for name in ("micro_kernel", "gemm_small", "gemm_small_set")
    }


def training_step():
    """A tiny GPT-style step, so that the loop-vectorised kernels get compiled."""
    from sitp import nn
    from sitp.kernels.cpu.fused import (
        adam,
        attention,
        cross_entropy,
        gelu,
        layer_norm,
        norms,
        rms_norm,
    )
    from sitp.nn import functional as F

    sitp.manual_seed(0)
    B, T, C, V = 2, 8, 32, 17
    emb, lin1, lin2 = nn.Embedding(V, C), nn.Linear(C, 4 * C), nn.Linear(4 * C, C)
    ln, rms, head = nn.LayerNorm(C), nn.RMSNorm(C), nn.Linear(C, V)
    params = [
        *emb.parameters(),
        *lin1.parameters(),
        *lin2.parameters(),
        *ln.parameters(),
        *rms.parameters(),
        *head.parameters(),
    ]
    opt = sitp.optim.AdamW(params, lr=1e-3)
    idx = sitp.randint(0, V, (B, T))
    x = ln(emb(idx))
    q = x.view(B, T, 2, C // 2).transpose(1, 2)
    a = F.scaled_dot_product_attention(q, q, q, is_causal=True).transpose(1, 2).reshape(B, T, C)
    h = lin2(F.gelu(lin1(x + a)))
    logits = head(rms(h + x))
    loss = F.cross_entropy(logits.view(B * T, V), idx.view(B * T)) + logits.softmax(-1).sum() * 0
    loss.backward()
    nn.utils.clip_grad_norm_(params, 1.0)
    opt.step()
    from sitp.kernels.cpu import kernels as K

    return {
        name: module_kernel(module.__name__, name)
        for module, names in (
            (K, ("zip_fast_kernel", "map_kernel", "reduce_kernel", "softmax_kernel")),
            (gelu, ("gelu_kernel", "gelu_backward_kernel")),
            (layer_norm, ("layer_norm_kernel", "layer_norm_backward_kernel")),
            (cross_entropy, ("cross_entropy_kernel",)),
            (attention, ("attention_forward_kernel", "attention_backward_kernel")),
            (adam, ("adam_kernel",)),
            (rms_norm, ("rms_norm_kernel", "rms_norm_backward_kernel")),
            (norms, ("sum_of_squares",)),
        )
        for name in names
    }


def compiled_kernel():
    """A kernel that sitp.compile generates (chapter 6): GELU's tanh form on float32,
    small enough to be serial (no prange), so its loop is the code inspected."""

    def gelu(h):
        return 0.5 * h * (1.0 + ((h + 0.044715 * h * h * h) * 0.7978845608028654).tanh())

    h = sitp.randn(8, 32)
    cf = sitp.compile(gelu)
    cf(h)  # the first call traces (and runs eagerly); the second runs the kernel
    np.testing.assert_allclose(cf(h).numpy(), gelu(h).numpy(), rtol=1e-5, atol=1e-6)
    (node,) = [n for n in cf.graph.nodes if n.kernel is not None]
    out = {"compiled_gelu": ("source", node.kernel.source, node.kernel.name)}
    # the GEMM with a generated epilogue (rules.py): a Linear, GELU, Linear step, whose
    # GELU and GELU' become the epilogues of the forward's and the backward's products
    from sitp import nn
    from sitp.nn import functional as F

    fc, proj = nn.Linear(32, 64), nn.Linear(64, 32)
    x = sitp.randn(40, 32)

    def step():
        y = proj(F.gelu(fc(x)))
        y.square().sum().backward()
        return y.detach()

    cs = sitp.compile(step)
    for _ in range(2):  # the trace, then the program (which calls the generated GEMMs)
        for p in (*fc.parameters(), *proj.parameters()):
            p.grad = None
        want = cs()
    assert len(cs.entries) == 1
    np.testing.assert_allclose(want.numpy(), step().numpy(), rtol=1e-4, atol=1e-5)
    fused = [  # (the rules also give proj's product y the backward's 2y as its epilogue)
        n
        for n in cs.graph.nodes
        if n.fn.startswith("Linear.") and n.kernel is not None and "gelu" in n.kernel.summary()
    ]
    assert [n.fn for n in fused] == ["Linear.forward", "Linear.backward"], fused
    for n in fused:
        name = n.kernel.name + "_gemm"
        out["compiled_gemm_" + n.fn.split(".")[1]] = ("source", n.kernel.source, name)
    return out


def saved_kernels_path() -> Path | None:
    """Where the description of this target's kernels is kept between runs, or None.

    The machine code is a function of the sources, the compiler and the target: the key
    is sitp's cache key (which hashes the kernel sources, numba's and llvmlite's
    versions, the CPU name and features, the vectorizer flags and the tile), this
    file's bytes and its arguments. With ``SITP_CODEGEN_REPORTS`` unset nothing is kept.
    """
    folder = os.environ.get("SITP_CODEGEN_REPORTS")
    if not folder:
        return None
    from sitp._target import cache_key

    digest = hashlib.sha256()
    for part in (cache_key(), Path(__file__).read_text(encoding="utf-8"), *sys.argv[1:]):
        digest.update(part.encode() + b"\0")
    return Path(folder) / f"{digest.hexdigest()[:20]}.json"


def run_on_host():
    """``--signatures``: run the kernels here (the host's target) and pickle what ran."""
    places = gemm_kernels()
    if "--all" in sys.argv:
        places.update(training_step())
        places.update(compiled_kernel())
    path = Path(sys.argv[sys.argv.index("--signatures") + 1])
    path.write_bytes(pickle.dumps(signatures(places)))


def main():
    if "--signatures" in sys.argv:
        return run_on_host()
    cfg = sitp.show_config(mode="dicts")
    report = {
        "cpu": cfg["cpu"]["llvm_cpu_name"],
        "vector_bits": cfg["cpu"]["vector_bits"],
        "tile": [packed.MR, packed.NR],
        "cache": cfg["cache"]["dir"],
    }
    saved = saved_kernels_path()
    if saved is not None and saved.is_file():
        report["kernels"] = json.loads(saved.read_text(encoding="utf-8"))
        report["saved"] = True
    else:
        report["kernels"] = kernels(host_signatures())
        if saved is not None:  # atomically: parallel probes may write the same file
            saved.parent.mkdir(parents=True, exist_ok=True)
            tmp = saved.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(report["kernels"]), encoding="utf-8")
            os.replace(tmp, saved)
    print(json.dumps(report))


if __name__ == "__main__":
    main()

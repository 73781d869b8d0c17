"""``sitp.compile`` on CUDA tensors (``sitp/compile/gpu.py``): the trace records the CUDA
backend's calls, the fused groups run as generated ``@cuda.jit`` kernels, the other calls
replay the CUDA backend, and the outputs are CUDA tensors equal to eager's.

Under numba's CUDA simulator every GPU thread is a Python thread, so the sizes are tiny.
"""

import os
import subprocess
import sys

import numpy as np
import pytest

import sitp

pytestmark = pytest.mark.skipif(
    not (sitp.cuda.is_available() or sitp.cuda.is_simulated()),
    reason="needs a GPU or NUMBA_ENABLE_CUDASIM=1",
)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _cpu(*shape, seed=0, dtype=np.float64):
    return sitp.tensor(np.random.default_rng(seed).standard_normal(shape).astype(dtype))


def _np(t):
    return t.cpu().detach().numpy()


def _launches(cf, i=0) -> int:
    return cf.entries[i].program.launches[0]


def test_pointwise_chain_with_broadcasting_runs_one_cuda_kernel():
    xc, bc = _cpu(3, 4), _cpu(4, seed=1)
    x, b = xc.cuda(), bc.cuda()

    def f(x, b):
        return ((x - b).exp() * 0.5 + 1.0).tanh()

    cf = sitp.compile(f)
    cf(x, b)  # the trace: eager's values
    out = cf(x, b)
    assert out.is_cuda and out.shape == (3, 4)
    e = cf.entries[0]
    assert e.program is not None and e.report["device"] == "cuda"
    assert e.report["kernels"] == 1 and e.report["steps_after"] == 1
    (n,) = e.graph.nodes
    assert n.fn == "kernel" and "@cuda.jit" in n.kernel.source
    assert _launches(cf) == 1
    np.testing.assert_allclose(_np(out), _np(f(x, b)), rtol=1e-14)
    np.testing.assert_allclose(_np(out), f(xc, bc).numpy(), rtol=1e-14)
    # new values in the same buffers layout: the program reads this call's arrays
    x2 = _cpu(3, 4, seed=5)
    out2 = cf(x2.cuda(), b)
    np.testing.assert_allclose(_np(out2), f(x2, bc).numpy(), rtol=1e-14)
    assert _launches(cf) == 2 and len(cf.entries) == 1


def test_softmax_and_layer_norm_reductions_fuse_into_cuda_kernels():
    xc, wc = _cpu(3, 5, dtype=np.float32), _cpu(5, seed=2, dtype=np.float32)
    x, w = xc.cuda(), wc.cuda()

    def f(x, w):
        m = x.amax(-1, keepdim=True)
        e = (x - m).exp()
        p = e / e.sum(-1, keepdim=True)
        mu = p.mean(-1, keepdim=True)
        var = ((p - mu) ** 2).mean(-1, keepdim=True)
        return (p - mu) / (var + 1e-5).sqrt() * w

    cf = sitp.compile(f)
    cf(x, w)
    out = cf(x, w)
    r = cf.entries[0].report
    assert out.is_cuda and r["device"] == "cuda"
    assert r["kernels"] >= 3 and r["steps_after"] == r["kernels"]  # every op in a kernel
    assert _launches(cf) == r["kernels"]
    np.testing.assert_allclose(_np(out), _np(f(x, w)), rtol=2e-5, atol=2e-5)
    np.testing.assert_allclose(_np(out), f(xc, wc).numpy(), rtol=2e-5, atol=2e-5)


def test_training_step_backward_on_cuda_matches_eager_and_cpu():
    rng = np.random.default_rng(0)

    def mk(*s):
        return sitp.tensor(rng.standard_normal(s).astype(np.float32))

    X, Y, W1, B1, W2 = mk(4, 3), mk(4, 2), mk(3, 5), mk(5), mk(5, 2)

    def step(x, y, w1, b1, w2):
        h = (x @ w1 + b1).tanh()
        loss = ((h @ w2 - y) ** 2).mean()
        loss.backward()
        return loss

    ps = [t.cuda().requires_grad_(True) for t in (W1, B1, W2)]
    x, y = X.cuda(), Y.cuda()
    cf = sitp.compile(step)
    for _ in range(2):  # the trace, then the program
        for p in ps:
            p.grad = None
        loss = cf(x, y, *ps)
    grads = [p.grad for p in ps]
    e = cf.entries[0]
    assert e.program is not None and e.report["device"] == "cuda"
    assert any(n.fn == "matmul" and n.device == "cuda" for n in e.graph.nodes)
    assert e.report["kernels"] >= 3 and _launches(cf) == e.report["kernels"]
    assert loss.is_cuda and all(g.is_cuda for g in grads)
    for p in ps:
        p.grad = None
    ref = step(x, y, *ps)
    np.testing.assert_allclose(_np(loss), _np(ref), rtol=1e-6)
    for g, p in zip(grads, ps):
        np.testing.assert_allclose(_np(g), _np(p.grad), rtol=1e-5, atol=1e-6)
    pc = [t.requires_grad_(True) for t in (W1, B1, W2)]
    ref_cpu = step(X, Y, *pc)
    np.testing.assert_allclose(_np(loss), _np(ref_cpu), rtol=1e-5)
    for g, p in zip(grads, pc):
        np.testing.assert_allclose(_np(g), p.grad.numpy(), rtol=1e-4, atol=1e-5)


def test_a_cpu_call_and_a_cuda_call_make_two_entries():
    xc = _cpu(2, 3)

    def f(x):
        return (x * 2.0).exp().sum(0)

    cf = sitp.compile(f)
    for _ in range(2):
        a = cf(xc)
        g = cf(xc.cuda())
    assert len(cf.entries) == 2
    cpu_e, gpu_e = cf.entries
    assert cpu_e.report.get("device") is None and gpu_e.report["device"] == "cuda"
    assert not a.is_cuda and g.is_cuda
    assert _launches(cf, 1) == 1
    np.testing.assert_allclose(_np(g), a.numpy(), rtol=1e-14)


def test_explain_names_what_the_gpu_path_leaves_off():
    from sitp.compile.api import explain_text

    cf = sitp.compile(lambda x: x.exp() + 1.0)
    x = _cpu(2, 2).cuda()
    cf(x)
    text = explain_text(cf)
    assert "compiled for CUDA" in text and "1 generated @cuda.jit kernels" in text
    assert "off on the GPU path: lowerings" in text


def test_a_forward_whose_backward_runs_later_is_split_on_cuda():
    """Outputs that require grad: a forward and a backward program, both on the device;
    an output the loss does not use gets a zero gradient on the device."""
    w = _cpu(3).cuda().requires_grad_(True)
    cf = sitp.compile(lambda w: ((w * w).sum(), w.exp()))
    for _ in range(2):  # the trace, then the programs
        w.grad = None
        a, b = cf(w)
        a.backward()
    joint = cf.entries[0].program
    assert joint.device == "cuda" and cf.entries[0].report["device"] == "cuda"
    assert a.is_cuda and b.is_cuda and w.grad.is_cuda
    assert joint.fwd.launches[0] >= 1 and joint.bwd.launches[0] >= 1
    np.testing.assert_allclose(_np(w.grad), 2 * _np(w), rtol=1e-14)
    np.testing.assert_allclose(_np(b), np.exp(_np(w)), rtol=1e-14)


def test_a_compiled_cuda_module_trains_as_eager():
    import sitp.nn as nn
    import sitp.nn.functional as F

    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.l1, self.ln, self.l2 = nn.Linear(3, 6), nn.LayerNorm(6), nn.Linear(6, 4)

        def forward(self, x, y):
            return F.cross_entropy(self.l2(F.gelu(self.ln(self.l1(x)))), y)

    sitp.manual_seed(0)
    m = M().cuda()
    x = _cpu(5, 3, dtype=np.float32).cuda()
    y = sitp.tensor(np.array([0, 1, 2, 3, 0])).cuda()
    cm = sitp.compile(m)

    def run(f):
        m.zero_grad(set_to_none=True)
        loss = f(x, y)
        loss.backward()
        return _np(loss), [_np(p.grad) for p in m.parameters()]

    run(cm)  # the trace
    got = run(cm)
    e = cm.entries[0]
    assert e.program is not None and e.report["device"] == "cuda"
    for prog in (e.program.fwd, e.program.bwd):  # one compiled call: one launch a kernel
        n_kernels = sum(1 for n in prog.graph.nodes if n.fn == "kernel")
        assert n_kernels >= 1 and prog.launches[0] == n_kernels
    # the fused layers' GPU kernels are replayed as nodes of the graph
    assert any(n.fn == "LayerNormGPU.forward" for n in e.program.fwd.graph.nodes)
    want = run(m)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-6)
    for a, b in zip(got[1], want[1]):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_a_cuda_program_is_compiled_per_batch_size():
    cf = sitp.compile(lambda x: (x * 3.0).sum(-1))
    for n in (2, 3, 3):
        x = _cpu(n, 2, seed=n)
        out = cf(x.cuda())
        np.testing.assert_allclose(_np(out), (x * 3.0).sum(-1).numpy(), rtol=1e-14)
    assert len(cf.entries) == 2 and all(e.dynamic is None for e in cf.entries)


def test_bench_compile_cuda_smoke():
    r = subprocess.run(
        [sys.executable, os.path.join(ROOT, "scripts", "bench_compile_cuda.py"), "--smoke"],
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ),
    )
    assert r.returncode == 0, r.stderr
    assert "device:" in r.stdout and "pointwise" in r.stdout and "step" in r.stdout
    assert "launches" in r.stdout

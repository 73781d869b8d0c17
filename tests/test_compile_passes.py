"""The passes of sitp.compile on small graphs (chapter 6.2), each checked for what it
removes or fuses and for the program still computing eager's values."""

import os

import numpy as np
import pytest

import sitp
from sitp.compile import capture, codegen, passes
from sitp.compile.runtime import Program, step_of
from sitp.compile.scalars import tanh_f32


def trace(fn, *inputs):
    """The graph of ``fn`` on ``inputs``, and eager's result."""
    tracer = capture.Tracer()
    for i, t in enumerate(inputs):
        tracer.add_input(t, i)
    with capture.tracing(tracer):
        out = fn(*inputs)
    tracer.finish()
    assert not tracer.breaks
    g = tracer.graph
    g.output = tracer.ref(out)
    return g, out


def run(g, *inputs, steps=None, n_slots=0):
    out, _ = Program(g, steps, n_slots).run(list(inputs))
    return out.numpy()


def x64(*shape, seed=0):
    return sitp.tensor(np.random.default_rng(seed).standard_normal(shape))


def test_dead_code_drops_unused_calls():
    x = x64(3, 4)
    g, out = trace(lambda x: (x.exp(), x.tanh() * 2)[1], x)
    n = len(g.nodes)
    assert passes.eliminate_dead(g) == 1  # the exp reaches no output
    assert len(g.nodes) == n - 1 and all(node.op != "exp" for node in g.nodes)
    assert np.array_equal(run(g, x), out.numpy())


def test_common_subexpressions_are_computed_once():
    x = x64(3, 4)
    g, out = trace(lambda x: x.exp() + x.exp(), x)
    assert [n.op for n in g.nodes] == ["exp", "exp", "add"]
    assert passes.eliminate_common(g) == 1
    assert [n.op for n in g.nodes] == ["exp", "add"]
    add = g.nodes[1]
    assert add.args[1].value is add.args[2].value  # both operands read the one exp
    assert np.array_equal(run(g, x), out.numpy())


def test_constants_fold_at_compile_time():
    x = x64(4)

    def f(x):
        c = sitp.ones(4, dtype=sitp.float64) * 3.0 + 1.0  # no input reaches it
        return x * c

    g, out = trace(f, x)
    before = len(g.nodes)
    folded = passes.fold_constants(g)
    passes.eliminate_dead(g)
    assert folded >= 2 and len(g.nodes) < before
    assert [n.op for n in g.nodes] == ["mul"]
    assert np.array_equal(run(g, x), out.numpy())
    assert np.array_equal(run(g, x64(4, seed=1)), (x64(4, seed=1) * 4.0).numpy())


def test_pointwise_chain_with_broadcasting_is_one_kernel():
    x, b = x64(3, 4), x64(4, seed=1)
    g, out = trace(lambda x, b: ((x + b).tanh() * x - 1.5).abs(), x, b)
    assert len(g.nodes) == 5
    kernels = passes.fuse(g)
    assert len(kernels) == 1 and len(g.nodes) == 1
    assert [n.op for n in kernels[0].nodes] == ["add", "tanh", "mul", "sub", "abs"]
    src = kernels[0].source
    assert (
        '@njit(cache=True, error_model="numpy")' in src and "a1[i1]" in src
    )  # b is read along dim 1 only
    steps, _ = _steps(g)
    assert np.array_equal(run(g, x, b, steps=steps), out.numpy())


def test_softmax_chain_fuses_reductions_as_epilogues():
    x = x64(5, 7)

    def softmax(x):
        m = x.amax(-1, keepdim=True)
        e = (x - m).exp()
        return e / e.sum(-1, keepdim=True)

    g, out = trace(softmax, x)
    assert len(g.nodes) == 5
    kernels = passes.fuse(g)
    # max(x); e = exp(x - m) and its sum in one loop nest, which stores e too (an exp is
    # not worth computing twice); then e / s
    assert [[n.op for n in k.nodes] for k in kernels] == [["max"], ["sub", "exp", "sum"], ["div"]]
    assert [len(k.outs()) for k in kernels] == [1, 2, 1]
    assert "out1[i0 * 7 + i1] = t" in kernels[1].source
    steps, _ = _steps(g)
    np.testing.assert_allclose(run(g, x, steps=steps), out.numpy(), rtol=1e-14, atol=0)


def test_memory_plan_reuses_dead_intermediates():
    x = x64(4, 6)

    def f(x):
        a = x.sum(-1, keepdim=True)
        b = (x - a).exp().sum(-1, keepdim=True)
        c = (x * b).sum(-1, keepdim=True)  # a is dead here: c can take its buffer
        return (x + c).sum(-1)

    g, out = trace(f, x)
    passes.fuse(g)
    plan = passes.plan_memory(g)
    assert plan["bytes_before"] == 3 * 4 * 8 and plan["bytes_after"] == 2 * 4 * 8
    assert len(set(plan["plan"].values())) == 2
    steps, n_slots = _steps(g, plan)
    np.testing.assert_allclose(run(g, x, steps=steps, n_slots=n_slots), out.numpy(), rtol=1e-14)


def test_graph_prints_as_a_table():
    x = x64(2, 3)
    g, _ = trace(lambda x: x.t().exp().sum(0), x)
    text = str(g)
    lines = text.splitlines()
    assert lines[0].split() == ["node", "op", "args", "shape", "dtype"]
    assert any("unary.exp" in line and "in1<3x2:1,3@0>" in line for line in lines)
    assert lines[-1].startswith("output")


def test_cuda_source_runs_under_the_simulator():
    if os.environ.get("NUMBA_ENABLE_CUDASIM") != "1":
        pytest.skip("the CUDA kernels are checked under the simulator (NUMBA_ENABLE_CUDASIM=1)")
    x, b = x64(3, 4), x64(4, seed=1)
    g, out = trace(lambda x, b: ((x - b).exp() * 0.5).sum(-1), x, b)
    (k,) = passes.fuse(g)
    src = codegen.generate(k, target="cuda")
    assert "@cuda.jit" in src and "cuda.grid(1)" in src
    fn = codegen.load(src, k.name, target="cuda")
    res = np.empty(3)
    env = {v.id: (x, b)[v.index]._storage for v in g.inputs}
    env.update({v.id: v.array for v in g.consts})  # the 0.5
    codegen.cuda_launch(fn, k, [env[v.id] for v in k.leaves], res)
    np.testing.assert_allclose(res, out.numpy(), rtol=1e-14)


def test_cuda_float32_source_has_its_scalar_helpers():
    """A float32 kernel names exp_f32 and tanh_f32; the CUDA source defines both."""
    if os.environ.get("NUMBA_ENABLE_CUDASIM") != "1":
        pytest.skip("the CUDA kernels are checked under the simulator (NUMBA_ENABLE_CUDASIM=1)")
    x = sitp.tensor(np.random.default_rng(2).standard_normal((3, 5)).astype(np.float32))
    g, out = trace(lambda x: (x.tanh() + x.exp()).sum(-1), x)
    (k,) = passes.fuse(g)
    src = codegen.generate(k, target="cuda")
    assert "tanh_f32(" in src and "exp_f32(" in src
    fn = codegen.load(src, k.name, target="cuda")
    res = np.empty(3, np.float32)
    env = {v.id: x._storage for v in g.inputs}
    env.update({v.id: v.array for v in g.consts})
    codegen.cuda_launch(fn, k, [env[v.id] for v in k.leaves], res)
    np.testing.assert_allclose(res, out.numpy(), rtol=1e-5)


def test_serial_cpu_kernels_use_numpys_error_model():
    """Serial generated kernels divide as IEEE says, so their loops vectorise."""
    x = x64(3, 4)
    g, _ = trace(lambda x: (x / (x + 1.0)).exp(), x)
    (k,) = passes.fuse(g)
    src = codegen.generate(k)
    assert "parallel=True" not in src and 'error_model="numpy")' in src


def _steps(g, plan=None):
    plan = plan or {"plan": {}, "slots": []}
    steps = []
    for n in g.nodes:
        if n.fn == "kernel":
            fn = codegen.load(n.kernel.source, n.kernel.name)
            steps.append(passes.kernel_step(n, fn, plan["plan"]))
        else:
            steps.append(step_of(n))
    return steps, len(plan["slots"])


def test_tanh_f32_is_accurate():
    x = np.concatenate([np.linspace(-12, 12, 20001), np.geomspace(1e-30, 0.5, 2000)])
    x = np.concatenate([x, -x]).astype(np.float32)
    got = np.array([tanh_f32(v) for v in x[:: max(1, x.size // 4000)]], np.float64)
    ref = np.tanh(x[:: max(1, x.size // 4000)].astype(np.float64))
    assert np.max(np.abs(got - ref) / np.maximum(np.abs(ref), 1e-30)) < 1e-6
    assert tanh_f32(np.float32(np.inf)) == 1 and tanh_f32(np.float32(-np.inf)) == -1
    assert np.isnan(tanh_f32(np.float32(np.nan)))


def test_mean_is_a_reduction_with_an_epilogue():
    x = x64(4, 6)
    g, out = trace(lambda x: (x * x).mean(-1, keepdim=True).rsqrt(), x)
    (k,) = passes.fuse(g)  # sum(x * x), then / 6 and rsqrt before the store
    assert [n.op for n in k.nodes] == ["mul", "sum", "div", "rsqrt"]
    assert "red = np.float64(acc)" in k.source
    steps, _ = _steps(g)
    np.testing.assert_allclose(run(g, x, steps=steps), out.numpy(), rtol=1e-14)


def _layer_norm(y, g, b):
    m = y.mean(-1, keepdim=True)
    d = y - m
    v = (d * d).mean(-1, keepdim=True)
    return d * (v + 1e-5).rsqrt() * g + b


def test_cost_model_stores_per_row_values_once():
    """Fusion's cost model (passes._choose_stored) on layer norms written with ops: the
    mean and the rsqrt are per-row values stored once, as the epilogues of their
    reductions; the centred values and the normalised output are recomputed by their
    readers. One norm of a residual sum: three kernels; two in a row: five (x + r1 and
    the second norm's input, each read by several kernels, are stored by the sums that
    read them, as their second outputs)."""
    x, r1, r2 = x64(16, 8), x64(16, 8, seed=1), x64(16, 8, seed=2)
    g, b = x64(8, seed=3), x64(8, seed=4)

    def one(x, r1, g, b):
        return _layer_norm(x + r1, g, b)

    def two(x, r1, r2, g, b):
        return _layer_norm(_layer_norm(x + r1, g, b) + r2, g, b)

    for fn, args, want in ((one, (x, r1, g, b), 3), (two, (x, r1, r2, g, b), 5)):
        cf = sitp.compile(fn)
        for _ in range(2):
            got = cf(*args).numpy()
        np.testing.assert_allclose(got, fn(*args).numpy(), rtol=1e-12, atol=1e-12)
        kernels = [n.kernel for n in cf.graph.nodes if n.kernel is not None]
        assert len(kernels) == want, [k.summary() for k in kernels]
        # the rsqrt is computed inside a reduction's kernel, once per row
        for k in kernels:
            if any(m.op == "rsqrt" for m in k.nodes):
                assert k.root.fn == "reduce" and k.epilogue is not None


def test_copies_that_only_rearrange_one_buffer_are_forwarded():
    """A concatenation of windows of one buffer (as a split's backward builds one gradient
    from three) is read as a view of that buffer: the empty buffer and the assign calls
    die. Windows of two buffers, or windows of one in another order (no strided view of
    it), stay copies."""
    x, y = x64(2, 6, 4), x64(2, 6, 4, seed=1)

    def one(x):
        a, b, c = x.transpose(1, 2).split(2, dim=2)  # windows of x, strided
        return sitp.cat([a, b, c], dim=2).exp()

    def reordered(x):
        a, b, c = x.transpose(1, 2).split(2, dim=2)
        return sitp.cat([c, a, b], dim=2).exp()

    def two(x, y):
        return sitp.cat([x[:, :3], y[:, 3:]], dim=1).exp()

    cases = ((one, (x,), False), (reordered, (x,), True), (two, (x, y), True))
    for fn, args, copies_left in cases:
        g, out = trace(fn, *args)
        assert any(n.fn == "assign" for n in g.nodes)
        passes.eliminate_dead(g)
        moved = passes.forward_copies(g)
        passes.eliminate_dead(g)
        assert any(n.fn == "assign" for n in g.nodes) == copies_left
        assert (moved > 0) != copies_left
        np.testing.assert_array_equal(run(g, *args), out.numpy())

    def back(x):  # the concatenation transposed back and made contiguous: x's own layout
        a, b, c = x.transpose(1, 2).split(2, dim=2)
        return sitp.cat([a, b, c], dim=2).transpose(1, 2).contiguous() * 2.0

    g, out = trace(back, x)
    assert [n.fn for n in g.nodes].count("copy") == 1
    passes.forward_copies(g)
    passes.eliminate_dead(g)
    assert [n.fn for n in g.nodes] == ["binary"] and g.nodes[0].args[1].value is g.inputs[0]
    np.testing.assert_array_equal(run(g, x), out.numpy())

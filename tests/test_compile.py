"""sitp.compile end to end (chapter 6): compiled programs against eager sitp (itself
tested against PyTorch), guards and recompiles, graph breaks, the joint backward."""

import warnings

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import sitp
import sitp.nn.functional as F
from sitp.compile import api


def t64(*shape, seed=0, requires_grad=False):
    a = np.random.default_rng(seed).standard_normal(shape)
    return sitp.tensor(a, requires_grad=requires_grad)


def gelu_block(x, w, b):
    h = x @ w + b
    return 0.5 * h * (1.0 + ((h + 0.044715 * h * h * h) * 0.7978845608028654).tanh())


def layer_norm_residual(x, r, g, b):
    y = x + r
    m = y.mean(-1, keepdim=True)
    v = ((y - m) * (y - m)).mean(-1, keepdim=True)
    return (y - m) * (v + 1e-5).rsqrt() * g + b


def test_pointwise_with_broadcasting_and_strided_inputs():
    def f(x, y, z):
        return (x * y - z).sigmoid() + x.abs().sqrt()

    cf = sitp.compile(f)
    base = t64(6, 8)
    for dtype, tol in ((sitp.float64, 0), (sitp.float32, 1e-6)):
        x = base.to(dtype).t()[::2]  # (4, 6), a transposed view with steps: strides (2, 8)
        y = t64(4, 1, seed=1).to(dtype)
        z = t64(6, seed=2).to(dtype)
        for _ in range(2):  # the trace, then the compiled program
            np.testing.assert_allclose(cf(x, y, z).numpy(), f(x, y, z).numpy(), rtol=tol, atol=tol)
    assert len(cf.entries) == 2 and cf.entries[0].report["kernels"] == 1


def test_gelu_block_and_layer_norm_match_eager_and_torch():
    x, w, b = t64(4, 8), t64(8, 6, seed=1), t64(6, seed=2)
    cg = sitp.compile(gelu_block)
    cg(x, w, b)
    out = cg(x, w, b).numpy()
    np.testing.assert_array_equal(out, gelu_block(x, w, b).numpy())
    ref = F.gelu(x @ w + b, approximate="tanh").numpy()
    np.testing.assert_allclose(out, ref, rtol=1e-12, atol=1e-12)
    assert cg.entries[0].report["kernels"] == 1  # bias add + 9 pointwise ops in one loop

    r, g, bb = t64(4, 6, seed=3), t64(6, seed=4), t64(6, seed=5)
    y = t64(4, 6, seed=6)
    cl = sitp.compile(layer_norm_residual)
    cl(y, r, g, bb)
    got = cl(y, r, g, bb).numpy()
    want = torch.nn.functional.layer_norm(
        torch.tensor(y.numpy() + r.numpy()), (6,), torch.tensor(g.numpy()), torch.tensor(bb.numpy())
    ).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


class MLP(sitp.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = sitp.nn.Linear(5, 7)
        self.fc2 = sitp.nn.Linear(7, 3)

    def forward(self, x):
        return self.fc2(self.fc1(x).tanh() * 2.0 - 1.0)


def test_mlp_forward_and_backward_compiled_equal_eager():
    sitp.manual_seed(0)
    model = MLP().double()

    def step(x, y):
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        return loss

    cs = sitp.compile(step)
    for seed in range(3):  # trace, then two compiled calls on new data
        x, y = t64(4, 5, seed=seed), t64(4, 3, seed=10 + seed)
        model.zero_grad(set_to_none=True)
        le = step(x, y)
        ge = [p.grad.numpy().copy() for p in model.parameters()]
        model.zero_grad(set_to_none=True)
        lc = cs(x, y)
        gc = [p.grad.numpy() for p in model.parameters()]
        assert abs(lc.item() - le.item()) < 1e-12
        for a, b in zip(ge, gc):
            np.testing.assert_allclose(b, a, rtol=1e-12, atol=1e-12)
    assert len(cs.entries) == 1


def test_closure_parameter_with_outputs_that_require_grad_runs_eagerly():
    w = t64(3, requires_grad=True)
    cf = sitp.compile(lambda x: (x * w).sum())
    out = cf(t64(3, seed=1))
    out.backward()
    assert w.grad is not None and "not an argument" in cf.entries[0].reason


def test_compiled_module_sees_parameter_updates():
    sitp.manual_seed(0)
    model = MLP()
    cm = sitp.compile(model)
    x = sitp.randn(4, 5)
    with sitp.no_grad():
        cm(x)
        with sitp.no_grad():
            model.fc1.weight.mul_(0.5)  # an optimizer's in-place update
        np.testing.assert_allclose(cm(x).numpy(), model(x).numpy(), rtol=1e-6, atol=1e-6)
    assert cm.fc1 is model.fc1  # attributes reach the module


def test_gpt_train_step_compiled_equals_eager():
    from sitp.models.gpt import GPT, GPTConfig

    sitp.manual_seed(0)
    cfg = GPTConfig(
        block_size=8, vocab_size=11, n_layer=1, n_head=2, n_embd=8, bias=True, dropout=0.0
    )
    model = GPT(cfg).double()
    rng = np.random.default_rng(0)
    # the compiled module: a forward graph and a backward graph, split from one trace;
    # backward() outside it runs the backward graph through one autograd Function
    cm = sitp.compile(model)
    for _ in range(2):
        x = sitp.tensor(rng.integers(0, 11, (2, 8)))
        y = sitp.tensor(rng.integers(0, 11, (2, 8)))
        got = []
        for fn in (model, cm):
            model.zero_grad(set_to_none=True)
            logits, loss = fn(x, y)
            (loss + 0.01 * logits.sum()).backward()
            grads = [p.grad.numpy().copy() for p in model.parameters()]
            got.append((logits.detach().numpy(), loss.item(), grads))
        (le, ll, ge), (lc, lcl, gc) = got
        np.testing.assert_allclose(lc, le, rtol=1e-6, atol=1e-9)
        assert abs(ll - lcl) < 1e-6
        for a, b in zip(ge, gc):
            np.testing.assert_allclose(b, a, rtol=1e-6, atol=1e-9)
    assert len(cm.entries) == 1 and cm.entries[0].report["saved"] > 0
    # the forward saves exactly what the backward graph reads after its passes
    joint = cm.entries[0].program
    made = {v.id for n in joint.fwd.graph.nodes for v in n.made()}
    read = {v.id for n in joint.bwd.graph.nodes for v in n.inputs()}
    read |= {r.value.id for r in joint.bwd.graph.output_refs()}
    assert joint.saved == read & made

    def step(x, y):
        _, loss = model(x, y)
        loss.backward()
        return loss

    cs = sitp.compile(step)
    for _ in range(3):
        x = sitp.tensor(rng.integers(0, 11, (2, 8)))
        y = sitp.tensor(rng.integers(0, 11, (2, 8)))
        model.zero_grad(set_to_none=True)
        le = step(x, y).item()
        ge = [p.grad.numpy().copy() for p in model.parameters()]
        model.zero_grad(set_to_none=True)
        lc = cs(x, y).item()
        assert abs(lc - le) < 1e-6
        for p, g in zip(model.parameters(), ge):
            np.testing.assert_allclose(p.grad.numpy(), g, rtol=1e-6, atol=1e-9)
    assert len(cs.entries) == 1 and cs.entries[0].program is not None


def test_a_step_that_zeroes_its_closures_grads_compiles_once_per_grad_state():
    """The leaf guard holds each closure parameter's ``.grad`` as the call found it: a
    step that zeroes the grads itself traces once with no grads and once with them, then
    runs its programs (it used to trace at every call, the grad being None only inside)."""
    sitp.manual_seed(0)
    fc = sitp.nn.Linear(4, 3).double()
    x = t64(5, 4)

    def step(accumulate):
        if not accumulate:
            fc.zero_grad(set_to_none=True)
        fc(x).square().sum().backward()
        return fc.weight.grad * 1.0

    cs = sitp.compile(step)
    fc.zero_grad(set_to_none=True)
    want = step(False).numpy().copy()
    fc.zero_grad(set_to_none=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the recompile limit's warning would fail here
        for _ in range(12):
            np.testing.assert_allclose(cs(False).numpy(), want, rtol=1e-12)
    assert len(cs.entries) == 2 and all(e.program is not None for e in cs.entries)
    assert [e.leaves[0][1][-1] for e in cs.entries] == [True, False]
    # a step that adds into the grads it finds is guarded apart, and accumulates
    for k in range(2, 5):
        np.testing.assert_allclose(cs(True).numpy(), k * want, rtol=1e-12)
    assert len(cs.entries) == 3


def test_new_shape_recompiles_and_the_cache_has_a_limit():
    # dynamic=False: else the second batch size makes one entry for all (test_compile_dynamic)
    cf = sitp.compile(lambda x: x * 2 + 1, fuse=False, dynamic=False)
    cf(t64(3))
    cf(t64(3, seed=1))
    assert len(cf.entries) == 1
    np.testing.assert_array_equal(cf(t64(4)).numpy(), (t64(4) * 2 + 1).numpy())
    assert len(cf.entries) == 2
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        for n in range(5, 5 + api.cache_size_limit):
            np.testing.assert_array_equal(cf(t64(n)).numpy(), (t64(n) * 2 + 1).numpy())
    assert len(cf.entries) == api.cache_size_limit
    assert any("the recompile limit" in str(m.message) for m in w)


def test_python_arguments_are_guarded_and_inputs_written_in_place():
    def f(x, scale):
        x.mul_(scale)  # writes the caller's tensor
        return x + 1

    cf = sitp.compile(f, fuse=False)
    for scale in (2.0, 2.0, 3.0):
        a, b = t64(4), t64(4)
        np.testing.assert_array_equal(cf(a, scale).numpy(), f(b, scale).numpy())
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert len(cf.entries) == 2  # one per value of scale


def test_graph_break_on_item_runs_eagerly_and_explains(capsys):
    def f(x):
        if x.sum().item() > 0:  # data-dependent control flow
            return x * 2
        return x * 3

    cf = sitp.compile(f, explain=True)
    pos, neg = sitp.ones(3), -sitp.ones(3)
    assert cf(pos).tolist() == [2.0, 2.0, 2.0]
    assert cf(neg).tolist() == [-3.0, -3.0, -3.0]  # same signature: eager, the right branch
    text = capsys.readouterr().out
    assert "graph break" in text and "item()" in text and "test_compile.py:" in text
    assert cf.breaks and cf.breaks[0].where.endswith(f":{f.__code__.co_firstlineno + 1}")
    assert "graph break" in api.explain(f, pos)


def test_embedding_indices_are_inputs_not_constants():
    w = t64(10, 4)
    cf = sitp.compile(lambda idx: w[idx].sum(-1))
    a, b = sitp.tensor([1, 2, 3]), sitp.tensor([7, 0, 9])
    cf(a)
    np.testing.assert_array_equal(cf(b).numpy(), w[b].sum(-1).numpy())


def test_bad_argument_is_a_clear_error():
    with pytest.raises(TypeError, match="function or an nn.Module"):
        sitp.compile(3)


_UNARY = {
    "tanh": lambda h: h.tanh(),
    "sigmoid": lambda h: h.sigmoid(),
    "neg": lambda h: -h,
    "abs": lambda h: h.abs(),
    "sin": lambda h: h.sin(),
    "exp": lambda h: h.tanh().exp(),  # bounded, so that a chain cannot overflow
}
_BINARY = ["add", "sub", "mul", "maximum"]


@st.composite
def programs(draw):
    """A random chain of pointwise ops on (3, 4) and a broadcast (4,) operand, maybe
    ending in a reduction over the last dim."""
    steps = draw(
        st.lists(
            st.tuples(st.sampled_from(sorted(_UNARY) + _BINARY), st.booleans()),
            min_size=1,
            max_size=5,
        )
    )
    red = draw(st.sampled_from([None, "sum", "amax", "mean"]))
    return steps, red


def _run_program(prog, x, b):
    steps, red = prog
    h = x
    for op, use_b in steps:
        if op in _UNARY:
            h = _UNARY[op](h)
        else:
            other = b if use_b else x
            h = sitp.maximum(h, other) if op == "maximum" else getattr(h, op)(other)
    return h if red is None else getattr(h, red)(-1)


@settings(max_examples=8, deadline=None, derandomize=True)
@given(programs())
def test_random_pointwise_programs(prog):
    x, b = t64(3, 4), t64(4, seed=1)
    cf = sitp.compile(lambda x, b: _run_program(prog, x, b))
    cf(x, b)
    x2 = t64(3, 4, seed=2)
    np.testing.assert_allclose(
        cf(x2, b).numpy(), _run_program(prog, x2, b).numpy(), rtol=1e-13, atol=1e-13
    )


def test_torch_compile_parameters():
    """torch.compile's keywords: disable returns the function, fullgraph turns a graph
    break into an error naming it, backend="eager" replays unfused, and the settings sitp
    does not have are refused by name."""

    def f(x):
        return (x * 2).exp()

    assert sitp.compile(f, disable=True) is f
    x = sitp.randn(5)
    np.testing.assert_allclose(
        sitp.compile(f, backend="eager", mode="max-autotune")(x).numpy(), f(x).numpy()
    )
    assert sitp.compile(f, backend="eager").fuse is False

    def breaks(x):
        return x * float(x.sum().item())

    with pytest.raises(RuntimeError, match="fullgraph=True.*item"):
        sitp.compile(breaks, fullgraph=True)(x)
    with pytest.raises(ValueError, match="dynamic must be"):
        sitp.compile(f, dynamic="batch")
    with pytest.raises(ValueError, match="backend 'tvm'"):
        sitp.compile(f, backend="tvm")
    with pytest.raises(ValueError, match="mode 'fast'"):
        sitp.compile(f, mode="fast")
    h = sitp.compile(f, recompile_limit=1, name="f")
    h(sitp.randn(2))
    with pytest.warns(UserWarning, match=r"\(f\): 1 signatures"):
        h(sitp.randn(3))
    assert len(h.entries) == 1
    with pytest.raises(NotImplementedError, match="shapes_spec"):
        sitp.compile(f, shapes_spec={})
    with pytest.raises(ValueError, match="epilogue_fusion"):
        sitp.compile(f, options={"epilogue_fusion": True})

    @sitp.compile(backend="eager")
    def g(x):
        return x + 1

    np.testing.assert_allclose(g(x).numpy(), (x + 1).numpy())

"""sitp.compile's lowering of fused layers (sitp/compile/lower.py) and the runtime's
release of dead buffers: compiled against eager sitp and PyTorch, forward and gradients."""

import numpy as np
import pytest
import torch

import sitp
import sitp.nn.functional as F
from sitp.bench import threads
from sitp.compile import codegen, lower, runtime
from sitp.models.gpt import GPT, GPTConfig

B, H, T, D = 2, 3, 8, 4
C = H * D


def _arr(shape, seed):
    return np.random.default_rng(seed).standard_normal(shape)


def _step_sdpa(q, k, v, go, causal):
    """Heads split from (B, T, H, D) leaves, as a GPT does: strided q, k, v and dO (each
    test then compiles the kernels for one layout, the GPT's)."""

    def step():
        o = F.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=causal
        )
        (o.transpose(1, 2) * go).sum().backward()
        return o

    return step


def _torch_sdpa(qa, ka, va, goa, causal):
    q, k, v = (torch.tensor(a, requires_grad=True) for a in (qa, ka, va))
    o = torch.nn.functional.scaled_dot_product_attention(
        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=causal
    )
    (o.transpose(1, 2) * torch.tensor(goa)).sum().backward()
    return o.detach().numpy(), [t.grad.numpy() for t in (q, k, v)]


@pytest.mark.parametrize(
    "causal, dtype", [(True, "float64"), (False, "float64"), (True, "float32")]
)
def test_lowered_attention_matches_eager_and_torch(causal, dtype):
    arrs = [_arr((B, T, H, D), s).astype(dtype) for s in range(4)]
    q, k, v = (sitp.tensor(a, requires_grad=True) for a in arrs[:3])
    go = sitp.tensor(arrs[3])
    step = _step_sdpa(q, k, v, go, causal)
    cs = sitp.compile(step)
    tol = 1e-12 if dtype == "float64" else 2e-5
    want_o, want_g = _torch_sdpa(*arrs, causal)
    for _ in range(3):  # the trace (eager's values), then the compiled program twice
        for t in (q, k, v):
            t.grad = None
        out = cs()
        np.testing.assert_allclose(out.detach().numpy(), want_o, rtol=tol, atol=tol)
        for t, w in zip((q, k, v), want_g):
            np.testing.assert_allclose(t.grad.numpy(), w, rtol=tol, atol=tol)
    assert cs.entries[0].report["lowered"] == 2  # the forward and the backward node
    for t in (q, k, v):
        t.grad = None
    eager = step()
    np.testing.assert_allclose(out.detach().numpy(), eager.detach().numpy(), rtol=tol, atol=tol)


def _gpt_attention(x, w):
    """The GPT's attention block: one qkv product, split into heads, causal attention."""
    qkv = x @ w  # (B, T, 3C)
    q, k, v = qkv.split(C, dim=2)
    q = q.view(B, T, H, D).transpose(1, 2)
    k = k.view(B, T, H, D).transpose(1, 2)
    v = v.view(B, T, H, D).transpose(1, 2)
    y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return y.transpose(1, 2).contiguous().view(B, T, C)


def test_split_heads_backward_writes_into_one_buffer():
    xa, wa, ga = _arr((B, T, C), 0), _arr((C, 3 * C), 1), _arr((B, T, C), 2)
    x, w = sitp.tensor(xa, requires_grad=True), sitp.tensor(wa, requires_grad=True)
    g = sitp.tensor(ga)

    def step():
        y = _gpt_attention(x, w)
        (y * g).sum().backward()
        return y

    cs = sitp.compile(step)
    tx, tw = torch.tensor(xa, requires_grad=True), torch.tensor(wa, requires_grad=True)
    qkv = tx @ tw
    tq, tk, tv = (t.view(B, T, H, D).transpose(1, 2) for t in qkv.split(C, dim=2))
    ty = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, is_causal=True)
    ty = ty.transpose(1, 2).contiguous().view(B, T, C)
    (ty * torch.tensor(ga)).sum().backward()
    for _ in range(3):
        x.grad = w.grad = None
        y = cs()
        np.testing.assert_allclose(y.detach().numpy(), ty.detach().numpy(), rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-11, atol=1e-11)
        np.testing.assert_allclose(w.grad.numpy(), tw.grad.numpy(), rtol=1e-11, atol=1e-11)
    # dQ, dK, dV land in the split's gradient buffer: no copies into it in the graph
    fns = [n.fn for n in cs.graph.nodes]
    assert "Attention.backward" in fns and "assign" not in fns and "empty" not in fns


def test_attention_that_does_not_fit_stays_opaque():
    """A mask, or broadcast keys, keeps eager's fused layer (and its values)."""
    arrs = [_arr(s, i) for i, s in enumerate([(B, H, T, D), (B, 1, T, D), (B, 1, T, D)])]
    mask = sitp.tensor(np.tril(np.ones((T, T), bool)))
    q, k, v = (sitp.tensor(a, requires_grad=True) for a in arrs)

    def step():
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        o.sum().backward()
        return o

    cs = sitp.compile(step)
    for _ in range(2):
        for t in (q, k, v):
            t.grad = None
        out = cs()
    assert cs.entries[0].report["lowered"] == 0
    grads = [t.grad.numpy() for t in (q, k, v)]
    for t in (q, k, v):
        t.grad = None
    np.testing.assert_allclose(
        out.detach().numpy(), step().detach().numpy(), rtol=1e-12, atol=1e-12
    )
    for t, w in zip((q, k, v), grads):
        np.testing.assert_allclose(t.grad.numpy(), w, rtol=1e-12, atol=1e-12)


def test_lowered_kernels_reject_nothing_silently_on_strided_views():
    """The kernels read q, k, v and write the gradients through any row-contiguous
    strides: views into one (B, T, 3, H, D) buffer give the same values as copies."""
    rng = np.random.default_rng(5)
    qkv = rng.standard_normal((B, T, 3, H, D))
    q, k, v = (qkv[:, :, i].transpose(0, 2, 1, 3) for i in range(3))
    qc, kc, vc = (np.ascontiguousarray(a) for a in (q, k, v))
    scale = 0.5
    out, p = np.empty((B, H, T, D)), np.empty((B, H, T, T))
    lower.forward(q, k, v, out, p, scale, True)
    s = np.einsum("bhid,bhjd->bhij", qc, kc) * scale
    s = np.where(np.tril(np.ones((T, T), bool)), s, -np.inf)
    pr = np.exp(s - s.max(-1, keepdims=True))
    pr /= pr.sum(-1, keepdims=True)
    np.testing.assert_allclose(p, pr, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(out, pr @ vc, rtol=1e-12, atol=1e-13)
    g = rng.standard_normal((B, T, H, D)).transpose(0, 2, 1, 3)
    grads = np.empty((B, T, 3, H, D))
    dq, dk, dv = (grads[:, :, i].transpose(0, 2, 1, 3) for i in range(3))
    lower.backward(q, k, v, p, g, dq, dk, dv, scale, True)
    dp = g @ vc.transpose(0, 1, 3, 2)
    ds = pr * (dp - (dp * pr).sum(-1, keepdims=True)) * scale
    np.testing.assert_allclose(dv, pr.transpose(0, 1, 3, 2) @ g, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(dq, ds @ kc, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(dk, ds.transpose(0, 1, 3, 2) @ qc, rtol=1e-12, atol=1e-13)


def test_runtime_releases_buffers_after_their_last_reader():
    x = sitp.tensor(_arr((4, 5), 0))
    w = sitp.tensor(_arr((5, 3), 1))

    def f(x, w):
        h = (x @ w).tanh()
        return (h @ w.t()).sum(-1)

    cf = sitp.compile(f)
    cf(x, w)
    got = cf(x, w)
    np.testing.assert_array_equal(got.numpy(), f(x, w).numpy())
    prog = cf.entries[0].program
    env = prog.run_env([x, w])
    made = {v.id for n in prog.graph.nodes for v in n.made()}
    live = prog.graph.live_values()
    assert made - live  # the graph has intermediates, and none of them is kept
    assert not (made - live) & set(env)
    drops = runtime.release_lists(prog.graph)
    assert sum(len(d) for d in drops) >= len(made - live)


def test_gpt_train_step_with_lowered_attention_matches_eager():
    sitp.manual_seed(0)
    cfg = GPTConfig(block_size=8, vocab_size=11, n_layer=2, n_head=2, n_embd=8, dropout=0.0)
    model = GPT(cfg).to(sitp.float64)
    rng = np.random.default_rng(0)
    x, y = (sitp.tensor(rng.integers(0, 11, (2, 8))) for _ in range(2))

    def step():
        _, loss = model(x, y)
        loss.backward()
        return loss

    cs = sitp.compile(step)
    for _ in range(2):
        model.zero_grad(set_to_none=True)
        got = cs().item()
    grads = [p.grad.numpy().copy() for p in model.parameters()]
    lowered = [n.fn for n in cs.entries[0].graph.nodes if n.lowered is not None]
    assert lowered.count("Attention.forward") == lowered.count("Attention.backward") == 2
    model.zero_grad(set_to_none=True)
    assert abs(step().item() - got) < 1e-12
    for p, g in zip(model.parameters(), grads):
        np.testing.assert_allclose(g, p.grad.numpy(), rtol=1e-10, atol=1e-12)


def test_parallel_kernel_has_a_serial_twin_for_one_thread():
    n = 1 << 16  # the index space from which codegen writes a prange
    x, y = sitp.tensor(_arr((n,), 0)), sitp.tensor(_arr((n,), 1))

    def f(x, y):
        return (x * y).tanh() + x

    cf = sitp.compile(f)
    cf(x, y)
    src = cf.entries[0].graph.nodes[0].kernel.source
    name = cf.entries[0].graph.nodes[0].kernel.name
    assert "prange(" in src and f"def {name}_serial(" in src
    assert codegen.load_serial(src, name) is not None
    want = f(x, y).numpy()
    with threads(1):
        np.testing.assert_array_equal(cf(x, y).numpy(), want)
    with threads(2):
        np.testing.assert_array_equal(cf(x, y).numpy(), want)


@pytest.mark.parametrize("double", [False, True])
def test_a_linear_on_rows_a_stride_apart_is_lowered_and_equals_eager(double):
    """An RNN's step reads its state as a time step's slice of the (batch, time, width)
    states, and its first state broadcast to the batch: both Linear calls become steps on
    arrays (lower._strided_rows), with eager's values and gradients."""
    sitp.manual_seed(0)
    lin = sitp.nn.Linear(6, 5)
    if double:
        lin = lin.double()
    dt = lin.weight.dtype
    xs = sitp.randn(4, 3, 6, dtype=dt, requires_grad=True)
    h0 = sitp.randn(6, dtype=dt, requires_grad=True)
    leaves = (lin.weight, lin.bias, xs, h0)

    def step():
        for p in leaves:
            p.grad = None
        a = lin(xs[:, 1])  # rows 18 entries apart
        b = lin(h0.expand(4, 6))  # one row, stride 0
        loss = (a * b).tanh().sum()
        loss.backward()
        return [loss.detach().numpy()] + [p.grad.numpy().copy() for p in leaves]

    want = step()
    cf = sitp.compile(step)
    for _ in range(2):  # the trace, then the program
        got = cf()
    fwd = [n for n in cf.entries[0].graph.nodes if n.fn == "Linear.forward"]
    assert len(fwd) == 2 and all(n.lowered is not None for n in fwd)
    tol = 1e-12 if double else 1e-5
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol)


def test_strided_rows_are_only_rows_inside_their_buffer():
    """What lower._strided_rows lets through: unit column stride, a row stride of at
    least the row's length (or 0), every entry inside the buffer."""
    from sitp.compile.graph import Ref, Value

    v = Value(1, 40, np.float32, "node")  # 40 entries
    fits = lambda shape, strides, offset=0: lower._strided_rows(  # noqa: E731
        Ref(v, shape, strides, offset, sitp.float32, sitp.Tensor)
    )
    assert fits((4, 6), (10, 1)) and fits((4, 6), (0, 1), 34)
    assert not fits((4, 6), (10, 2))  # columns apart
    assert not fits((4, 6), (5, 1))  # rows overlap
    assert not fits((4, 6), (10, 1), 5)  # the last row runs past the buffer
    assert not fits((2, 3, 6), (18, 6, 1))  # not a matrix

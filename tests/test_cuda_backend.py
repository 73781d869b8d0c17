"""Device tensors: every backend function on the GPU path against the CPU path.

Without a GPU these run in numba's CUDA simulator (one Python thread per GPU
thread), so sizes stay tiny; the same tests run on real hardware in gpu.yml.
"""

import numpy as np
import pytest
import torch

import sitp
import sitp.nn as nn
import sitp.nn.functional as F
from helpers import assert_close, host_device_copies
from test_ops import BINARY, TOL, UNARY, _binary_inputs, _domain, call, main_form

pytestmark = pytest.mark.skipif(
    not (sitp.cuda.is_available() or sitp.cuda.is_simulated()),
    reason="needs a GPU or NUMBA_ENABLE_CUDASIM=1",
)


def both(arr, requires_grad=False):
    c = sitp.tensor(arr, requires_grad=requires_grad)
    g = sitp.tensor(arr, device="cuda").detach().requires_grad_(requires_grad)
    return c, g


def same(g, c, rtol=1e-5, atol=1e-6):
    assert g.device == "cuda" or g.numel() == 0
    np.testing.assert_allclose(
        g.cpu().numpy() if not g.requires_grad else g.detach().cpu().numpy(),
        c.detach().numpy(),
        rtol=rtol,
        atol=atol,
    )


def _x(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def test_round_trip_and_metadata():
    a = _x(2, 3)
    g = sitp.tensor(a, device="cuda")
    assert g.device == "cuda" and g.is_cuda and g.shape == (2, 3)
    np.testing.assert_array_equal(g.cpu().numpy(), a)
    np.testing.assert_array_equal(g.T.cpu().numpy(), a.T)
    assert g[1, 2].item() == a[1, 2]
    assert g.tolist() == a.tolist()
    with pytest.raises(TypeError, match="cpu()"):
        g.numpy()
    assert "device" not in repr(sitp.zeros(1)) and sitp.zeros(2, device="cuda").device == "cuda"


def test_elementwise_broadcast_views_and_scalars():
    a, b = _x(3, 4), _x(4, seed=1)
    ca, ga = both(a)
    cb, gb = both(b)
    same(ga + gb, ca + cb)
    same(ga.T * 2.5 - 1, ca.T * 2.5 - 1)
    same((ga / (gb.abs() + 1)).exp().tanh(), (ca / (cb.abs() + 1)).exp().tanh())
    same((ga > 0).float(), (ca > 0).float())
    same(sitp.where(ga > 0, ga, gb), sitp.where(ca > 0, ca, cb))
    same(
        ga.masked_fill(ga < 0, float("-inf")).softmax(-1),
        ca.masked_fill(ca < 0, float("-inf")).softmax(-1),
    )
    same(ga[1:, ::2], ca[1:, ::2])
    same(ga[sitp.tensor([2, 0, 2])], ca[sitp.tensor([2, 0, 2])])


def test_reductions_softmax_matmul_gather():
    a = _x(3, 5)
    ca, ga = both(a)
    same(ga.sum(), ca.sum())
    same(ga.sum(0), ca.sum(0))
    same(ga.mean(1, keepdim=True), ca.mean(1, keepdim=True))
    same(ga.max(1).values, ca.max(1).values)
    assert ga.argmax(1).cpu().tolist() == ca.argmax(1).tolist()
    same(ga.log_softmax(0), ca.log_softmax(0))
    same(ga @ ga.T, ca @ ca.T, rtol=1e-5, atol=1e-5)
    idx = sitp.tensor([[0, 4], [1, 1], [3, 2]])
    same(ga.gather(1, idx.cuda()), ca.gather(1, idx))
    same(ga.tril(), ca.tril())
    same(sitp.cat([ga, ga[:1]]), sitp.cat([ca, ca[:1]]))


def test_autograd_on_device_matches_cpu():
    a, w = _x(4, 3), _x(3, 2, seed=2)
    ca, ga = both(a, requires_grad=True)
    cw, gw = both(w, requires_grad=True)
    target = sitp.tensor([1, 0, 1, 1])
    # tanh's and sigmoid's gradients are one binary op each (tanh_backward,
    # sigmoid_backward); stack is one node whose backward hands out views
    lc = F.cross_entropy(sitp.stack([(ca @ cw).tanh(), (ca @ cw).sigmoid()], 0).sum(0) * 3, target)
    lg = F.cross_entropy(
        sitp.stack([(ga @ gw).tanh(), (ga @ gw).sigmoid()], 0).sum(0) * 3, target.cuda()
    )
    same(lg, lc)
    lc.backward()
    lg.backward()
    assert gw.grad.device == "cuda"
    same(gw.grad, cw.grad, rtol=1e-4, atol=1e-6)
    same(ga.grad, ca.grad, rtol=1e-4, atol=1e-6)


def test_module_and_optimizer_on_device():
    sitp.manual_seed(0)
    m = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))
    m_gpu = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))
    m_gpu.load_state_dict(m.state_dict())
    m_gpu.to("cuda")
    assert all(p.device == "cuda" for p in m_gpu.parameters())
    opt_c = sitp.optim.AdamW(m.parameters(), lr=0.1)
    opt_g = sitp.optim.AdamW(m_gpu.parameters(), lr=0.1)
    x = _x(5, 3)
    for _ in range(2):
        for model, opt, xx in (
            (m, opt_c, sitp.tensor(x)),
            (m_gpu, opt_g, sitp.tensor(x, device="cuda")),
        ):
            loss = (model(xx) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    for (n, pc), pg in zip(m.named_parameters(), m_gpu.parameters()):
        same(pg, pc, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("opt_class, wd", [("AdamW", 0.1), ("Adam", 0.05), ("Adam", 0.0)])
def test_adam_on_device_is_one_launch_per_parameter_and_matches_the_cpu(monkeypatch, opt_class, wd):
    """The one-pass CUDA kernel (kernels/cuda/fused.py) takes every contiguous parameter,
    and three steps land where the CPU's one-pass kernel lands."""
    from sitp.kernels.cuda import fused

    calls = []
    real = fused.adam_update
    monkeypatch.setattr(fused, "adam_update", lambda *a: calls.append(a[0].size) or real(*a))
    shapes = [(4, 3), (3,), (2, 5)]
    cpu = [sitp.tensor(_x(*s, seed=i), requires_grad=True) for i, s in enumerate(shapes)]
    gpu = [
        sitp.tensor(_x(*s, seed=i), device="cuda").requires_grad_(True)
        for i, s in enumerate(shapes)
    ]
    opts = [getattr(sitp.optim, opt_class)(ps, lr=0.05, weight_decay=wd) for ps in (cpu, gpu)]
    for step in range(3):
        for ps, opt in zip((cpu, gpu), opts):
            for i, p in enumerate(ps):
                g = _x(*p.shape, seed=10 * step + i)
                p.grad = sitp.tensor(g, device=p.device)
            opt.step()
    assert calls == [12, 3, 10] * 3
    for pg, pc in zip(gpu, cpu):
        same(pg, pc, rtol=1e-6, atol=1e-7)
    for pg, pc in zip(gpu, cpu):
        for key in ("exp_avg", "exp_avg_sq"):
            same(opts[1].state[pg][key], opts[0].state[pc][key], rtol=1e-6, atol=1e-7)


def test_mixing_devices_is_a_clear_error():
    with pytest.raises(RuntimeError, match="same device.*cuda and cpu"):
        sitp.ones(2, device="cuda") + sitp.ones(2)
    with pytest.raises(RuntimeError, match="same device"):
        sitp.ones(2, 2, device="cuda") @ sitp.ones(2, 2)
    # Python scalars and 0-d CPU tensors are fine, as in PyTorch
    assert (sitp.ones(2, device="cuda") * sitp.tensor(3.0)).cpu().tolist() == [3.0, 3.0]


def test_attention_layer_norm_dropout_on_device():
    q, k, v = _x(1, 2, 5, 4), _x(1, 2, 5, 4, seed=1), _x(1, 2, 5, 4, seed=2)
    cq, gq = both(q, requires_grad=True)
    ck, gk = both(k)
    cv, gv = both(v)
    oc = F.scaled_dot_product_attention(cq, ck, cv, is_causal=True)
    og = F.scaled_dot_product_attention(gq, gk, gv, is_causal=True)
    same(og, oc, rtol=1e-5, atol=1e-6)
    oc.sum().backward()
    og.sum().backward()
    same(gq.grad, cq.grad, rtol=1e-4, atol=1e-6)
    ln_c, ln_g = nn.LayerNorm(4), nn.LayerNorm(4).to("cuda")
    same(ln_g(gk), ln_c(ck), rtol=1e-5, atol=1e-5)
    d = F.dropout(sitp.ones(50, device="cuda"), 0.5)
    assert d.device == "cuda" and set(d.cpu().tolist()) <= {0.0, 2.0}


def test_bad_gpu_index_surfaces_at_the_next_sync():
    g = sitp.zeros(3, 2, device="cuda")
    out = g[sitp.tensor([0, 5], device="cuda")]  # no host round trip here...
    with pytest.raises(IndexError, match="out of range"):
        out.cpu()  # ...the error comes with the data
    assert g[sitp.tensor([2], device="cuda")].cpu().shape == (1, 2)  # the flag was reset
    with pytest.raises(IndexError, match="out of range"):
        g.gather(1, sitp.tensor([[3, 0]], device="cuda")).sum().item()


def test_training_step_does_not_copy_between_host_and_device(monkeypatch):
    """After a warm-up step, a step of an MLP language model on the GPU moves no data
    between host and device: the batch, the weights, the gradients and the optimizer
    state stay there (the loss is not read back inside the step)."""

    sitp.manual_seed(0)
    model = nn.Sequential(nn.Embedding(11, 4), nn.Flatten(), nn.Linear(12, 11)).to("cuda")
    opt = sitp.optim.AdamW(model.parameters(), lr=0.01)
    X = sitp.randint(0, 11, (6, 3), device="cuda")
    Y = sitp.randint(0, 11, (6,), device="cuda")

    def step():
        loss = F.cross_entropy(model(X), Y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss

    step()  # warm-up: constants and gather plans are made once
    copies = host_device_copies(monkeypatch, type(X._storage))
    loss = step()
    assert copies == []
    monkeypatch.undo()
    assert loss.item() > 0


@pytest.mark.parametrize(
    "plan", [("shared", {"BS": 4}), ("doublebuffer", dict(BM=16, BN=16, BK=4, TM=4, TN=4))]
)
def test_matmul_on_the_gemm_ladder_folds_batches_and_matches_the_cpu(monkeypatch, plan):
    """The backend's path to the GEMM ladder (section 4.4), forced with tilings the
    simulator runs quickly: a Linear-style product whose batch folds into M, a batch of
    products (one launch each), a transposed weight, sizes off every tile edge."""
    from sitp.kernels.cuda import ops as cuda_ops

    asked = []
    monkeypatch.setattr(cuda_ops, "gemm_plan", lambda M, N, K: asked.append((M, N, K)) or plan)
    cases = [
        ((2, 3, 7), (7, 5)),  # folds: one (6, 7) @ (7, 5)
        ((2, 5, 6), (2, 6, 3)),  # a batch of two products
        ((1, 5, 6), (3, 6)),  # b given transposed (a view), below
    ]
    for i, (sa, sb) in enumerate(cases):
        a = _x(*sa, seed=i)
        b = _x(*sb, seed=10 + i)
        if i == 2:
            b = np.ascontiguousarray(b).T  # (6, 3), strided
        ca, ga = both(a, True)
        cb, gb = both(b, True)
        same(ga @ gb, ca @ cb, rtol=1e-5, atol=1e-5)
        g = _x(*(ca @ cb).shape, seed=20 + i)
        (ca @ cb).backward(sitp.tensor(g))
        (ga @ gb).backward(sitp.tensor(g, device="cuda"))
        same(ga.grad, ca.grad, rtol=1e-5, atol=1e-5)
        same(gb.grad, cb.grad, rtol=1e-5, atol=1e-5)
    assert (6, 5, 7) in asked and (5, 3, 6) in asked  # the fold, and one of the batch
    # float64 never takes the ladder (its kernels are float32)
    asked.clear()
    x64 = sitp.tensor(_x(3, 4).astype(np.float64), device="cuda")
    same(x64 @ x64.T, sitp.tensor(_x(3, 4).astype(np.float64)) @ sitp.tensor(_x(3, 4)).double().T)
    assert asked == []


@pytest.mark.gpu
def test_matmul_at_gpt_sizes_takes_the_ladder_and_matches_torch():
    """Real hardware only: the products of nanoGPT's Shakespeare recipe (64 x 256 tokens,
    width 384), off-tile by one, through the backend's ladder path, against torch."""
    from sitp.kernels.cuda import ops as cuda_ops

    for sa, sb in (
        ((64, 255, 385), (385, 1153)),
        ((16319, 385), (385, 1537)),
        ((2, 4, 255, 64), (2, 4, 64, 255)),
    ):
        assert cuda_ops.gemm_plan(int(np.prod(sa[:-1])) if len(sb) == 2 else sa[-2], sb[-1], sa[-1])
        a, b = _x(*sa, seed=1), _x(*sb, seed=2)
        got = (sitp.tensor(a, device="cuda") @ sitp.tensor(b, device="cuda")).cpu().numpy()
        want = (torch.tensor(a, dtype=torch.float64) @ torch.tensor(b, dtype=torch.float64)).numpy()
        np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3)


@pytest.mark.gpu
def test_gpt_trains_on_a_real_gpu_like_on_the_cpu():
    """Real hardware only: the GPT of chapter 3.5 at batch 32 x block 32, five AdamW steps
    on the GPU and on the CPU from the same weights, same losses."""
    from sitp.models.gpt import GPT, GPTConfig

    cfg = GPTConfig(vocab_size=27, block_size=32, n_layer=4, n_head=4, n_embd=64)
    sitp.manual_seed(0)
    cpu_model = GPT(cfg)
    gpu_model = GPT(cfg)
    gpu_model.load_state_dict(cpu_model.state_dict())
    gpu_model.to("cuda")
    X = sitp.randint(0, 27, (32, 32))
    Y = sitp.randint(0, 27, (32, 32))
    losses = {}
    for name, model, (x, y) in (
        ("cpu", cpu_model, (X, Y)),
        ("gpu", gpu_model, (X.cuda(), Y.cuda())),
    ):
        opt = sitp.optim.AdamW(model.parameters(), lr=1e-3)
        losses[name] = []
        for _ in range(5):
            _, loss = model(x, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses[name].append(loss.item())
    np.testing.assert_allclose(losses["gpu"], losses["cpu"], rtol=1e-4)


# ------------------------------------------- every elementwise op of test_ops' tables
def _on_device_like_torch(row, arrays, g):
    """A row on the device (main form), forward and backward, against torch on the CPU."""
    leaves = [sitp.tensor(a, device="cuda").requires_grad_(True) for a in arrays]
    t_leaves = [torch.tensor(a, requires_grad=True) for a in arrays]
    y = call(sitp, row, main_form(row), *leaves)
    yt = call(torch, row, main_form(row), *t_leaves)
    assert y.device == "cuda" and y.dtype.np == yt.detach().numpy().dtype
    tol = TOL[arrays[0].dtype.type]
    assert_close(y.cpu(), yt, **tol)
    y.backward(sitp.tensor(g, device="cuda"))
    yt.backward(torch.tensor(g))
    for x, t in zip(leaves, t_leaves):
        assert x.grad.device == "cuda"
        assert_close(x.grad.cpu(), t.grad, **tol)


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_ops_on_the_device_like_torch(name):
    """Each row of test_ops.UNARY on three entries (the simulator is slow), in both dtypes."""
    row = UNARY[name]
    for dtype in (np.float32, np.float64):
        x = _domain(np.array([-1.3, 0.4, 1.7], dtype), row.domain)
        _on_device_like_torch(row, [x], np.array([0.5, -1.0, 2.0], dtype))


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_ops_on_the_device_like_torch(name):
    """Each row of test_ops.BINARY, with b broadcast along a's first dim."""
    row = BINARY[name]
    for dtype in (np.float32, np.float64):
        a, b = _binary_inputs([(1, 3), (3,)], 5, row.domain, dtype)
        _on_device_like_torch(row, [a, b], np.array([[0.5, -1.0, 2.0]], dtype))


def test_numpy_without_row_stack_is_a_clear_error_before_any_kernel(monkeypatch):
    """numba-cuda 0.30.4 fails at its first compile on NumPy 2.5 (np.row_stack is gone):
    on a real GPU, sitp says so and names the fix instead."""
    import numba_cuda
    from numba import config

    from sitp.kernels.cuda import launch

    monkeypatch.delattr(np, "row_stack", raising=False)
    monkeypatch.setattr(config, "ENABLE_CUDASIM", 0)
    monkeypatch.setattr(numba_cuda, "__version__", "0.30.4")
    with pytest.raises(ImportError, match=r"numpy<2\.5"):
        launch._check_numpy()
    monkeypatch.setattr(numba_cuda, "__version__", "0.31.0")  # a release that may fix it
    launch._check_numpy()


def test_reducing_leading_dims_reads_columns_in_place_and_matches_the_row_path(monkeypatch):
    """A contiguous tensor reduced over its leading dims (a bias's gradient) goes to
    reduce_cols_k, one launch and no transposed copy; it gives the bits of the row path
    (the same entries in the same order, the same float64 accumulator) for every op."""
    from sitp.kernels.cuda import ops as cuda_ops

    x_np = _x(3, 5, 7)
    x_np[1, 2, 3] = 0.0  # for all()
    x = sitp.tensor(x_np, device="cuda")
    launched = []
    for name in ("reduce_cols_k", "reduce_rows_k", "assign_k"):
        real = getattr(cuda_ops, name)
        monkeypatch.setattr(
            cuda_ops,
            name,
            type(
                "K", (), {"__getitem__": lambda s, c, n=name, k=real: launched.append(n) or k[c]}
            )(),
        )
    got = x.sum((0, 1))
    assert launched == ["reduce_cols_k"]  # no copy before, no dtype conversion after
    monkeypatch.undo()
    xt = x.permute(2, 0, 1).contiguous()  # the same columns as rows: the row path
    assert got.cpu().numpy().tobytes() == xt.sum((1, 2)).cpu().numpy().tobytes()
    x2, x2_cpu = x.reshape(15, 7), sitp.tensor(x_np).reshape(15, 7)
    for name in ("sum", "prod", "amax", "amin", "mean"):
        cols = getattr(x2, name)(0)
        rows = getattr(x2.t().contiguous(), name)(1)
        assert cols.cpu().numpy().tobytes() == rows.cpu().numpy().tobytes(), name
        same(cols, getattr(x2_cpu, name)(0), rtol=1e-5, atol=1e-6)
    b = sitp.tensor(x_np != 0, device="cuda")
    same(b.all(0), sitp.tensor(x_np != 0).all(0))
    same(b.any(0), sitp.tensor(x_np != 0).any(0))
    same(x.sum(0, keepdim=True), sitp.tensor(x_np).sum(0, keepdim=True), rtol=1e-6, atol=1e-6)

"""sitp.nn modules against torch.nn with the same weights; Module bookkeeping."""

import math

import numpy as np
import pytest
import torch

import sitp
import sitp.nn as nn
from helpers import assert_close


def copy_weights(src_torch: torch.nn.Module, dst: nn.Module):
    """Load a torch module's weights into the sitp module with the same names."""
    sd = {k: sitp.tensor(v.detach().numpy()) for k, v in src_torch.state_dict().items()}
    dst.load_state_dict(sd)


def run_both(sm, tm, x_np, *, grads=True, rtol=1e-5, atol=1e-6):
    copy_weights(tm, sm)
    xs = sitp.tensor(x_np, requires_grad=x_np.dtype.kind == "f")
    xt = torch.tensor(x_np, requires_grad=x_np.dtype.kind == "f")
    ys, yt = sm(xs), tm(xt)
    assert_close(ys, yt, rtol=rtol, atol=atol)
    if grads:
        g = np.random.default_rng(0).standard_normal(tuple(yt.shape)).astype(np.float32)
        ys.backward(sitp.tensor(g))
        yt.backward(torch.tensor(g))
        if x_np.dtype.kind == "f":
            assert_close(xs.grad, xt.grad, rtol=rtol, atol=atol)
        tp = dict(tm.named_parameters())
        for name, p in sm.named_parameters():
            assert_close(p.grad, tp[name].grad, rtol=rtol, atol=atol)
    return ys, yt


def _x(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize(
    "make",
    [
        lambda lib: lib.nn.Linear(7, 5),
        lambda lib: lib.nn.Linear(7, 5, bias=False),
        lambda lib: lib.nn.Sequential(lib.nn.Linear(7, 9), lib.nn.Tanh(), lib.nn.Linear(9, 3)),
        lambda lib: lib.nn.Sequential(lib.nn.Linear(7, 9), lib.nn.ReLU(), lib.nn.Sigmoid()),
        lambda lib: lib.nn.Sequential(
            lib.nn.Linear(7, 8), lib.nn.GELU(), lib.nn.GELU(approximate="tanh")
        ),
        lambda lib: lib.nn.LayerNorm(7),
        lambda lib: lib.nn.Sequential(lib.nn.Linear(7, 4), lib.nn.Softmax(dim=-1)),
    ],
)
def test_layers_match_torch(make):
    run_both(make(sitp), make(torch), _x(6, 3, 7))


def test_embedding_matches_torch_and_scatter_adds():
    se, te = nn.Embedding(11, 4), torch.nn.Embedding(11, 4)
    idx = np.array([[1, 3, 3], [10, 1, 0]])
    run_both(se, te, idx)


def test_batchnorm1d_train_and_eval_match_torch():
    for shape in [(8, 5), (4, 5, 3)]:
        sb, tb = nn.BatchNorm1d(5), torch.nn.BatchNorm1d(5)
        x = _x(*shape) * 3 + 1
        run_both(sb, tb, x)
        run_both(sb, tb, x * 0.5)
        assert_close(sb.running_mean, tb.running_mean)
        assert_close(sb.running_var, tb.running_var)
        sb.eval()
        tb.eval()
        assert_close(sb(sitp.tensor(x)), tb(torch.tensor(x)), rtol=1e-5, atol=1e-5)


def test_conv1d_matches_torch():
    for kw in [dict(), dict(padding=2), dict(dilation=2), dict(stride=2, padding=1)]:
        sc, tc = nn.Conv1d(3, 4, 3, **kw), torch.nn.Conv1d(3, 4, 3, **kw)
        run_both(sc, tc, _x(2, 3, 9), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("cell", ["RNNCell", "GRUCell"])
def test_recurrent_cells_match_torch(cell):
    sc, tc = getattr(nn, cell)(5, 6), getattr(torch.nn, cell)(5, 6)
    copy_weights(tc, sc)
    x = _x(4, 3, 5)
    hs, ht = None, None
    xs = sitp.tensor(x, requires_grad=True)
    xt = torch.tensor(x, requires_grad=True)
    for t in range(3):
        hs = sc(xs[:, t], hs)
        ht = tc(xt[:, t], ht)
    assert_close(hs, ht, rtol=1e-5, atol=1e-6)
    hs.sum().backward()
    ht.sum().backward()
    assert_close(xs.grad, xt.grad, rtol=1e-5, atol=1e-6)
    for name, p in sc.named_parameters():
        assert_close(p.grad, dict(tc.named_parameters())[name].grad, rtol=1e-5, atol=1e-6)


def test_dropout_train_eval():
    d = nn.Dropout(0.25)
    x = sitp.ones(10000)
    y = d(x)
    kept = (y != 0).float().mean().item()
    assert abs(kept - 0.75) < 0.03 and abs(y.max().item() - 1 / 0.75) < 1e-6
    d.eval()
    assert d(x).equal(x)
    with pytest.raises(ValueError, match="between 0 and 1"):
        nn.Dropout(1.5)


def test_default_init_statistics_like_torch():
    sitp.manual_seed(0)
    lin = nn.Linear(400, 300)
    bound = 1 / 400**0.5
    w = lin.weight.detach().numpy()
    assert w.min() >= -bound and w.max() <= bound and abs(w.std() - bound / 3**0.5) < 1e-3
    e = nn.Embedding(1000, 64).weight.detach().numpy()
    assert abs(e.std() - 1) < 0.02


class Tied(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(10, 4)
        self.head = nn.Linear(4, 10, bias=False)
        self.head.weight = self.emb.weight  # weight tying
        self.blocks = nn.ModuleList([nn.Linear(4, 4) for _ in range(2)])
        self.register_buffer("mask", sitp.ones(3, 3).tril())

    def forward(self, idx):
        x = self.emb(idx)
        for b in self.blocks:
            x = b(x).tanh()
        return self.head(x)


def test_module_bookkeeping_and_tied_weights():
    m = Tied()
    names = [n for n, _ in m.named_parameters()]
    assert names == [
        "emb.weight",
        "blocks.0.weight",
        "blocks.0.bias",
        "blocks.1.weight",
        "blocks.1.bias",
    ]
    assert sum(p.numel() for p in m.parameters()) == 40 + 2 * 20
    sd = m.state_dict()
    assert "head.weight" in sd and "mask" in sd
    assert [n for n, _ in m.named_children()] == ["emb", "head", "blocks"]
    assert len(list(m.modules())) == 6
    out = m(sitp.tensor([[1, 2, 3]]))
    out.sum().backward()
    assert m.emb.weight.grad is m.head.weight.grad
    m.zero_grad()
    assert m.emb.weight.grad is None
    m.eval()
    assert not m.blocks[1].training
    assert "Linear(in_features=4, out_features=4, bias=True)" in repr(m)


def test_state_dict_round_trip_and_strict_errors():
    a, b = Tied(), Tied()
    b.load_state_dict(a.state_dict())
    assert b.head.weight.equal(a.emb.weight) and b.head.weight is b.emb.weight
    sd = a.state_dict()
    sd["extra"] = sitp.zeros(1)
    del sd["blocks.0.bias"]
    with pytest.raises(RuntimeError, match=r'Missing key\(s\) in state_dict: "blocks.0.bias"') as e:
        b.load_state_dict(sd)
    assert 'Unexpected key(s) in state_dict: "extra"' in str(e.value)
    res = b.load_state_dict(sd, strict=False)
    assert res.missing_keys == ["blocks.0.bias"] and res.unexpected_keys == ["extra"]
    sd = a.state_dict()
    sd["blocks.0.weight"] = sitp.zeros(3, 3)
    with pytest.raises(RuntimeError, match="size mismatch for blocks.0.weight"):
        b.load_state_dict(sd)


def test_state_dict_loads_into_torch_and_back():
    s = nn.Sequential(nn.Linear(3, 4), nn.LayerNorm(4))
    t = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.LayerNorm(4))
    t.load_state_dict({k: torch.tensor(v.numpy()) for k, v in s.state_dict().items()})
    x = _x(2, 3)
    assert_close(s(sitp.tensor(x)), t(torch.tensor(x)), rtol=1e-5, atol=1e-6)


def test_clip_grad_norm_matches_torch():
    s, t = nn.Linear(4, 3), torch.nn.Linear(4, 3)
    copy_weights(t, s)
    x = _x(5, 4) * 10
    (s(sitp.tensor(x)) ** 2).sum().backward()
    (t(torch.tensor(x)) ** 2).sum().backward()
    ns = nn.utils.clip_grad_norm_(s.parameters(), 1.0)
    nt = torch.nn.utils.clip_grad_norm_(t.parameters(), 1.0)
    assert abs(ns.item() - nt.item()) / nt.item() < 1e-5
    assert_close(s.weight.grad, t.weight.grad, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("norm_type", [2.0, 1.0, 3.0, float("inf")])
def test_clip_grad_norm_of_many_gradients_matches_torch(norm_type):
    """The fused 2-norm (one float64 pass per gradient) and the op path for other norms,
    on gradients of odd sizes, one of them not contiguous and one float64, against torch."""
    rng = np.random.default_rng(7)
    arrays = [rng.standard_normal(n).astype(np.float32) for n in (1, 7, 1031, 40_000)]
    arrays.append(rng.standard_normal(33))  # float64
    sp = [sitp.tensor(a, requires_grad=True) for a in arrays]
    tp = [torch.tensor(a, requires_grad=True) for a in arrays]
    for p, a in zip(sp, arrays):
        p.grad = sitp.tensor(a * 3)
    sp[2].grad = sitp.tensor(np.repeat(arrays[2] * 3, 2)).view(-1, 2)[:, 0]  # a strided view
    for p, a in zip(tp, arrays):
        p.grad = torch.tensor(a * 3)
    ns = nn.utils.clip_grad_norm_(sp, 0.5, norm_type=norm_type)
    nt = torch.nn.utils.clip_grad_norm_(tp, 0.5, norm_type=norm_type)
    assert abs(ns.item() - nt.item()) <= 1e-5 * nt.item()
    for p, q in zip(sp, tp):
        assert_close(p.grad, q.grad, rtol=1e-5, atol=1e-7)


def test_clip_grad_norm_reports_a_nan_gradient():
    p = sitp.tensor([1.0, 2.0], requires_grad=True)
    p.grad = sitp.tensor([float("nan"), 1.0])
    assert math.isnan(nn.utils.clip_grad_norm_([p], 1.0).item())
    with pytest.raises(RuntimeError, match="non-finite"):
        nn.utils.clip_grad_norm_([p], 1.0, error_if_nonfinite=True)


def test_dataloader_batches_and_seeded_shuffle():
    X = sitp.arange(10).view(10, 1)
    Y = sitp.arange(10) * 2
    ds = sitp.utils.data.TensorDataset(X, Y)
    assert len(ds) == 10 and ds[3][1].item() == 6
    dl = sitp.utils.data.DataLoader(ds, batch_size=4)
    batches = list(dl)
    assert len(dl) == 3 and [b[0].shape[0] for b in batches] == [4, 4, 2]
    g1 = sitp.Generator().manual_seed(1)
    g2 = sitp.Generator().manual_seed(1)
    o1 = [b[1].tolist() for b in sitp.utils.data.DataLoader(ds, 3, shuffle=True, generator=g1)]
    o2 = [b[1].tolist() for b in sitp.utils.data.DataLoader(ds, 3, shuffle=True, generator=g2)]
    assert o1 == o2 and sorted(sum(o1, [])) == list(range(0, 20, 2))
    assert len(list(sitp.utils.data.DataLoader(ds, 4, drop_last=True))) == 2
    with pytest.raises(ValueError, match="Size mismatch"):
        sitp.utils.data.TensorDataset(X, Y[:3])


def test_module_errors():
    class Bad(nn.Module):
        def __init__(self):
            self.x = nn.Linear(1, 1)

    with pytest.raises(AttributeError, match="super"):
        Bad()
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        nn.Linear(1, 1).nope
    with pytest.raises(ValueError, match="expected input of shape"):
        nn.BatchNorm1d(3)(sitp.zeros(4, 2))


def test_reassigned_parameter_and_module_keep_their_place():
    """Assigning a new Parameter (or module) to an existing name replaces it where it
    stands, as in torch: the state dict's order does not change."""
    torch = pytest.importorskip("torch")
    import sitp

    for lib in (sitp, torch):
        lin = lib.nn.Linear(2, 3)
        lin.weight = lib.nn.Parameter(lib.zeros(3, 2))
        seq = lib.nn.Sequential(lib.nn.Linear(2, 2), lib.nn.Tanh())
        seq[0] = lib.nn.Linear(2, 2)
        seq.register_module("0", lib.nn.Linear(2, 2))
        assert list(lin.state_dict()) == ["weight", "bias"]
        assert [k.split(".")[0] for k in seq.state_dict()] == ["0", "0"]
        assert list(dict(seq.named_children())) == ["0", "1"]


def test_sequential_item_assignment_and_deletion_like_torch():
    torch = pytest.importorskip("torch")
    import sitp

    names = []
    for lib in (sitp, torch):
        seq = lib.nn.Sequential(lib.nn.Linear(2, 2), lib.nn.Tanh(), lib.nn.Linear(2, 3))
        seq[-1] = lib.nn.Linear(2, 4)
        del seq[0]
        names.append((list(dict(seq.named_children())), list(seq.state_dict()), len(seq)))
        with pytest.raises(IndexError):
            seq[5] = lib.nn.Tanh()
    assert names[0] == names[1]

"""nn.RNN, nn.LSTM, nn.GRU, nn.LSTMCell and nn.utils.rnn against torch.

Each module is built in torch, its state dict copied into sitp's, and the two compared:
outputs, final states, and the gradients of every parameter and of the input after the
backward of a random linear functional of everything the module returns.
"""

import numpy as np
import pytest
import torch

import sitp
from sitp import nn
from sitp.nn.utils import rnn as srnn

T, B, I, H = 5, 3, 4, 7


def _s(a, requires_grad=False):
    """A sitp tensor with the values of torch tensor or numpy array ``a``."""
    a = a.detach().numpy() if isinstance(a, torch.Tensor) else a
    return sitp.tensor(np.ascontiguousarray(a), requires_grad=requires_grad)


def _copy(t_mod, s_mod):
    s_mod.load_state_dict({k: _s(v) for k, v in t_mod.state_dict().items()})


def _flat(out):
    """The tensors a recurrent module returns, in order."""
    if isinstance(out, (tuple, list)):
        return [t for o in out for t in _flat(o)]
    if hasattr(out, "batch_sizes"):  # a PackedSequence: its data
        return [out.data]
    return [out]


def _compare(t_mod, s_mod, x, hx=None, tol=1e-10, packed=None):
    """Forward both modules on x (and hx), backward a random linear functional of the
    outputs, compare values and gradients. ``packed`` packs x (T, B, *) with those lengths."""
    tx = torch.tensor(x, requires_grad=True)
    sx = _s(x, requires_grad=True)
    t_in, s_in = tx, sx
    if packed is not None:
        t_in = torch.nn.utils.rnn.pack_padded_sequence(tx, packed, enforce_sorted=False)
        s_in = srnn.pack_padded_sequence(sx, packed, enforce_sorted=False)
    t_hx = s_hx = None
    if hx is not None:
        t_hx = tuple(torch.tensor(h, requires_grad=True) for h in hx)
        s_hx = tuple(_s(h, requires_grad=True) for h in hx)
    t_out = t_mod(t_in, (t_hx if len(t_hx) > 1 else t_hx[0]) if hx is not None else None)
    s_out = s_mod(s_in, (s_hx if len(s_hx) > 1 else s_hx[0]) if hx is not None else None)
    t_flat, s_flat = _flat(t_out), _flat(s_out)
    assert len(t_flat) == len(s_flat)
    rng = np.random.default_rng(0)
    t_loss = s_loss = 0
    for a, b in zip(t_flat, s_flat):
        assert tuple(a.shape) == tuple(b.shape)
        np.testing.assert_allclose(b.detach().numpy(), a.detach().numpy(), rtol=tol, atol=tol)
        w = rng.standard_normal(tuple(a.shape)).astype(x.dtype)
        t_loss = t_loss + (a * torch.tensor(w)).sum()
        s_loss = s_loss + (b * _s(w)).sum()
    t_loss.backward()
    s_loss.backward()
    s_params = dict(s_mod.named_parameters())
    for name, p in t_mod.named_parameters():
        np.testing.assert_allclose(
            s_params[name].grad.numpy(), p.grad.numpy(), rtol=tol, atol=tol, err_msg=name
        )
    np.testing.assert_allclose(sx.grad.numpy(), tx.grad.numpy(), rtol=tol, atol=tol)
    for a, b in zip(t_hx or (), s_hx or ()):
        np.testing.assert_allclose(b.grad.numpy(), a.grad.numpy(), rtol=tol, atol=tol)
    return t_out, s_out


def _pair(kind, *args, dtype=torch.float64, **kwargs):
    if kind in ("tanh", "relu"):
        t_mod = torch.nn.RNN(*args, nonlinearity=kind, **kwargs)
        s_mod = nn.RNN(*args, nonlinearity=kind, **kwargs)
    else:
        t_mod = getattr(torch.nn, kind)(*args, **kwargs)
        s_mod = getattr(nn, kind)(*args, **kwargs)
    t_mod = t_mod.to(dtype)
    s_mod = s_mod.double() if dtype == torch.float64 else s_mod
    _copy(t_mod, s_mod)
    return t_mod, s_mod


def _states(kind, L, b, h_out=H, h=H, rng=None):
    rng = rng or np.random.default_rng(1)
    shape = (L, b, h_out) if b else (L, h_out)
    hx = [rng.standard_normal(shape)]
    if kind == "LSTM":
        hx.append(rng.standard_normal(shape[:-1] + (h,)))
    return hx


KINDS = ["LSTM", "GRU", "tanh", "relu"]


@pytest.mark.parametrize("kind", KINDS)
def test_two_layers_bidirectional_match_torch(kind):
    t_mod, s_mod = _pair(kind, I, H, num_layers=2, bidirectional=True)
    x = np.random.default_rng(2).standard_normal((T, B, I))
    _compare(t_mod, s_mod, x)


@pytest.mark.parametrize("kind", KINDS)
def test_batch_first_with_initial_state(kind):
    t_mod, s_mod = _pair(kind, I, H, num_layers=2, batch_first=True)
    x = np.random.default_rng(3).standard_normal((B, T, I))
    _compare(t_mod, s_mod, x, hx=_states(kind, 2, B))


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
def test_unbatched_input(kind):
    t_mod, s_mod = _pair(kind, I, H, bidirectional=True)
    x = np.random.default_rng(4).standard_normal((T, I))
    _compare(t_mod, s_mod, x)
    _compare(t_mod, s_mod, x, hx=_states(kind, 2, 0))


@pytest.mark.parametrize("kind", KINDS)
def test_packed_sequence_matches_torch(kind):
    t_mod, s_mod = _pair(kind, I, H, num_layers=2, bidirectional=True)
    x = np.random.default_rng(5).standard_normal((T, B, I))
    lengths = [3, 5, 1]  # unsorted: the sort and its inverse are exercised
    t_out, s_out = _compare(t_mod, s_mod, x, hx=_states(kind, 4, B), packed=lengths)
    assert s_out[0].batch_sizes.tolist() == t_out[0].batch_sizes.tolist()
    assert s_out[0].sorted_indices.tolist() == t_out[0].sorted_indices.tolist()
    padded, lens = srnn.pad_packed_sequence(s_out[0])
    t_padded, t_lens = torch.nn.utils.rnn.pad_packed_sequence(t_out[0])
    np.testing.assert_allclose(padded.detach().numpy(), t_padded.detach().numpy(), atol=1e-12)
    assert lens.tolist() == t_lens.tolist()


def test_lstm_projection():
    t_mod, s_mod = _pair("LSTM", I, H, num_layers=2, bidirectional=True, proj_size=3)
    x = np.random.default_rng(6).standard_normal((T, B, I))
    _compare(t_mod, s_mod, x, hx=_states("LSTM", 4, B, h_out=3))


def test_float32_and_no_bias():
    t_mod, s_mod = _pair("LSTM", I, H, num_layers=2, bias=False, dtype=torch.float32)
    x = np.random.default_rng(7).standard_normal((T, B, I)).astype(np.float32)
    _compare(t_mod, s_mod, x, tol=2e-5)


def test_dropout_in_eval_mode_is_no_dropout():
    t_mod, s_mod = _pair("GRU", I, H, num_layers=3, dropout=0.4)
    t_mod.eval()
    s_mod.eval()
    x = np.random.default_rng(8).standard_normal((T, B, I))
    _compare(t_mod, s_mod, x)


def test_dropout_is_between_layers_only():
    # p = 1 drops every unit between the layers and none after the last: deterministic,
    # so torch's module in training mode is the reference
    t_mod, s_mod = _pair("LSTM", I, H, num_layers=2, dropout=1.0)
    x = np.random.default_rng(9).standard_normal((T, B, I))
    _compare(t_mod, s_mod, x)
    s_mod.dropout = 0.5
    out_train = s_mod(_s(x))[0]
    s_mod.eval()
    out_eval = s_mod(_s(x))[0]
    assert not np.allclose(out_train.detach().numpy(), out_eval.detach().numpy())


def test_lstm_cell_matches_torch():
    t_cell = torch.nn.LSTMCell(I, H).double()
    s_cell = nn.LSTMCell(I, H).double()
    _copy(t_cell, s_cell)
    rng = np.random.default_rng(10)
    for shape in [(B, I), (I,)]:
        x = rng.standard_normal(shape)
        hc = [rng.standard_normal(shape[:-1] + (H,)) for _ in range(2)]
        tx, th, tc = (torch.tensor(a, requires_grad=True) for a in (x, *hc))
        sx, sh, sc = (_s(a, requires_grad=True) for a in (x, *hc))
        t_h, t_c = t_cell(tx, (th, tc))
        s_h, s_c = s_cell(sx, (sh, sc))
        w1, w2 = rng.standard_normal(t_h.shape), rng.standard_normal(t_c.shape)
        ((t_h * torch.tensor(w1)).sum() + (t_c * torch.tensor(w2)).sum()).backward()
        ((s_h * _s(w1)).sum() + (s_c * _s(w2)).sum()).backward()
        for a, b in [(t_h, s_h), (t_c, s_c), (tx.grad, sx.grad), (th.grad, sh.grad)]:
            np.testing.assert_allclose(b.detach().numpy(), a.detach().numpy(), atol=1e-12)
        np.testing.assert_allclose(sc.grad.numpy(), tc.grad.numpy(), atol=1e-12)
        for name, p in t_cell.named_parameters():
            np.testing.assert_allclose(
                dict(s_cell.named_parameters())[name].grad.numpy(), p.grad.numpy(), atol=1e-12
            )
        t_cell.zero_grad()
        s_cell.zero_grad()
    h, c = s_cell(_s(rng.standard_normal((B, I))))  # no state: zeros
    assert tuple(h.shape) == tuple(c.shape) == (B, H)


def test_lstm_gates_one_gradient_only():
    """Only h (or only c) used downstream: the node gets None for the other output."""
    cell = nn.LSTMCell(I, H).double()
    x = _s(np.random.default_rng(11).standard_normal((B, I)))
    h, c = cell(x)
    h.sum().backward()
    g_h = cell.weight_hh.grad.numpy().copy()
    cell.zero_grad()
    h, c = cell(x)
    (h.sum() + 0 * c.sum()).backward()
    np.testing.assert_allclose(cell.weight_hh.grad.numpy(), g_h, atol=1e-14)
    cell.zero_grad()
    h, c = cell(x)
    c.sum().backward()
    assert np.abs(cell.weight_ih.grad.numpy()).sum() > 0


def test_state_dict_names_and_round_trip():
    t_mod = torch.nn.LSTM(I, H, num_layers=2, bidirectional=True, proj_size=3)
    s_mod = nn.LSTM(I, H, num_layers=2, bidirectional=True, proj_size=3)
    assert list(s_mod.state_dict()) == list(t_mod.state_dict())
    for (k, a), b in zip(s_mod.state_dict().items(), t_mod.state_dict().values()):
        assert tuple(a.shape) == tuple(b.shape), k
    bound = 1 / np.sqrt(H)
    assert all(np.abs(p.detach().numpy()).max() <= bound for p in s_mod.parameters())
    t_mod.load_state_dict({k: torch.tensor(v.numpy()) for k, v in s_mod.state_dict().items()})
    x = np.random.default_rng(12).standard_normal((T, B, I)).astype(np.float32)
    np.testing.assert_allclose(
        s_mod(_s(x))[0].detach().numpy(), t_mod(torch.tensor(x))[0].detach().numpy(), atol=1e-5
    )


def test_constructor_errors_match_torch():
    with pytest.raises(ValueError, match="dropout should be a number"):
        nn.LSTM(I, H, dropout=1.5)
    with pytest.raises(ValueError, match="hidden_size must be greater than zero"):
        nn.GRU(I, 0)
    with pytest.raises(ValueError, match="proj_size has to be smaller than hidden_size"):
        nn.LSTM(I, H, proj_size=H)
    with pytest.raises(ValueError, match="Unknown nonlinearity"):
        nn.RNN(I, H, nonlinearity="sigmoid")
    with pytest.warns(UserWarning, match="num_layers greater than 1"):
        nn.GRU(I, H, dropout=0.5)


def test_bad_shapes_raise():
    lstm = nn.LSTM(I, H, num_layers=2)
    with pytest.raises(RuntimeError, match=f"Expected {I}, got {I + 1}"):
        lstm(sitp.randn(T, B, I + 1))
    with pytest.raises(ValueError, match="Expected input to be 2D or 3D, got 4D"):
        lstm(sitp.randn(T, B, 1, I))
    bad = (sitp.zeros(2, B + 1, H), sitp.zeros(2, B + 1, H))
    with pytest.raises(
        RuntimeError, match=r"Expected hidden\[0\] size \(2, 3, 7\), got \[2, 4, 7\]"
    ):
        lstm(sitp.randn(T, B, I), bad)
    with pytest.raises(RuntimeError, match="should also be 2-D"):
        lstm(sitp.randn(T, I), (sitp.zeros(2, 1, H), sitp.zeros(2, 1, H)))
    with pytest.raises(RuntimeError, match=r"Expected hidden size \(1, 3, 7\), got \[1, 4, 7\]"):
        nn.GRU(I, H)(sitp.randn(T, B, I), sitp.zeros(1, B + 1, H))
    with pytest.raises(ValueError, match=r"input dtype \(sitp.float64\) does not match weight"):
        lstm(sitp.randn(T, B, I, dtype=sitp.float64))
    with pytest.raises(RuntimeError, match="hidden state of dtype sitp.float64"):
        nn.GRU(I, H)(sitp.randn(T, B, I), sitp.zeros(1, B, H, dtype=sitp.float64))
    with pytest.raises(ValueError, match="LSTMCell: Expected input to be 1D or 2D"):
        nn.LSTMCell(I, H)(sitp.randn(T, B, I))


# ------------------------------------------------------------------ nn.utils.rnn
def _seqs(lengths, feat=(2,), seed=13):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((n, *feat)) for n in lengths]


@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("side", ["right", "left"])
def test_pad_sequence(batch_first, side):
    seqs = _seqs([3, 5, 2])
    t = torch.nn.utils.rnn.pad_sequence(
        [torch.tensor(s) for s in seqs], batch_first, -1.0, padding_side=side
    )
    s = srnn.pad_sequence([_s(a) for a in seqs], batch_first, -1.0, padding_side=side)
    np.testing.assert_array_equal(s.numpy(), t.numpy())


@pytest.mark.parametrize("batch_first", [False, True])
def test_pack_and_pad_round_trip(batch_first):
    seqs = _seqs([3, 5, 2, 5])
    t_pack = torch.nn.utils.rnn.pack_sequence([torch.tensor(a) for a in seqs], False)
    s_pack = srnn.pack_sequence([_s(a) for a in seqs], enforce_sorted=False)
    for a, b in zip(s_pack, t_pack):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    t_pad, t_len = torch.nn.utils.rnn.pad_packed_sequence(t_pack, batch_first, 9.0, 7)
    s_pad, s_len = srnn.pad_packed_sequence(s_pack, batch_first, 9.0, 7)
    np.testing.assert_array_equal(s_pad.numpy(), t_pad.numpy())
    assert s_len.tolist() == t_len.tolist()
    back = srnn.unpack_sequence(s_pack)
    for a, b in zip(back, seqs):
        np.testing.assert_array_equal(a.numpy(), b)
    # the gradient flows back through packing to the padded input
    x = _s(np.random.default_rng(14).standard_normal((5, 3, 2)), requires_grad=True)
    p = srnn.pack_padded_sequence(x, [5, 4, 2])
    (p.data * 2).sum().backward()
    mask = (np.arange(5)[:, None] < np.array([5, 4, 2])[None]).astype(float)
    np.testing.assert_array_equal(x.grad.numpy(), 2 * mask[..., None] * np.ones((5, 3, 2)))


def test_packing_errors():
    x = sitp.zeros(4, 3, 2)
    with pytest.raises(RuntimeError, match="must be sorted in decreasing order"):
        srnn.pack_padded_sequence(x, [2, 4, 3])
    with pytest.raises(RuntimeError, match="greater than 0"):
        srnn.pack_padded_sequence(x, [4, 3, 0])
    with pytest.raises(RuntimeError, match="equal to batch_size"):
        srnn.pack_padded_sequence(x, [4, 3])
    with pytest.raises(RuntimeError, match="exceeds the input's 4 time steps"):
        srnn.pack_padded_sequence(x, [5, 3, 1])
    p = srnn.pack_padded_sequence(x, [4, 3, 1])
    with pytest.raises(ValueError, match="total_length=2"):
        srnn.pad_packed_sequence(p, total_length=2)


def test_full_paths_resolve():
    import sitp.nn.modules.rnn as m

    assert m.LSTM is nn.LSTM and m.GRU is nn.GRU and m.RNN is nn.RNN
    assert sitp.nn.utils.rnn.PackedSequence._fields == (
        "data",
        "batch_sizes",
        "sorted_indices",
        "unsorted_indices",
    )
    assert callable(sitp.nn.utils.clip_grad_norm_)


@pytest.mark.parametrize(
    "kind, used",
    [("LSTM", "output"), ("LSTM", "h_n"), ("LSTM", "c_n"), ("GRU", "output"), ("GRU", "h_n")],
)
def test_gradient_of_one_result_only(kind, used):
    """Backward from one of the results alone: the layer node gets None for the others."""
    t_mod, s_mod = _pair(kind, I, H, num_layers=2, bidirectional=True)
    x = np.random.default_rng(15).standard_normal((T, B, I))
    results = []
    for lib, mod, arr in ((torch, t_mod, torch.tensor(x)), (sitp, s_mod, _s(x))):
        out, state = mod(arr)
        h_n, c_n = state if kind == "LSTM" else (state, None)
        pick = {"output": out, "h_n": h_n, "c_n": c_n}[used]
        (pick * pick).sum().backward()
        results.append({n: p.grad.numpy() for n, p in mod.named_parameters()})
    for name, g in results[0].items():
        np.testing.assert_allclose(results[1][name], g, atol=1e-10, err_msg=name)


def test_lstm_gates_composed_path_matches_the_kernel(monkeypatch):
    """The tensor-op formulas the gates node uses off the CPU (no kernel) agree with torch."""
    from sitp.nn._functions import lstm as _lstm

    monkeypatch.setattr(_lstm, "_kernels", lambda: None)
    t_mod, s_mod = _pair("LSTM", I, H, proj_size=3)  # projections: the per-step path
    x = np.random.default_rng(16).standard_normal((T, B, I))
    _compare(t_mod, s_mod, x, hx=_states("LSTM", 1, B, h_out=3))


def test_all_weights_and_flatten_parameters():
    t_mod = torch.nn.GRU(I, H, num_layers=2, bidirectional=True)
    s_mod = nn.GRU(I, H, num_layers=2, bidirectional=True)
    s_mod.flatten_parameters()  # torch code calls it; nothing to do here
    t_shapes = [[tuple(p.shape) for p in layer] for layer in t_mod.all_weights]
    assert [[tuple(p.shape) for p in layer] for layer in s_mod.all_weights] == t_shapes


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
def test_step_by_step_path_matches_torch(kind, monkeypatch):
    """The general loop (one autograd node per step; what runs off the CPU) on a packed
    batch in both directions, with the whole-layer node switched off."""
    from sitp.nn._functions import recurrent as _recurrent

    monkeypatch.setattr(_recurrent, "fits", lambda *args: False)
    t_mod, s_mod = _pair(kind, I, H, num_layers=2, bidirectional=True)
    x = np.random.default_rng(17).standard_normal((T, B, I))
    _compare(t_mod, s_mod, x, hx=_states(kind, 4, B), packed=[4, 5, 2])
    _compare(t_mod, s_mod, x)


def test_on_a_device_as_on_the_cpu():
    """On a CUDA device (numba's simulator without a GPU) the step-by-step path with
    tensor ops computes what the CPU's kernels do, gradients included."""
    import copy

    cpu_mod = nn.LSTM(2, 3)  # tiny: the simulator runs each kernel in Python
    dev_mod = copy.deepcopy(cpu_mod).to("cuda")
    x = sitp.randn(2, 1, 2)
    for mod, inp in ((cpu_mod, x), (dev_mod, x.to("cuda"))):
        out, _ = mod(inp)
        (out * out).sum().backward()
    np.testing.assert_allclose(
        dev_mod(x.to("cuda"))[0].cpu().detach().numpy(),
        cpu_mod(x)[0].detach().numpy(),
        atol=1e-5,
    )
    for (name, p), q in zip(cpu_mod.named_parameters(), dev_mod.parameters()):
        np.testing.assert_allclose(q.grad.cpu().numpy(), p.grad.numpy(), atol=1e-5, err_msg=name)

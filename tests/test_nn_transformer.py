"""nn.MultiheadAttention and the Transformer modules against torch.

Each module is built in torch (float64 unless said), its state dict copied into sitp's,
and both run on the same inputs and masks: outputs, attention weights, and the
gradients of every parameter and input after the backward of a random linear
functional of the outputs are compared.
"""

import math

import numpy as np
import pytest
import torch

import sitp
from sitp import nn

E, NH, L, S, N, FF = 6, 3, 5, 4, 3, 11


def _s(a, requires_grad=False):
    a = a.detach().numpy() if isinstance(a, torch.Tensor) else a
    return sitp.tensor(np.ascontiguousarray(a), requires_grad=requires_grad)


def _copy(t_mod, s_mod, same_order=True):
    s_mod.load_state_dict({k: _s(v) for k, v in t_mod.state_dict().items()})
    if same_order:
        assert list(s_mod.state_dict()) == list(t_mod.state_dict())
    assert sorted(s_mod.state_dict()) == sorted(t_mod.state_dict())


def _run(t_mod, s_mod, inputs, masks=None, tol=1e-10, call=None, **kwargs):
    """Call both modules on float inputs (numpy arrays; gradients taken) and masks
    (numpy arrays, passed as they are, by keyword), as ``call(module, *inputs, **kw)``
    (the module called on the inputs by default); compare all outputs and gradients."""
    masks = masks or {}
    call = call or (lambda mod, *a, **kw: mod(*a, **kw))
    t_in = [torch.tensor(a, requires_grad=True) for a in inputs]
    s_in = [_s(a, requires_grad=True) for a in inputs]
    t_out = call(t_mod, *t_in, **{k: torch.tensor(m) for k, m in masks.items()}, **kwargs)
    s_out = call(s_mod, *s_in, **{k: _s(m) for k, m in masks.items()}, **kwargs)
    t_out = [o for o in (t_out if isinstance(t_out, tuple) else (t_out,)) if o is not None]
    s_out = [o for o in (s_out if isinstance(s_out, tuple) else (s_out,)) if o is not None]
    assert len(t_out) == len(s_out)
    rng = np.random.default_rng(0)
    t_loss = s_loss = 0
    for a, b in zip(t_out, s_out):
        assert tuple(a.shape) == tuple(b.shape)
        np.testing.assert_allclose(b.detach().numpy(), a.detach().numpy(), rtol=tol, atol=tol)
        w = rng.standard_normal(tuple(a.shape)).astype(inputs[0].dtype)
        t_loss = t_loss + (a * torch.tensor(w)).sum()
        s_loss = s_loss + (b * _s(w)).sum()
    t_loss.backward()
    s_loss.backward()
    s_params = dict(s_mod.named_parameters())
    for name, p in t_mod.named_parameters():
        if p.grad is None:
            assert s_params[name].grad is None, name
            continue
        np.testing.assert_allclose(
            s_params[name].grad.numpy(), p.grad.numpy(), rtol=tol, atol=tol, err_msg=name
        )
    for a, b in zip(t_in, s_in):
        if a.grad is not None:
            np.testing.assert_allclose(b.grad.numpy(), a.grad.numpy(), rtol=tol, atol=tol)
    return s_out


def _mha(**kwargs):
    t_mod = torch.nn.MultiheadAttention(E, NH, **kwargs).double()
    s_mod = nn.MultiheadAttention(E, NH, **kwargs).double()
    _copy(t_mod, s_mod)
    return t_mod, s_mod


def _x(*shape, seed=1):
    return np.random.default_rng(seed).standard_normal(shape)


def _causal_bool(n):
    return np.triu(np.ones((n, n), bool), 1)  # True: may not attend


KPM = np.array([[False, False, True, False], [False, True, False, False], [False] * 4])


@pytest.mark.parametrize("need_weights", [True, False])
@pytest.mark.parametrize(
    "kwargs",
    [{}, {"kdim": 4, "vdim": 5}, {"add_bias_kv": True}, {"add_zero_attn": True}, {"bias": False}],
)
def test_mha_cross_attention_with_masks(kwargs, need_weights):
    t_mod, s_mod = _mha(**kwargs)
    q, k, v = (
        _x(L, N, E),
        _x(S, N, kwargs.get("kdim", E), seed=2),
        _x(S, N, kwargs.get("vdim", E), seed=3),
    )
    masks = {"key_padding_mask": KPM, "attn_mask": _x(L, S, seed=4)}
    _run(t_mod, s_mod, [q, k, v], masks, need_weights=need_weights)


def test_mha_self_attention_causal_batch_first_per_head_weights():
    t_mod, s_mod = _mha(batch_first=True)
    x = _x(N, L, E)

    def self_attention(mod, x, **kw):
        return mod(x, x, x, **kw)

    masks = {"attn_mask": _causal_bool(L)}
    _run(t_mod, s_mod, [x], masks, call=self_attention, average_attn_weights=False)
    # the is_causal hint with need_weights=False: SDPA's causal path
    t_mod.zero_grad()
    s_mod.zero_grad()
    _run(t_mod, s_mod, [x], masks, call=self_attention, need_weights=False, is_causal=True)


def test_mha_float_padding_mask_and_3d_attn_mask():
    t_mod, s_mod = _mha()
    q, k = _x(L, N, E), _x(S, N, E, seed=2)
    kpm = np.where(KPM, -np.inf, 0.0)
    masks = {"key_padding_mask": kpm, "attn_mask": _x(N * NH, L, S, seed=5)}
    _run(t_mod, s_mod, [q, k, k], masks)


def test_mha_unbatched():
    t_mod, s_mod = _mha()
    q, k = _x(L, E), _x(S, E, seed=2)
    _run(t_mod, s_mod, [q, k, k], {"key_padding_mask": KPM[0]})
    t_mod.zero_grad()
    s_mod.zero_grad()
    _run(t_mod, s_mod, [q, k, k], {"attn_mask": _x(NH, L, S)}, need_weights=False)


def test_mha_dropout_in_eval_mode_is_no_dropout():
    t_mod, s_mod = _mha(dropout=0.5)
    t_mod.eval()
    s_mod.eval()
    _run(t_mod, s_mod, [_x(L, N, E), _x(S, N, E), _x(S, N, E, seed=3)])


def test_mha_dropout_in_training_mode_drops_weights():
    # (seeded first: the module's weights and x came from whatever state the generator
    # was left in by the tests before, and "a survivor above 1" held for some orders only)
    sitp.manual_seed(0)
    s_mod = nn.MultiheadAttention(E, NH, dropout=0.5)
    x = sitp.randn(L, N, E)
    _, w = s_mod(x, x, x, average_attn_weights=False)
    w = w.detach().numpy()
    s_mod.eval()
    _, w_eval = s_mod(x, x, x, average_attn_weights=False)
    w_eval = w_eval.detach().numpy()
    np.testing.assert_allclose(w_eval.sum(-1), 1.0, rtol=1e-5)
    dropped = w == 0
    assert dropped.any() and not dropped.all()  # some weights dropped, some kept,
    np.testing.assert_allclose(w[~dropped], 2 * w_eval[~dropped], rtol=1e-5)  # kept ones x2


def test_mha_errors():
    with pytest.raises(ValueError, match="embed_dim must be divisible by num_heads"):
        nn.MultiheadAttention(7, 3)
    m = nn.MultiheadAttention(E, NH)
    x = sitp.randn(L, N, E)
    with pytest.raises(ValueError, match="was expecting embedding dimension of 6, but got 7"):
        m(sitp.randn(L, N, E + 1), x, x)
    with pytest.raises(ValueError, match="4-D query tensor"):
        m(sitp.randn(L, N, 1, E), x, x)
    with pytest.raises(RuntimeError, match=r"2D attn_mask is \(4, 5\), but should be \(5, 5\)"):
        m(x, x, x, attn_mask=sitp.zeros(4, L))
    with pytest.raises(
        RuntimeError, match=r"3D attn_mask is \(2, 5, 5\), but should be \(9, 5, 5\)"
    ):
        m(x, x, x, attn_mask=sitp.zeros(2, L, L))
    with pytest.raises(ValueError, match=r"key_padding_mask of shape \(2, 5\): expected \(3, 5\)"):
        m(x, x, x, key_padding_mask=sitp.zeros(2, L))
    with pytest.raises(ValueError, match="does not match value shape"):
        m(x, sitp.randn(S, N, E), x)
    with pytest.raises(RuntimeError, match="Need attn_mask if specifying the is_causal hint"):
        m(x, x, x, is_causal=True)


# ------------------------------------------------------------------ the layers
def _pair(cls, *args, dtype=torch.float64, **kwargs):
    t_mod = getattr(torch.nn, cls)(*args, **kwargs).to(dtype)
    s_mod = getattr(nn, cls)(*args, **kwargs)
    s_mod = s_mod.double() if dtype == torch.float64 else s_mod
    _copy(t_mod, s_mod)
    t_mod.eval()  # dropout off on both sides (the modules default to p = 0.1)
    s_mod.eval()
    return t_mod, s_mod


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu", "callable"])
def test_encoder_layer(norm_first, activation):
    act = torch.tanh if activation == "callable" else activation
    t_mod = torch.nn.TransformerEncoderLayer(E, NH, FF, norm_first=norm_first, activation=act)
    s_act = sitp.tanh if activation == "callable" else activation
    s_mod = nn.TransformerEncoderLayer(E, NH, FF, norm_first=norm_first, activation=s_act)
    t_mod, s_mod = t_mod.double().eval(), s_mod.double().eval()
    _copy(t_mod, s_mod)
    kpm = np.array([[False] * 4 + [True], [False] * 5, [False, True] + [False] * 3])
    _run(t_mod, s_mod, [_x(L, N, E)], {"src_mask": _causal_bool(L), "src_key_padding_mask": kpm})


def test_encoder_layer_batch_first_is_causal_no_bias():
    t_mod, s_mod = _pair("TransformerEncoderLayer", E, NH, FF, batch_first=True, bias=False)
    mask = torch.nn.Transformer.generate_square_subsequent_mask(L, dtype=torch.float64).numpy()
    _run(t_mod, s_mod, [_x(N, L, E)], {"src_mask": mask}, is_causal=True)


def test_encoder_stack_detects_the_causal_mask():
    t_layer = torch.nn.TransformerEncoderLayer(E, NH, FF, dropout=0.3)
    t_mod = torch.nn.TransformerEncoder(
        t_layer, 2, torch.nn.LayerNorm(E), enable_nested_tensor=False
    )
    s_mod = nn.TransformerEncoder(
        nn.TransformerEncoderLayer(E, NH, FF, dropout=0.3), 2, nn.LayerNorm(E)
    )
    t_mod, s_mod = t_mod.double().eval(), s_mod.double().eval()
    _copy(t_mod, s_mod)
    assert s_mod.layers[0].linear1.weight is not s_mod.layers[1].linear1.weight
    mask = np.triu(np.full((L, L), -np.inf), 1)
    _run(t_mod, s_mod, [_x(L, N, E)], {"mask": mask})


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_stack(norm_first):
    t_mod = torch.nn.TransformerDecoder(
        torch.nn.TransformerDecoderLayer(E, NH, FF, norm_first=norm_first), 2, torch.nn.LayerNorm(E)
    )
    s_mod = nn.TransformerDecoder(
        nn.TransformerDecoderLayer(E, NH, FF, norm_first=norm_first), 2, nn.LayerNorm(E)
    )
    t_mod, s_mod = t_mod.double().eval(), s_mod.double().eval()
    _copy(t_mod, s_mod)
    masks = {
        "tgt_mask": _causal_bool(L),
        "memory_key_padding_mask": KPM,
        "tgt_key_padding_mask": np.zeros((N, L), bool),
    }
    _run(t_mod, s_mod, [_x(L, N, E), _x(S, N, E, seed=2)], masks)


def test_transformer_float32_batch_first():
    torch.manual_seed(0)
    t_mod, s_mod = _pair("Transformer", E, NH, 2, 1, FF, batch_first=True, dtype=torch.float32)
    src = _x(N, S, E).astype(np.float32)
    tgt = _x(N, L, E, seed=2).astype(np.float32)
    masks = {
        "tgt_mask": np.triu(np.full((L, L), -np.inf, np.float32), 1),
        "src_key_padding_mask": KPM,
        "memory_key_padding_mask": KPM,
    }
    _run(t_mod, s_mod, [src, tgt], masks, tol=2e-5)


def test_transformer_unbatched_and_init():
    s_mod = nn.Transformer(E, NH, 1, 1, FF, dropout=0.0)
    # every matrix re-drawn Xavier-uniform: within ±sqrt(6 / (fan_in + fan_out))
    for name, p in s_mod.named_parameters():
        if p.ndim > 1:
            bound = math.sqrt(6 / sum(p.shape))
            assert np.abs(p.detach().numpy()).max() <= bound, name
    t_mod = torch.nn.Transformer(E, NH, 1, 1, FF, dropout=0.0).double()
    s_mod = s_mod.double()
    _copy(t_mod, s_mod)
    _run(t_mod, s_mod, [_x(S, E), _x(L, E, seed=2)])


def test_generate_square_subsequent_mask():
    for dtype, s_dtype in [(None, None), (torch.float64, sitp.float64), (torch.bool, sitp.bool)]:
        t = torch.nn.Transformer.generate_square_subsequent_mask(4, dtype=dtype)
        s = nn.Transformer.generate_square_subsequent_mask(4, dtype=s_dtype)
        assert str(s.dtype).split(".")[-1] == str(t.dtype).split(".")[-1]
        np.testing.assert_array_equal(s.numpy(), t.numpy())


def _word_lm(T):
    """The classic word-level language model: an encoder-only nn.Transformer subclass
    whose ``decoder`` is replaced by a Linear, written once for either library."""

    class TransformerModel(T.nn.Transformer):
        def __init__(self, ntoken, ninp, nhead, nhid, nlayers, dropout=0.5):
            super().__init__(
                d_model=ninp, nhead=nhead, dim_feedforward=nhid, num_encoder_layers=nlayers
            )
            self.model_type = "Transformer"
            self.input_emb = T.nn.Embedding(ntoken, ninp)
            self.ninp = ninp
            self.decoder = T.nn.Linear(ninp, ntoken)

        def forward(self, src):
            mask = T.log(T.tril(T.ones(len(src), len(src), dtype=T.float64)))
            x = self.input_emb(src) * math.sqrt(self.ninp)
            out = self.encoder(x, mask=mask)
            return T.nn.functional.log_softmax(self.decoder(out), dim=-1)

    return TransformerModel


def test_subclassing_transformer_word_language_model():
    t_mod = _word_lm(torch)(13, E, NH, FF, 2).double().eval()
    s_mod = _word_lm(sitp)(13, E, NH, FF, 2).double().eval()
    # torch keeps a replaced submodule (decoder) in its place; sitp's Module moves it last
    _copy(t_mod, s_mod, same_order=False)
    src = np.random.default_rng(6).integers(0, 13, (L, N))
    t_out = t_mod(torch.tensor(src))
    s_out = s_mod(sitp.tensor(src))
    np.testing.assert_allclose(s_out.detach().numpy(), t_out.detach().numpy(), atol=1e-10)
    s_out.sum().backward()
    assert s_mod.input_emb.weight.grad is not None


def test_layer_errors():
    with pytest.raises(RuntimeError, match="activation should be relu/gelu, not tanh"):
        nn.TransformerEncoderLayer(E, NH, activation="tanh")
    m = nn.Transformer(E, NH, 1, 1, FF)
    with pytest.raises(RuntimeError, match="the batch number of src and tgt must be equal"):
        m(sitp.randn(S, N, E), sitp.randn(L, N + 1, E))
    with pytest.raises(RuntimeError, match="must be equal to d_model=6"):
        m(sitp.randn(S, N, E + 1), sitp.randn(L, N, E + 1))


def test_full_paths_resolve():
    import sitp.nn.modules.activation as act
    import sitp.nn.modules.linear as lin
    import sitp.nn.modules.transformer as tr

    assert tr.TransformerEncoder is nn.TransformerEncoder
    assert act.MultiheadAttention is nn.MultiheadAttention
    assert issubclass(lin.NonDynamicallyQuantizableLinear, nn.Linear)
    assert type(nn.MultiheadAttention(E, NH).out_proj) is lin.NonDynamicallyQuantizableLinear


def test_on_a_device_as_on_the_cpu():
    """On a CUDA device (numba's simulator without a GPU): attention as composed ops."""
    import copy

    cpu_mod = nn.TransformerEncoderLayer(4, 2, 3, dropout=0.0, norm_first=True)  # tiny
    dev_mod = copy.deepcopy(cpu_mod).to("cuda")
    x = sitp.randn(3, 2, 4)
    kpm = _s(np.array([[False, False, True], [False, False, False]]))  # (N, L)
    mask = nn.Transformer.generate_square_subsequent_mask(3)
    outs = []
    for mod, dev in ((cpu_mod, "cpu"), (dev_mod, "cuda")):
        y = mod(x.to(dev), src_mask=mask.to(dev), src_key_padding_mask=kpm.to(dev))
        (y * y).sum().backward()
        outs.append(y.cpu().detach().numpy())
    np.testing.assert_allclose(outs[1], outs[0], atol=1e-5)
    for (name, p), q in zip(cpu_mod.named_parameters(), dev_mod.parameters()):
        np.testing.assert_allclose(q.grad.cpu().numpy(), p.grad.numpy(), atol=1e-5, err_msg=name)

"""The modern GPT of section 5.3: every option of GPTConfig against PyTorch.

Each option is a config field of sitp.models.gpt, off by default. For each one the
same model file runs in sitp and, through sitp.models.port, in PyTorch with the
same weights: logits, loss and every parameter's gradient must agree. Rotary
embeddings are also checked against complex multiplication in numpy, and the Muon
hookup against torch.optim.Muon stepping the same parameters.
"""

import numpy as np
import pytest

import sitp
from sitp.models.gpt import GPT, GPTConfig, apply_rotary, muon_and_adamw, rotary_cos_sin
from sitp.models.port import load_module

torch = pytest.importorskip("torch")

RTOL, ATOL = 1e-4, 1e-5
TINY = dict(block_size=16, vocab_size=27, n_layer=2, n_head=4, n_embd=32)
OPTIONS = {
    "gpt2": {},
    "rope": {"rope": True},
    "rmsnorm": {"norm": "rmsnorm"},
    "rmsnorm_no_gain": {"norm": "rmsnorm", "norm_params": False},
    "layernorm_no_params": {"norm_params": False},
    "no_bias": {"bias": False},
    "qk_norm": {"qk_norm": True},
    "relu2": {"mlp": "relu2"},
    "untied": {"tie_weights": False},
    "softcap": {"logit_softcap": 0.5},  # small enough that tanh bends the logits
    "all": {
        "rope": True,
        "norm": "rmsnorm",
        "norm_params": False,
        "bias": False,
        "qk_norm": True,
        "mlp": "relu2",
        "tie_weights": False,
        "logit_softcap": 0.5,
    },
}


def np_(t):
    return t.detach().cpu().numpy() if isinstance(t, torch.Tensor) else t.detach().numpy()


def pair(**fields):
    """A sitp GPT and PyTorch's copy of the same file, with the same weights."""
    t_gpt = load_module("gpt", "torch")
    sitp.manual_seed(0)
    smodel = GPT(GPTConfig(**TINY, **fields))
    # larger weights than GPT-2's init, so that every option changes the numbers
    with sitp.no_grad():
        for p in smodel.parameters():
            p.add_(sitp.randn(p.shape) * 0.2)
    tmodel = t_gpt.GPT(t_gpt.GPTConfig(**TINY, **fields))
    tmodel.load_state_dict(
        {k: torch.tensor(v.numpy().copy()) for k, v in smodel.state_dict().items()}
    )
    return smodel, tmodel


def batch(B=3, T=16, seed=1):
    g = np.random.default_rng(seed)
    return g.integers(0, 27, (B, T)), g.integers(0, 27, (B, T))


@pytest.mark.parametrize("option", list(OPTIONS))
def test_option_forward_and_backward_match_torch(option):
    smodel, tmodel = pair(**OPTIONS[option])
    X, Y = batch()
    logits, loss = smodel(sitp.tensor(X), sitp.tensor(Y))
    loss.backward()
    tlogits, tloss = tmodel(torch.tensor(X), torch.tensor(Y))
    tloss.backward()
    np.testing.assert_allclose(np_(logits), np_(tlogits), rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(loss.item(), tloss.item(), rtol=RTOL)
    tparams = dict(tmodel.named_parameters())
    assert [n for n, _ in smodel.named_parameters()] == list(tparams)
    for n, p in smodel.named_parameters():
        np.testing.assert_allclose(
            np_(p.grad), np_(tparams[n].grad), rtol=RTOL, atol=ATOL, err_msg=n
        )


def test_each_option_changes_the_model():
    """No option is a no-op: each one's logits differ from GPT-2's on the same weights."""
    X, _ = batch()
    base, _ = pair()
    base_logits = np_(base(sitp.tensor(X))[0])
    for option, fields in OPTIONS.items():
        if option in ("gpt2", "untied"):  # untied starts from the same (copied) numbers
            continue
        model, _ = pair(**fields)
        assert not np.allclose(np_(model(sitp.tensor(X))[0]), base_logits, atol=1e-3), option


def test_defaults_are_chapter_3_5s_gpt():
    model = GPT(GPTConfig())
    names = [n for n, _ in model.named_parameters()]
    assert names[:2] == ["transformer.wte.weight", "transformer.wpe.weight"]
    assert "transformer.h.0.ln_1.bias" in names and "transformer.h.0.attn.c_attn.bias" in names
    assert model.lm_head.weight is model.transformer.wte.weight
    assert sum(p.numel() for p in model.parameters()) == 203_840
    assert isinstance(model.transformer.h[0].ln_1, sitp.nn.LayerNorm)


def test_parameters_each_option_adds_or_removes():
    count = lambda **f: sum(p.numel() for p in GPT(GPTConfig(**TINY, **f)).parameters())  # noqa: E731
    base, L, C, V, T = count(), 2, 32, 27, 16
    assert count(rope=True) == base - T * C  # no wpe
    assert count(norm="rmsnorm") == base - (2 * L + 1) * C  # gains only, no shifts
    assert count(norm="rmsnorm", norm_params=False) == base - 2 * (2 * L + 1) * C
    assert count(tie_weights=False) == base + V * C
    assert count(qk_norm=True) == count(mlp="relu2") == count(logit_softcap=30.0) == base
    model = GPT(GPTConfig(**TINY, rope=True))
    assert "transformer.wpe" not in dict(model.named_modules())
    assert not any("rope" in k for k in model.state_dict())  # recomputed, not saved
    assert tuple(model.rope_cos.shape) == (16, 4)


def test_softcap_bounds_the_logits():
    model, _ = pair(logit_softcap=0.5)
    logits = np_(model(sitp.tensor(batch()[0]))[0])
    assert 0.4 < np.abs(logits).max() <= 0.5  # tanh saturates to 1 in float32


def test_rotary_is_complex_multiplication():
    """Pair (x_i, x_{i+D/2}) as x_i + i x_{i+D/2}, times e^{i t theta_j}: numpy's complex numbers."""
    B, H, T, D = 2, 3, 7, 8
    x = np.random.default_rng(0).standard_normal((B, H, T, D)).astype(np.float32)
    cos, sin = rotary_cos_sin(T, D, base=100.0)
    y = apply_rotary(sitp.tensor(x), cos, sin).numpy()
    theta = 100.0 ** (-np.arange(0, D, 2) / D)
    z = (x[..., : D // 2] + 1j * x[..., D // 2 :]) * np.exp(1j * np.arange(T)[:, None] * theta)
    np.testing.assert_allclose(y, np.concatenate([z.real, z.imag], -1), rtol=1e-5, atol=1e-5)


def test_rotary_scores_depend_on_the_offset_only():
    """q_m . k_n after rotation is a function of m - n: shifting both positions keeps it."""
    D, T = 8, 12
    g = sitp.Generator().manual_seed(3)
    q, k = sitp.randn((1, 1, 1, D), generator=g), sitp.randn((1, 1, 1, D), generator=g)
    cos, sin = rotary_cos_sin(T, D)

    def score(m, n):
        qm = apply_rotary(q, cos[m : m + 1], sin[m : m + 1])
        kn = apply_rotary(k, cos[n : n + 1], sin[n : n + 1])
        return (qm * kn).sum().item()

    assert score(5, 2) == pytest.approx(score(9, 6), abs=1e-5)
    assert score(3, 3) == pytest.approx((q * k).sum().item(), abs=1e-5)
    assert score(5, 2) != pytest.approx(score(5, 3), abs=1e-3)


@pytest.mark.parametrize(
    "fields, message",
    [
        (dict(norm="batchnorm"), "norm must be"),
        (dict(mlp="swiglu"), "mlp must be"),
        (dict(logit_softcap=-1.0), "logit_softcap"),
        (dict(n_embd=30, n_head=4), "multiple of n_head"),
        (dict(n_embd=12, n_head=4, rope=True), "even head width"),
    ],
)
def test_bad_config_raises(fields, message):
    with pytest.raises(ValueError, match=message):
        GPTConfig(**fields)


def test_muon_groups_and_steps_match_torch():
    smodel, tmodel = pair(rope=True, bias=False, norm="rmsnorm", tie_weights=False)
    t_gpt = load_module("gpt", "torch")
    s_opts, t_opts = (
        muon_and_adamw(smodel, lr=1e-2, muon_lr=0.05),
        t_gpt.muon_and_adamw(tmodel, lr=1e-2, muon_lr=0.05),
    )
    assert isinstance(s_opts[0], sitp.optim.Muon) and isinstance(t_opts[0], torch.optim.Muon)
    names = {id(p): n for n, p in smodel.named_parameters()}
    muon = sorted(names[id(p)] for g in s_opts[0].param_groups for p in g["params"])
    adamw = sorted(names[id(p)] for g in s_opts[1].param_groups for p in g["params"])
    assert set(muon) | set(adamw) == set(names.values()) and not set(muon) & set(adamw)
    assert all(n.startswith("transformer.h.") and n.endswith(".weight") for n in muon)
    assert len(muon) == 4 * TINY["n_layer"]  # c_attn, attn.c_proj, c_fc, mlp.c_proj
    assert {"transformer.wte.weight", "lm_head.weight", "transformer.ln_f.weight"} <= set(adamw)
    # one step from the same gradients (torch's). torch's Muon orthogonalises in bfloat16,
    # so its Muon updates are compared by direction and size; AdamW's exactly
    X, Y = batch()
    _, tloss = tmodel(torch.tensor(X), torch.tensor(Y))
    tloss.backward()
    sparams = dict(smodel.named_parameters())
    before = {n: np_(p).copy() for n, p in tmodel.named_parameters()}
    for n, p in tmodel.named_parameters():
        sparams[n].grad = sitp.tensor(np_(p.grad).copy())
    for o in s_opts + t_opts:
        o.step()
    for n, p in tmodel.named_parameters():
        if n in muon:
            ds, dt = (np_(sparams[n]) - before[n]).ravel(), (np_(p) - before[n]).ravel()
            cos = ds @ dt / np.linalg.norm(ds) / np.linalg.norm(dt)
            assert cos > 0.99 and abs(np.linalg.norm(ds) / np.linalg.norm(dt) - 1) < 0.02, (n, cos)
        else:
            np.testing.assert_allclose(np_(sparams[n]), np_(p), rtol=1e-4, atol=1e-5, err_msg=n)

"""sitp.optim.Muon against torch.optim.Muon, and its Newton–Schulz step against numpy's SVD.

torch runs the Newton–Schulz iteration in bfloat16, sitp in the parameter's dtype. For the
step-by-step comparisons the fixture ``torch_in_full_precision`` makes torch's cast to
bfloat16 a copy in the same dtype (torch's own Muon code runs unchanged otherwise), so
the two must agree to float32's (or float64's) precision; one test compares with
unmodified torch at bfloat16's precision.
"""

import copy

import numpy as np
import pytest
import torch

import sitp
from helpers import np_of
from sitp.optim.muon import newton_schulz

RNG = np.random.default_rng(0)
SHAPES = [(6, 4), (3, 5), (4, 4)]  # tall, wide, square
W0 = [RNG.standard_normal(s) for s in SHAPES]
X = [RNG.standard_normal((8, s[0])) for s in SHAPES]  # inputs of each layer
Y = [RNG.standard_normal((8, s[1])) for s in SHAPES]  # and its targets

F32 = dict(rtol=1e-5, atol=1e-6)
F64 = dict(rtol=1e-10, atol=1e-12)


@pytest.fixture
def torch_in_full_precision(monkeypatch):
    monkeypatch.setattr(torch.Tensor, "bfloat16", lambda self, *a, **k: self.clone())


def make_params(lib, dtype):
    return [lib.tensor(w.astype(dtype), requires_grad=True) for w in W0]


def loss_fn(lib, params, dtype):
    """A least-squares fit per matrix: its gradient depends on the parameter."""
    total = 0.0
    for w, x, y in zip(params, X, Y):
        r = lib.tensor(x.astype(dtype)) @ w - lib.tensor(y.astype(dtype))
        total = total + (r * r).mean()
    return total


def run(lib, kwargs, steps, dtype, groups=None):
    params = make_params(lib, dtype)
    spec = params if groups is None else [{"params": [p], **g} for p, g in zip(params, groups)]
    opt = lib.optim.Muon(spec, **kwargs)
    path = []
    for _ in range(steps):
        opt.zero_grad()
        loss_fn(lib, params, dtype).backward()
        opt.step()
        path.append(np.concatenate([p.detach().numpy().ravel() for p in params]))
    return np.array(path, np.float64), opt, params


CASES = [
    {"lr": 0.02},
    {"lr": 0.02, "nesterov": False},
    {"lr": 0.02, "momentum": 0.0, "weight_decay": 0.0},
    {"lr": 0.01, "momentum": 0.9, "weight_decay": 0.3, "adjust_lr_fn": "original"},
    {"lr": 0.01, "adjust_lr_fn": "match_rms_adamw"},
    {"lr": 0.02, "ns_steps": 3, "eps": 1e-5},
    {"lr": 0.02, "ns_coefficients": (1.5, -0.5, 0.0), "ns_steps": 12},  # the cubic iteration
]


@pytest.mark.usefixtures("torch_in_full_precision")
@pytest.mark.parametrize("dtype,tol", [(np.float32, F32), (np.float64, F64)])
@pytest.mark.parametrize("kwargs", CASES, ids=str)
def test_trajectory_matches_torch(kwargs, dtype, tol):
    ours, _, _ = run(sitp, kwargs, 8, dtype)
    theirs, _, _ = run(torch, kwargs, 8, dtype)
    np.testing.assert_allclose(ours, theirs, **tol)
    assert np.abs(ours[-1] - np.concatenate([w.ravel() for w in W0])).max() > 1e-2  # it moved


@pytest.mark.usefixtures("torch_in_full_precision")
def test_parameter_groups_match_torch():
    groups = [{"lr": 0.05}, {"weight_decay": 0.0, "nesterov": False}, {"momentum": 0.5}]
    ours, opt, _ = run(sitp, {"lr": 0.01}, 6, np.float32, groups)
    theirs, _, _ = run(torch, {"lr": 0.01}, 6, np.float32, groups)
    np.testing.assert_allclose(ours, theirs, **F32)
    assert [g["lr"] for g in opt.param_groups] == [0.05, 0.01, 0.01]


def test_close_to_unmodified_torch_in_bfloat16():
    """The real torch.optim.Muon (bfloat16 iteration): the same steps to about 2 digits."""
    start = np.concatenate([w.ravel() for w in W0])
    ours, _, _ = run(sitp, {"lr": 0.02}, 5, np.float32)
    theirs, _, _ = run(torch, {"lr": 0.02}, 5, np.float32)
    moved_ours, moved_theirs = ours[-1] - start, theirs[-1] - start
    rel = np.linalg.norm(moved_ours - moved_theirs) / np.linalg.norm(moved_theirs)
    assert rel < 0.03, rel


# ------------------------------------------------------------ Newton–Schulz, numerically
def _poly_iterate(s, coeffs, steps):
    a, b, c = coeffs
    for _ in range(steps):
        s = a * s + b * s**3 + c * s**5
    return s


@pytest.mark.parametrize("shape", [(7, 4), (4, 7), (5, 5)], ids=str)
def test_newton_schulz_maps_each_singular_value_by_the_polynomial(shape):
    """numpy's SVD as the oracle: the singular vectors stay, and each singular value
    sigma / |G|_F goes through the scalar polynomial ns_steps times."""
    G = np.random.default_rng(1).standard_normal(shape)
    coeffs = (3.4445, -4.775, 2.0315)
    O = np_of(newton_schulz(sitp.tensor(G), coeffs, 5))
    assert O.shape == G.shape
    U, s, Vt = np.linalg.svd(G, full_matrices=False)
    want = _poly_iterate(s / np.linalg.norm(G), coeffs, 5)
    core = U.T @ O @ Vt.T  # diagonal when O has G's singular vectors
    np.testing.assert_allclose(core, np.diag(want), atol=1e-10)
    # the default quintic leaves them near 1, not at 1
    got = np.linalg.svd(O, compute_uv=False)
    assert 0.6 < got.min() and got.max() < 1.25, got


def test_cubic_newton_schulz_converges_to_the_polar_factor():
    """(1.5, -0.5, 0) is the classical Newton–Schulz iteration: it converges to U V^T."""
    G = np.random.default_rng(2).standard_normal((6, 3))
    U, _, Vt = np.linalg.svd(G, full_matrices=False)
    O = np_of(newton_schulz(sitp.tensor(G), (1.5, -0.5, 0.0), 40))
    np.testing.assert_allclose(O, U @ Vt, atol=1e-10)
    np.testing.assert_allclose(np.linalg.svd(O, compute_uv=False), 1.0, atol=1e-10)


def test_newton_schulz_of_zero_is_zero_and_keeps_float32():
    Z = newton_schulz(sitp.zeros(3, 4))
    assert Z.dtype == sitp.float32 and not np_of(Z).any()


# ------------------------------------------------------------------------- errors
BAD = {
    "bias_1d": (lambda L: L.optim.Muon([L.zeros(3, requires_grad=True)]), "(3"),
    "conv_3d": (lambda L: L.optim.Muon([L.zeros(2, 3, 4, requires_grad=True)]), "2, 3, 4"),
    "lr": (lambda L: L.optim.Muon([L.zeros(2, 2, requires_grad=True)], lr=-1.0), "-1.0"),
    "momentum": (
        lambda L: L.optim.Muon([L.zeros(2, 2, requires_grad=True)], momentum=-0.1),
        "-0.1",
    ),
    "weight_decay": (
        lambda L: L.optim.Muon([L.zeros(2, 2, requires_grad=True)], weight_decay=-0.5),
        "-0.5",
    ),
    "adjust_lr_fn": (
        lambda L: L.optim.Muon([L.zeros(2, 2, requires_grad=True)], adjust_lr_fn="rms"),
        "rms",
    ),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_invalid_arguments_raise_like_torch(name):
    case, named = BAD[name]
    with pytest.raises(ValueError):
        case(torch)
    with pytest.raises(ValueError, match=None) as got:
        case(sitp)
    assert named in str(got.value)


@pytest.mark.parametrize(
    "kwargs", [{"ns_steps": 100}, {"ns_coefficients": (1.0, 2.0)}], ids=["steps", "coefficients"]
)
def test_bad_newton_schulz_options_raise_by_the_first_step(kwargs):
    """torch raises at the first step; sitp already when the group is built."""
    w = torch.zeros(2, 2, requires_grad=True)
    opt = torch.optim.Muon([w], **kwargs)
    w.grad = torch.ones(2, 2)
    with pytest.raises(ValueError):
        opt.step()
    with pytest.raises(ValueError):
        sitp.optim.Muon([sitp.zeros(2, 2, requires_grad=True)], **kwargs)
    with pytest.raises(ValueError, match="2-D"):
        newton_schulz(sitp.zeros(3))


# ------------------------------------------------------------------- checkpoints
def _train(opt, params, steps, lib=sitp, dtype=np.float32):
    for _ in range(steps):
        opt.zero_grad()
        loss_fn(lib, params, dtype).backward()
        opt.step()


def test_state_dict_round_trip_equals_uninterrupted_run():
    kw = {"lr": 0.02, "weight_decay": 0.05}
    params = make_params(sitp, np.float32)
    opt = sitp.optim.Muon(params, **kw)
    _train(opt, params, 12)

    params2 = make_params(sitp, np.float32)
    opt2 = sitp.optim.Muon(params2, **kw)
    _train(opt2, params2, 5)
    saved = copy.deepcopy(opt2.state_dict())
    params3 = [p.detach().clone().requires_grad_() for p in params2]
    _train(opt2, params2, 3)  # the saved state must not follow this

    opt3 = sitp.optim.Muon(params3, lr=1.0)
    opt3.load_state_dict(saved)
    assert opt3.param_groups[0]["lr"] == 0.02  # options come from the checkpoint
    _train(opt3, params3, 7)
    for p, q in zip(params3, params):
        np.testing.assert_array_equal(np_of(p), np_of(q))


@pytest.mark.usefixtures("torch_in_full_precision")
def test_state_dict_has_torch_format_and_loads_torch_checkpoints():
    kw = {"lr": 0.02, "momentum": 0.9}
    _, opt_s, _ = run(sitp, kw, 4, np.float64)
    _, opt_t, params_t = run(torch, kw, 4, np.float64)
    sd_s, sd_t = opt_s.state_dict(), opt_t.state_dict()
    assert sd_s["state"].keys() == sd_t["state"].keys() == {0, 1, 2}
    for i in sd_t["state"]:
        assert sd_s["state"][i].keys() == sd_t["state"][i].keys() == {"momentum_buffer"}
        np.testing.assert_allclose(
            sd_s["state"][i]["momentum_buffer"].numpy(),
            sd_t["state"][i]["momentum_buffer"].numpy(),
            **F64,
        )
    (gs,), (gt,) = sd_s["param_groups"], sd_t["param_groups"]
    assert gs == gt

    # a torch checkpoint, loaded into sitp, continues as torch continues
    params = [sitp.tensor(p.detach().numpy(), requires_grad=True) for p in params_t]
    opt = sitp.optim.Muon(params)
    opt.load_state_dict(sd_t)
    _train(opt, params, 4, sitp, np.float64)
    _train(opt_t, params_t, 4, torch, np.float64)
    for p, q in zip(params, params_t):
        np.testing.assert_allclose(np_of(p), q.detach().numpy(), **F64)


def test_named_parameters_and_muon_with_adamw():
    """The usual split: Muon for the matrices, AdamW for the rest."""
    model = sitp.nn.Sequential(sitp.nn.Linear(4, 8), sitp.nn.Linear(8, 2))
    matrices = [(n, p) for n, p in model.named_parameters() if p.ndim == 2]
    others = [p for p in model.parameters() if p.ndim != 2]
    muon, adamw = sitp.optim.Muon(matrices, lr=0.02), sitp.optim.AdamW(others, lr=3e-3)
    assert muon.state_dict()["param_groups"][0]["param_names"] == ["0.weight", "1.weight"]
    x = sitp.tensor(RNG.standard_normal((16, 4)).astype(np.float32))
    y = sitp.tensor(RNG.standard_normal((16, 2)).astype(np.float32))
    losses = []
    for _ in range(30):
        muon.zero_grad()
        adamw.zero_grad()
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        muon.step()
        adamw.step()
        losses.append(loss.item())
    assert losses[-1] < 0.8 * losses[0]

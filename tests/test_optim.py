"""sitp.optim against torch.optim: the same problem, run side by side, step by step.

The problem is a small linear regression with two parameter groups (the weights and the
bias, with different learning rates and weight decay). It is written once against a
module ``lib`` that is either ``sitp`` or ``torch``: the same code runs on both.
"""

import copy
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import sitp
from sitp.bench import threads
from sitp.kernels.cpu.fused import adam as fused_adam

RNG = np.random.default_rng(0)
X_ND = RNG.normal(size=(16, 4))
Y_N = X_ND @ np.array([1.0, -2.0, 0.5, 3.0]) + 0.7 + 0.1 * RNG.normal(size=16)
W0_D, B0 = RNG.normal(size=4), RNG.normal(size=1)

F32 = dict(rtol=1e-5, atol=1e-6)
F64 = dict(rtol=1e-10, atol=1e-12)


def make_params(lib, dtype):
    np_dtype = np.float32 if dtype == "float32" else np.float64
    w = lib.tensor(W0_D.astype(np_dtype), requires_grad=True)
    b = lib.tensor(B0.astype(np_dtype), requires_grad=True)
    return w, b


def loss_fn(lib, w, b, dtype, sign=1.0):
    np_dtype = np.float32 if dtype == "float32" else np.float64
    X, y = lib.tensor(X_ND.astype(np_dtype)), lib.tensor(Y_N.astype(np_dtype))
    pred = (X * w).sum(1) + b  # (N,): elementwise and a reduction, no matmul
    return ((pred - y) ** 2).mean() * sign


def groups(w, b, group_opts):
    g0, g1 = group_opts
    return [{"params": [w], **g0}, {"params": [b], **g1}]


def run(lib, name, kwargs, group_opts, steps, dtype, *, sign=1.0, sched=None):
    """Parameters after each of ``steps`` steps of ``lib.optim.<name>``."""
    w, b = make_params(lib, dtype)
    opt = getattr(lib.optim, name)(groups(w, b, group_opts), **kwargs)
    scheduler = sched(lib, opt) if sched else None
    path = []
    for _ in range(steps):
        opt.zero_grad()
        loss_fn(lib, w, b, dtype, sign).backward()
        opt.step()
        if scheduler:
            scheduler.step()
        path.append(np.concatenate([w.detach().numpy(), b.detach().numpy()]).astype(np.float64))
    return np.array(path), opt


TWO_GROUPS = ({"lr": 0.05, "weight_decay": 0.1}, {"lr": 0.02})

CASES = [
    ("SGD", {"lr": 0.01}),
    ("SGD", {"lr": 0.01, "momentum": 0.9}),
    ("SGD", {"lr": 0.01, "momentum": 0.8, "dampening": 0.3}),
    ("SGD", {"lr": 0.01, "momentum": 0.9, "nesterov": True}),
    ("SGD", {"lr": 0.01, "momentum": 0.5, "maximize": True}),
    ("Adam", {"lr": 0.01}),
    ("Adam", {"lr": 0.01, "betas": (0.8, 0.99), "eps": 1e-6, "amsgrad": True}),
    ("Adam", {"lr": 0.01, "maximize": True}),
    ("AdamW", {"lr": 0.01}),
    ("AdamW", {"lr": 0.01, "amsgrad": True}),
]


@pytest.mark.parametrize("dtype,tol", [("float32", F32), ("float64", F64)])
@pytest.mark.parametrize("name,kwargs", CASES, ids=lambda c: str(c))
def test_trajectory_matches_torch(name, kwargs, dtype, tol):
    sign = -1.0 if kwargs.get("maximize") else 1.0  # maximize -loss: the same minimum
    ours, _ = run(sitp, name, kwargs, TWO_GROUPS, 50, dtype, sign=sign)
    theirs, _ = run(torch, name, kwargs, TWO_GROUPS, 50, dtype, sign=sign)
    np.testing.assert_allclose(ours, theirs, **tol)
    assert np.abs(ours[-1] - ours[0]).max() > 1e-2  # it moved


@settings(max_examples=8, deadline=None)
@given(
    lr=st.floats(1e-4, 0.1),
    momentum=st.floats(0.0, 0.99),
    wd=st.floats(0.0, 0.5),
    nesterov=st.booleans(),
    dampening=st.sampled_from([0.0, 0.5]),
)
def test_sgd_random_hyperparameters(lr, momentum, wd, nesterov, dampening):
    nesterov = nesterov and momentum > 0
    kwargs = dict(
        lr=lr,
        momentum=momentum,
        weight_decay=wd,
        nesterov=nesterov,
        dampening=0.0 if nesterov else dampening,
    )
    opts = ({}, {"lr": lr / 2, "weight_decay": 0.0})
    ours, _ = run(sitp, "SGD", kwargs, opts, 10, "float64")
    theirs, _ = run(torch, "SGD", kwargs, opts, 10, "float64")
    np.testing.assert_allclose(ours, theirs, **F64)


@settings(max_examples=8, deadline=None)
@given(
    name=st.sampled_from(["Adam", "AdamW"]),
    lr=st.floats(1e-4, 0.1),
    beta1=st.floats(0.0, 0.99),
    beta2=st.floats(0.5, 0.9999),
    eps=st.floats(1e-10, 1e-3),
    wd=st.floats(0.0, 0.5),
    amsgrad=st.booleans(),
)
def test_adam_random_hyperparameters(name, lr, beta1, beta2, eps, wd, amsgrad):
    kwargs = dict(lr=lr, betas=(beta1, beta2), eps=eps, weight_decay=wd, amsgrad=amsgrad)
    opts = ({}, {"lr": lr * 3, "weight_decay": 0.0})
    ours, _ = run(sitp, name, kwargs, opts, 10, "float64")
    theirs, _ = run(torch, name, kwargs, opts, 10, "float64")
    np.testing.assert_allclose(ours, theirs, rtol=1e-9, atol=1e-11)


# ------------------------------------------------------------------ invalid hyperparameters
@pytest.mark.parametrize(
    "name,kwargs,match",
    [
        ("SGD", {"lr": -0.1}, "learning rate"),
        ("SGD", {"lr": 0.1, "momentum": -0.5}, "momentum"),
        ("SGD", {"lr": 0.1, "weight_decay": -1e-4}, "weight_decay"),
        ("SGD", {"lr": 0.1, "nesterov": True}, "Nesterov"),
        ("SGD", {"lr": 0.1, "momentum": 0.9, "dampening": 0.1, "nesterov": True}, "Nesterov"),
        ("Adam", {"lr": -1e-3}, "learning rate"),
        ("Adam", {"betas": (1.0, 0.999)}, "beta parameter at index 0"),
        ("Adam", {"betas": (0.9, -0.1)}, "beta parameter at index 1"),
        ("AdamW", {"betas": (0.9, 1.5)}, "beta parameter at index 1"),
        ("Adam", {"eps": -1e-8}, "epsilon"),
        ("AdamW", {"weight_decay": -0.01}, "weight_decay"),
    ],
)
def test_invalid_hyperparameters(name, kwargs, match):
    w = sitp.zeros(3, requires_grad=True)
    with pytest.raises(ValueError, match=match):
        getattr(sitp.optim, name)([w], **kwargs)
    with pytest.raises(ValueError):  # torch agrees that they are invalid
        getattr(torch.optim, name)([torch.zeros(3, requires_grad=True)], **kwargs)


def test_invalid_option_in_a_group():
    w, b = sitp.zeros(3, requires_grad=True), sitp.zeros(1, requires_grad=True)
    with pytest.raises(ValueError, match="learning rate"):
        sitp.optim.SGD([{"params": [w]}, {"params": [b], "lr": -1.0}], lr=0.1)


# -------------------------------------------------------------------------- the base class
def test_param_groups_take_defaults():
    w, b = make_params(sitp, "float32")
    opt = sitp.optim.AdamW([{"params": [w]}, {"params": b, "lr": 0.5, "weight_decay": 0.0}])
    g0, g1 = opt.param_groups
    assert (g0["lr"], g0["weight_decay"], g0["betas"]) == (1e-3, 1e-2, (0.9, 0.999))
    assert (g1["lr"], g1["weight_decay"]) == (0.5, 0.0)
    assert g1["params"][0] is b  # a lone tensor becomes a list
    assert "Parameter Group 1" in repr(opt) and "lr: 0.5" in repr(opt)


def test_add_param_group_checks():
    w, b = make_params(sitp, "float32")
    opt = sitp.optim.SGD([w], lr=0.1)
    with pytest.raises(ValueError, match="more than one parameter group"):
        opt.add_param_group({"params": [w]})
    with pytest.raises(ValueError, match="non-leaf"):
        opt.add_param_group({"params": [b * 2]})
    with pytest.raises(TypeError, match="ordered collections"):
        opt.add_param_group({"params": {b}})
    with pytest.raises(TypeError, match="only optimize Tensors"):
        opt.add_param_group({"params": [1.0]})
    with pytest.raises(ValueError, match="empty parameter list"):
        sitp.optim.SGD([], lr=0.1)
    opt.add_param_group({"params": [b], "momentum": 0.9})
    assert opt.param_groups[1]["lr"] == 0.1 and opt.param_groups[1]["momentum"] == 0.9
    with pytest.raises(ValueError, match="required"):
        sitp.optim.Optimizer([w], {"lr": sitp.optim.optimizer.required})


def test_zero_grad():
    w, b = make_params(sitp, "float32")
    opt = sitp.optim.SGD([w, b], lr=0.1)
    loss_fn(sitp, w, b, "float32").backward()
    opt.zero_grad(set_to_none=False)
    assert w.grad is not None and float(w.grad.abs().sum()) == 0.0
    opt.zero_grad()  # set_to_none=True by default, as in torch
    assert w.grad is None and b.grad is None


def test_step_skips_params_without_grad_and_returns_closure_loss():
    w, b = make_params(sitp, "float32")
    opt = sitp.optim.Adam([w, b], lr=0.1)

    def closure():
        opt.zero_grad()
        loss = ((w - 1) ** 2).sum()  # b gets no gradient
        loss.backward()
        return loss

    with sitp.no_grad():  # the closure still records a graph (it runs under enable_grad)
        loss = opt.step(closure)
    assert math.isclose(float(loss), float(((sitp.tensor(W0_D) - 1) ** 2).sum()), rel_tol=1e-5)
    assert np.allclose(b.detach().numpy(), B0) and b not in opt.state
    assert int(opt.state[w]["step"].item()) == 1


# ---------------------------------------------------------------------------- checkpoints
def _train(opt, w, b, steps):
    for _ in range(steps):
        opt.zero_grad()
        loss_fn(sitp, w, b, "float32").backward()
        opt.step()


@pytest.mark.parametrize(
    "name,kwargs",
    [
        ("SGD", {"lr": 0.01, "momentum": 0.9, "nesterov": True}),
        ("Adam", {"lr": 0.01, "weight_decay": 0.01, "amsgrad": True}),
        ("AdamW", {"lr": 0.01}),
    ],
)
def test_state_dict_round_trip_equals_uninterrupted_run(name, kwargs):
    w, b = make_params(sitp, "float32")
    opt = getattr(sitp.optim, name)(groups(w, b, TWO_GROUPS), **kwargs)
    _train(opt, w, b, 40)

    w2, b2 = make_params(sitp, "float32")
    opt2 = getattr(sitp.optim, name)(groups(w2, b2, TWO_GROUPS), **kwargs)
    _train(opt2, w2, b2, 20)
    saved = copy.deepcopy(opt2.state_dict())
    params_saved = [w2.detach().clone(), b2.detach().clone()]
    _train(opt2, w2, b2, 5)  # the saved state must not follow this

    w3 = params_saved[0].requires_grad_()
    b3 = params_saved[1].requires_grad_()
    opt3 = getattr(sitp.optim, name)(groups(w3, b3, ({}, {})), **kwargs)
    opt3.load_state_dict(saved)
    assert [g["lr"] for g in opt3.param_groups] == [0.05, 0.02]  # options come from the file
    _train(opt3, w3, b3, 20)
    np.testing.assert_array_equal(w3.detach().numpy(), w.detach().numpy())
    np.testing.assert_array_equal(b3.detach().numpy(), b.detach().numpy())


@pytest.mark.parametrize(
    "name,kwargs",
    [
        ("SGD", {"lr": 0.01, "momentum": 0.9}),
        ("AdamW", {"lr": 0.01, "amsgrad": True}),
    ],
)
def test_state_dict_has_torch_format_and_loads_torch_checkpoints(name, kwargs):
    ours, opt_s = run(sitp, name, kwargs, TWO_GROUPS, 10, "float64")
    theirs, opt_t = run(torch, name, kwargs, TWO_GROUPS, 10, "float64")
    sd_s, sd_t = opt_s.state_dict(), opt_t.state_dict()
    assert sd_s["state"].keys() == sd_t["state"].keys() == {0, 1}
    for i in (0, 1):
        assert sd_s["state"][i].keys() == sd_t["state"][i].keys()
        for k, v in sd_t["state"][i].items():
            np.testing.assert_allclose(sd_s["state"][i][k].numpy(), v.numpy(), **F64)
    for gs, gt in zip(sd_s["param_groups"], sd_t["param_groups"]):
        assert gs["params"] == gt["params"]
        assert {k: gs[k] for k in gs if k in gt} == {k: gt[k] for k in gs if k in gt}
        assert {"lr", "weight_decay"} <= gs.keys()

    # a torch checkpoint, loaded into sitp, continues exactly as torch continues
    w, b = (
        sitp.tensor(theirs[-1][:4], requires_grad=True),
        sitp.tensor(theirs[-1][4:], requires_grad=True),
    )
    opt = getattr(sitp.optim, name)(groups(w, b, ({}, {})), lr=1.0)
    opt.load_state_dict(sd_t)
    wt, bt = opt_t.param_groups[0]["params"][0], opt_t.param_groups[1]["params"][0]
    for _ in range(10):
        for o, (p, q), lib in ((opt, (w, b), sitp), (opt_t, (wt, bt), torch)):
            o.zero_grad()
            loss_fn(lib, p, q, "float64").backward()
            o.step()
    np.testing.assert_allclose(w.detach().numpy(), wt.detach().numpy(), **F64)
    np.testing.assert_allclose(b.detach().numpy(), bt.detach().numpy(), **F64)


def test_load_state_dict_checks_shapes():
    w, b = make_params(sitp, "float32")
    opt = sitp.optim.SGD([w, b], lr=0.1)
    with pytest.raises(ValueError, match="number of parameter groups"):
        opt.load_state_dict(sitp.optim.SGD(groups(w, b, ({}, {})), lr=0.1).state_dict())
    with pytest.raises(ValueError, match="size of optimizer's group"):
        opt.load_state_dict(sitp.optim.SGD([w], lr=0.1).state_dict())


# ---------------------------------------------------------------------------- schedulers
def _lrs(lib, make_sched, steps=100, base=(0.1, 0.03)):
    params = [lib.zeros(2, requires_grad=True), lib.zeros(1, requires_grad=True)]
    opt = lib.optim.SGD(
        [{"params": [params[0]], "lr": base[0]}, {"params": [params[1]], "lr": base[1]}]
    )
    sched = make_sched(lib, opt)
    out = [list(sched.get_last_lr())]
    for _ in range(steps):
        opt.step()
        sched.step()
        out.append(list(sched.get_last_lr()))
        assert out[-1] == [g["lr"] for g in opt.param_groups]
    return np.array(out)


def _warmup_cosine_reference(step, warmup=10, total=80, min_ratio=0.0):
    """Hugging Face's lambda (num_cycles=0.5) with progress held at 1 after the end."""
    if step < warmup:
        return step / max(1, warmup)
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    return min_ratio + (1 - min_ratio) * max(0.0, 0.5 * (1.0 + math.cos(math.pi * progress)))


SCHEDULES = {
    "LambdaLR": lambda lib, opt: lib.optim.lr_scheduler.LambdaLR(
        opt, [lambda s: 0.97**s, lambda s: 1 / (1 + s)]
    ),
    "StepLR": lambda lib, opt: lib.optim.lr_scheduler.StepLR(opt, step_size=7, gamma=0.5),
    "CosineAnnealingLR": lambda lib, opt: lib.optim.lr_scheduler.CosineAnnealingLR(
        opt, T_max=40, eta_min=1e-3
    ),
    "CosineAnnealingLR-100": lambda lib, opt: lib.optim.lr_scheduler.CosineAnnealingLR(
        opt, T_max=100
    ),
}


@pytest.mark.parametrize("name", SCHEDULES)
def test_scheduler_matches_torch(name):
    ours, theirs = _lrs(sitp, SCHEDULES[name]), _lrs(torch, SCHEDULES[name])
    assert ours.shape == (101, 2)
    np.testing.assert_allclose(ours, theirs, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("min_ratio", [0.0, 0.1])
def test_warmup_cosine(min_ratio):
    def ours(lib, opt):
        return sitp.optim.lr_scheduler.get_cosine_schedule_with_warmup(
            opt, 10, 80, min_lr_ratio=min_ratio
        )

    def theirs(lib, opt):  # the same schedule built from torch's LambdaLR
        return torch.optim.lr_scheduler.LambdaLR(
            opt, lambda s: _warmup_cosine_reference(s, min_ratio=min_ratio)
        )

    a, b = _lrs(sitp, ours), _lrs(torch, theirs)
    np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(a[0], [0.0, 0.0])  # warmup starts at 0
    np.testing.assert_allclose(a[10], [0.1, 0.03])  # peak after warmup
    np.testing.assert_allclose(a[80:], np.tile([0.1, 0.03], (21, 1)) * min_ratio, atol=1e-15)
    assert np.all(np.diff(a[:11, 0]) > 0) and np.all(np.diff(a[10:81, 0]) < 0)
    with pytest.raises(ValueError):
        sitp.optim.lr_scheduler.get_cosine_schedule_with_warmup(
            sitp.optim.SGD([sitp.zeros(1, requires_grad=True)], lr=0.1), 20, 10
        )


def test_scheduler_state_dict_and_resume():
    def make(lib, opt):
        return lib.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=50)

    full = _lrs(sitp, make, steps=30)
    p = sitp.zeros(1, requires_grad=True)
    opt = sitp.optim.SGD([{"params": [p], "lr": 0.1}, {"params": [sitp.zeros(1)], "lr": 0.03}])
    sched = make(sitp, opt)
    for _ in range(12):
        opt.step()
        sched.step()
    state = sched.state_dict()
    assert "optimizer" not in state and state["last_epoch"] == 12
    opt2 = sitp.optim.SGD(
        [{"params": [sitp.zeros(1)], "lr": 0.1}, {"params": [sitp.zeros(1)], "lr": 0.03}]
    )
    sched2 = make(sitp, opt2)
    sched2.load_state_dict(state)
    for _ in range(18):
        opt2.step()
        sched2.step()
    np.testing.assert_allclose(sched2.get_last_lr(), full[30], rtol=1e-15)
    with pytest.raises(KeyError, match="initial_lr"):
        sitp.optim.lr_scheduler.StepLR(sitp.optim.SGD([sitp.zeros(1)], lr=0.1), 3, last_epoch=5)
    with pytest.raises(ValueError, match="lr_lambdas"):
        sitp.optim.lr_scheduler.LambdaLR(opt2, [lambda s: 1.0])


def test_optimizer_with_scheduler_matches_torch():
    def sched(lib, opt):
        return lib.optim.lr_scheduler.StepLR(opt, step_size=10, gamma=0.5)

    kwargs = {"lr": 0.01, "momentum": 0.9}
    ours, _ = run(sitp, "SGD", kwargs, TWO_GROUPS, 50, "float64", sched=sched)
    theirs, _ = run(torch, "SGD", kwargs, TWO_GROUPS, 50, "float64", sched=sched)
    np.testing.assert_allclose(ours, theirs, **F64)


def test_named_parameters_as_in_torch():
    ws, wt = make_params(sitp, "float32"), make_params(torch, "float32")
    opt_s = sitp.optim.AdamW([("weight", ws[0]), ("bias", ws[1])], lr=0.1)
    opt_t = torch.optim.AdamW([("weight", wt[0]), ("bias", wt[1])], lr=0.1)
    assert opt_s.param_groups[0]["params"][1] is ws[1]
    assert (
        opt_s.state_dict()["param_groups"][0]["param_names"]
        == opt_t.state_dict()["param_groups"][0]["param_names"]
        == ["weight", "bias"]
    )
    with pytest.raises(ValueError, match="names"):
        sitp.optim.SGD([("weight", ws[0]), ws[1]], lr=0.1)


@pytest.mark.parametrize(
    "cls, kw",
    [(sitp.optim.Adam, dict(weight_decay=0.1)), (sitp.optim.AdamW, dict(weight_decay=0.1))],
)
def test_fused_adam_kernel_equals_the_composed_step(cls, kw):
    """A contiguous parameter takes the one-pass kernel; a transposed (non-contiguous)
    one takes the composed ops the book shows. Both give the same trajectory."""
    import numpy as np

    w0 = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float64)
    fused = sitp.tensor(w0, requires_grad=True)
    composed = sitp.tensor(np.ascontiguousarray(w0.T)).T.detach().requires_grad_(True)
    assert fused.is_contiguous() and not composed.is_contiguous()
    opts = [cls([fused], lr=0.05, **kw), cls([composed], lr=0.05, **kw)]
    for _ in range(20):
        for w, opt in zip((fused, composed), opts):
            opt.zero_grad()
            ((w * w).sum() + w.sin().sum()).backward()
            opt.step()
    np.testing.assert_allclose(
        fused.detach().numpy(), composed.detach().numpy(), rtol=1e-12, atol=1e-14
    )


@pytest.mark.parametrize("n_threads", [1, 2])
def test_large_parameters_step_on_threads_as_torch(n_threads):
    """A parameter past the fused kernel's parallel threshold is updated in bands on
    numba's threads (an odd size: the bands differ by one entry); AdamW's trajectory
    equals torch's, on one thread and on two."""
    w0 = np.random.default_rng(1).standard_normal((257, 131)).astype(np.float32)
    assert w0.size >= fused_adam._PARALLEL_MIN
    ws, wt = sitp.tensor(w0, requires_grad=True), torch.tensor(w0, requires_grad=True)
    opt_s = sitp.optim.AdamW([ws], lr=0.01, weight_decay=0.1)
    opt_t = torch.optim.AdamW([wt], lr=0.01, weight_decay=0.1)
    with threads(n_threads):
        for _ in range(5):
            for w, opt in ((ws, opt_s), (wt, opt_t)):
                opt.zero_grad()
                (w * w).sum().backward()
                opt.step()
    np.testing.assert_allclose(ws.detach().numpy(), wt.detach().numpy(), rtol=1e-5, atol=1e-6)

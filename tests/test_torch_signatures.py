"""Every torch name that sitp has accepts torch's parameter names, and every submodule a
script imports by dotted path exists in sitp under the same path.

The names come from docs/api/torch-names.json (scripts/torch_coverage.py). torch's
signature is read with ``inspect.signature``. A name that can be checked on no machine is
not collected: a C builtin without a signature (most of ``torch.*`` and
``torch.Tensor.*``), a sitp function that is ``x.name(...)`` (the Tensor method is a
case itself), or a sitp callable that takes ``**kwargs`` (it accepts every name). Their
count, by reason, is printed once in the run's summary ("cases not collected");
test_names_not_collected_are_what_their_reason_says checks each. A gap that is known and
not fixed yet is listed in KNOWN_GAPS with why; the test fails when one is fixed, so the
list stays true.
"""

import importlib
import importlib.util
import inspect
import types
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch

import sitp
from sitp.nn.modules.module import Module

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location(
    "torch_coverage", ROOT / "scripts" / "torch_coverage.py"
)
tc = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(tc)

# torch name -> why sitp does not take all of torch's parameters yet
KNOWN_GAPS = {}

# torch parameters that sitp takes under another name for a reason a script never sees
SKIP_PARAMS = {"self"}


def _torch_params(obj):
    sig = inspect.signature(obj)
    return [
        p
        for p in sig.parameters.values()
        if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) and p.name not in SKIP_PARAMS
    ]


def _sitp_accepts(obj):
    """sitp's parameter names, or None if it forwards everything (checked elsewhere)."""
    if inspect.isclass(obj) and issubclass(obj, Module) and obj.__init__ is Module.__init__:
        return set()  # Module.__init__ raises TypeError for any argument
    if getattr(obj, "__code__", None) is sitp.exp.__code__:
        return None  # sitp.exp(x, ...) is x.exp(...): the Tensor method is checked
    params = inspect.signature(obj).parameters
    if any(p.kind == p.VAR_KEYWORD for p in params.values()):
        return None
    return set(params)


def _cases():
    cov = tc.coverage(tc.load())
    for ns, names in cov.items():
        tobj = tc.resolve(ns)
        for n, ok in names.items():
            if not ok:
                continue
            t = getattr(tobj, n)
            if isinstance(t, types.ModuleType) or not callable(t):
                continue
            if ns == "torch" and n in ("Tensor", "Generator", "device", "dtype", "Size"):
                continue  # types: their construction is tested with the classes themselves
            yield f"{ns}.{n}"


def _lookup(full):
    ns, n = full.rsplit(".", 1)
    return getattr(tc.resolve(ns), n), getattr(tc.resolve(tc.sitp_name(ns)), n)


NO_SIGNATURE = "torch's C builtin has no inspectable signature"
FORWARDS = "sitp's is x.name(...), and the Tensor method is a case itself"
ANY_KEYWORD = "sitp's takes **kwargs, so it accepts every name"


def _why_unchecked(name):
    """Why ``name`` cannot be checked on any machine, or None if it can."""
    t, s = _lookup(name)
    try:
        _torch_params(t)
    except (ValueError, TypeError):
        return NO_SIGNATURE
    if _sitp_accepts(s) is not None:
        return None
    return FORWARDS if getattr(s, "__code__", None) is sitp.exp.__code__ else ANY_KEYWORD


ALL_NAMES = sorted(_cases())
NOT_COLLECTED = {name: why for name in ALL_NAMES if (why := _why_unchecked(name)) is not None}
CASES = [name for name in ALL_NAMES if name not in NOT_COLLECTED]


@pytest.mark.parametrize("name", CASES)
def test_accepts_torchs_parameter_names(name):
    t, s = _lookup(name)
    wanted, accepts = _torch_params(t), _sitp_accepts(s)
    missing = [p.name for p in wanted if p.name not in accepts]
    if name in KNOWN_GAPS:
        assert missing, f"{name} is fixed: remove it from KNOWN_GAPS"
        pytest.xfail(KNOWN_GAPS[name])
    assert not missing, f"{name}: sitp lacks torch's parameters {missing}"


def test_some_names_are_really_checked():
    """Most names are C builtins in torch; the Python ones must still be many."""
    assert len(CASES) >= 80, len(CASES)
    assert not set(KNOWN_GAPS) - set(CASES), "a known gap that is not checked"


def test_names_not_collected_are_what_their_reason_says(record_property):
    """Each name left out is what its reason says; the count goes to the run's summary."""
    for name, why in NOT_COLLECTED.items():
        t, s = _lookup(name)
        if why == NO_SIGNATURE:
            made_in_c = not inspect.isfunction(t.__init__ if inspect.isclass(t) else t)
            assert made_in_c, f"{name} is Python code: its signature should be readable"
            with pytest.raises((ValueError, TypeError)):
                inspect.signature(t)
        elif why == FORWARDS:
            assert f"torch.Tensor.{name.rsplit('.', 1)[1]}" in CASES, name
        else:
            params = inspect.signature(s).parameters.values()
            assert any(p.kind == p.VAR_KEYWORD for p in params), name
    counts = Counter(NOT_COLLECTED.values())
    record_property(
        "not_collected",
        f"tests/test_torch_signatures.py: {len(NOT_COLLECTED)} of {len(ALL_NAMES)} torch names "
        "not collected (" + "; ".join(f"{n}: {why}" for why, n in sorted(counts.items())) + ")",
    )


SUBMODULES = [
    "torch.utils.data.dataloader",
    "torch.utils.data.dataset",
    "torch.utils.data.sampler",
    "torch.nn.modules",
    "torch.nn.modules.module",
    "torch.nn.modules.linear",
    "torch.nn.modules.activation",
    "torch.nn.modules.container",
    "torch.nn.modules.conv",
    "torch.nn.modules.dropout",
    "torch.nn.modules.normalization",
    "torch.nn.modules.sparse",
    "torch.nn.modules.rnn",
    "torch.nn.parameter",
    "torch.nn.functional",
    "torch.nn.init",
    "torch.nn.utils",
    "torch.optim.optimizer",
    "torch.optim.lr_scheduler",
    "torch.optim.sgd",
    "torch.optim.adam",
    "torch.autograd",
    "torch.serialization",
]


@pytest.mark.parametrize("dotted", SUBMODULES)
def test_submodule_imports_under_the_same_path(dotted):
    assert isinstance(importlib.import_module(dotted), types.ModuleType)
    mod = importlib.import_module(tc.sitp_name(dotted))
    assert isinstance(mod, types.ModuleType)


@pytest.mark.parametrize(
    "dotted,name",
    [
        ("torch.utils.data.dataloader", "DataLoader"),
        ("torch.utils.data.dataset", "Dataset"),
        ("torch.utils.data.sampler", "RandomSampler"),
        ("torch.nn.modules.module", "Module"),
        ("torch.nn.parameter", "Parameter"),
        ("torch.optim.optimizer", "Optimizer"),
        ("torch.nn.modules.linear", "Linear"),
        ("torch.optim.adam", "Adam"),
        ("torch.optim.sgd", "SGD"),
    ],
)
def test_from_submodule_import_name(dotted, name):
    ns = {}
    exec(f"from {tc.sitp_name(dotted)} import {name}", ns)
    assert ns[name] is tc.resolve(tc.sitp_name(dotted) + "." + name)
    exec(f"from {dotted} import {name}", ns)  # torch has it there too


@pytest.mark.parametrize("lib", [torch, sitp], ids=["torch", "sitp"])
@pytest.mark.parametrize("deco", ["no_grad", "enable_grad", "inference_mode"])
def test_bare_grad_mode_decorators(lib, deco):
    w = lib.ones(2, requires_grad=True)

    @getattr(lib, deco)
    def f(x):
        return x * 2

    @getattr(lib, deco)()
    def g(x):
        return x * 2

    with lib.no_grad():
        assert f(w).requires_grad == g(w).requires_grad == (deco == "enable_grad")
    assert f.__name__ == "f"


@pytest.mark.parametrize("layer", ["ReLU", "SiLU"])
def test_inplace_activation_writes_its_input_like_torch(layer):
    import numpy as np

    results = []
    for lib in (torch, sitp):
        w = lib.tensor([-1.0, 0.5, 2.0], requires_grad=True)
        h = w * 3
        out = getattr(lib.nn, layer)(inplace=True)(h)
        assert out is h
        (out * lib.tensor([1.0, 2.0, 3.0])).sum().backward()
        results.append((h.detach().numpy(), w.grad.numpy()))
    for a, b in zip(*results):
        np.testing.assert_allclose(a, b, rtol=1e-6)


@pytest.mark.parametrize(
    "make",
    [
        lambda L: L.nn.Conv1d(2, 2, 3, groups=2),
        lambda L: L.nn.Conv1d(2, 2, 3, padding_mode="reflect"),
        lambda L: L.nn.Embedding(5, 3, max_norm=1.0),
        lambda L: L.nn.Embedding(5, 3, scale_grad_by_freq=True),
        lambda L: L.nn.Embedding(5, 3, sparse=True),
    ],
    ids=["conv_groups", "conv_padding_mode", "emb_max_norm", "emb_scale_grad", "emb_sparse"],
)
def test_unsupported_torch_options_are_refused_not_ignored(make):
    make(torch)  # torch takes it
    with pytest.raises(NotImplementedError):
        make(sitp)


def test_embedding_weight_and_freeze_like_torch():
    import numpy as np

    table = np.arange(12, dtype=np.float32).reshape(4, 3)
    for freeze in (False, True):
        t = torch.nn.Embedding(4, 3, _weight=torch.tensor(table), _freeze=freeze)
        s = sitp.nn.Embedding(4, 3, _weight=sitp.tensor(table), _freeze=freeze)
        idx = [2, 0]
        np.testing.assert_array_equal(
            s(sitp.tensor(idx)).detach().numpy(), t(torch.tensor(idx)).detach().numpy()
        )
        assert s.weight.requires_grad == t.weight.requires_grad == (not freeze)


def test_batchnorm_without_bias_like_torch():
    import numpy as np

    x = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)
    t, s = torch.nn.BatchNorm1d(3, bias=False), sitp.nn.BatchNorm1d(3, bias=False)
    assert s.bias is None and t.bias is None
    assert [n for n, _ in s.named_parameters()] == [n for n, _ in t.named_parameters()]
    np.testing.assert_allclose(
        s(sitp.tensor(x)).detach().numpy(),
        t(torch.tensor(x)).detach().numpy(),
        rtol=1e-5,
        atol=1e-6,
    )


@pytest.mark.parametrize("lib", [torch, sitp], ids=["torch", "sitp"])
def test_grad_unused_input_like_torch(lib):
    x = lib.ones(2, requires_grad=True)
    y = lib.ones(2, requires_grad=True)
    out = (x * 3).sum()
    with pytest.raises(RuntimeError, match="not have been used"):
        lib.autograd.grad(out, [x, y], retain_graph=True)
    gx, gy = lib.autograd.grad(out, [x, y], allow_unused=True, retain_graph=True)
    assert gy is None and gx.tolist() == [3.0, 3.0]
    gx, gy = lib.autograd.grad(out, [x, y], materialize_grads=True)
    assert gy.tolist() == [0.0, 0.0]


@pytest.mark.parametrize(
    "call",
    [
        lambda L, t: t.backward(create_graph=True),
        lambda L, t: L.autograd.grad(t, [t], create_graph=True),
    ],
    ids=["backward", "grad"],
)
def test_higher_order_gradients_are_refused(call):
    x = sitp.ones(2, requires_grad=True)
    with pytest.raises(NotImplementedError):
        call(sitp, (x * x).sum())


def test_norm_dtype_like_torch():
    import numpy as np

    v = [3.0, 4.0, 12.0]
    s = sitp.tensor(v).norm(dtype=sitp.float64)
    t = torch.tensor(v).norm(dtype=torch.float64)
    assert s.dtype is sitp.float64
    np.testing.assert_allclose(s.item(), t.item())


def test_set_rng_state_new_state_keyword_like_torch():
    for lib in (torch, sitp):
        state = lib.get_rng_state()
        a = lib.rand(3)
        lib.set_rng_state(new_state=state)
        assert lib.rand(3).tolist() == a.tolist()


def test_split_function_takes_torchs_keyword():
    import numpy as np

    x = np.arange(10, dtype=np.float32)
    for size in (3, [2, 8]):
        s = sitp.split(sitp.tensor(x), split_size_or_sections=size, dim=0)
        t = torch.split(torch.tensor(x), split_size_or_sections=size, dim=0)
        assert [p.tolist() for p in s] == [p.tolist() for p in t]


LEGACY = [
    (None, None),
    (True, None),
    (False, None),
    (None, True),
    (None, False),
    (True, True),
    (False, True),
    (True, False),
    (False, False),
]


@pytest.mark.parametrize("loss", ["MSELoss", "BCELoss", "CrossEntropyLoss"])
@pytest.mark.parametrize("size_average,reduce", LEGACY)
def test_legacy_size_average_and_reduce_like_torch(loss, size_average, reduce):
    import warnings

    import numpy as np

    rng = np.random.default_rng(0)
    if loss == "CrossEntropyLoss":
        x, y = rng.standard_normal((4, 3)).astype(np.float32), np.array([0, 2, 1, 2])
    else:
        x = rng.uniform(0.1, 0.9, (4, 3)).astype(np.float32)
        y = rng.uniform(0, 1, (4, 3)).astype(np.float32)
    out, caught = [], []
    for lib in (torch, sitp):
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            m = getattr(lib.nn, loss)(
                size_average=size_average, reduce=reduce, reduction="sum"
            )  # the legacy flags win when given
        caught.append(
            [(type(x.message), str(x.message)) for x in w if "size_average" in str(x.message)]
        )
        out.append((m.reduction, m(lib.tensor(x), lib.tensor(y)).detach().numpy()))
    assert caught[0] == caught[1]
    assert bool(caught[1]) == (size_average is not None or reduce is not None)
    assert out[0][0] == out[1][0]
    np.testing.assert_allclose(out[1][1], out[0][1], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("shape", [(3,), (2, 3)])
def test_bce_loss_weight_like_torch(shape):
    import numpy as np

    rng = np.random.default_rng(1)
    x = rng.uniform(0.05, 0.95, (2, 3)).astype(np.float32)
    y = rng.uniform(0, 1, (2, 3)).astype(np.float32)
    w = rng.uniform(0.5, 2, shape).astype(np.float32)
    res = []
    for lib in (torch, sitp):
        m = lib.nn.BCELoss(weight=lib.tensor(w))
        assert [n for n, _ in m.named_buffers()] == ["weight"]
        xi = lib.tensor(x, requires_grad=True)
        loss = m(xi, lib.tensor(y))
        loss.backward()
        res.append((loss.item(), xi.grad.numpy()))
    np.testing.assert_allclose(res[1][0], res[0][0], rtol=1e-5)
    np.testing.assert_allclose(res[1][1], res[0][1], rtol=1e-5, atol=1e-7)


def _backward_case(lib, how):
    import numpy as np

    rng = np.random.default_rng(2)
    a, b = (
        lib.tensor(rng.standard_normal(3).astype(np.float32), requires_grad=True) for _ in range(2)
    )
    h = a * b  # shared by both outputs
    y1, y2 = (h * h).sum(), h.exp()
    g2 = lib.tensor([1.0, -2.0, 0.5])
    if how == "two":
        lib.autograd.backward([y1, y2], [None, g2])
    elif how == "tuple_kw":
        lib.autograd.backward(tensors=(y1, y2), grad_tensors=(None, g2), retain_graph=False)
    elif how == "one":
        lib.autograd.backward(y1)
    elif how == "inputs":
        lib.autograd.backward([y1, y2], [None, g2], inputs=[a])
    elif how == "inputs_interior":
        lib.autograd.backward([y1, y2], [None, g2], inputs=[h, b])
        return [None if t.grad is None else t.grad.numpy() for t in (a, b, h)]
    return [None if t.grad is None else t.grad.numpy() for t in (a, b)]


@pytest.mark.parametrize("how", ["two", "tuple_kw", "one", "inputs", "inputs_interior"])
def test_autograd_backward_like_torch(how):
    import warnings

    import numpy as np

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch warns when .grad of a non-leaf is read
        t, s = _backward_case(torch, how), _backward_case(sitp, how)
    assert [g is None for g in s] == [g is None for g in t]
    for gs, gt in zip(s, t):
        if gt is not None:
            np.testing.assert_allclose(gs, gt, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("lib", [torch, sitp], ids=["torch", "sitp"])
def test_autograd_backward_errors_like_torch(lib):
    x = lib.ones(2, requires_grad=True)
    with pytest.raises(RuntimeError, match="implicitly created only for scalar"):
        lib.autograd.backward([x * 2, (x * 3).sum()])
    with pytest.raises(RuntimeError, match="does not require grad"):
        lib.autograd.backward([(x * 2).sum(), lib.ones(())])
    with pytest.raises(RuntimeError, match="Mismatch in shape"):
        lib.autograd.backward([x * 3, (x * 2).sum()], [lib.ones(3), None])
    with pytest.raises(RuntimeError, match="cannot be empty"):
        lib.autograd.backward((x * 2).sum(), inputs=[])
    y = (x * x).sum()
    lib.autograd.backward([y, y * 2])
    with pytest.raises(RuntimeError, match="second time"):
        lib.autograd.backward([y])


@pytest.mark.parametrize("inputs_of", [lambda a, b: [a], lambda a, b: a, lambda a, b: (b, a)])
def test_tensor_backward_inputs_like_torch(inputs_of):
    """``y.backward(inputs=...)`` accumulates only into the tensors named, as in torch."""
    grads = {}
    for lib in (torch, sitp):
        a = lib.tensor([1.0, 2.0, -0.5], requires_grad=True)
        b = lib.tensor([3.0, 4.0, 0.25], requires_grad=True)
        (a * b * a).sum().backward(inputs=inputs_of(a, b))
        grads[lib.__name__] = [
            None if t.grad is None else np.asarray(t.grad.tolist()) for t in (a, b)
        ]
    for s, t in zip(grads["sitp"], grads["torch"]):
        assert (s is None) == (t is None)
        if t is not None:
            np.testing.assert_allclose(s, t)

"""``sitp.backends`` against ``torch.backends``: the same switches under the same names,
with torch's defaults and checks, honoured or (documented) kept without effect."""

import importlib
import os

import numpy as np
import pytest
import torch

import sitp
import sitp.backends

SWITCHES = [
    ("cuda.matmul", "allow_tf32"),
    ("cuda.matmul", "allow_fp16_reduced_precision_reduction"),
    ("cuda.matmul", "allow_bf16_reduced_precision_reduction"),
    ("cudnn", "allow_tf32"),
    ("cudnn", "benchmark"),
    ("cudnn", "deterministic"),
    ("cudnn", "enabled"),
    ("mkldnn", "enabled"),
]


def owner(lib, path):
    obj = lib.backends
    for part in path.split("."):
        obj = getattr(obj, part)
    return obj


@pytest.fixture(autouse=True)
def restore_switches():
    """The switches are process-wide: put every one back after each test."""
    saved = {
        (lib, path, name): getattr(owner(lib, path), name)
        for lib in (torch, sitp)
        for path, name in SWITCHES
    }
    yield
    for (lib, path, name), value in saved.items():
        setattr(owner(lib, path), name, value)


@pytest.mark.parametrize("path,name", SWITCHES, ids=[f"{p}.{n}" for p, n in SWITCHES])
def test_switch_defaults_set_and_checks_as_torch(path, name):
    s, t = owner(sitp, path), owner(torch, path)
    assert getattr(s, name) is getattr(t, name)  # torch's default
    for value in (True, False):
        setattr(s, name, value)
        setattr(t, name, value)
        assert getattr(s, name) is value is getattr(t, name)
    errors = []
    for obj in (s, t):
        with pytest.raises((RuntimeError, TypeError)) as info:
            setattr(obj, name, "yes")
        errors.append(info)
    assert errors[0].type is errors[1].type
    assert "expects a bool" in str(errors[0].value) and "str" in str(errors[0].value)
    if "reduced_precision" in name:  # these take a (bool, bool) pair as well
        setattr(s, name, (False, True))
        setattr(t, name, (False, True))
        assert getattr(s, name) is False is getattr(t, name)


def test_unknown_matmul_switch_is_an_error_as_in_torch():
    for lib in (sitp, torch):
        with pytest.raises(AttributeError, match="Unknown attribute allow_tf33"):
            lib.backends.cuda.matmul.allow_tf33 = True
        with pytest.raises(AttributeError, match="Unknown attribute allow_tf33"):
            lib.backends.cuda.matmul.allow_tf33


def test_cudnn_flags_context_restores():
    for lib in (sitp, torch):
        cudnn = lib.backends.cudnn
        cudnn.benchmark = True
        with cudnn.flags(enabled=False, benchmark=False, deterministic=True):
            assert (cudnn.enabled, cudnn.benchmark, cudnn.deterministic) == (False, False, True)
        assert (cudnn.enabled, cudnn.benchmark, cudnn.deterministic) == (True, True, False)


def test_availability_of_libraries_sitp_does_not_use():
    b = sitp.backends
    assert b.cudnn.is_available() is False and b.cudnn.version() is None
    assert b.mps.is_available() is False and b.mps.is_built() is False
    assert b.mkldnn.is_available() is False  # torch's CPU build has oneDNN; sitp does not
    assert b.opt_einsum.is_available() is False and b.opt_einsum.get_opt_einsum() is None
    assert b.opt_einsum.enabled is False and b.opt_einsum.strategy is None
    assert b.cuda.is_built() is True
    # where torch lacks the library too, both say so alike
    assert torch.backends.mps.is_available() is False
    if not torch.backends.cudnn.is_available():
        assert torch.backends.cudnn.version() is None


def test_cpu_capability_names_the_isa_sitp_compiles_for():
    cap = sitp.backends.cpu.get_cpu_capability()
    isa = sitp._target.isa_name()
    assert cap == {"AVX-512": "AVX512", "AVX2": "AVX2"}.get(isa, "DEFAULT")
    theirs = torch.backends.cpu.get_cpu_capability()
    same_target = not os.environ.get("NUMBA_CPU_NAME") and not os.environ.get("ATEN_CPU_CAPABILITY")
    if same_target and not theirs.startswith(("SVE", "VSX", "Z")):
        assert cap == theirs  # both libraries compiled for this host


def test_switches_change_no_result():
    """Documented as without effect on sitp: a float32 product is the same bits."""
    rng = np.random.default_rng(0)
    a = sitp.tensor(rng.standard_normal((33, 17)).astype(np.float32))
    b = sitp.tensor(rng.standard_normal((17, 9)).astype(np.float32))
    before = (a @ b).numpy()
    sitp.backends.cuda.matmul.allow_tf32 = True
    sitp.backends.cudnn.benchmark = True
    sitp.backends.cudnn.deterministic = True
    np.testing.assert_array_equal((a @ b).numpy(), before)


def test_submodules_import_by_dotted_path_and_flags_are_documented():
    for name in ("cpu", "cuda", "cudnn", "mkldnn", "mps", "opt_einsum"):
        mod = importlib.import_module(f"sitp.backends.{name}")
        assert getattr(sitp.backends, name) is mod
        assert mod.__doc__, name
    for mod in (sitp.backends.cuda, sitp.backends.cudnn, sitp.backends.mkldnn):
        doc = " ".join(mod.__doc__.split())  # each says its flags do nothing on sitp
        assert "no effect" in doc or "change no result" in doc, mod.__name__

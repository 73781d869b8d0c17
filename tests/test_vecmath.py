"""sitp.kernels.cpu.vecmath (float32 exp and erf without libm) and the fused GELU kernels.

The error bounds are stated in ulps of the float32 result (for a subnormal
result, in units of the smallest subnormal, 2**-149). Measured over every 7th
float32 in [-104, 89] (exp) and every 3rd in [1e-30, 4.5] (erf): exp 1.26 ulp,
erf 5.82 ulp (its worst case is near x = 3, where erf is close to 1: an
absolute error of 3.5e-7). The bounds below leave a little room above those.
"""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as TF
from hypothesis import given, settings
from hypothesis import strategies as st
from numba import njit

import sitp
from sitp.autograd.gradcheck import gradcheck
from sitp.kernels.cpu.fused.gelu import gelu_backward_kernel, gelu_kernel
from sitp.kernels.cpu.vecmath import FASTMATH, erf_f32, exp_f32
from sitp.nn import functional as F

EXP_ULPS = 1.5
# erf_f32's largest error on the dense grid below: 5.66 ulp where the target has fused
# multiply-adds (fastmath contracts the polynomials; AVX2 and AVX-512), 6.12 on x86-64's
# baseline (SSE2), which has none and rounds every product (both measured with the grid)
ERF_ULPS = 6.25
SETTINGS = settings(max_examples=30, deadline=None)
F32 = np.float32


@njit(fastmath=FASTMATH, error_model="numpy")
def _map(x, out, which):
    """exp_f32 (which 0) or erf_f32 (1) over an array: compiled as the kernels are."""
    if which == 0:
        for i in range(x.size):
            out[i] = exp_f32(x[i])
    else:
        for i in range(x.size):
            out[i] = erf_f32(x[i])


def vexp(x):
    x = np.asarray(x, F32)
    out = np.empty_like(x)
    _map(x, out, 0)
    return out


def verf(x):
    x = np.asarray(x, F32)
    out = np.empty_like(x)
    _map(x, out, 1)
    return out


def ulps(y, exact):
    """|y - exact| in units of the spacing of float32 at the exact value."""
    exact = np.asarray(exact, np.float64)
    spacing = np.spacing(np.abs(exact).astype(F32)).astype(np.float64)
    return np.abs(np.asarray(y, np.float64) - exact) / spacing


def erf64(x):
    return np.array([math.erf(v) for v in np.asarray(x, np.float64).ravel()]).reshape(np.shape(x))


# ----------------------------------------------------------------------- tanh
def _tanh32(x):
    """sitp's float32 tanh, through the tensor (the launcher picks f32_via_f64_kernel)."""
    return sitp.tensor(np.asarray(x, F32)).tanh().numpy()


def test_tanh_f32_is_correctly_rounded_on_a_dense_grid():
    """Within half a float32 ulp of float64's tanh (what a correctly rounded tanh
    gives), on 2.2 million points from the tiny to the flat part."""
    x = np.concatenate(
        [
            np.linspace(-12, 12, 2_000_001),
            np.linspace(-0.01, 0.01, 100_001),
            np.geomspace(1e-38, 1e-2, 50_001),
            -np.geomspace(1e-38, 1e-2, 50_001),
        ]
    ).astype(F32)
    assert ulps(_tanh32(x), np.tanh(x.astype(np.float64))).max() <= 0.5 + 2.0**-20


def test_tanh_f32_edges():
    got = _tanh32([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 10.0, 50.0, -3e38])
    assert got[:2].tolist() == [0.0, 0.0] and np.signbit(got[1]) and not np.signbit(got[0])
    assert got[2:4].tolist() == [1.0, -1.0] and np.isnan(got[4])
    assert got[5:].tolist() == [F32(1e-45), F32(-1e-45), 1.0, 1.0, -1.0]


def test_tanh_f32_strided_equals_contiguous_and_float64_keeps_libm():
    a = sitp.randn(33, 17)
    np.testing.assert_array_equal(a.t().tanh().numpy(), a.tanh().numpy().T)
    d = sitp.randn(33, dtype=sitp.float64)  # float64 is the C library's tanh
    np.testing.assert_array_equal(d.tanh().numpy(), np.array([math.tanh(v) for v in d.tolist()]))


@SETTINGS
@given(st.floats(-20, 20, width=32))
def test_tanh_f32_hypothesis(v):
    assert ulps(_tanh32([v]), [math.tanh(v)])[0] <= 0.5 + 2.0**-20


def test_exp_f32_rounded_is_correctly_rounded_and_keeps_the_edges():
    """sitp's float32 exp (computed in float64, rounded once): within half an ulp of
    float64's exp on a dense grid from the last subnormal to the overflow, the edges
    exact, and the same bits through a strided view."""
    x = np.concatenate([np.linspace(-104.5, 89.0, 2_000_001), np.linspace(-1, 1, 100_001)])
    x = x.astype(F32)
    got = sitp.tensor(x).exp().numpy()
    exact = np.exp(x.astype(np.float64))
    finite = exact < float(np.finfo(F32).max)
    assert ulps(got[finite], exact[finite]).max() <= 0.5 + 2.0**-20
    assert np.isinf(got[~finite]).all()
    edges = sitp.tensor(np.array([0, -0.0, np.inf, -np.inf, np.nan, -300, 300], F32)).exp()
    e = edges.numpy()
    assert e[:4].tolist() == [1.0, 1.0, np.inf, 0.0] and np.isnan(e[4])
    assert e[5:].tolist() == [0.0, np.inf]
    a = sitp.randn(33, 17) * 5
    np.testing.assert_array_equal(a.t().exp().numpy(), a.exp().numpy().T)


@SETTINGS
@given(st.floats(-110, 95, width=32))
def test_exp_f32_rounded_hypothesis(v):
    got = sitp.tensor(np.array([v], F32)).exp().numpy()[0]
    exact = math.exp(v)
    if exact > float(np.finfo(F32).max):
        assert got == np.inf
    else:
        assert ulps([got], [exact])[0] <= 0.5 + 2.0**-20


# ----------------------------------------------------------------------- exp
def test_exp_f32_dense_grid():
    x = np.concatenate(
        [
            np.linspace(-104, 88.72, 1_000_001),
            np.linspace(-1, 1, 100_001),
            np.geomspace(1e-30, 1e-3, 1001),
            -np.geomspace(1e-30, 1e-3, 1001),
        ]
    ).astype(F32)
    exact = np.exp(x.astype(np.float64))
    assert ulps(vexp(x), exact).max() <= EXP_ULPS


def test_exp_f32_edges():
    fmax = float(np.finfo(F32).max)
    assert vexp([0.0])[0] == 1.0 and vexp([-0.0])[0] == 1.0
    assert vexp([np.inf])[0] == np.inf and vexp([-np.inf])[0] == 0.0
    assert np.isnan(vexp([np.nan])[0])
    # the last finite result and the first overflow
    x_max = F32(88.7)
    while math.exp(float(np.nextafter(x_max, F32(np.inf)))) < fmax:
        x_max = np.nextafter(x_max, F32(np.inf))
    assert (
        np.isfinite(vexp([x_max])[0])
        and ulps(vexp([x_max]), [math.exp(float(x_max))]).max() <= EXP_ULPS
    )
    assert vexp([F32(89.0), F32(1e30), F32(3e38)]).tolist() == [np.inf] * 3
    # the normal/subnormal boundary and the subnormal range are rounded, not flushed
    x = np.linspace(-103.5, -87.0, 10001).astype(F32)
    assert ulps(vexp(x), np.exp(x.astype(np.float64))).max() <= EXP_ULPS
    assert vexp([F32(-104.0), F32(-1e30), F32(-3e38)]).tolist() == [0.0] * 3


@SETTINGS
@given(st.floats(-110, 95, width=32))
def test_exp_f32_hypothesis(v):
    exact = math.exp(v) if v < 88.8 else math.inf
    got = vexp([v])[0]
    if exact > float(np.finfo(F32).max):
        assert got == np.inf
    else:
        assert ulps([got], [exact])[0] <= EXP_ULPS


# ----------------------------------------------------------------------- erf
def test_erf_f32_dense_grid():
    x = np.concatenate(
        [
            np.linspace(-6, 6, 1_000_001),
            np.geomspace(1e-38, 1e-2, 2001),
            -np.geomspace(1e-38, 1e-2, 2001),
        ]
    ).astype(F32)
    assert ulps(verf(x), erf64(x)).max() <= ERF_ULPS


def test_erf_f32_edges():
    assert verf([0.0])[0] == 0.0
    assert np.signbit(verf([-0.0])[0])
    tiny = np.array([1e-45, 1e-40, 1.1754944e-38, 1e-30], F32)  # subnormal, the boundary, small
    assert ulps(verf(tiny), erf64(tiny)).max() <= ERF_ULPS
    assert ulps(verf(-tiny), erf64(-tiny)).max() <= ERF_ULPS
    assert verf([4.0, 10.0, 1e30, np.inf]).tolist() == [1.0] * 4
    assert verf([-4.0, -10.0, -1e30, -np.inf]).tolist() == [-1.0] * 4
    assert np.isnan(verf([np.nan])[0])
    assert np.all(np.abs(verf(np.linspace(-8, 8, 100001))) <= 1.0)


@SETTINGS
@given(st.floats(-8, 8, width=32))
def test_erf_f32_hypothesis(v):
    assert ulps(verf([v]), erf64([v]))[0] <= ERF_ULPS


# ------------------------------------------------------------ GELU vs torch
APPROX = ["none", "tanh"]
DTYPES = [np.float32, np.float64]
# float32 against torch's float32: both err by up to ~1e-6 absolute (1 + erf(x) cancels
# for x < 0), and torch's tanh backward loses up to 1e-6 |g| more (its 1 - tanh(u)^2
# is 0 once tanh rounds to +-1). The tighter check against exact float64 values is
# test_gelu_float32_close_to_float64.
TOL = {np.float32: dict(rtol=2e-6, atol=5e-6), np.float64: dict(rtol=1e-12, atol=1e-13)}


def _against_torch(x, g, approximate, dt, view=None):
    """F.gelu forward and backward vs torch on the same values (``view`` makes a strided input)."""
    view = view or (lambda t: t)
    xs = sitp.tensor(x, requires_grad=True)
    xt = torch.tensor(x, requires_grad=True)
    ys, yt = F.gelu(view(xs), approximate=approximate), TF.gelu(view(xt), approximate=approximate)
    assert ys.dtype == (sitp.float32 if dt == np.float32 else sitp.float64)
    np.testing.assert_allclose(ys.detach().numpy(), yt.detach().numpy(), **TOL[dt])
    ys.backward(sitp.tensor(g))
    yt.backward(torch.tensor(g))
    np.testing.assert_allclose(xs.grad.numpy(), xt.grad.numpy(), **TOL[dt])


@pytest.mark.parametrize("approximate", APPROX)
@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("n", [1, 7, 33, 1000, 262147])
def test_gelu_matches_torch(n, dt, approximate):
    r = np.random.default_rng(n)
    x = (r.standard_normal(n) * 3).astype(dt)
    g = r.standard_normal(n).astype(dt)
    _against_torch(x, g, approximate, dt)


@pytest.mark.parametrize("approximate", APPROX)
@pytest.mark.parametrize("dt", DTYPES)
def test_gelu_non_contiguous(dt, approximate):
    r = np.random.default_rng(1)
    x = (r.standard_normal((9, 14)) * 3).astype(dt)
    # a transpose, then every third column: shape (14, 3), strides (1, 42)
    g = r.standard_normal((14, 3)).astype(dt)
    _against_torch(x, g, approximate, dt, view=lambda t: t.t()[:, ::3])


@pytest.mark.parametrize("approximate", APPROX)
def test_gelu_broadcast_upstream_gradient(approximate):
    """y.sum().backward() hands GELU a stride-0 gradient; backward makes it contiguous."""
    x = np.linspace(-5, 5, 21).astype(np.float32)
    xs, xt = sitp.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    F.gelu(xs, approximate).sum().backward()
    TF.gelu(xt, approximate=approximate).sum().backward()
    np.testing.assert_allclose(xs.grad.numpy(), xt.grad.numpy(), **TOL[np.float32])


@SETTINGS
@given(
    st.lists(st.floats(-30, 30, width=32), min_size=1, max_size=50),
    st.sampled_from(APPROX),
    st.sampled_from(DTYPES),
)
def test_gelu_hypothesis(values, approximate, dt):
    x = np.array(values, dt)
    g = np.linspace(-2, 2, x.size).astype(dt)
    _against_torch(x, g, approximate, dt)


@pytest.mark.parametrize("approximate", APPROX)
@pytest.mark.parametrize("dt", DTYPES)
def test_gelu_special_values_like_torch(dt, approximate):
    """NaN -> NaN, +inf -> +inf, -inf -> NaN (torch's x * 0), huge |x| -> x or -0;
    gradients NaN at NaN and +-inf, 1 and 0 for huge finite x.

    The reference is torch in float64, cast back. torch's own float32 result for
    +inf depends on which of its kernels runs: its scalar path gives +inf, while its
    vectorised path gives NaN on some CPUs (seen with torch 2.13 on an AVX-512
    Xeon, for a tensor of 8 or more values) and +inf on others. sitp gives +inf,
    the limit of x * Phi(x), on every target.
    """
    x = np.array([np.nan, np.inf, -np.inf, 1e30, -1e30, 0.0, -0.0, 50.0, -50.0], dt)
    xs = sitp.tensor(x, requires_grad=True)
    ys = F.gelu(xs, approximate=approximate)
    yt = TF.gelu(torch.tensor(x.astype(np.float64)), approximate=approximate).numpy().astype(dt)
    assert (
        TF.gelu(torch.tensor([np.inf], dtype=torch.float32), approximate=approximate).item()
        == np.inf
    )
    y = ys.detach().numpy()
    np.testing.assert_array_equal(y, yt)  # NaNs in the same places, values equal
    ys.backward(sitp.ones(x.size, dtype=ys.dtype))
    np.testing.assert_array_equal(xs.grad.numpy()[:3], [np.nan] * 3)
    np.testing.assert_array_equal(xs.grad.numpy()[3:], np.array([1, 0, 0.5, 0.5, 1, 0], dt))


@pytest.mark.parametrize("approximate", APPROX)
def test_gelu_float32_close_to_float64(approximate):
    """The float32 kernels against exact float64 values of the same float32 inputs."""
    x = np.linspace(-12, 12, 200001).astype(np.float32)
    x64 = torch.tensor(x.astype(np.float64), requires_grad=True)
    y64 = TF.gelu(x64, approximate=approximate)
    y64.sum().backward()
    y = np.empty_like(x)
    gelu_kernel(x, y, approximate == "tanh")
    dx = np.empty_like(x)
    gelu_backward_kernel(x, np.ones_like(x), dx, approximate == "tanh")
    np.testing.assert_allclose(y, y64.detach().numpy(), rtol=5e-7, atol=1e-6)
    np.testing.assert_allclose(dx, x64.grad.numpy(), rtol=5e-7, atol=5e-7)


@pytest.mark.parametrize("approximate", APPROX)
def test_gelu_gradcheck_float64(approximate):
    r = np.random.default_rng(2)
    x = sitp.tensor(r.uniform(-4, 4, size=(3, 5)), dtype=sitp.float64, requires_grad=True)
    assert gradcheck(lambda t: F.gelu(t, approximate=approximate), (x,))


def test_gelu_keeps_generic_path_for_integers():
    """Integer input is promoted to float32 by the generic op, as before (torch raises)."""
    y = F.gelu(sitp.tensor([-1, 0, 2]))
    assert y.dtype == sitp.float32
    np.testing.assert_allclose(
        y.numpy(), TF.gelu(torch.tensor([-1.0, 0.0, 2.0])).numpy(), rtol=1e-6
    )


def test_gelu_module_and_grad_fn():
    x = sitp.randn(4, 8, requires_grad=True)
    y = sitp.nn.GELU(approximate="tanh")(x)
    assert "GeluTanhBackward" in repr(y.grad_fn)
    with sitp.no_grad():
        assert F.gelu(x).grad_fn is None


def _refit() -> dict:
    """What scripts/fit_vecmath.py computes for the constants of _vecmath.py.

    The fit (2,400 least-squares solves for erf) takes 10-20 s. Its result is a function
    of the script's bytes and of numpy (whose LAPACK solves it), so it is kept beside
    sitp's numba cache under a key of both and read back by later runs: an edit of the
    script, or another numpy, fits again; an edit of the pasted constants is compared
    with the kept fit as with a fresh one."""
    import hashlib
    import importlib.util
    import json
    from pathlib import Path

    from sitp._target import default_cache_root
    from sitp.serialization import write_atomically

    path = Path(__file__).resolve().parents[1] / "scripts" / "fit_vecmath.py"
    key = hashlib.sha256(path.read_bytes() + np.__version__.encode()).hexdigest()[:20]
    kept = default_cache_root() / "fit-vecmath" / f"{key}.json"
    if kept.exists():
        return json.loads(kept.read_text())
    spec = importlib.util.spec_from_file_location("fit_vecmath", path)
    fit = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fit)
    p, q = fit.fit_erf(6, 4)
    result = {
        "ln2": [float(v) for v in fit.split_ln2()],
        "exp": [float(v) for v in fit.fit_exp(6)],
        "erf_p": [float(v) for v in p],
        "erf_q": [float(v) for v in q],
    }
    kept.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(kept, json.dumps(result).encode())  # whole or not at all, for a run beside
    return result


def test_coefficients_are_what_the_fit_script_prints():
    """_vecmath.py's constants are pasted from scripts/fit_vecmath.py: refit and compare,
    so that an edit by hand (or a change to the fit) cannot go unnoticed."""
    from sitp.kernels.cpu import vecmath as V

    def same(refit, pasted):
        # A least-squares solve may differ in its last float64 bits from one BLAS to
        # another, which can move a float32 rounding by one ulp: allow a few ulps.
        np.testing.assert_allclose(np.float32(refit), np.float32(pasted), rtol=1e-6, atol=0)

    fit = _refit()
    assert tuple(np.float32(fit["ln2"])) == (V.LN2_HI, V.LN2_LO)
    same(fit["exp"][2:], [V.EXP_C2, V.EXP_C3, V.EXP_C4, V.EXP_C5, V.EXP_C6])
    same(fit["erf_p"], [V.ERF_P0, V.ERF_P1, V.ERF_P2, V.ERF_P3, V.ERF_P4, V.ERF_P5, V.ERF_P6])
    same(fit["erf_q"][1:], [V.ERF_Q1, V.ERF_Q2, V.ERF_Q3, V.ERF_Q4])


@pytest.mark.parametrize("approximate", APPROX)
def test_gelu_and_layer_norm_on_two_threads_equal_one(approximate):
    """Arrays past the parallel threshold are split among threads; elementwise and
    row-wise work gives the same bits as on one thread."""
    import numba

    from sitp.kernels.cpu.fused import gelu, layer_norm

    shape = (2, gelu.PARALLEL_MIN // 256 + 3, 256)
    assert np.prod(shape) >= max(gelu.PARALLEL_MIN, layer_norm._PARALLEL_ROWS_MIN)
    x = np.random.default_rng(3).standard_normal(shape).astype(np.float32)
    results = []
    saved = numba.get_num_threads()
    try:
        for threads in (1, min(2, numba.config.NUMBA_NUM_THREADS)):
            numba.set_num_threads(threads)
            xs = sitp.tensor(x, requires_grad=True)
            y = F.gelu(xs, approximate=approximate)
            y.backward(sitp.ones(shape))
            ln = F.layer_norm(xs.detach(), (256,))
            results.append([y.detach().numpy().copy(), xs.grad.numpy().copy(), ln.numpy().copy()])
    finally:
        numba.set_num_threads(saved)
    for one, two in zip(*results):
        np.testing.assert_array_equal(one, two)
    _against_torch(
        x.ravel(), np.ones(x.size, np.float32), approximate, np.float32
    )  # default threads

"""The GPU kernels of sitp.kernels.cuda (sections 4.3-4.6) against numpy and torch.

Under the CUDA simulator (no GPU) every thread runs as Python, so these tests use tiny
tilings and odd sizes (33 x 17 x 29, T = 9): every rung still runs several blocks,
ragged edge tiles and several steps of its K loop. Tests marked ``gpu`` use realistic
sizes and default tilings; they are skipped under the simulator.
"""

import itertools
import math

import numpy as np
import pytest

from sitp.kernels.cuda import attention as attn
from sitp.kernels.cuda import gemm as G
from sitp.kernels.cuda import layouts as L
from sitp.kernels.cuda.launch import ceil_div, grid_2d, has_gpu, simulated

# Tilings small enough for the simulator, with more than one block and one K step.
TINY = {
    "naive": dict(BS=8),
    "coalesced": dict(BS=8),
    "shared": dict(BS=8),
    "blocktile1d": dict(BM=16, BN=8, BK=4, TM=4),
    "blocktile2d": dict(BM=16, BN=16, BK=4, TM=4, TN=4),
    "transposed": dict(BM=16, BN=16, BK=4, TM=4, TN=4),
    "warptile": dict(BM=16, BN=16, BK=4, WM=8, WN=16, WNITER=2, TM=2, TN=1),
    "doublebuffer": dict(BM=16, BN=16, BK=4, TM=4, TN=4),
    "swizzled": dict(BM=32, BN=16, BK=4, TM=4, TN=4),
}


def rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape, dtype=np.float32)


def test_every_rung_has_a_tiny_tiling():
    assert set(TINY) == set(G.KERNELS)


@pytest.mark.parametrize("kernel", G.KERNELS)
def test_gemm_rung_matches_numpy_on_odd_sizes(kernel):
    # 33 x 9 x 19: no side a multiple of a tile, more than one block down M and across
    # N and two K steps for every tiling of TINY (the simulator runs a thread per thread)
    A, B = rand(33, 9, seed=1), rand(9, 19, seed=2)
    C = G.gemm(A, B, kernel=kernel, **TINY[kernel])
    assert C.shape == (33, 19) and C.dtype == np.float32
    np.testing.assert_allclose(C, A @ B, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kernel", ["shared", "warptile", "doublebuffer"])
def test_gemm_smaller_than_one_tile_and_k_of_one(kernel):
    A, B = rand(3, 1, seed=3), rand(1, 5, seed=4)
    np.testing.assert_allclose(G.gemm(A, B, kernel=kernel, **TINY[kernel]), A @ B, rtol=1e-6)


def test_gemm_device_variant_keeps_results_on_the_device():
    from numba import cuda

    A, B = rand(9, 6, seed=5), rand(6, 7, seed=6)
    dA, dB = cuda.to_device(A), cuda.to_device(B)
    dC = cuda.device_array((9, 7), dtype=np.float32)
    out = G.gemm_device(dA, dB, dC, kernel="blocktile2d", **TINY["blocktile2d"])
    assert out is dC
    np.testing.assert_allclose(dC.copy_to_host(), A @ B, rtol=1e-5, atol=1e-6)


def test_gemm_errors_are_clear():
    with pytest.raises(ValueError, match="inner sizes differ"):
        G.gemm(rand(3, 4), rand(5, 6), kernel="naive", BS=4)
    with pytest.raises(ValueError, match="unknown kernel"):
        G.gemm(rand(3, 4), rand(4, 6), kernel="cublas")
    with pytest.raises(ValueError, match="two matrices"):
        G.gemm(rand(3), rand(3, 2))


def test_launch_configs():
    assert ceil_div(33, 8) == 5 and ceil_div(32, 8) == 4
    assert grid_2d(33, 29, 8, 8) == (4, 5)
    assert G.launch_config("naive", 33, 29, BS=8) == ((5, 4), (8, 8))
    assert G.launch_config("warptile", 4096, 4096) == ((32, 32), 128)
    assert G.launch_config("blocktile1d", 1000, 1000) == ((16, 16), 512)


def test_warptile_rejects_a_tiling_that_does_not_cover_a_warp():
    with pytest.raises(AssertionError, match="warp"):
        G.warptile(BM=16, BN=16, BK=4, WM=8, WN=16, WNITER=2, TM=4, TN=1)


# ---- attention -------------------------------------------------------------------------


def attention_reference(Q, K, V, causal):
    """Plain numpy: softmax(Q K^T / sqrt(D) + mask) V and the row logsumexp."""
    T, D = Q.shape[-2:]
    S = Q.astype(np.float64) @ np.swapaxes(K, -1, -2) / math.sqrt(D)
    if causal:
        S = np.where(np.tril(np.ones((T, T), bool)), S, -np.inf)
    m = S.max(-1, keepdims=True)
    P = np.exp(S - m)
    l = P.sum(-1, keepdims=True)
    return (P / l) @ V, (m + np.log(l))[..., 0]


QKV_SHAPE = (2, 2, 9, 8)  # (B, H, T, D): T = 9 is no multiple of any tile below
TINY_ATTN = dict(BS=4, NT=4, BR=4, BC=4)


@pytest.fixture(scope="module")
def qkv():
    return tuple(rand(*QKV_SHAPE, seed=s) for s in (10, 11, 12))


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("method", ["naive", "fused", "flash"])
def test_attention_forward_matches_numpy(qkv, method, causal):
    Q, K, V = qkv
    O = attn.attention(Q, K, V, causal=causal, method=method, **TINY_ATTN)
    expected, _ = attention_reference(Q, K, V, causal)
    np.testing.assert_allclose(O, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("causal", [False, True])
def test_flash_saves_the_logsumexp_and_nothing_quadratic(qkv, causal):
    Q, K, V = qkv
    O, Lse = attn.attention_device(
        *(attn.to_device(x) for x in qkv), causal=causal, method="flash", BR=4, BC=4
    )
    assert Lse.shape == QKV_SHAPE[:3]  # (B, H, T): O(T) extra memory
    _, expected = attention_reference(Q, K, V, causal)
    np.testing.assert_allclose(Lse.copy_to_host(), expected, rtol=1e-5, atol=1e-5)


def test_flash_tiles_larger_than_t_and_a_custom_scale():
    Q, K, V = (rand(1, 1, 5, 4, seed=s) for s in (20, 21, 22))
    O = attn.attention(Q, K, V, causal=True, method="flash", scale=0.5, BR=8, BC=8)
    expected, _ = attention_reference(Q * np.float32(0.5 * 2), K, V, causal=True)  # sqrt(4) = 2
    np.testing.assert_allclose(O, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("causal", [False, True])
def test_flash_backward_matches_torch_autograd(qkv, causal):
    torch = pytest.importorskip("torch")
    Q, K, V = qkv
    dO = rand(*QKV_SHAPE, seed=13)
    grads = attn.attention_backward(Q, K, V, dO, causal=causal, BR=4, BC=4)
    tq, tk, tv = (torch.tensor(x, dtype=torch.float64, requires_grad=True) for x in qkv)
    out = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, is_causal=causal)
    out.backward(torch.tensor(dO, dtype=torch.float64))
    for name, mine, ref in zip("QKV", grads, (tq, tk, tv)):
        np.testing.assert_allclose(mine, ref.grad.numpy(), rtol=1e-4, atol=1e-5, err_msg=f"d{name}")


def test_attention_rejects_mismatched_shapes():
    with pytest.raises(ValueError, match=r"\(B, H, T, D\)"):
        attn.attention(rand(1, 1, 4, 2), rand(1, 1, 5, 2), rand(1, 1, 5, 2), method="naive")
    with pytest.raises(ValueError, match="unknown method"):
        attn.attention(*(rand(1, 1, 2, 2),) * 3, method="sparse")


# ---- layouts (pure Python) -------------------------------------------------------------


def test_row_major_layout_is_numpys_strides_in_elements():
    x = np.zeros((3, 5, 7), np.float32)
    lay = L.row_major(3, 5, 7)
    assert tuple(s // 4 for s in x.strides) == lay.stride
    for i, j, k in itertools.product(range(3), range(5), range(7)):
        assert lay(i, j, k) == np.ravel_multi_index((i, j, k), x.shape)


@pytest.mark.parametrize(
    "A,B",
    [
        (L.row_major(4, 8), L.col_major(8, 4)),
        (L.row_major(6, 8), L.Layout((2, 3), (1, 2))),
        (L.col_major(4, 6), L.Layout((2, 12), (12, 1))),
        (L.Layout((2, 4, 3), (12, 1, 4)), L.Layout(6, 4)),
    ],
)
def test_compose_is_function_composition(A, B):
    C = L.compose(A, B)
    assert [C(i) for i in range(B.size)] == [A(B(i)) for i in range(B.size)]


def test_compose_refuses_what_is_not_a_layout():
    with pytest.raises(ValueError, match="divide"):
        L.compose(L.col_major(4, 6), L.Layout(6, 1))  # 6 consecutive of a 4-row column


def test_tiled_layout_matches_the_kernels_row0_plus_r():
    M, N, BM, BN = 8, 12, 4, 3
    T = L.tiled(L.row_major(M, N), (BM, BN))
    for r, tr, c, tc in itertools.product(range(BM), range(M // BM), range(BN), range(N // BN)):
        assert T((r, tr), (c, tc)) == (tr * BM + r) * N + tc * BN + c


def test_blocktile2d_layout_is_the_kernels_assignment():
    BM, BN, TM, TN = 16, 16, 4, 2
    lay = L.blocktile2d_layout(BM, BN, TM, TN)
    for t in range((BM // TM) * (BN // TN)):
        tr, tc = (t // (BN // TN)) * TM, (t % (BN // TN)) * TN
        for r, c in itertools.product(range(TM), range(TN)):
            assert lay((t, c + TN * r)) == (tr + r) * BN + tc + c
    assert sorted(lay.offsets()) == list(range(BM * BN))  # a bijection onto the tile


def test_swizzle_is_a_bijection_and_removes_the_transposed_store_conflict():
    sw = L.swizzle(3, 2, 5)
    assert sorted(sw(w) for w in range(8 * 128)) == list(range(8 * 128))
    assert L.conflict_degree(L.transposed_store_words(128, 8)) == 8
    assert L.conflict_degree(L.transposed_store_words(128, 8, swz=sw)) == 1
    assert L.conflict_degree([0] * 32) == 1  # one word for everyone: a broadcast
    assert L.conflict_degree(list(range(0, 64, 2))) == 2


def test_swizzled_kernel_uses_the_swizzle_of_layouts():
    """The kernel's BASE/BITS/SHIFT for the defaults are section 4.5's swizzle(3, 2, 5)."""
    BM, BK = 128, 8
    sw = L.swizzle(3, 2, 5)
    base, bits = (32 // BK).bit_length() - 1, BK.bit_length() - 1
    shift = BM.bit_length() - 1 - base
    assert (bits, base, shift) == (3, 2, 5)
    for w in range(BM * BK):
        assert w ^ ((w >> shift) & (((1 << bits) - 1) << base)) == sw(w)
    with pytest.raises(AssertionError, match="powers of two"):
        G.swizzled(BM=16, BN=16, BK=4, TM=4, TN=4)


# ---- launch helpers ---------------------------------------------------------------------


def test_no_gpu_under_the_simulator():
    if simulated():
        assert not has_gpu()


# ---- real hardware only -----------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("kernel", G.KERNELS)
def test_gemm_rung_on_the_gpu_at_1024(kernel):
    n = 1024
    A, B = rand(n, n + 3, seed=1), rand(n + 3, n - 5, seed=2)  # ragged edges at full size
    C = G.gemm(A, B, kernel=kernel)
    np.testing.assert_allclose(C, A.astype(np.float64) @ B, rtol=1e-3, atol=1e-3)


@pytest.mark.gpu
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("method", ["naive", "fused", "flash"])
def test_attention_on_the_gpu_at_t_1024(method, causal):
    Q, K, V = (rand(2, 4, 1024, 64, seed=s) for s in (1, 2, 3))
    O = attn.attention(Q, K, V, causal=causal, method=method)
    np.testing.assert_allclose(O, attention_reference(Q, K, V, causal)[0], rtol=1e-3, atol=1e-4)


@pytest.mark.gpu
@pytest.mark.parametrize("causal", [False, True])
def test_flash_backward_on_the_gpu_at_t_512(causal):
    torch = pytest.importorskip("torch")
    Q, K, V, dO = (rand(1, 2, 512, 64, seed=s) for s in (4, 5, 6, 7))
    grads = attn.attention_backward(Q, K, V, dO, causal=causal)
    tq, tk, tv = (torch.tensor(x, dtype=torch.float64, requires_grad=True) for x in (Q, K, V))
    torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, is_causal=causal).backward(
        torch.tensor(dO, dtype=torch.float64)
    )
    for mine, ref in zip(grads, (tq, tk, tv)):
        np.testing.assert_allclose(mine, ref.grad.numpy(), rtol=1e-3, atol=1e-4)


def test_attention_buffers_are_reused_between_calls(qkv):
    kept = {}
    d_qkv = [attn.to_device(x) for x in qkv]
    O1 = attn.attention_device(*d_qkv, method="naive", buffers=kept, BS=4, NT=4)
    assert set(kept) == {"O", "P", "S"} and O1 is kept["O"]
    O2 = attn.attention_device(*d_qkv, method="naive", buffers=kept, BS=4, NT=4)
    assert O2 is O1
    np.testing.assert_allclose(
        O2.copy_to_host(), attention_reference(*qkv, False)[0], rtol=1e-5, atol=1e-5
    )


@pytest.mark.skipif(has_gpu(), reason="on a GPU the benchmarks run instead")
@pytest.mark.parametrize("command", ["gpu-gemm", "gpu-attention"])
def test_gpu_benchmarks_refuse_in_one_line_without_a_gpu(command):
    import os
    import subprocess
    import sys

    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    out = subprocess.run(
        [sys.executable, "-m", "sitp.bench", command],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert out.returncode == 1
    assert out.stdout == ""
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "no GPU" in lines[0] and command in lines[0]

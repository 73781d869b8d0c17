"""topk, sort and argsort against torch: values, positions, ties, NaN and infinities,
every dim, strided inputs, both of the CPU kernel's ways (a sorted window for k <= 64, a
merge sort above), and gradients; the CUDA kernel (under the simulator where no GPU
answers) against the CPU one."""

from __future__ import annotations

import numpy as np
import pytest

import sitp

torch = pytest.importorskip("torch")


def _rows(n, seed, ties=False, specials=False, dtype=np.float32):
    rng = np.random.default_rng(seed)
    x = rng.integers(-3, 4, n) if ties else rng.standard_normal(n)
    x = x.astype(dtype)
    if specials:
        x[rng.choice(n, 4, replace=False)] = [np.nan, np.inf, -np.inf, np.nan]
    return x


def _same_as_torch(x, k, dim, largest):
    s = sitp.topk(sitp.tensor(x), k, dim=dim, largest=largest)
    t = torch.topk(torch.tensor(x), k, dim=dim, largest=largest, sorted=True)
    np.testing.assert_array_equal(s.values.numpy(), t.values.numpy())
    # torch's CPU topk does not promise the order of ties; sort(stable=True) does: the
    # positions are checked against its positions, which equal topk's in values
    st = torch.sort(torch.tensor(x), dim=dim, descending=largest, stable=True)
    want = st.indices.narrow(dim, 0, k)
    np.testing.assert_array_equal(s.indices.numpy(), want.numpy())


@pytest.mark.parametrize(
    "n, k", [(1, 1), (7, 3), (65, 10), (65, 0), (65, 65), (300, 64), (300, 65), (300, 200)]
)
@pytest.mark.parametrize("kind", ["plain", "ties", "specials"])
@pytest.mark.parametrize("largest", [True, False])
def test_topk_matches_torch(n, k, kind, largest):
    x = np.stack([_rows(n, s, kind == "ties", kind == "specials" and n >= 4) for s in range(3)])
    _same_as_torch(x, k, -1, largest)


def test_topk_along_every_dim_of_a_strided_input_and_other_dtypes():
    x = np.random.default_rng(1).standard_normal((4, 9, 5)).astype(np.float64)
    for dim in range(3):
        for largest in (True, False):
            _same_as_torch(x, 3, dim, largest)
            _same_as_torch(np.ascontiguousarray(x.transpose(2, 0, 1)), 2, dim, largest)
    s = sitp.tensor(x).transpose(0, 2)[:, ::2]  # a strided view
    t = torch.tensor(x).transpose(0, 2)[:, ::2]
    np.testing.assert_array_equal(
        s.topk(2, dim=1).indices.numpy(),
        t.sort(dim=1, descending=True, stable=True).indices[:, :2].numpy(),
    )
    ints = np.random.default_rng(2).integers(-50, 50, (3, 40))
    _same_as_torch(ints, 5, 1, True)
    _same_as_torch(ints, 30, 1, False)


@pytest.mark.parametrize("descending", [False, True])
def test_sort_and_argsort_match_torchs_stable_sort(descending):
    for x in [
        np.stack([_rows(97, s, ties=True, specials=True) for s in range(4)]),
        np.random.default_rng(3).standard_normal((6, 5)),
        np.random.default_rng(4).integers(0, 3, (5, 8)),
    ]:
        for dim in (0, -1):
            s = sitp.sort(sitp.tensor(x), dim=dim, descending=descending)
            t = torch.sort(torch.tensor(x), dim=dim, descending=descending, stable=True)
            np.testing.assert_array_equal(s.values.numpy(), t.values.numpy())
            np.testing.assert_array_equal(s.indices.numpy(), t.indices.numpy())
            np.testing.assert_array_equal(
                sitp.tensor(x).argsort(dim, descending).numpy(), t.indices.numpy()
            )
    zero_d = sitp.sort(sitp.tensor(2.5))
    assert zero_d.values.item() == 2.5 and zero_d.indices.item() == 0


def test_topk_and_sort_gradients_match_torch():
    x = np.random.default_rng(5).standard_normal((3, 8)).astype(np.float32)
    g = np.random.default_rng(6).standard_normal((3, 3)).astype(np.float32)
    xs, xt = sitp.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    (sitp.topk(xs, 3, dim=1).values * sitp.tensor(g)).sum().backward()
    (torch.topk(xt, 3, dim=1).values * torch.tensor(g)).sum().backward()
    np.testing.assert_array_equal(xs.grad.numpy(), xt.grad.numpy())
    xs.grad = None
    xt.grad = None
    sitp.sort(xs, 0, descending=True).values.pow(2).sum().backward()
    torch.sort(xt, 0, descending=True).values.pow(2).sum().backward()
    np.testing.assert_allclose(xs.grad.numpy(), xt.grad.numpy(), rtol=1e-6)


def test_bad_k_and_dim_name_what_is_wrong():
    x = sitp.zeros(2, 5)
    with pytest.raises(
        RuntimeError, match=r"selected index k out of range \(k=6, size of dim 1 is 5\)"
    ):
        sitp.topk(x, 6)
    with pytest.raises(RuntimeError, match="selected index k out of range"):
        sitp.topk(x, -1)
    with pytest.raises(IndexError, match="Dimension out of range"):
        sitp.sort(x, dim=2)


@pytest.mark.parametrize("k", [1, 4, 97])
def test_the_cuda_kernel_matches_the_cpu_kernel(k):
    """The CUDA backend's kernel (a sorted window for every k) against the CPU one, on
    rows with ties, NaN and infinities, along a middle dim."""
    x = np.stack([_rows(97, s, ties=True, specials=True) for s in range(3)])[:, None, :]
    x = np.ascontiguousarray(np.repeat(x, 2, 1).transpose(0, 2, 1))  # (3, 97, 2): dim 1
    on_cpu = sitp.topk(sitp.tensor(x), k, dim=1, largest=True)
    on_gpu = sitp.topk(sitp.tensor(x, device="cuda"), k, dim=1, largest=True)
    np.testing.assert_array_equal(on_gpu.indices.cpu().numpy(), on_cpu.indices.numpy())
    np.testing.assert_array_equal(on_gpu.values.cpu().numpy(), on_cpu.values.numpy())


def test_topk_past_the_finite_entries_repeats_no_position():
    """The argmax passes that topk used to run masked each pick with -inf, so a row whose
    other entries were -inf gave position 0 three times ([1, -inf, -inf], k=3)."""
    row = sitp.tensor([1.0, float("-inf"), float("-inf")])
    assert sitp.topk(row, 3).indices.tolist() == [0, 1, 2]
    assert sitp.topk(row, 3, largest=False).indices.tolist() == [1, 2, 0]

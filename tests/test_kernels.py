"""The numba kernels themselves, against numpy, on odd (non-tile-multiple) sizes."""

import numpy as np
import pytest

import sitp
from sitp.bench import threads
from sitp.kernels.cpu import kernels as K
from sitp.kernels.cpu import ops as cpu
from sitp.strides import contiguous_strides

I64 = np.int64


def _view(arr):
    """(storage, shape, strides, offset) of a numpy array that is a view of a flat buffer."""
    base = arr.base if arr.base is not None else arr
    while base.base is not None:
        base = base.base
    flat = base.reshape(-1)
    item = arr.itemsize
    offset = (arr.__array_interface__["data"][0] - flat.__array_interface__["data"][0]) // item
    return (
        flat,
        np.asarray(arr.shape, I64),
        np.asarray([s // item for s in arr.strides], I64),
        offset,
    )


@pytest.mark.parametrize("shape", [(33, 17), (1,), (7, 1, 13), (3, 5, 2, 9)])
def test_positions_is_the_stride_formula(shape):
    arr = np.arange(int(np.prod(shape)) * 2, dtype=np.float64)[::2].reshape(shape)
    arr = np.swapaxes(arr, 0, -1)
    flat, shp, st, off = _view(arr)
    pos = K.positions(shp, st, off)
    np.testing.assert_array_equal(flat[pos], arr.reshape(-1))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(
    "op, ref",
    [
        ("exp", np.exp),
        ("tanh", np.tanh),
        ("neg", np.negative),
        ("abs", np.abs),
        ("sin", np.sin),
        ("square", np.square),
    ],
)
def test_map_kernel_on_strided_rows(dtype, op, ref):
    x = np.random.default_rng(0).standard_normal((33, 29)).astype(dtype)
    xt = x.T  # rows of x.T are strided by 29
    flat, shp, st, off = _view(xt)
    starts = K.positions(shp[:-1], st[:-1], off)
    out = np.empty(xt.size, dtype)
    K.map_kernel(K.UNARY[op], np.nan, np.nan, flat, starts, st[-1], shp[-1], out)
    np.testing.assert_allclose(out.reshape(xt.shape), ref(xt), rtol=1e-6)


@pytest.mark.parametrize(
    "op, ref",
    [
        ("add", np.add),
        ("mul", np.multiply),
        ("sub", np.subtract),
        ("maximum", np.maximum),
        ("div", np.divide),
    ],
)
def test_zip_kernel_with_broadcast_step_zero(op, ref):
    a = np.random.default_rng(1).standard_normal((17, 33))
    b = np.random.default_rng(2).standard_normal(33) + 3.0
    # b broadcast along rows: every row starts at 0
    a_starts = np.arange(17, dtype=I64) * 33
    b_starts = np.zeros(17, I64)
    out = np.empty(17 * 33)
    K.zip_kernel(K.BINARY[op], a.reshape(-1), a_starts, 1, b, b_starts, 1, 33, out)
    np.testing.assert_allclose(out.reshape(17, 33), ref(a, b))


@pytest.mark.parametrize(
    "op, ref", [("sum", np.sum), ("prod", np.prod), ("max", np.max), ("min", np.min)]
)
def test_reduce_kernel_rows(op, ref):
    x = np.random.default_rng(3).uniform(0.5, 1.5, (13, 29))
    out = np.empty(13)
    K.reduce_kernel(
        K.REDUCE[op], x.reshape(-1), np.arange(13, dtype=I64) * 29, 1, 29, np.float64(0), out
    )
    np.testing.assert_allclose(out, ref(x, axis=1))


def test_argreduce_and_softmax_kernels():
    x = np.random.default_rng(4).standard_normal((9, 31))
    v = np.empty(9)
    i = np.empty(9, I64)
    starts = np.arange(9, dtype=I64) * 31
    K.argreduce_kernel(True, x.reshape(-1), starts, 1, 31, v, i)
    np.testing.assert_array_equal(i, x.argmax(1))
    out = np.empty(9 * 31)
    K.softmax_kernel(x.reshape(-1), starts, 1, 31, False, out)
    e = np.exp(x - x.max(1, keepdims=True))
    np.testing.assert_allclose(out.reshape(9, 31), e / e.sum(1, keepdims=True), rtol=1e-12)


def test_take_and_put_kernels_gather_and_scatter_add():
    x = np.arange(7 * 5, dtype=np.float64)
    table = np.array([0, 3, 3, 6], I64) * 5  # rows 0, 3, 3, 6
    pre = np.zeros(1, I64)
    post = np.arange(5, dtype=I64)
    out = np.empty(4 * 5)
    K.take_kernel(x, pre, table, post, out)
    np.testing.assert_array_equal(out.reshape(4, 5), x.reshape(7, 5)[[0, 3, 3, 6]])
    acc = np.zeros(35)
    K.put_kernel(acc, pre, table, post, np.ones(20), True)
    expected = np.zeros((7, 5))
    np.add.at(expected, [0, 3, 3, 6], 1.0)
    np.testing.assert_array_equal(acc.reshape(7, 5), expected)


def test_index_table_reports_bad_index():
    idx = np.array([[0, 2, -1, 5]], I64)
    table = np.empty(4, I64)
    assert K.index_table(idx, np.array([5], I64), np.array([3], I64), table) == 3
    assert K.index_table(idx[:, :3], np.array([5], I64), np.array([3], I64), table[:3]) == -1
    np.testing.assert_array_equal(table[:3], [0, 6, 12])


def test_collapse_merges_contiguous_dims():
    shape = (4, 5, 6)
    c = contiguous_strides(shape)
    assert cpu.collapse(shape, c, (0, 0, 1)) == ([20, 6], [[6, 1], [0, 1]])
    assert cpu.collapse(shape, c) == ([120], [[1]])
    assert cpu.collapse((), ()) == ([1], [[0]])


@pytest.mark.parametrize(
    "op, ref",
    [
        ("add", np.add),
        ("sub", np.subtract),
        ("mul", np.multiply),
        ("div", np.divide),
        ("maximum", np.maximum),
    ],
)
@pytest.mark.parametrize("b_step", [1, 0])
def test_zip_fast_kernel_every_layout(op, ref, b_step):
    rng = np.random.default_rng(5)
    a = rng.standard_normal(7 * 33).astype(np.float32)
    b = rng.standard_normal(7 * 33).astype(np.float32) + 4
    a_starts = np.arange(7, dtype=I64) * 33
    b_starts = a_starts if b_step else np.arange(7, dtype=I64)  # one scalar per row
    out = np.empty(7 * 33, np.float32)
    K.zip_fast_kernel(K.BINARY[op], a, a_starts, 1, b, b_starts, b_step, 33, out)
    bb = b.reshape(7, 33) if b_step else b[:7, None]
    np.testing.assert_allclose(out.reshape(7, 33), ref(a.reshape(7, 33), bb), rtol=1e-6)
    # strided operands take the general path
    out2 = np.empty(7 * 33, np.float32)
    K.zip_fast_kernel(K.BINARY[op], a, np.arange(7, dtype=I64), 7, b, b_starts, b_step, 33, out2)
    np.testing.assert_allclose(out2.reshape(7, 33), ref(a.reshape(33, 7).T, bb), rtol=1e-6)


_COMPARES = [
    ("eq", np.equal),
    ("ne", np.not_equal),
    ("lt", np.less),
    ("le", np.less_equal),
    ("gt", np.greater),
    ("ge", np.greater_equal),
    ("logical_and", np.logical_and),  # no loop of its own: the general path
    ("logical_xor", np.logical_xor),
]


def _rows_of(arr2d):
    """(flat storage, row starts, step) of a 2-D numpy view whose rows step evenly."""
    flat, _, st, off = _view(arr2d)
    return flat, off + np.arange(arr2d.shape[0], dtype=I64) * st[0], int(st[1])


@pytest.mark.parametrize("op, ref", _COMPARES)
@pytest.mark.parametrize("layout", ["rows", "b one per row", "a strided", "b strided"])
def test_compare_kernel_every_layout(op, ref, layout):
    """The six comparisons' own loops (a at step 1, b at step 1 or 0) and the general
    path agree with numpy, ties included, on 7 rows of 33."""
    rng = np.random.default_rng(6)
    base_a = rng.integers(-3, 4, (33, 14)).astype(np.float32)  # small ints: many ties
    base_b = rng.integers(-3, 4, (33, 14)).astype(np.float32)
    a2 = base_a.T[:7] if layout == "a strided" else np.ascontiguousarray(base_a.T[:7])
    b2 = base_b.T[:7] if layout == "b strided" else np.ascontiguousarray(base_b.T[:7])
    a_flat, a_starts, a_step = _rows_of(a2)
    if layout == "b one per row":
        b_flat, b_starts, b_step = b2[:, 0].copy(), np.arange(7, dtype=I64), 0
        expect = ref(a2, b2[:, :1])
    else:
        (b_flat, b_starts, b_step), expect = _rows_of(b2), ref(a2, b2)
    out = np.empty(7 * 33, np.bool_)
    K.compare_kernel(K.COMPARE[op], a_flat, a_starts, a_step, b_flat, b_starts, b_step, 33, out)
    np.testing.assert_array_equal(out.reshape(7, 33), expect)


@pytest.mark.parametrize("a_step, b_step", [(1, 1), (0, 1), (1, 0), (0, 0)])
@pytest.mark.parametrize("c_strided", [False, True])
def test_where_kernel_every_layout(a_step, b_step, c_strided):
    """Selects with the condition at step 1 and each value at step 1 or 0 (one value a
    row, as masked_fill's), and the general path for a strided condition, equal numpy."""
    rng = np.random.default_rng(7)
    cond = rng.random((33, 14)) < 0.5
    c2 = cond.T[:7] if c_strided else np.ascontiguousarray(cond.T[:7])
    c_flat, c_starts, c_step = _rows_of(c2)
    vals = [rng.standard_normal((7, 33)).astype(np.float32) for _ in range(2)]
    args, expect = [], []
    for v, step in zip(vals, (a_step, b_step)):
        if step:
            args += [v.reshape(-1), np.arange(7, dtype=I64) * 33, 1]
            expect.append(v)
        else:  # one value a row
            args += [v[:, 0].copy(), np.arange(7, dtype=I64), 0]
            expect.append(v[:, :1])
    out = np.empty(7 * 33, np.float32)
    K.where_kernel(c_flat, c_starts, c_step, *args, 33, out)
    np.testing.assert_array_equal(out.reshape(7, 33), np.where(c2, *expect))


@pytest.mark.parametrize("n_threads", [1, 2])
@pytest.mark.parametrize("case", ["window", "transposed", "cast"])
def test_large_copies_split_among_threads_equal_numpy(case, n_threads):
    """Copies past ops._PARALLEL_COPY_MIN entries run assign4_parallel on two threads:
    into a window of a wider buffer (contiguous rows, the slice path), from a transpose
    (strided rows), and with a cast; odd sizes, so the ranges split unevenly."""
    src = np.random.default_rng(3).standard_normal((3, 71, 401))
    s_src = sitp.tensor(src)
    if case == "transposed":  # a (3, 401, 71) tensor seen through its transpose
        s_src = sitp.tensor(np.ascontiguousarray(src.transpose(0, 2, 1))).transpose(1, 2)
        assert not s_src.is_contiguous()
    assert src.size >= cpu._PARALLEL_COPY_MIN
    dt = np.float32 if case == "cast" else np.float64
    wide = sitp.zeros(3, 71, 1001, dtype=sitp.float32 if case == "cast" else sitp.float64)
    with threads(n_threads):
        wide[..., 300:701] = s_src
    want = np.zeros((3, 71, 1001), dt)
    want[..., 300:701] = src
    np.testing.assert_array_equal(wide.numpy(), want)


@pytest.mark.parametrize("n_threads", [1, 2])
@pytest.mark.parametrize(
    "op, shape_a, shape_b",
    [
        ("add", (3, 71, 401), (3, 71, 401)),  # one long row: each row cut in two
        ("mul", (1031, 67), (67,)),  # rows of a broadcast bias: bands of rows
        ("sub", (1031, 67), (1031, 1)),  # a broadcast column (step 0)
        ("div", (67, 1031), ()),  # a scalar
        ("pow", (300, 301), (300, 301)),  # an op with no fast lane
    ],
)
def test_large_zips_split_among_threads_equal_numpy(op, shape_a, shape_b, n_threads):
    """Zips past ops._PARALLEL_COPY_MIN entries run zip_fast_parallel on two threads."""
    r = np.random.default_rng(4)
    a = r.uniform(0.5, 2.0, shape_a).astype(np.float32)
    b = r.uniform(0.5, 2.0, shape_b).astype(np.float32)
    assert a.size >= cpu._PARALLEL_COPY_MIN
    fn = {"add": np.add, "mul": np.multiply, "sub": np.subtract, "div": np.divide, "pow": np.power}
    with threads(n_threads):
        got = getattr(sitp, op)(sitp.tensor(a), sitp.tensor(b))
    np.testing.assert_allclose(got.numpy(), fn[op](a, b), rtol=1e-6)


def test_assign4_kernel_copies_permuted_views():
    x = np.arange(2 * 3 * 4 * 5, dtype=np.float32).reshape(2, 3, 4, 5)
    v = x.transpose(0, 2, 1, 3)  # a head split: (B, T, H, D) -> (B, H, T, D)
    flat, shp, st, off = _view(v)
    out = np.empty(v.size, np.float32)
    K.assign4_kernel(out, 0, 60, 15, 5, 1, flat, off, *st, *shp)
    np.testing.assert_array_equal(out.reshape(v.shape), v)


def test_set_num_threads_like_torch_cut_to_numbas_pool():
    """``sitp.set_num_threads`` sets the threads of the parallel kernels, as torch's sets
    its intra-op threads; a count above numba's pool is cut to the pool's size, and a
    large zip gives the same values on one thread and on all of them."""
    import numba

    old = sitp.get_num_threads()
    a = sitp.randn(513, 257)
    try:
        sitp.set_num_threads(1)
        assert sitp.get_num_threads() == numba.get_num_threads() == 1
        one = (a * a).numpy()
        sitp.set_num_threads(10_000)
        assert sitp.get_num_threads() == numba.config.NUMBA_NUM_THREADS
        np.testing.assert_array_equal((a * a).numpy(), one)
    finally:
        sitp.set_num_threads(old)
    assert sitp.get_num_threads() == old


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(
    "op, p0", [("neg", 0), ("abs", 0), ("relu", 0), ("square", 0), ("pow", 2.0),
               ("pow", 3.0), ("pow", 1.0), ("pow", 2.5), ("exp", 0), ("sqrt", 0)]
)  # fmt: skip
def test_map_fast_kernel_has_map_kernels_bytes(dtype, op, p0):
    """The vectorised rows of map_fast_kernel (and its strided path) give map_kernel's
    bytes, signed zeros, infinities and NaN included, on 7 rows of 33."""
    rng = np.random.default_rng(8)
    x = (rng.standard_normal(7 * 33 * 2) * 3).astype(dtype)
    x[:6] = [np.nan, -0.0, 0.0, np.inf, -np.inf, -1e-30]
    for starts, step in ((np.arange(7, dtype=I64) * 33, 1), (np.arange(7, dtype=I64), 7)):
        fast, ref = np.empty(7 * 33, dtype), np.empty(7 * 33, dtype)
        K.map_fast_kernel(K.UNARY[op], float(p0), np.nan, x, starts, step, 33, fast)
        K.map_kernel(K.UNARY[op], float(p0), np.nan, x, starts, step, 33, ref)
        assert fast.tobytes() == ref.tobytes()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(
    "op, p0", [("neg", 0), ("abs", 0), ("relu", 0), ("square", 0), ("pow", 2.0),
               ("pow", 2.5), ("exp", 0), ("tanh", 0), ("sigmoid", 0), ("sqrt", 0)]
)  # fmt: skip
def test_row_kernels_have_the_row_kernels_bytes(dtype, op, p0):
    """The launcher's one-row kernels (a contiguous operand) give the bytes of the kernels
    they stand in for, on one row of 231: map_row_kernel map_fast_kernel's, and for
    float32 tanh and exp f32_via_f64_row_kernel f32_via_f64_kernel's."""
    rng = np.random.default_rng(9)
    x = (rng.standard_normal(231) * 3).astype(dtype)
    x[:6] = [np.nan, -0.0, 0.0, np.inf, -np.inf, -1e-30]
    row, ref = np.empty(231, dtype), np.empty(231, dtype)
    K.map_row_kernel(K.UNARY[op], float(p0), np.nan, x, row)
    K.map_fast_kernel(K.UNARY[op], float(p0), np.nan, x, np.zeros(1, I64), 1, 231, ref)
    assert row.tobytes() == ref.tobytes()
    if dtype is np.float32 and op in ("tanh", "exp"):
        K.f32_via_f64_row_kernel(K.UNARY[op], x, row)
        K.f32_via_f64_kernel(K.UNARY[op], x, np.zeros(1, I64), 1, 231, ref)
        assert row.tobytes() == ref.tobytes()

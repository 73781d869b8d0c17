"""The two backends implement sitp/kernels/interface.py, and stay in their layer.

* both define every function of the interface, with its parameter names;
* neither imports the other, nor the tensor layer or anything above it (checked on the
  source with ``ast``, imports inside functions included);
* both work on *bare* operands: objects with only ``_storage, _shape, _strides, _offset,
  dtype`` and ``_make``, so a backend that called a Tensor method would fail here.

The CUDA backend is imported under numba's simulator (NUMBA_ENABLE_CUDASIM=1, set by the
repository's conftest before numba is imported) unless a GPU is there.
"""

from __future__ import annotations

import ast
import inspect
import math
from pathlib import Path

import numpy as np
import pytest

from sitp.dtypes import bool_, float32, float64, int64
from sitp.kernels import interface
from sitp.kernels.cpu import ops as cpu_ops
from sitp.kernels.cuda import ops as cuda_ops

SRC = Path(__file__).resolve().parents[1] / "src"
BACKENDS = {"cpu": cpu_ops, "cuda": cuda_ops}

# What a backend may import from sitp: the foundation and the backends package (less the
# other backend, checked below).
ALLOWED = ("sitp.kernels", "sitp.dtypes", "sitp.strides", "sitp._env", "sitp._target")
OTHER = {"cpu": "sitp.kernels.cuda", "cuda": "sitp.kernels.cpu"}


def _params(f):
    return [
        (p.name, p.kind, p.default is inspect.Parameter.empty)
        for p in inspect.signature(f).parameters.values()
    ]


def test_interface_lists_its_functions():
    defined = {
        n
        for n, f in vars(interface).items()
        if inspect.isfunction(f) and f.__module__ == interface.__name__
    }
    assert defined == set(interface.FUNCTIONS)
    for name in interface.FUNCTIONS:
        assert getattr(interface, name).__doc__, f"interface.{name} has no docstring"


@pytest.mark.parametrize("backend", sorted(BACKENDS))
@pytest.mark.parametrize("name", interface.FUNCTIONS)
def test_backend_defines_the_function(backend, name):
    module = BACKENDS[backend]
    f = getattr(module, name, None)
    assert callable(f), f"{module.__name__} has no {name}"
    assert _params(f) == _params(getattr(interface, name)), (
        f"{module.__name__}.{name}{inspect.signature(f)} differs from "
        f"interface.{name}{inspect.signature(getattr(interface, name))}"
    )


def _imports(path: Path):
    """Every module a file imports (absolute names), at any depth of the code."""
    tree = ast.parse(path.read_text())
    package = ".".join(path.relative_to(SRC).with_suffix("").parts[:-1])
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                yield a.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                mod = f"{base}.{node.module}" if node.module else base
            else:
                mod = node.module
            yield mod
            for a in node.names:  # "from sitp.kernels import layout" imports a module too
                yield f"{mod}.{a.name}"


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_backend_imports_only_below_it(backend):
    path = Path(BACKENDS[backend].__file__)
    for mod in _imports(path):
        if mod != "sitp" and not mod.startswith("sitp."):
            continue  # numpy, numba, math ...
        assert mod.startswith(ALLOWED), f"{path.name} of the {backend} backend imports {mod}"
        assert not mod.startswith(OTHER[backend]), (
            f"the {backend} backend imports the other backend ({mod})"
        )


def test_shared_modules_have_no_cuda():
    for name in ("layout.py", "scalar.py", "interface.py"):
        mods = list(_imports(SRC / "sitp" / "kernels" / name))
        assert not any(m.startswith("numba.cuda") for m in mods), name
        assert not any(m.startswith(("sitp.kernels.cpu", "sitp.kernels.cuda")) for m in mods), name


# ------------------------------------------------------------------ bare operands
class Bare:
    """An operand with nothing but the fields a backend may read, and ``_make``."""

    __slots__ = ("_storage", "_shape", "_strides", "_offset", "dtype")

    @classmethod
    def _make(cls, storage, shape, strides, offset, dtype):
        t = object.__new__(cls)
        t._storage, t._shape, t._strides, t._offset, t.dtype = (
            storage,
            tuple(shape),
            tuple(strides),
            offset,
            dtype,
        )
        return t


_DTYPES = {np.dtype(d.np): d for d in (float32, float64, int64, bool_)}


def _host(arr, strides=None, offset=0, storage=None):
    """A bare host operand over numpy ``arr`` (contiguous), or a strided view of ``storage``."""
    if storage is None:
        arr = np.ascontiguousarray(arr)
        st = tuple(s // arr.itemsize for s in arr.strides) if arr.ndim else ()
        return Bare._make(arr.reshape(-1).copy(), arr.shape, st, 0, _DTYPES[arr.dtype])
    return Bare._make(storage, arr, strides, offset, _DTYPES[storage.dtype])


def _np(t):
    """The entries of a bare host operand as a numpy array."""
    isz = t._storage.itemsize
    return np.ndarray(
        t._shape, t._storage.dtype, t._storage, t._offset * isz, tuple(s * isz for s in t._strides)
    ).copy()


@pytest.fixture(params=sorted(BACKENDS))
def be(request):
    return request.param, BACKENDS[request.param]


def test_bare_operands(be):
    name, B = be
    on, back = B.to_device, _np_of_backend(B)  # a host operand moved there; a result as numpy
    rng = np.random.default_rng(0)
    a = rng.standard_normal((3, 4))
    storage = a.reshape(-1).copy()
    aT = _host((4, 3), (1, 4), 0, storage)  # a transpose: strides (1, 4)
    x, xT = on(_host(a)), on(aT)
    assert type(x) is Bare and type(xT) is Bare

    def check(t, want, **kw):
        assert type(t) is Bare
        np.testing.assert_allclose(back(t), want, rtol=1e-6, atol=1e-12, **kw)

    check(xT, a.T)
    check(B.unary("exp", xT), np.exp(a.T))
    check(B.unary("clamp", x, -0.5, 0.5), np.clip(a, -0.5, 0.5))
    bias = on(_host(np.arange(4.0)))
    check(B.binary("add", x, bias), a + np.arange(4.0))
    check(B.binary("mul", on(_host(np.array(2.0))), x), 2 * a)
    check(B.compare("gt", x, bias), a > np.arange(4.0))
    check(
        B.where(B.compare("gt", x, bias), x, bias), np.where(a > np.arange(4.0), a, np.arange(4.0))
    )
    check(B.copy(xT, float32), a.T.astype(np.float32))

    dst = on(_host(np.zeros((3, 4))))
    col = Bare._make(dst._storage, (3,), (4,), 1, float64)  # column 1 of dst
    assert B.assign(col, on(_host(np.array(7.0)))) is None
    want = np.zeros((3, 4))
    want[:, 1] = 7
    check(dst, want)
    # in place: into a contiguous operand, a strided view (the column) and with itself
    assert B.binary_into("mul", dst, on(_host(np.full((3, 4), 3.0)))) is None
    want *= 3
    check(dst, want)
    B.binary_into("add", col, on(_host(np.array(1.0))))
    want[:, 1] += 1
    check(dst, want)
    B.binary_into("sub", dst, dst)
    check(dst, np.zeros((3, 4)))

    check(B.reduce("sum", xT, (0,)), a.T.sum(0))
    check(B.reduce("sum", x, (1,), True), a.sum(1, keepdims=True))
    check(B.reduce("max", xT, (0, 1)), a.max())
    check(B.reduce("any", x, (0,)), (a != 0).any(0))
    values, indices = B.argreduce(xT, 1, True, False)
    check(values, a.T.max(1))
    check(indices, a.T.argmax(1))
    # topk along the last dim of a transposed operand: numpy's stable sort is the oracle
    check(B.topk(xT, 2, True), np.argsort(-a.T, axis=1, kind="stable")[:, :2])
    check(B.topk(xT, 3, False), np.argsort(a.T, axis=1, kind="stable")[:, :3])

    def softmax(v, axis):
        e = np.exp(v - v.max(axis, keepdims=True))
        return e / e.sum(axis, keepdims=True)

    y = B.softmax(x, 0)
    check(y, softmax(a, 0))
    check(B.softmax(xT, 1, True), np.log(softmax(a.T, 1)))
    g = rng.standard_normal((3, 4))
    sy = softmax(a, 0)
    check(B.softmax_backward(y, on(_host(g)), 0), sy * (g - (g * sy).sum(0, keepdims=True)))
    check(B.cumsum(xT, 0), np.cumsum(a.T, 0))

    check(B.matmul(x, xT), a @ a.T)
    b3 = rng.standard_normal((2, 3, 4))
    check(B.matmul(on(_host(b3)), xT), b3 @ a.T)
    check(
        B.matmul(on(_host(b3)), on(_host(b3.transpose(0, 2, 1).copy()))), b3 @ b3.transpose(0, 2, 1)
    )

    idx = np.array([[2, 0, -1]], np.int64)
    taken = B.take(x, 0, idx)
    got = taken if isinstance(taken, np.ndarray) else taken.copy_to_host()
    np.testing.assert_allclose(got.reshape(3, 4), a[[2, 0, -1]])
    z = on(_host(np.zeros((3, 4))))
    assert B.put(z, 0, np.array([[1, 1]], np.int64), on(_host(np.ones((2, 4)))), True) is None
    check(z, np.array([[0.0] * 4, [2.0] * 4, [0.0] * 4]))

    index = np.array([[0, 2], [1, 1], [3, 0]], np.int64)
    check(B.gather(x, 1, on(_host(index))), np.take_along_axis(a, index, 1))
    want = np.zeros((3, 4))
    np.add.at(want, (np.arange(3)[:, None], index), g[:, :2])
    check(B.scatter_add((3, 4), 1, on(_host(index)), on(_host(g[:, :2].copy())), float64), want)
    check(B.tri(x, 0, True), np.triu(a))
    check(B.tri(xT, -1, False), np.tril(a.T, -1))

    mask = on(_host(a > 0))
    np.testing.assert_array_equal(B.nonzero(mask), np.flatnonzero(a > 0))
    np.testing.assert_array_equal(B.nonzero(on(_host(np.zeros((2, 0))))), np.zeros(0, np.int64))
    p = on(_host(np.array([[0.0, 1.0, 3.0], [2.0, 0.0, 0.0]])))
    u = np.array([0.1, 0.9, 0.5, 0.5])
    samples, status = B.multinomial(p, 2, False, u)
    assert isinstance(samples, np.ndarray) and status == 0
    on_cpu, cpu_status = cpu_ops.multinomial(_host(_np_of(p, name)), 2, False, u)
    np.testing.assert_array_equal(samples, on_cpu)
    assert sorted(samples[:2]) == [1, 2] and samples[2] == 0 and cpu_status == 0
    # the weights' status: a bad entry (negative, NaN, inf) wins over a row summing to 0
    for rows, want in [
        ([[1.0, -0.5]], 1),
        ([[1.0, np.nan]], 1),
        ([[np.inf, 1.0]], 1),
        ([[1.0, 1.0], [0.0, 0.0]], 2),
        ([[0.0, 0.0], [1.0, -1.0]], 1),
    ]:
        assert B.multinomial(on(_host(np.array(rows))), 1, True, np.full(len(rows), 0.5))[1] == want

    def storage(s):
        return s if isinstance(s, np.ndarray) else s.copy_to_host()

    np.testing.assert_array_equal(
        storage(B.fill((2, 3), 1.5, float32)), np.full(6, 1.5, np.float32)
    )
    assert storage(B.empty((2, 3), int64)).shape == (6,)
    np.testing.assert_array_equal(storage(B.arange(1, 7, 2, int64)), [1, 3, 5])
    np.testing.assert_allclose(storage(B.arange(0, 1, 0.25, float32)), [0, 0.25, 0.5, 0.75])
    assert B.check_errors() is None


def _np_of_backend(B):
    def back(t):
        return _np(B.to_host(t))

    return back


def _np_of(t, backend):
    """A backend operand's entries as numpy (through that backend's to_host)."""
    return _np(BACKENDS[backend].to_host(t))


def test_no_operand_functions_return_bare_storages(be):
    _, B = be
    for s in (B.fill((2,), 0, float64), B.empty((2,), float64), B.arange(0, 2, 1, float64)):
        assert not hasattr(s, "_shape") and s.size == 2
    assert math.isnan(inspect.signature(B.unary).parameters["p0"].default)


def test_the_cpu_backend_does_not_import_numba_cuda():
    """numba-cuda is an extra: every module of kernels/cpu must import without it."""
    for path in sorted((SRC / "sitp" / "kernels" / "cpu").rglob("*.py")):
        mods = list(_imports(path))
        assert not any(m.startswith(("numba.cuda", "sitp.kernels.cuda")) for m in mods), path

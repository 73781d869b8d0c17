"""sitp.compile on the MLP (Linear -> GELU -> Linear): the GELU decomposed into pointwise
primitives and fused into the Linears' products as their epilogues (sitp/compile/rules.py,
codegen.generate_gemm); the lowering of the other Linears, of a Linear with the residual
add and layer norm after it, and of the cross-entropy loss (sitp/compile/lower.py,
sitp/compile/kernels.py): compiled against eager sitp and PyTorch, forward and
gradients, float64 and float32, on sizes that leave ragged tiles (rows not a multiple of
the tile's, columns not of its width)."""

import numpy as np
import pytest
import torch

import sitp
import sitp.nn as nn
import sitp.nn.functional as F
from sitp.bench import threads

K, N = 7, 21  # the MLP's width and hidden width: ragged column tiles in both dtypes


class MLP(nn.Module):
    def __init__(self, approximate):
        super().__init__()
        self.fc = nn.Linear(K, N)
        self.proj = nn.Linear(N, K)
        self.approximate = approximate

    def forward(self, x):
        return self.proj(F.gelu(self.fc(x), approximate=self.approximate))


def _torch_mlp(m, xa, ga, approximate):
    tm = torch.nn.Sequential(
        torch.nn.Linear(K, N), torch.nn.GELU(approximate=approximate), torch.nn.Linear(N, K)
    ).double()
    with torch.no_grad():
        for tl, sl in ((tm[0], m.fc), (tm[2], m.proj)):
            tl.weight.copy_(torch.tensor(sl.weight.detach().numpy()))
            tl.bias.copy_(torch.tensor(sl.bias.detach().numpy()))
    x = torch.tensor(xa, dtype=torch.float64, requires_grad=True)
    y = tm(x)
    (y * torch.tensor(ga, dtype=torch.float64)).sum().backward()
    grads = [tm[0].weight.grad, tm[0].bias.grad, tm[2].weight.grad, tm[2].bias.grad]
    return y.detach().numpy(), x.grad.numpy(), [t.numpy() for t in grads]


def _mlp_step(m, x, go):
    def step():
        y = m(x)
        (y * go).sum().backward()
        return y

    return step


def _grads(m, x):
    return [x.grad.numpy().copy()] + [
        p.grad.numpy().copy() for p in (m.fc.weight, m.fc.bias, m.proj.weight, m.proj.bias)
    ]


def _clear(m, x):
    m.zero_grad(set_to_none=True)
    x.grad = None


@pytest.mark.parametrize(
    "rows, dtype, approximate",
    [
        (19, "float64", "none"),
        (5, "float64", "tanh"),
        (19, "float32", "tanh"),
        (28, "float32", "none"),
        (31, "float32", "none"),
    ],
)
def test_lowered_mlp_matches_eager_and_torch(rows, dtype, approximate):
    """19 rows: two blocks of the tile's rows on AVX-512, the second ending flush with the
    edge (overlapping the first); 5: fewer rows than a tile, gemm_small_set's own path;
    31: two full blocks and a ragged third."""
    sitp.manual_seed(0)
    m = MLP(approximate).to(getattr(sitp, dtype))
    rng = np.random.default_rng(0)
    xa, ga = rng.standard_normal((rows, K)), rng.standard_normal((rows, K))
    x = sitp.tensor(xa.astype(dtype), requires_grad=True)
    go = sitp.tensor(ga.astype(dtype))
    step = _mlp_step(m, x, go)
    with threads(1):
        cs = sitp.compile(step)
        for _ in range(3):  # the trace, then the program twice
            _clear(m, x)
            got = cs().detach().numpy()
        got_g = _grads(m, x)
        _clear(m, x)
        want = step().detach().numpy()
        want_g = _grads(m, x)
    fns = [n.fn for n in cs.graph.nodes]
    assert "GELU.forward" not in fns and "GELU.backward" not in fns  # decomposed
    rep = cs.entries[0].report  # gelu and gelu' became the epilogues of fc's and proj''s GEMMs
    assert rep["decomposed"] == 2 and rep["epilogues"] == 2 and rep["lowered"] == 4
    tol = dict(rtol=1e-6, atol=1e-6) if dtype == "float64" else dict(rtol=2e-4, atol=2e-5)
    np.testing.assert_allclose(got, want, **tol)
    for a, b in zip(got_g, want_g):
        np.testing.assert_allclose(a, b, **tol)
    ty, tx, tgrads = _torch_mlp(m, xa.astype(dtype), ga.astype(dtype), approximate)
    np.testing.assert_allclose(got, ty, **tol)
    for a, b in zip(got_g, [tx] + tgrads):
        np.testing.assert_allclose(a, b, **tol)


def test_lowered_mlp_on_two_threads_gives_one_threads_values():
    """With numba on more threads than one, the lowered steps call eager's (threaded)
    kernels, and the GEMM epilogues split their row blocks among the threads: the same
    values as on one thread, within rounding."""
    sitp.manual_seed(1)
    m = MLP("none").to(sitp.float64)
    rng = np.random.default_rng(1)
    x = sitp.tensor(rng.standard_normal((19, K)), requires_grad=True)
    go = sitp.tensor(rng.standard_normal((19, K)))
    cs = sitp.compile(_mlp_step(m, x, go))
    out = {}
    for n in (1, 2):
        with threads(n):
            for _ in range(2):
                _clear(m, x)
                y = cs().detach().numpy()
            out[n] = [y] + _grads(m, x)
    assert len(cs.entries) == 1
    for a, b in zip(out[1], out[2]):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
    rn = ResidualNorm().to(sitp.float64)
    r = sitp.tensor(rng.standard_normal((19, N)), requires_grad=True)
    cr = sitp.compile(lambda: rn(r, x)[1].sum().backward())
    out = {}
    for n in (1, 2):
        with threads(n):
            for _ in range(2):
                rn.zero_grad(set_to_none=True)
                r.grad = x.grad = None
                cr()
            out[n] = [t.grad.numpy().copy() for t in (r, x, rn.proj.weight, rn.ln.weight)]
    for a, b in zip(out[1], out[2]):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


def test_gemm_epilogue_on_threads_large_enough_to_split():
    """A product of 64 x 1024 entries, the size from which the generated GEMM's row
    blocks are a prange: its values on two threads and one against eager's passes."""
    from sitp.compile import codegen

    sitp.manual_seed(4)
    rows, width = 66, 1024 // 4  # 66 rows: four blocks and a ragged fifth on AVX-512
    fc, proj = nn.Linear(8, 4 * width), nn.Linear(4 * width, 8)
    x = sitp.tensor(np.random.default_rng(6).standard_normal((rows, 8)).astype(np.float32))

    def step():
        fc.zero_grad(set_to_none=True)
        proj.zero_grad(set_to_none=True)
        y = proj(F.gelu(fc(x)))
        y.square().sum().backward()
        return [y.detach().numpy()] + [p.grad.numpy().copy() for p in (fc.weight, fc.bias)]

    cs = sitp.compile(step)
    want = step()
    for n in (1, 2):
        with threads(n):
            cs()
            got = cs()
        for a, b in zip(got, want):
            np.testing.assert_allclose(a, b, rtol=2e-4, atol=2e-4)
    fused = [n for n in cs.graph.nodes if n.fn == "Linear.forward" and n.kernel is not None]
    (fwd,) = [n for n in fused if "gelu" in n.kernel.summary()]
    assert rows * 4 * width >= codegen.PARALLEL_MIN
    src = fwd.kernel.source  # the generated GEMM with the GELU as its epilogue
    assert "prange(" in src and "_serial(" in src and "gelu_f32(" in src


def test_gemm_epilogue_bits_do_not_depend_on_where_its_buffers_lie():
    """The generated GEMM's epilogue (GELU, then x 1.5) on a product of PARALLEL_MIN
    entries, called with the product C and the output at addresses next to each other
    and far apart: the same bits each time, from the threaded version and its serial
    twin, and eager's bits. Compiled with the backend GEMM's fast-math flags ("afn",
    "arcp"), the threaded version's epilogue gave other bits when out lay within a few
    bytes after C: LLVM's vector loop checks the two addresses at run time and falls
    back to a scalar loop that rounded differently, so a compiled step on two threads
    changed its last bits from call to call as the allocator placed its buffers."""
    from sitp.compile import codegen

    sitp.manual_seed(4)
    rows, width = 66, 1024
    fc, proj = nn.Linear(8, width), nn.Linear(width, 8)
    x = sitp.tensor(np.random.default_rng(6).standard_normal((rows, 8)).astype(np.float32))

    def step():
        proj(F.gelu(fc(x)) * 1.5).square().sum().backward()

    cs = sitp.compile(step)
    cs()
    (k,) = [
        n.kernel
        for n in cs.graph.nodes
        if n.fn == "Linear.forward" and n.kernel is not None and "gelu" in n.kernel.summary()
    ]
    name = k.name + "_gemm"
    threaded, serial = codegen.load(k.source, name), codegen.load_serial(k.source, name)
    assert serial is not None and rows * width >= codegen.PARALLEL_MIN
    consts = [v.array for v in k.leaves[1:]]  # (the first leaf is C itself)
    args = [x.numpy(), fc.weight.detach().numpy(), fc.bias.detach().numpy()]
    n = rows * width
    buf = np.empty(3 * n + 16, np.float32)
    want = (F.gelu(fc(x)) * 1.5).detach().numpy().reshape(-1)
    for fn in (threaded, serial):
        for c_at, out_at in ((0, n), (0, n + 1), (n + 1, 0), (0, 2 * n + 16), (2 * n + 16, 0)):
            c, out = buf[c_at : c_at + n], buf[out_at : out_at + n]
            fn(*args, c, *consts, out, 1)  # (1: one block of rows per task)
            np.testing.assert_array_equal(out, want)


_TWINS = """
import sys

import numpy as np

from sitp.compile import codegen

source, name = open(sys.argv[1]).read(), sys.argv[2]
B, T, width, n = (int(a) for a in sys.argv[3:])
rng = np.random.default_rng(0)
dy = rng.standard_normal((B * T, n)).astype(np.float32)
w = rng.standard_normal((n, width)).astype(np.float32)
h = rng.standard_normal(B * T * width).astype(np.float32)
outs = []
for fn in (codegen.load(source, name), codegen.load_serial(source, name)):
    c, out = np.empty(B * T * width, np.float32), np.empty(B * T * width, np.float32)
    fn(dy, w, np.empty(0, np.float32), c, h, out, 1)
    outs.append(out)
np.save(sys.argv[1] + ".npy", np.stack(outs + [(dy @ w).reshape(-1), h]))
"""


def test_parallel_gemm_epilogue_gives_its_serial_twins_bits(tmp_path):
    """The GELU backward's generated product on the anchor GPT's rows (12 x 64 of width
    512: ``dY @ W``, then ``gelu_grad -> mul`` on each block of rows): the threaded
    version gives its serial twin's bits, and PyTorch's GELU backward to float32's
    rounding. A row is a (batch, position) pair found by remainders from the block's first
    row, which in a ``prange``'s body is a signed number that numba's scheduler hands in:
    LLVM could not prove the epilogue's indices non-negative, kept numba's wraparound test
    and read the rows by gathers, 3.9 times slower than the twin on one thread, and 189 of
    the 393,216 entries rounded otherwise. (Run in a new process: in this one, after the
    compile of a large step, numba compiled the same source to the good loop.)"""
    import subprocess
    import sys

    from sitp.compile import codegen

    sitp.manual_seed(5)
    B, T, width, n = 12, 64, 512, 128
    fc, proj = nn.Linear(n, width), nn.Linear(width, n)
    x = sitp.tensor(np.random.default_rng(7).standard_normal((B, T, n)).astype(np.float32))

    def step():
        proj(F.gelu(fc(x))).square().sum().backward()

    cs = sitp.compile(step)
    cs()
    (k,) = [n.kernel for n in cs.graph.nodes if n.kernel is not None
            and n.fn == "Linear.backward" and "gelu_grad" in n.kernel.summary()]  # fmt: skip
    assert B * T * width >= codegen.PARALLEL_MIN and "prange(" in k.source
    src = tmp_path / "kernel.py"
    src.write_text(k.source)
    cmd = [sys.executable, "-c", _TWINS, str(src), k.name + "_gemm", str(B), str(T), str(width)]
    subprocess.run(cmd + [str(n)], check=True, timeout=600)
    threaded, serial, c, h = np.load(str(src) + ".npy")
    np.testing.assert_array_equal(threaded, serial)
    th = torch.tensor(h, requires_grad=True)
    torch.nn.functional.gelu(th).backward(torch.tensor(c))
    np.testing.assert_allclose(threaded, th.grad.numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype, reduction", [("float64", "mean"), ("float32", "sum")])
def test_lowered_cross_entropy_matches_eager_and_torch(dtype, reduction):
    rng = np.random.default_rng(3)
    R, V = 13, 11
    za = rng.standard_normal((R, V)) * 3
    ta = rng.integers(0, V, R)
    ta[4] = -100  # an ignored row
    z = sitp.tensor(za.astype(dtype), requires_grad=True)
    t = sitp.tensor(ta)

    def step():
        loss = F.cross_entropy(z, t, reduction=reduction)
        loss.backward()
        return loss

    cs = sitp.compile(step)
    for _ in range(3):
        z.grad = None
        got = cs().item()
    got_g = z.grad.numpy().copy()
    assert "CrossEntropy.forward" in [n.fn for n in cs.graph.nodes if n.lowered is not None]
    tz = torch.tensor(za.astype(dtype), requires_grad=True)
    tl = torch.nn.functional.cross_entropy(tz, torch.tensor(ta), reduction=reduction)
    tl.backward()
    z.grad = None
    want = step().item()
    tol = dict(rtol=1e-6, atol=1e-6) if dtype == "float64" else dict(rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got, want, **tol)
    np.testing.assert_allclose(got, tl.item(), **tol)
    np.testing.assert_allclose(got_g, z.grad.numpy(), **tol)
    np.testing.assert_allclose(got_g, tz.grad.numpy(), **tol)
    # a target out of range, on the compiled program: the error eager raises
    t._storage[0] = V
    with pytest.raises(IndexError, match="out of bounds"):
        cs()


class ResidualNorm(nn.Module):
    """A block's end: the residual stream plus a projection, then the next layer norm."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(K, N)
        self.ln = nn.LayerNorm(N)

    def forward(self, r, x):
        s = r + self.proj(x)
        return s, self.ln(s)


@pytest.mark.parametrize("rows, dtype", [(19, "float64"), (5, "float64"), (31, "float32")])
def test_lowered_residual_norm_matches_eager_and_torch(rows, dtype):
    sitp.manual_seed(2)
    m = ResidualNorm().to(getattr(sitp, dtype))
    with sitp.no_grad():  # a gain and a shift that are not 1 and 0
        m.ln.weight.copy_(sitp.randn(N).to(getattr(sitp, dtype)))
        m.ln.bias.copy_(sitp.randn(N).to(getattr(sitp, dtype)))
    rng = np.random.default_rng(4)
    ra, xa, ga, gs = (rng.standard_normal(s) for s in [(rows, N), (rows, K), (rows, N), (rows, N)])
    r = sitp.tensor(ra.astype(dtype), requires_grad=True)
    x = sitp.tensor(xa.astype(dtype), requires_grad=True)
    go, gso = sitp.tensor(ga.astype(dtype)), sitp.tensor(gs.astype(dtype))

    def step():
        s, y = m(r, x)
        ((y * go).sum() + (s * gso).sum()).backward()
        return y

    def grads():
        return [
            t.grad.numpy().copy()
            for t in (r, x, m.proj.weight, m.proj.bias, m.ln.weight, m.ln.bias)
        ]

    def clear():
        m.zero_grad(set_to_none=True)
        r.grad = x.grad = None

    with threads(1):
        cs = sitp.compile(step)
        for _ in range(3):
            clear()
            got = cs().detach().numpy()
        got_g = grads()
        clear()
        want = step().detach().numpy()
        want_g = grads()
    fns = [n.fn for n in cs.graph.nodes]
    assert "LayerNorm.forward" not in fns and "binary" not in fns  # inside the Linear's step
    tol = dict(rtol=1e-6, atol=1e-6) if dtype == "float64" else dict(rtol=2e-4, atol=2e-5)
    np.testing.assert_allclose(got, want, **tol)
    for a, b in zip(got_g, want_g):
        np.testing.assert_allclose(a, b, **tol)
    tr, tx = (torch.tensor(a.astype(dtype), requires_grad=True) for a in (ra, xa))
    tw, tb, tlw, tlb = (
        torch.tensor(t.detach().numpy(), requires_grad=True)
        for t in (m.proj.weight, m.proj.bias, m.ln.weight, m.ln.bias)
    )
    ts = tr + tx @ tw.T + tb
    ty = torch.nn.functional.layer_norm(ts, (N,), tlw, tlb)
    (
        (ty * torch.tensor(ga.astype(dtype))).sum() + (ts * torch.tensor(gs.astype(dtype))).sum()
    ).backward()
    np.testing.assert_allclose(got, ty.detach().numpy(), **tol)
    for a, t in zip(got_g, (tr, tx, tw, tb, tlw, tlb)):
        np.testing.assert_allclose(a, t.grad.numpy(), **tol)


def test_a_linear_whose_result_is_read_twice():
    """The hidden layer h is also returned and squared: the forward's product is still
    fused with its first reader (the GELU), the others read h from memory. (proj's
    backward reads y.sum()'s gradient, a broadcast view, which the lowering leaves to
    eager's Linear.backward: its GELU' stays a kernel of its own.)"""
    sitp.manual_seed(3)
    m = MLP("none").to(sitp.float64)
    rng = np.random.default_rng(5)
    x = sitp.tensor(rng.standard_normal((19, K)), requires_grad=True)

    def step():
        h = m.fc(x)
        y = m.proj(F.gelu(h))
        (y.sum() + (h * h).sum()).backward()
        return h, y

    with threads(1):
        cs = sitp.compile(step)
        for _ in range(2):
            _clear(m, x)
            got = [t.detach().numpy() for t in cs()]
        got_g = _grads(m, x)
        _clear(m, x)
        want = [t.detach().numpy() for t in step()]
        want_g = _grads(m, x)
    rep = cs.entries[0].report
    assert rep["decomposed"] == 2 and rep["epilogues"] == 1
    (fc,) = [n for n in cs.graph.nodes if n.fn == "Linear.forward" and n.kernel is not None]
    assert fc.args[2].value is cs.graph.nodes[0].args[2].value  # fc's weight
    for a, b in zip(got + got_g, want + want_g):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)

"""sitp.compile on the GRU: ``GRUGates.forward``/``.backward`` decomposed into pointwise
primitives (sitp/compile/rules.py), the forward fused into one generated kernel, the
backward into one ``pack`` kernel that stores the three gates' gradients side by side in
the rows of d(gi) and d(gh) (codegen.generate). Compiled against eager sitp, forward and
gradients, in float64 (to round-off) and float32, on odd sizes (H not a multiple of the
vector width, batch 3), and cases where the rule must not fire."""

import numpy as np
import pytest

import sitp
import sitp.nn as nn
import sitp.nn.functional as F
from sitp.bench import threads
from sitp.compile.api import CompiledFunction
from sitp.compile.scalars import sigmoid_f32
from sitp.nn._functions.gru import GRUGates

B, D, T = 3, 4, 3  # batch, input width, time steps


def _model(H, dtype):
    sitp.manual_seed(0)
    return nn.GRUCell(D, H).to(getattr(sitp, dtype))


def _step(cell, xs, h0, go):
    """T steps of the cell from h0 and a weighted sum of the states, backward."""

    def step():
        h, states = h0, []
        for x in xs:
            h = cell(x, h)
            states.append(h)
        y = sitp.stack(states, 1)  # (B, T, H)
        (y * go).sum().backward()
        return y

    return step


def _inputs(H, dtype, seed=0):
    rng = np.random.default_rng(seed)
    xs = [sitp.tensor(rng.standard_normal((B, D)).astype(dtype)) for _ in range(T)]
    h0 = sitp.tensor(rng.standard_normal((B, H)).astype(dtype), requires_grad=True)
    go = sitp.tensor(rng.standard_normal((B, T, H)).astype(dtype))
    return xs, h0, go


def _grads(cell, h0):
    return [h0.grad.numpy().copy()] + [p.grad.numpy().copy() for p in cell.parameters()]


def _clear(cell, h0):
    cell.zero_grad(set_to_none=True)
    h0.grad = None


def _compiled_and_eager(cell, step, h0, **kw):
    with threads(1):
        cs = CompiledFunction(step, **kw)
        for _ in range(3):  # the trace, then the program twice
            _clear(cell, h0)
            got = cs().detach().numpy()
        got_g = _grads(cell, h0)
        _clear(cell, h0)
        want = step().detach().numpy()
        want_g = _grads(cell, h0)
    return cs, (got, got_g), (want, want_g)


def _close(got, want, tol):
    np.testing.assert_allclose(got[0], want[0], **tol)
    assert len(got[1]) == len(want[1]) == 5
    for a, b in zip(got[1], want[1]):
        np.testing.assert_allclose(a, b, **tol)


TOL = {"float64": dict(rtol=1e-12, atol=1e-12), "float32": dict(rtol=2e-5, atol=2e-6)}


@pytest.mark.parametrize("H, dtype", [(5, "float64"), (13, "float32"), (16, "float32")])
def test_gru_gates_decomposed_fused_and_equal_to_eager(H, dtype):
    cell = _model(H, dtype)
    xs, h0, go = _inputs(H, dtype)
    step = _step(cell, xs, h0, go)
    cs, got, want = _compiled_and_eager(cell, step, h0)
    rep = cs.entries[0].report
    assert rep["decomposed"] == 2 * T  # each step's forward and backward
    fns = [n.fn for n in cs.graph.nodes]
    assert not any(f.startswith("GRUGates.") for f in fns)
    kernels = [n.kernel for n in cs.graph.nodes if n.kernel is not None]
    packs = [k for k in kernels if k.root.fn == "pack"]
    forwards = [k for k in kernels if "sigmoid" in k.summary() and k.root.fn != "pack"]
    assert len(packs) == T and len(forwards) == T  # one kernel per step each way
    for k in packs:  # d(gi), d(gh) (B, 3H) and dh (B, H), from one loop nest
        assert [v.size for v in k.outs()] == [B * 3 * H, B * 3 * H, B * H]
        assert k.source.count("# tanh\n") == 1 and k.source.count("# sigmoid\n") == 2
    _close(got, want, TOL[dtype])


def test_gru_module_backward_outside_the_compiled_forward():
    """A compiled module whose loss's backward runs outside: the backward graph is split
    from the forward (api._trace_backward), its GRUGates.backward decomposed reading
    the forward graph's gi, gh and h, which the forward then saves."""
    H = 7
    cell = _model(H, "float64")
    xs, h0, go = _inputs(H, "float64", seed=1)

    class Unrolled(nn.Module):
        def __init__(self):
            super().__init__()
            self.cell = cell

        def forward(self, h):
            for x in xs:
                h = self.cell(x, h)
            return h

    m = Unrolled()
    cm = sitp.compile(m)
    out = {}
    for name, fn in (("compiled", cm), ("compiled", cm), ("eager", m)):
        _clear(cell, h0)
        y = fn(h0)
        (y * go[:, 0]).sum().backward()
        out[name] = (y.detach().numpy(), _grads(cell, h0))
    assert cm.entries[0].report["decomposed"] >= T  # the backward graph's
    _close(out["compiled"], out["eager"], TOL["float64"])


def test_gru_gates_not_decomposed_when_gi_is_written_in_place():
    """gi written in place after the gates read it: the backward would read the new
    values, so neither node is decomposed, and the step still equals eager."""
    H = 6
    rng = np.random.default_rng(2)
    w_ih = sitp.tensor(rng.standard_normal((3 * H, D)), requires_grad=True)
    w_hh = sitp.tensor(rng.standard_normal((3 * H, H)), requires_grad=True)
    x = sitp.tensor(rng.standard_normal((B, D)))
    h = sitp.tensor(rng.standard_normal((B, H)), requires_grad=True)

    def step():
        gi, gh = F.linear(x, w_ih), F.linear(h, w_hh)
        out = GRUGates.apply(gi, gh, h)
        gi.mul_(2.0)  # after the forward read it; GRUGates saves h, r, z, n, not gi
        loss = (out * out).sum() + gi.sum()
        loss.backward()
        return loss.detach()

    grads = {}
    with threads(1):
        cs = CompiledFunction(step)
        for name, fn in (("compiled", cs), ("compiled", cs), ("eager", step)):
            for t in (w_ih, w_hh, h):
                t.grad = None
            val = fn().numpy()
            grads[name] = [val] + [t.grad.numpy().copy() for t in (w_ih, w_hh, h)]
    assert cs.entries[0].report["decomposed"] == 0
    assert {"GRUGates.forward", "GRUGates.backward"} <= {n.fn for n in cs.graph.nodes}
    for a, b in zip(grads["compiled"], grads["eager"]):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


def test_gru_pack_without_the_fusion_pass():
    """Decomposed but not fused (``passes_on`` without "fuse"): the pointwise nodes are
    backend calls and the pack node's stores numpy copies; eager's values."""
    H = 5
    cell = _model(H, "float64")
    xs, h0, go = _inputs(H, "float64", seed=3)
    step = _step(cell, xs, h0, go)
    cs, got, want = _compiled_and_eager(cell, step, h0, passes_on=("fold", "cse", "dce", "lower"))
    assert cs.entries[0].report["decomposed"] == 2 * T
    assert sum(n.fn == "pack" for n in cs.graph.nodes) == T
    _close(got, want, TOL["float64"])


def test_sigmoid_f32_is_accurate():
    """The generated float32 kernels' sigmoid (compile/scalars.py, vectorisable): within
    3e-7 relative of the float64 sigmoid from -110 to 110 (down to 1e-37), 0 and 1 at
    the infinities, NaN for NaN."""
    x = np.linspace(-110, 110, 200_001).astype(np.float32)
    got = np.array([sigmoid_f32(v) for v in x[::50]], np.float64)
    ref = 1 / (1 + np.exp(-x[::50].astype(np.float64)))
    keep = ref > 1e-37
    assert np.max(np.abs(got - ref)[keep] / ref[keep]) < 3e-7
    ends = [sigmoid_f32(np.float32(v)) for v in (np.inf, -np.inf, np.nan)]
    assert ends[0] == 1 and ends[1] == 0 and np.isnan(ends[2])

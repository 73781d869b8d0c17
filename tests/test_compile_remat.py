"""Save or recompute (chapter 6.2, ``sitp/compile/remat.py``): the max-flow against a
brute-force minimum cut, the cut's choice on small training steps where recomputing
wins and where keeping wins, and the compiled steps against eager."""

import itertools

import numpy as np
import pytest

import sitp
from sitp.compile import remat


def brute_min_cut(cap, s, t):
    """The least capacity of an s-t cut, over every set of vertices holding s, not t."""
    verts = sorted({u for u in cap} | {v for vs in cap.values() for v in vs} - {s, t})
    best = None
    for k in range(len(verts) + 1):
        for side in itertools.combinations(verts, k):
            S = set(side) | {s}
            c = sum(w for u, vs in cap.items() if u in S for v, w in vs.items() if v not in S)
            best = c if best is None else min(best, c)
    return best


def test_max_flow_equals_the_brute_force_min_cut():
    # CLRS's network (Figure 26.1): the maximum flow is 23
    clrs = {
        "s": {"v1": 16, "v2": 13},
        "v1": {"v3": 12},
        "v2": {"v1": 4, "v4": 14},
        "v3": {"v2": 9, "t": 20},
        "v4": {"v3": 7, "t": 4},
    }
    flow, side = remat.max_flow(clrs, "s", "t")
    assert flow == 23 == brute_min_cut(clrs, "s", "t")
    cut = sum(w for u in side for v, w in clrs.get(u, {}).items() if v not in side)
    assert cut == flow and "t" not in side
    rng = np.random.default_rng(0)
    for _ in range(20):  # random networks of 7 vertices
        names = ["s", "a", "b", "c", "d", "e", "t"]
        cap = {}
        for u, v in itertools.permutations(names, 2):
            if u != "t" and v != "s" and rng.random() < 0.4:
                cap.setdefault(u, {})[v] = int(rng.integers(1, 10))
        flow, side = remat.max_flow(cap, "s", "t")
        assert flow == brute_min_cut(cap, "s", "t")
        assert flow == sum(w for u in side for v, w in cap.get(u, {}).items() if v not in side)


def _f64(a, grad=False):
    return sitp.tensor(a, dtype=sitp.float64, requires_grad=grad)


def norm_step(x, w1, w2):
    """A batch norm without affine, a tanh, a matrix product: the backward reads the
    centred values, the scale and the tanh, which min-cut recomputes from the first two."""
    h = x @ w1
    c = h - h.mean(0)
    r = ((c * c).mean(0) + 1e-5).rsqrt()
    a = (c * r).tanh()
    loss = ((a @ w2) ** 2).sum()
    loss.backward()
    return loss.detach()


def sum_step(x, w1, w2, w3):
    """The backward reads t = h1 + h2 only (in t^T dy): recomputing it would keep both
    matrix products' results instead of one sum, so the cut keeps t."""
    t = x @ w1 + x @ w2
    loss = ((t @ w3) ** 2).sum()
    loss.backward()
    return loss.detach()


def _inputs(rng, step):
    x = _f64(rng.standard_normal((32, 16)))
    ws = [(16, 24), (24, 4)] if step is norm_step else [(16, 24), (16, 24), (24, 4)]
    return [x] + [_f64(rng.standard_normal(s) * 0.3, grad=True) for s in ws]


def _run(step, mode, ts):
    for t in ts[1:]:
        t.grad = None
    f = sitp.compile(step, remat=mode, rerun_trace=True)
    loss = f(*ts).item()
    return loss, [t.grad.numpy().copy() for t in ts[1:]], f.entries[0].report


@pytest.mark.parametrize("step", [norm_step, sum_step])
def test_remat_matches_eager_and_keeps_fewer_bytes(step):
    ts = _inputs(np.random.default_rng(1), step)
    want = step(*ts).item()
    want_g = [t.grad.numpy().copy() for t in ts[1:]]
    got = {mode: _run(step, mode, ts) for mode in ("save", "mincut")}
    for loss, grads, _ in got.values():
        assert abs(loss - want) <= 1e-12 * abs(want)
        for g, w in zip(grads, want_g):
            np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)
    save, cut = got["save"][2], got["mincut"][2]
    assert save["recomputed"] == 0 and save["held_bytes"] == save["kept_bytes"]
    matrix = 32 * 24 * 8  # bytes of one 32 x 24 activation in float64
    if step is norm_step:  # save keeps the centred values and the tanh; the cut, the first
        assert cut["recomputed"] >= 2
        assert save["held_bytes"] >= 2 * matrix and cut["held_bytes"] < 1.5 * matrix
    else:  # keeping t is cheapest: nothing is recomputed
        assert cut["recomputed"] == 0
        assert cut["held_bytes"] == save["held_bytes"]


def test_remat_refuses_an_unknown_mode():
    with pytest.raises(ValueError):
        sitp.compile(norm_step, remat="all")


class NormTanh(sitp.nn.Module):
    """norm_step's forward as a module: compiled, its backward runs later (a Joint)."""

    def __init__(self, w1, w2):
        super().__init__()
        self.w1, self.w2 = sitp.nn.Parameter(w1), sitp.nn.Parameter(w2)

    def forward(self, x):
        h = x @ self.w1
        c = h - h.mean(0)
        a = (c * ((c * c).mean(0) + 1e-5).rsqrt()).tanh()
        return ((a @ self.w2) ** 2).sum()


def test_remat_on_a_split_forward_and_backward():
    rng = np.random.default_rng(2)
    x = _f64(rng.standard_normal((32, 16)))
    w1, w2 = rng.standard_normal((16, 24)) * 0.3, rng.standard_normal((24, 4)) * 0.3
    held, grads = {}, {}
    for mode in (None, "mincut", "eager"):
        m = NormTanh(_f64(w1), _f64(w2))
        f = m if mode == "eager" else sitp.compile(m, remat=mode)
        for _ in range(2):  # the trace's call, then the program's
            m.zero_grad()
            f(x).backward()
        grads[mode] = [m.w1.grad.numpy().copy(), m.w2.grad.numpy().copy()]
        if mode != "eager":
            held[mode] = f.entries[0].report["held_bytes"]
    for mode in (None, "mincut"):
        for g, w in zip(grads[mode], grads["eager"]):
            np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)
    matrix = 32 * 24 * 8  # bytes of one 32 x 24 activation in float64
    assert held[None] >= 2 * matrix  # the centred values and the tanh, saved
    assert held["mincut"] < 1.5 * matrix  # the centred values and rows; the tanh recomputed

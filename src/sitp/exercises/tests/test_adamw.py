"""Tests of the section 3.2 assignment: ``pytest --pyargs sitp.exercises.tests.test_adamw``."""

import numpy as np

import sitp


def run(step, optimizer_class, weight_decay, steps=25, seed=0, **options):
    """The same gradients through ``step`` (numpy) and through a sitp optimizer."""
    rng = np.random.default_rng(seed)
    p = rng.normal(size=(4, 3))
    m, v = np.zeros_like(p), np.zeros_like(p)
    w = sitp.tensor(p.copy(), requires_grad=True)
    opt = optimizer_class([w], weight_decay=weight_decay, **options)
    for t in range(1, steps + 1):
        g = rng.normal(size=p.shape) * (1 + t % 3)
        step(p, g, m, v, t, weight_decay=weight_decay, **options)
        w.grad = sitp.tensor(g)
        opt.step()
    return p, w.detach().numpy()


def test_adam_matches_sitp(impl):
    mine, ref = run(impl.adam_step, sitp.optim.Adam, 0.0, lr=0.01)
    np.testing.assert_allclose(mine, ref, rtol=1e-10, atol=1e-12)


def test_adam_l2_penalty_matches_sitp(impl):
    mine, ref = run(impl.adam_step, sitp.optim.Adam, 0.1, lr=0.01, betas=(0.8, 0.99))
    np.testing.assert_allclose(mine, ref, rtol=1e-10, atol=1e-12)


def test_adamw_matches_sitp(impl):
    mine, ref = run(impl.adamw_step, sitp.optim.AdamW, 0.1, lr=0.01, eps=1e-6)
    np.testing.assert_allclose(mine, ref, rtol=1e-10, atol=1e-12)


def test_first_step_has_the_size_of_the_rate(impl):
    """After bias correction, step 1 moves every weight by lr * sign(g) (up to eps)."""
    p = np.zeros(5)
    g = np.array([1e-4, -3.0, 2.0, -1e3, 0.5])
    impl.adam_step(p, g, np.zeros(5), np.zeros(5), 1, lr=0.1, eps=1e-12)
    np.testing.assert_allclose(p, -0.1 * np.sign(g), rtol=1e-6)


def test_decay_is_decoupled(impl):
    """With a zero gradient, AdamW shrinks weights by (1 - lr*wd) per step and Adam's L2
    penalty does not: it moves them by about lr, whatever their size."""
    for scale in (1.0, 100.0):
        p = np.full(3, scale)
        m, v = np.zeros(3), np.zeros(3)
        impl.adamw_step(p, np.zeros(3), m, v, 1, lr=0.1, weight_decay=0.5)
        np.testing.assert_allclose(p, scale * (1 - 0.05))
        assert not m.any() and not v.any()
        q = np.full(3, scale)
        impl.adam_step(q, np.zeros(3), np.zeros(3), np.zeros(3), 1, lr=0.1, weight_decay=0.5)
        np.testing.assert_allclose(q, scale - 0.1, rtol=1e-6)

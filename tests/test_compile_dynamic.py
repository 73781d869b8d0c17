"""sitp.compile's symbolic batch size (6.1, "Guards"; sitp/compile/dynamic.py): after a
change of the batch size, one dynamic entry serves every batch size >= 2, with kernels
that take their sizes as arguments, so that no kernel compiles again; values and grads
equal eager's; other changes, batch size 1 and ``dynamic=False`` still recompile."""

import hashlib

import numpy as np
import pytest

import sitp
import sitp.nn.functional as F
from sitp.compile import codegen, dynamic
from sitp.compile.api import explain_text

SIZES = (3, 5, 7, 4)


@pytest.fixture
def loads(monkeypatch):
    """Every generated source loaded, by the call of the test that loaded it: (name,
    hash, whether it was new to the process, i.e. numba compiled it)."""
    seen = []
    real = codegen.load

    def load(source, name, target="cpu"):
        h = hashlib.sha1(source.encode()).hexdigest()[:16]
        seen.append((name, h, (h, target) not in codegen._loaded))
        return real(source, name, target)

    monkeypatch.setattr(codegen, "load", load)
    return seen


def rand(*shape, seed=0, dtype=sitp.float64, requires_grad=False):
    a = np.random.default_rng(seed).standard_normal(shape).astype(dtype.np)
    return sitp.tensor(a, requires_grad=requires_grad)


def kernels_of(program):
    """The generated kernels (and GEMM epilogue kernels) of a Program or a Joint."""
    progs = [program.fwd, program.bwd] if hasattr(program, "fwd") else [program]
    return [n.kernel for p in progs for n in p.graph.nodes if n.kernel is not None]


def chain(x, y):
    return ((x * y).tanh() + x.sin() * 2.0).sum(-1) / 3.0


@pytest.mark.parametrize("dtype", [sitp.float64, sitp.float32])
def test_pointwise_chain_one_dynamic_entry_for_every_batch_size(loads, dtype):
    cf = sitp.compile(chain)
    y = rand(6, seed=99, dtype=dtype)
    new = {}
    for B in SIZES:
        x = rand(B, 6, seed=B, dtype=dtype)
        for _ in range(2):  # the trace (or the check of the dynamic entry), then the program
            got = cf(x, y).numpy()
            want = chain(x, y).numpy()
            if dtype is sitp.float64:
                np.testing.assert_array_equal(got, want)
            else:
                np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
        new[B] = [name for name, _, fresh in loads if fresh]
        loads.clear()
    assert len(cf.entries) == 2
    static, dyn = cf.entries
    assert static.dynamic is None and dyn.dynamic is not None and dyn.report["dynamic"]
    assert new[7] == [] and new[4] == []  # no kernel compiled after the dynamic entry
    assert sorted(dyn.dynamic.programs) == [4, 5, 7]
    # each size's program runs the one kernel, its batch size an argument
    srcs = {k.source for p in dyn.dynamic.programs.values() for k in kernels_of(p)}
    assert len(srcs) == 1 and "range(n0)" in srcs.pop()
    assert [k.syms for k in kernels_of(dyn.dynamic.programs[7])] == [[7]]
    k = kernels_of(dyn.program)[0]
    # its parallel version is there for sizes past codegen.PARALLEL_MIN; these small sizes
    # ran the serial one, which numba compiled for one type signature
    serial = codegen.load_serial(k.source, k.name)
    assert k.small and len(serial.signatures) == 1
    assert "dynamic" in explain_text(cf)
    x9 = rand(9, 6, seed=9, dtype=dtype)  # a new size: its first call traces, to check
    assert not cf.signature_known(x9, y)
    cf(x9, y)
    assert cf.signature_known(x9, y) and len(cf.entries) == 2


def test_dynamic_false_compiles_each_batch_size(loads):
    cf = sitp.compile(chain, dynamic=False)
    y = rand(6, seed=99)
    hashes = []
    for B in SIZES:
        x = rand(B, 6, seed=B)
        cf(x, y)
        np.testing.assert_array_equal(cf(x, y).numpy(), chain(x, y).numpy())
        hashes.append({h for _, h, _ in loads})
        loads.clear()
    assert len(cf.entries) == 4 and all(e.dynamic is None for e in cf.entries)
    assert len(set().union(*hashes)) == 4  # a kernel source per size: sizes baked in
    with pytest.raises(ValueError, match="dynamic must be"):
        sitp.compile(chain, dynamic="batch")


def test_mlp_train_step_with_backward(loads):
    """A closure step (loss.backward() inside, the mean's 1/n a number of the graph):
    loss and grads as eager's, one static and one dynamic entry, no kernel compiled after."""
    sitp.manual_seed(0)
    fc1, fc2 = sitp.nn.Linear(5, 7).double(), sitp.nn.Linear(7, 3).double()
    params = [fc1.weight, fc1.bias, fc2.weight, fc2.bias]

    def step(x, y):
        loss = F.mse_loss(fc2(F.gelu(fc1(x))), y)
        loss.backward()
        return loss

    cs = sitp.compile(step)
    new = {}
    for B in SIZES:
        x, y = rand(B, 5, seed=B), rand(B, 3, seed=B + 10)
        for _ in range(2):
            for p in params:
                p.grad = None
            le = step(x, y).item()
            ge = [p.grad.numpy().copy() for p in params]
            for p in params:
                p.grad = None
            lc = cs(x, y).item()
            np.testing.assert_allclose(lc, le, rtol=1e-12, atol=1e-12)
            for p, g in zip(params, ge):
                np.testing.assert_allclose(p.grad.numpy(), g, rtol=1e-12, atol=1e-12)
        new[B] = [name for name, _, fresh in loads if fresh]
        loads.clear()
    assert len(cs.entries) == 2 and cs.entries[1].dynamic is not None
    assert new[7] == [] and new[4] == []
    # the GEMM epilogues are among the kernels, their row count an argument
    names = [k.name for k in kernels_of(cs.entries[1].program)]
    assert any("_gemm" in s for s in (k.source for k in kernels_of(cs.entries[1].program)))
    assert len(names) == cs.entries[1].report["kernels"]


def test_module_forward_and_backward_float32(loads):
    """An nn.Module (a forward graph and a backward graph; the first call of each size
    runs the program too): float32 outputs and grads as eager's."""
    sitp.manual_seed(1)
    m = sitp.nn.Sequential(sitp.nn.Linear(5, 8), sitp.nn.GELU(), sitp.nn.Linear(8, 2))
    cm = sitp.compile(m)
    new = {}
    for B in SIZES:
        x = rand(B, 5, seed=B, dtype=sitp.float32, requires_grad=True)
        got = []
        for fn in (m, cm):
            m.zero_grad(set_to_none=True)
            x.grad = None
            o = fn(x)
            (o * o).sum().backward()
            got.append(
                [o.detach().numpy(), x.grad.numpy()] + [p.grad.numpy() for p in m.parameters()]
            )
        for a, b in zip(*got):
            np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)
        new[B] = [name for name, _, fresh in loads if fresh]
        loads.clear()
    assert len(cm.entries) == 2 and cm.entries[1].dynamic is not None
    assert new[7] == [] and new[4] == []


def gpt_steps_against_eager(loads, shapes, block_size=8):
    """A 1-layer float64 GPT's training step, compiled, called twice at each (B, T) of
    ``shapes``: its loss and gradients equal eager's; returns the compiled step and, per
    shape, the kernels numba compiled for it."""
    from sitp.models.gpt import GPT, GPTConfig

    sitp.manual_seed(0)
    cfg = GPTConfig(block_size=block_size, vocab_size=11, n_layer=1, n_head=2, n_embd=8, bias=True)
    model = GPT(cfg).double()
    rng = np.random.default_rng(0)

    def step(x, y):
        _, loss = model(x, y)
        loss.backward()
        return loss

    cs = sitp.compile(step)
    new = {}
    for B, T in shapes:
        x, y = (sitp.tensor(rng.integers(0, 11, (B, T))) for _ in range(2))
        for _ in range(2):
            model.zero_grad(set_to_none=True)
            le = step(x, y).item()
            ge = [p.grad.numpy().copy() for p in model.parameters()]
            model.zero_grad(set_to_none=True)
            lc = cs(x, y).item()
            assert abs(lc - le) < 1e-12
            for p, g in zip(model.parameters(), ge):
                np.testing.assert_allclose(p.grad.numpy(), g, rtol=1e-12, atol=1e-12)
        new[B, T] = [name for name, _, fresh in loads if fresh]
        loads.clear()
    return cs, new


def test_gpt_train_step_dynamic(loads):
    cs, new = gpt_steps_against_eager(loads, [(B, 8) for B in SIZES])
    assert len(cs.entries) == 2 and cs.entries[1].dynamic is not None
    assert new[5, 8] and new[7, 8] == [] and new[4, 8] == []


def test_other_changes_are_guarded():
    """A change of a dim other than the leading one compiles a static entry; batch size 1
    stays specialised (its own entry), as does a first size of 1 (no fit from it)."""
    cf = sitp.compile(chain)
    y6, y7 = rand(6, seed=1), rand(7, seed=2)
    for B in (3, 5):
        cf(rand(B, 6, seed=B), y6)
    assert [e.dynamic is not None for e in cf.entries] == [False, True]
    x = rand(4, 7, seed=4)
    cf(x, y7)
    np.testing.assert_array_equal(cf(x, y7).numpy(), chain(x, y7).numpy())
    assert len(cf.entries) == 3 and cf.entries[2].dynamic is None
    x1 = rand(1, 6, seed=5)
    cf(x1, y6)
    np.testing.assert_array_equal(cf(x1, y6).numpy(), chain(x1, y6).numpy())
    assert len(cf.entries) == 4 and cf.entries[3].dynamic is None
    assert not cf.entries[1].dynamic.accepts(cf.entries[3].key)

    g = sitp.compile(chain)
    for B in (1, 3):
        g(rand(B, 6, seed=B), y6)
    assert len(g.entries) == 2 and all(e.dynamic is None for e in g.entries)
    g(rand(5, 6, seed=5), y6)  # fitted from 3 and 5
    assert len(g.entries) == 3 and g.entries[2].dynamic is not None


def test_a_graph_that_grows_as_the_square_stays_static():
    def gram(x):
        return (x @ x.t()).tanh()

    cf = sitp.compile(gram)
    for B in (3, 5, 7):
        x = rand(B, 4, seed=B)
        cf(x)
        np.testing.assert_array_equal(cf(x).numpy(), gram(x).numpy())
    assert len(cf.entries) == 3 and all(e.dynamic is None for e in cf.entries)
    assert "two dims that grow with the batch size" in explain_text(cf)


def test_a_branch_on_the_batch_size_is_checked():
    """The dynamic entry's first call at a new size traces, and the trace must be the
    template at that size: a Python branch on the size gives another graph, compiled
    static, and the sizes on the entry's side of the branch still use it."""

    def branchy(x):
        y = x.exp()
        if x.shape[0] > 4:
            y = y * 2.0
        return y.sum(-1)

    cf = sitp.compile(branchy)
    for B in (5, 7, 3, 6, 3):
        x = rand(B, 4, seed=B)
        for _ in range(2):
            np.testing.assert_array_equal(cf(x).numpy(), branchy(x).numpy())
    assert [e.dynamic is not None for e in cf.entries] == [False, True, False]
    assert cf.entries[1].dynamic.verified == {6, 7} and cf.entries[1].dynamic.rejected == {3}
    assert "at batch size 3 the trace is not the dynamic entry's" in explain_text(cf)


def test_symint_keeps_its_line():
    s = dynamic.SymInt(5, 2, 1)  # 2 s + 1 at s = 2
    assert s == 5 and isinstance(3 * s + 4, dynamic.SymInt)
    t = 3 * s + 4
    assert (int(t), t.a, t.c) == (19, 6, 7)
    assert not isinstance(s * s, dynamic.SymInt) and s * s == 25  # not a line
    assert dynamic.prod((s, 3)).a == 6 and not isinstance(s - s, dynamic.SymInt)


def test_sizes_across_the_parallel_threshold_share_the_kernel(loads):
    """A dynamic kernel has its parallel version at every size (its source must not
    change with the size); below codegen.PARALLEL_MIN entries a call runs the serial one."""
    cf = sitp.compile(chain)
    y = rand(4096, seed=1)
    for B in (8, 20, 12, 30):  # 32768, 81920, 49152, 122880 entries
        x = rand(B, 4096, seed=B)
        cf(x, y)  # (a sum of 4096 terms, regrouped: eager's to the last bits or so)
        np.testing.assert_allclose(cf(x, y).numpy(), chain(x, y).numpy(), rtol=1e-12)
        if B in (12, 30):
            assert not [name for name, _, fresh in loads if fresh]
        loads.clear()
    dyn = cf.entries[1].dynamic
    assert len(cf.entries) == 2 and sorted(dyn.programs) == [12, 20, 30]
    assert [kernels_of(dyn.programs[B])[0].small for B in (12, 20, 30)] == [True, False, False]


def test_programs_run_on_plain_ints():
    """The sizes are SymInts while the passes run and the kernels are written, plain
    ints in the program after (a SymInt's arithmetic runs in Python)."""
    cf = sitp.compile(chain)
    y = rand(6, seed=1)
    for B in (3, 5, 7):
        cf(rand(B, 6, seed=B), y)
    for prog in cf.entries[1].dynamic.programs.values():
        g = prog.graph
        nums = [d for n in g.nodes for r in n.refs() for d in (*r.shape, *r.strides)]
        nums += [v.size for n in g.nodes for v in n.outputs] + [
            d for r in g.output_refs() for d in r.shape
        ]
        assert nums and not any(isinstance(d, dynamic.SymInt) for d in nums)


def test_bench_dynamic_smoke(tmp_path):
    """scripts/bench_dynamic.py --smoke: numba compiles no kernel in the dynamic arm after
    its second batch size, and every size in the static arm."""
    import json
    import os
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = tmp_path / "dyn.json"
    script = os.path.join(root, "scripts", "bench_dynamic.py")
    cmd = [sys.executable, script, "--smoke", "--reps", "2", "--json", str(out)]
    subprocess.run(cmd, check=True, capture_output=True, timeout=600)
    arms = {r["arm"]: r for r in json.loads(out.read_text())["arms"]}
    static, dyn = arms["static"]["kernels_compiled"], arms["dynamic"]["kernels_compiled"]
    assert all(static[b] > 0 for b in ("8", "5", "3", "6"))
    assert dyn["8"] > 0 and dyn["5"] > 0 and dyn["3"] == 0 and dyn["6"] == 0
    assert arms["static"]["entries"] == 4 and arms["dynamic"]["entries"] == 2


def test_sequence_length_of_a_gpt_is_dynamic(loads):
    """A size other than the leading one: the GPT's sequence length (its positions, an
    arange built in Python, follow it); the lowered attention reads its T x T sizes from
    its arrays. Forward (eval, no grad) values as eager's, no kernel compiled after."""
    from sitp.models.gpt import GPT, GPTConfig

    sitp.manual_seed(0)
    cfg = GPTConfig(block_size=32, vocab_size=11, n_layer=1, n_head=2, n_embd=16, bias=True)
    model = GPT(cfg).double().eval()
    rng = np.random.default_rng(0)
    cm = sitp.compile(model)
    new = {}
    with sitp.no_grad():
        for T in (8, 12, 20, 9):
            x = sitp.tensor(rng.integers(0, 11, (2, T)))
            for _ in range(2):
                got = cm(x)[0].numpy()
            np.testing.assert_allclose(got, model(x)[0].numpy(), rtol=1e-12, atol=1e-12)
            new[T] = [name for name, _, fresh in loads if fresh]
            loads.clear()
    dyn = cm.entries[1].dynamic
    assert len(cm.entries) == 2 and (dyn.index, dyn.dim) == (0, 1)
    assert new[20] == [] and new[9] == []
    assert "input 0's dim 1 (dynamic)" in explain_text(cm)


def test_dynamic_true_still_checks_each_new_size(monkeypatch):
    """dynamic=True is the default's behaviour: a size the entry has not seen traces to
    check the graph (a program run unchecked would be wrong for a size branch)."""
    traced = []
    real = sitp.compile(chain).__class__._trace

    def counting(self, *a, **kw):
        traced.append(1)
        return real(self, *a, **kw)

    monkeypatch.setattr(sitp.compile(chain).__class__, "_trace", counting)
    y = rand(6, seed=99)
    for mode in (None, True):
        traced.clear()
        cf = sitp.compile(chain, dynamic=mode)
        for B in SIZES:
            x = rand(B, 6, seed=B)
            np.testing.assert_array_equal(cf(x, y).numpy(), chain(x, y).numpy())
        assert len(traced) == len(SIZES) and len(cf.entries) == 2

    def branchy(x, y):
        return chain(x, y) if x.shape[0] < 5 else chain(x, y) * 2

    cf = sitp.compile(branchy, dynamic=True)
    for B in (2, 3, 6, 4, 7):
        x = rand(B, 6, seed=B)
        np.testing.assert_array_equal(cf(x, y).numpy(), branchy(x, y).numpy())


def test_a_sampler_with_dynamic_true(loads):
    """A GPT sampling with a context one token longer at each call (batch 1): with
    dynamic=True, one kernel set after the second length; each new length is checked by
    a trace and then runs the entry."""
    from sitp.models.gpt import GPT, GPTConfig

    sitp.manual_seed(0)
    cfg = GPTConfig(block_size=32, vocab_size=11, n_layer=1, n_head=2, n_embd=16, bias=True)
    model = GPT(cfg).double().eval()
    cm = sitp.compile(model, dynamic=True)
    idx = np.array([[1, 2, 3]])
    with sitp.no_grad():
        for step in range(10):
            x = sitp.tensor(idx)
            logits = cm(x)[0].numpy()
            np.testing.assert_allclose(logits, model(x)[0].numpy(), rtol=1e-12, atol=1e-12)
            if step >= 2:
                assert not [name for name, _, fresh in loads if fresh]
            loads.clear()
            idx = np.concatenate([idx, [[int(np.argmax(logits[0, -1]))]]], axis=1)
    assert len(cm.entries) == 2 and sorted(cm.entries[1].dynamic.programs) == list(range(4, 13))


def test_symint_of_two_sizes():
    """c + a*s + b*t + d*s*t: a product of a size of s and one of t keeps the polynomial
    (a flattened B*T), a square does not."""
    s = dynamic.SymInt(3, 1, 0)  # s = 3
    t = dynamic.SymInt(8, 0, 0, b=1)  # t = 8
    bt = s * t * 16 + 4
    assert isinstance(bt, dynamic.SymInt) and int(bt) == 388 and bt.p == (4, 0, 0, 16)
    assert dynamic.at(bt.p, (5, 9)) == 5 * 9 * 16 + 4
    assert not isinstance(t * t, dynamic.SymInt) and not isinstance(bt * s, dynamic.SymInt)
    assert (bt - 4) // 16 == 24 and ((bt - 4) // 16).p == (0, 0, 0, 1)


def test_batch_and_length_together(loads):
    """A GPT's training step whose batch and length both change: two dynamic entries of
    the batch, at two lengths, become one entry for every (batch, length) pair, whose
    kernels take both; a pair it has not seen compiles no kernel. Values and gradients
    as eager's."""
    shapes = ((3, 8), (5, 8), (3, 12), (5, 12), (7, 12), (4, 10), (6, 9))
    cs, new = gpt_steps_against_eager(loads, shapes, block_size=16)
    both = [e.dynamic for e in cs.entries if e.dynamic is not None and e.dynamic.second]
    assert len(both) == 1 and (both[0].index, both[0].dim, both[0].second) == (0, 0, (0, 1))
    assert both[0].verified == {(7, 12), (4, 10), (6, 9)}
    assert new[7, 12] and new[4, 10] == [] and new[6, 9] == []
    assert "input 0's dim 0 and of input 0's dim 1 (dynamic)" in explain_text(cs)


def test_two_sizes_refuse_a_square():
    """Scores of attention written out are T x T: the entries of the batch at two lengths
    stay apart (a view with two dims that grow with the length)."""

    def scores(x):
        return (x @ x.transpose(-2, -1)).softmax(-1).sum(-1)

    cf = sitp.compile(scores)
    for B, T in ((3, 4), (5, 4), (3, 6), (5, 6), (7, 6), (4, 5)):
        x = rand(B, T, 3, seed=B * T)
        for _ in range(2):
            np.testing.assert_allclose(cf(x).numpy(), scores(x).numpy(), rtol=1e-12)
    assert not any(e.dynamic is not None and e.dynamic.second for e in cf.entries)

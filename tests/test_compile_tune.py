"""sitp.compile.tune (6.3's autotuning): the faster version wins, decisions are cached by
source, CPU and thread count, and a tuned program computes what the untuned one does.

The test workers run numba on one thread (conftest), so the tuner is given a thread
count of two and, where a winner must be known, a fake clock that the kernels advance."""

import json
import os

import numpy as np

import sitp
import sitp.nn as nn
import sitp.nn.functional as F
from sitp.compile import codegen, tune


def fake(cost, clock):
    """A kernel that takes ``cost`` seconds of the fake ``clock`` and counts its calls."""

    def fn(*args):
        clock[0] += cost
        fn.calls += 1

    fn.calls = 0
    return fn


def test_the_faster_version_wins_by_the_median(tmp_path):
    for p_cost, s_cost, want in ((3.0, 1.0, "serial"), (1.0, 3.0, "parallel")):
        clock = [0.0]
        tuner = tune.Tuner(tmp_path / want, timer=lambda: clock[0], threads=lambda: 2, cpu="x")
        par, ser = fake(p_cost, clock), fake(s_cost, clock)
        assert tuner.choose("src", par, ser, []) == want
        assert par.calls == ser.calls == 1 + tune.ROUNDS  # one untimed call each
        assert tuner.stats["timed"] == 1 and tuner.stats["serial"] == (want == "serial")
        assert tuner.stats["seconds"] == (p_cost + s_cost) * (1 + tune.ROUNDS)
        assert (tuner.stats["parallel_s"], tuner.stats["serial_s"]) == (p_cost, s_cost)
        assert tuner.choose("src", par, ser, []) == want  # decided: no more calls
        assert par.calls == 1 + tune.ROUNDS


def test_one_thread_is_serial_untimed(tmp_path):
    clock = [0.0]
    tuner = tune.Tuner(tmp_path, timer=lambda: clock[0], threads=lambda: 1, cpu="x")
    par, ser = fake(1.0, clock), fake(3.0, clock)
    assert tuner.choose("src", par, ser, []) == "serial" and par.calls == ser.calls == 0


def test_the_key_names_source_cpu_and_threads():
    k = tune.key("src", 2, "rocketlake")
    assert k != tune.key("src", 4, "rocketlake")
    assert k != tune.key("src", 2, "znver4")
    assert k != tune.key("src2", 2, "rocketlake")
    assert tune.key("src", 2).split("_")[1] == sitp._target.cpu_name()


def test_decisions_are_cached_on_disk_and_reused(tmp_path):
    clock = [0.0]
    first = tune.Tuner(tmp_path, timer=lambda: clock[0], threads=lambda: 2, cpu="x")
    first.choose("src", fake(3.0, clock), fake(1.0, clock), [])
    (path,) = list(tmp_path.iterdir())  # one file per decision, written whole
    assert path.name == tune.key("src", 2, "x") + ".json"
    assert json.loads(path.read_text())["choice"] == "serial"
    second = tune.Tuner(tmp_path, timer=lambda: clock[0], threads=lambda: 2, cpu="x")
    par, ser = fake(1.0, clock), fake(3.0, clock)  # now the other way round: not timed
    assert second.choose("src", par, ser, []) == "serial" and par.calls == ser.calls == 0
    assert second.stats == {"timed": 0, "cached": 1, "serial": 1, "seconds": 0.0,
                            "parallel_s": 0.0, "serial_s": 0.0}  # fmt: skip
    other = tune.Tuner(tmp_path, timer=lambda: clock[0], threads=lambda: 3, cpu="x")
    assert other.choose("src", par, ser, []) == "parallel"  # three threads: timed anew


def mlp_step():
    """A training step whose kernels and epilogue GEMM are large enough for a serial twin."""
    sitp.manual_seed(4)
    rows, width = 66, 256
    fc, proj = nn.Linear(8, 4 * width), nn.Linear(4 * width, 8)
    x = sitp.tensor(np.random.default_rng(6).standard_normal((rows, 8)).astype(np.float32))

    def step():
        fc.zero_grad(set_to_none=True)
        proj.zero_grad(set_to_none=True)
        y = proj(F.gelu(fc(x)) * 1.5)
        y.square().sum().backward()
        return y.detach(), fc.weight.grad * 1.0, fc.bias.grad * 1.0

    return step


def run_compiled(tuner):
    """The step compiled, its first call the program's (``rerun_trace``): its values."""
    cs = sitp.compile(mlp_step(), rerun_trace=True, tune=tuner)
    got = [t.numpy() for t in cs()]
    assert cs.entries[0].program is not None
    return got, cs


def set_all(directory, choice):
    for p in directory.iterdir():
        d = json.loads(p.read_text())
        p.write_text(json.dumps({**d, "choice": choice}))


def close(got, want):
    """Bit for bit: a parallel version and its serial twin compute the same values (the
    GEMM epilogues once differed in the last bit with where their buffers lay, see
    test_compile_mlp)."""
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)


def test_tuned_program_computes_the_untuned_ones_values_and_reuses_the_cache(tmp_path):
    want, plain = run_compiled(False)  # on one thread (conftest): every serial twin
    assert plain.tuner is None
    # timed on the real clock (numba has one thread here: either version may win)
    tuner = tune.Tuner(tmp_path, threads=lambda: 2)
    got, _ = run_compiled(tuner)
    assert tuner.stats["timed"] >= 2  # the two GEMMs with an epilogue (forward, backward)
    close(got, want)
    # the same program compiled again reads every decision and times nothing
    again = tune.Tuner(tmp_path, threads=lambda: 2)
    close(run_compiled(again)[0], want)
    assert again.stats["timed"] == 0 and again.stats["cached"] == tuner.stats["timed"]
    # every decision "serial": the kernels the untuned program runs on one thread
    set_all(tmp_path, "serial")
    serial = tune.Tuner(tmp_path, threads=lambda: 2)
    close(run_compiled(serial)[0], want)
    assert serial.stats["serial"] == tuner.stats["timed"]
    # every decision "parallel": the other versions run
    set_all(tmp_path, "parallel")
    parallel = tune.Tuner(tmp_path, threads=lambda: 2)
    close(run_compiled(parallel)[0], want)
    assert parallel.stats["serial"] == 0 and parallel.stats["cached"] == tuner.stats["timed"]


def test_a_pointwise_kernel_is_tuned_and_computes_the_same(tmp_path):
    n = codegen.PARALLEL_MIN  # the index space from which codegen writes a prange
    rng = np.random.default_rng(0)
    x, y = (sitp.tensor(rng.standard_normal(n)) for _ in range(2))

    def f(x, y):
        return (x * y).tanh() + x

    want = f(x, y).numpy()
    for choice in ("timed", "serial", "parallel"):
        if choice != "timed":
            set_all(tmp_path, choice)
        tuner = tune.Tuner(tmp_path, threads=lambda: 2)
        cf = sitp.compile(f, tune=tuner)
        for _ in range(2):  # the trace, then the program
            got = cf(x, y).numpy()
        (node,) = [n for n in cf.entries[0].graph.nodes if n.fn == "kernel"]
        assert "prange(" in node.kernel.source
        assert tuner.stats["timed" if choice == "timed" else "cached"] == 1
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_the_default_follows_the_environment(monkeypatch):
    monkeypatch.delenv(tune.ENV, raising=False)
    assert tune.resolve(None) is None and tune.resolve(False) is None
    monkeypatch.setenv(tune.ENV, "1")
    t = tune.resolve(None)
    assert isinstance(t, tune.Tuner) and t.directory.startswith(codegen.kernel_dir())
    assert os.path.basename(t.directory) == "tune"

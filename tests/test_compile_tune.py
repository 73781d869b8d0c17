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


def test_the_faster_thread_count_wins_by_the_median(tmp_path):
    for p_cost, s_cost, want in ((3.0, 1.0, 1), (1.0, 3.0, 2)):
        clock = [0.0]
        tuner = tune.Tuner(tmp_path / str(want), timer=lambda: clock[0], threads=lambda: 2,
                           cpu="x")  # fmt: skip
        par, ser = fake(p_cost, clock), fake(s_cost, clock)
        choices = tune.Choices(par, ser)
        assert tuner.choose("src", choices, []) == {"threads": want}
        # each: one untimed call, the probe, then the final's rounds (both are finalists)
        assert par.calls == ser.calls == 1 + tune.PROBE + tune.ROUNDS
        assert tuner.stats["timed"] == 1 and tuner.stats["configs"] == tuner.stats["space"] == 2
        assert tuner.stats["serial"] == tuner.stats["fewer"] == (want == 1)
        assert tuner.stats["seconds"] == (p_cost + s_cost) * (1 + tune.PROBE + tune.ROUNDS)
        assert (tuner.stats["fixed_s"], tuner.stats["tuned_s"]) == (p_cost, min(p_cost, s_cost))
        assert tuner.choose("src", choices, []) == {"threads": want}  # decided: no more calls
        assert par.calls == 1 + tune.PROBE + tune.ROUNDS


def test_one_thread_and_one_version_is_the_fixed_rule_untimed(tmp_path):
    clock = [0.0]
    tuner = tune.Tuner(tmp_path, timer=lambda: clock[0], threads=lambda: 1, cpu="x")
    par, ser = fake(1.0, clock), fake(3.0, clock)
    assert tuner.choose("src", tune.Choices(par, ser), []) == {"threads": 1}
    two = tune.Tuner(tmp_path, timer=lambda: clock[0], threads=lambda: 2, cpu="x")
    assert two.choose("src", tune.Choices(par), []) == {"threads": 2}  # no twin
    assert par.calls == ser.calls == 0 and tuner.stats["timed"] == two.stats["timed"] == 0


def test_thread_counts_are_powers_of_two_then_all():
    assert tune.thread_counts(1) == [1]
    assert tune.thread_counts(2) == [1, 2]
    assert tune.thread_counts(6) == [1, 2, 4, 6]
    assert tune.thread_counts(8) == [1, 2, 4, 8]


def gemm_choices(clock, log):
    """A fake GEMM with an epilogue: its cost is a function of the configuration (the
    serial twin is faster, and four blocks per task is the best block size)."""
    rows_cost = {1: 0.5, 2: 0.25, 4: 0.0, 8: 0.375}  # (sums of halves: exact on the clock)

    def version(base):
        def fn(*args):
            clock[0] += base + rows_cost[args[-1]]
            log.append((base, args[-1]))

        return fn

    def apart(args, one):
        clock[0] += 1.125 if one else 2.125
        log.append(("apart", one))

    return tune.Choices(version(2.0), version(1.0), apart, rows=True)


def test_the_beam_search_walks_the_knobs_to_the_fastest(tmp_path):
    clock, log = [0.0], []
    tuner = tune.Tuner(tmp_path, timer=lambda: clock[0], threads=lambda: 2, cpu="x")
    got = tuner.choose("gemm", gemm_choices(clock, log), [])
    assert got == {"threads": 1, "fuse": "epilogue", "rows": 4}
    # from the fixed rule (2 threads, fused, 1 block): one knob at a time, the beam of
    # two. Visited: the rule; 1 thread, apart, 2 blocks; apart on 1 thread, 1 thread with
    # 2 blocks; 1 thread with 4; then 8 blocks and 4 on 2 threads. Not visited: 8 blocks
    # on 2 threads, which no configuration in the beam is next to.
    assert tuner.stats["configs"] == 9 and tuner.stats["space"] == 10
    assert (2.0, 8) not in log and (1.0, 4) in log
    assert tuner.stats["fixed_s"] == 2.5 and tuner.stats["tuned_s"] == 1.0
    assert tuner.stats["serial"] == 1 and tuner.stats["rows"] == 1 and tuner.stats["apart"] == 0
    (path,) = list(tmp_path.iterdir())
    rec = json.loads(path.read_text())
    assert rec["choice"] == got and len(rec["probe_s"]) == 9
    # the finalists: the beam's two and the fixed rule, each timed ROUNDS more times
    assert set(rec["median_s"]) == {"fuse=epilogue,rows=4,threads=1",
                                    "fuse=apart,threads=1", "fuse=epilogue,rows=1,threads=2"}  # fmt: skip


def test_the_key_names_source_cpu_and_threads():
    k = tune.key("src", 2, "rocketlake")
    assert k != tune.key("src", 4, "rocketlake")
    assert k != tune.key("src", 2, "znver4")
    assert k != tune.key("src2", 2, "rocketlake")
    assert tune.key("src", 2).split("_")[1] == sitp._target.cpu_name()


def test_decisions_are_cached_on_disk_and_reused(tmp_path):
    clock = [0.0]
    first = tune.Tuner(tmp_path, timer=lambda: clock[0], threads=lambda: 2, cpu="x")
    first.choose("src", tune.Choices(fake(3.0, clock), fake(1.0, clock)), [])
    (path,) = list(tmp_path.iterdir())  # one file per decision, written whole
    assert path.name == tune.key("src", 2, "x") + ".json"
    assert json.loads(path.read_text())["choice"] == {"threads": 1}
    second = tune.Tuner(tmp_path, timer=lambda: clock[0], threads=lambda: 2, cpu="x")
    par, ser = fake(1.0, clock), fake(3.0, clock)  # now the other way round: not timed
    assert second.choose("src", tune.Choices(par, ser), []) == {"threads": 1}
    assert par.calls == ser.calls == 0
    assert second.stats["timed"] == 0 and second.stats["cached"] == 1
    other = tune.Tuner(tmp_path, timer=lambda: clock[0], threads=lambda: 2, cpu="y")
    assert other.choose("src", tune.Choices(par, ser), []) == {"threads": 2}  # timed anew
    assert other.stats["timed"] == 1
    # a decision of the earlier tuner (a string), or one that does not fit the kernel's
    # knobs, is searched anew, not run
    for old in ("serial", {"threads": 1, "rows": 4}):
        path.write_text(json.dumps({"choice": old}))
        again = tune.Tuner(tmp_path, timer=lambda: clock[0], threads=lambda: 2, cpu="x")
        assert again.choose("src", tune.Choices(par, ser), []) == {"threads": 2}
        assert again.stats["timed"] == 1 and again.stats["cached"] == 0


def test_a_thread_count_between_one_and_all_runs_with_that_many():
    """``with_threads`` sets numba's count for the call and restores it after."""
    import numba

    seen = []
    before = numba.get_num_threads()
    tune.with_threads(1, lambda: seen.append(numba.get_num_threads()))
    assert seen == [1] and numba.get_num_threads() == before


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


def set_all(directory, **knobs):
    """Every decision in ``directory`` made ``knobs``, where its kernel has them (a GEMM
    with an epilogue has ``fuse`` and, fused, ``rows``; ``threads`` is a choice where the
    kernel has a serial twin, which the search then timed); returns the GEMMs' count."""
    gemms = 0
    for p in directory.iterdir():
        d = json.loads(p.read_text())
        gemm = "fuse" in d["choice"]
        twin = any("threads=1" in n for n in d["probe_s"])
        c = {**d["choice"], **{k: v for k, v in knobs.items()
                               if (gemm or k == "threads") and (twin or k != "threads")}}  # fmt: skip
        if c.get("fuse") == "apart":
            c.pop("rows", None)
        elif gemm:
            c.setdefault("rows", 1)
        p.write_text(json.dumps({**d, "choice": c}))
        gemms += gemm
    return gemms


def same_bits(got, want):
    """Bit for bit: a parallel version and its serial twin compute the same values (the
    GEMM epilogues once differed in the last bit with where their buffers lay, see
    test_compile_mlp), and so does a fused GEMM with any number of blocks per task."""
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)


def to_rounding(got, want):
    """The backend's product and the epilogue apart (``fuse="apart"``): to rounding."""
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=2e-5, atol=1e-5)


def test_tuned_program_computes_the_untuned_ones_values_and_reuses_the_cache(tmp_path):
    want, plain = run_compiled(False)  # on one thread (conftest): every serial twin
    assert plain.tuner is None
    # timed on the real clock (numba has one thread here: any configuration may win)
    tuner = tune.Tuner(tmp_path, threads=lambda: 2)
    got, _ = run_compiled(tuner)
    assert tuner.stats["timed"] >= 2  # the two GEMMs with an epilogue (forward, backward)
    assert tuner.stats["configs"] > 2 * tuner.stats["timed"]  # more than two versions each
    to_rounding(got, want)
    # the same program compiled again reads every decision and times nothing
    again = tune.Tuner(tmp_path, threads=lambda: 2)
    to_rounding(run_compiled(again)[0], want)
    assert again.stats["timed"] == 0 and again.stats["cached"] == tuner.stats["timed"]
    # every decision the serial twin, fused: the kernels the untuned program runs
    gemms = set_all(tmp_path, threads=1, fuse="epilogue", rows=1)
    assert gemms >= 2  # (the forward's and the backward's, at least)
    serial = tune.Tuner(tmp_path, threads=lambda: 2)
    same_bits(run_compiled(serial)[0], want)
    assert serial.stats["timed"] == 0 and serial.stats["cached"] == tuner.stats["timed"]
    assert serial.stats["serial"] >= 1
    # the parallel versions, and the GEMMs' tasks of 2, 4 and 8 blocks: the same bits
    for rows in (2, 4, 8):
        set_all(tmp_path, threads=2, fuse="epilogue", rows=rows)
        parallel = tune.Tuner(tmp_path, threads=lambda: 2)
        same_bits(run_compiled(parallel)[0], want)
        assert parallel.stats["serial"] == 0 and parallel.stats["rows"] == gemms
        assert parallel.stats["cached"] == tuner.stats["timed"]
    # the products apart, on one thread and on the parallel versions: to rounding
    for threads in (1, 2):
        set_all(tmp_path, threads=threads, fuse="apart")
        apart = tune.Tuner(tmp_path, threads=lambda: 2)
        to_rounding(run_compiled(apart)[0], want)
        assert apart.stats["apart"] == gemms and apart.stats["timed"] == 0


def test_a_pointwise_kernel_is_tuned_and_computes_the_same(tmp_path):
    n = codegen.PARALLEL_MIN  # the index space from which codegen writes a prange
    rng = np.random.default_rng(0)
    x, y = (sitp.tensor(rng.standard_normal(n)) for _ in range(2))

    def f(x, y):
        return (x * y).tanh() + x

    want = f(x, y).numpy()
    for choice in ("timed", 1, 2):
        if choice != "timed":
            set_all(tmp_path, threads=choice)
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


def test_max_autotune_turns_the_tuner_on(monkeypatch):
    """torch.compile's ``mode="max-autotune"`` autotunes there; here it means tune=True,
    unless ``tune`` is given."""
    monkeypatch.delenv(tune.ENV, raising=False)

    def f(x):
        return x * 2

    for mode in ("max-autotune", "max-autotune-no-cudagraphs"):
        assert isinstance(sitp.compile(f, mode=mode).tuner, tune.Tuner)
        assert sitp.compile(f, mode=mode, tune=False).tuner is None
    assert sitp.compile(f, mode="reduce-overhead").tuner is None


def test_a_dynamic_kernel_has_a_decision_per_size(tmp_path):
    """A dynamic entry's kernel has one source for every batch size (its sizes are
    arguments), so the call's sizes are in a decision's key: each size is searched."""
    clock = [0.0]
    tuner = tune.Tuner(tmp_path, timer=lambda: clock[0], threads=lambda: 2, cpu="x")
    par, ser = fake(1.0, clock), fake(3.0, clock)
    for batch in (4, 6, 4):
        args = [np.empty((batch, 3)), np.empty(batch * 3), batch]
        assert tuner.choose("src", tune.Choices(par, ser), args) == {"threads": 2}
    assert tuner.stats["timed"] == 2 and len(list(tmp_path.iterdir())) == 2
    assert tune.key("src", 2, "x", args) != tune.key("src", 2, "x", [np.empty((6, 3)), 18, 6])

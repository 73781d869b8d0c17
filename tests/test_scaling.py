"""Section 5.5: the synthetic language's exact entropy, the scaling-law fit, one sweep.

The language's entropies are checked two ways that do not share code with them: by
enumerating every window of a tiny language, and by counting a sample. The fit is
checked on losses made from known parameters, and its frontier against a brute-force
search. The sweep script runs its smoke configuration in this process and resumes, in
both arms: the letters as tokens, and 5.1's BPE trained on the language's text.
"""

import importlib.util
import itertools
import json
import math
from pathlib import Path

import numba
import numpy as np
import pytest

from sitp.data.synthetic import LanguageConfig, LetterBPE, MarkovLanguage, write_language_shards
from sitp.train.scaling import bootstrap, fit_scaling_law, interval

ROOT = Path(__file__).resolve().parents[1]


def tiny(**fields):
    fields = {"vocab_size": 3, "order": 2, "lag_weights": (1.0, 0.6), "seed": 5, **fields}
    return MarkovLanguage(LanguageConfig(**fields))


def test_stationary_distribution_is_a_fixed_point_and_h_is_a_block_difference():
    lang = tiny(vocab_size=6)
    np.testing.assert_allclose(lang.step(lang.pi_C), lang.pi_C, rtol=0, atol=1e-12)
    joint_CV = lang.pi_C[:, None] * lang.P_CV  # P(k + 1 consecutive letters)
    H_next = float(-(joint_CV * np.log(joint_CV)).sum())
    assert math.isclose(H_next - lang.block_entropies()[-1], lang.entropy_rate(), rel_tol=1e-10)


def test_window_floor_and_log_loss_against_enumerating_every_window():
    lang, T = tiny(), 4
    V, k = lang.V, lang.k
    seqs = np.array(list(itertools.product(range(V), repeat=T + 1)))  # every window of T+1
    prob = np.array([lang.pi_C[s[0] * V + s[1]] for s in seqs])
    for t in range(k, T + 1):
        prob *= lang.P_CV[seqs[:, t - 2] * V + seqs[:, t - 1], seqs[:, t]]
    assert math.isclose(prob.sum(), 1.0, rel_tol=1e-12)
    H_window = float(-(prob * np.log(prob)).sum())
    p0 = np.bincount(seqs[:, 0], weights=prob, minlength=V)
    H_first = float(-(p0 * np.log(p0)).sum())
    # the mean over targets 1..T of H(X_j | X_<j) is (H(X_0..X_T) - H(X_0)) / T
    assert math.isclose(lang.window_floor(T), (H_window - H_first) / T, rel_tol=1e-10)
    expected = (prob[:, None] * lang.log_loss(seqs[:, :-1], seqs[:, 1:])).sum() / T
    assert math.isclose(expected, lang.window_floor(T), rel_tol=1e-10)


def test_entropy_rate_matches_the_counts_of_a_sample():
    lang = MarkovLanguage(LanguageConfig(vocab_size=8, order=2, lag_weights=(1.0, 0.7), seed=3))
    chains = 16
    x_NL = lang.sample(160_000, seed=1, chains=chains).reshape(chains, -1)
    ctx = (x_NL[:, :-2] * 8 + x_NL[:, 1:-1]).ravel()  # within each run of the chain only
    nxt = x_NL[:, 2:].ravel()
    n_CV = np.bincount(ctx * 8 + nxt, minlength=64 * 8).reshape(64, 8).astype(float)
    n_C = n_CV.sum(1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        plug_in = -np.nansum(n_CV * np.log(n_CV / n_C)) / n_CV.sum()
    # plug-in bias is about -(cells)/(2n) = -0.0016 nats; its sampling sd about 0.003
    assert abs(plug_in - lang.entropy_rate()) < 0.015
    np.testing.assert_allclose(n_C[:, 0] / n_C.sum(), lang.pi_C, atol=0.005)


def test_language_rejects_bad_configs():
    with pytest.raises(ValueError, match="lag_weights"):
        LanguageConfig(order=2, lag_weights=(1.0,))
    with pytest.raises(ValueError, match="vocab_size"):
        LanguageConfig(vocab_size=100)
    with pytest.raises(ValueError, match="shorter than the order"):
        tiny().window_floor(1)


TRUE = {"E": 1.8, "A": 60.0, "alpha": 0.45, "B": 400.0, "beta": 0.38}


def law_points(noise=0.0, seed=0):
    N, D = np.meshgrid([6e3, 2e4, 5e4, 1.5e5, 4e5], [1.2e5, 3.7e5, 1.1e6, 3.4e6])
    N, D = N.ravel(), D.ravel()
    L = TRUE["E"] + TRUE["A"] * N ** -TRUE["alpha"] + TRUE["B"] * D ** -TRUE["beta"]
    return N, D, L + noise * np.random.default_rng(seed).standard_normal(L.shape)


def test_fit_recovers_the_parameters_of_exact_points():
    fit = fit_scaling_law(*law_points())
    for name, value in TRUE.items():
        assert math.isclose(getattr(fit, name), value, rel_tol=2e-3), name
    assert fit.rms < 1e-4


def test_fit_with_E_held_fits_the_rest_and_a_wrong_E_fits_worse():
    N, D, L = law_points()
    held = fit_scaling_law(N, D, L, E=TRUE["E"])
    assert held.E == TRUE["E"] and held.rms < 1e-4
    for name in ("A", "alpha", "B", "beta"):
        assert math.isclose(getattr(held, name), TRUE[name], rel_tol=2e-3), name
    assert fit_scaling_law(N, D, L, E=TRUE["E"] - 0.3).rms > 100 * held.rms


def test_bootstrap_intervals_cover_the_truth_with_noise():
    N, D, L = law_points(noise=0.003, seed=1)
    fits = bootstrap(N, D, L, rounds=40, seed=0)
    for name in ("E", "alpha", "beta"):
        lo, hi = interval([getattr(f, name) for f in fits], level=0.98)
        assert lo <= TRUE[name] <= hi, (name, lo, hi)


def test_compute_optimal_split_against_a_search():
    fit = fit_scaling_law(*law_points())
    C = 1e12
    N_grid = np.logspace(2, 8, 200_001)
    L_grid = fit(N_grid, C / (6 * N_grid))
    N_opt, D_opt, L_opt = fit.optimal(C)
    assert math.isclose(N_opt, N_grid[np.argmin(L_grid)], rel_tol=1e-3)
    assert math.isclose(6 * N_opt * D_opt, C, rel_tol=1e-12)
    assert L_opt <= L_grid.min() + 1e-12


def test_fit_rejects_too_few_runs():
    with pytest.raises(ValueError, match="at least 5 runs"):
        fit_scaling_law([1e4, 2e4], [1e5, 2e5], [3.0, 2.9])
    with pytest.raises(ValueError, match="two values of N"):
        fit_scaling_law([1e4] * 5, [1e5, 2e5, 3e5, 4e5, 5e5], [3.0] * 5)


def load_sweep():
    spec = importlib.util.spec_from_file_location(
        "scaling_sweep", ROOT / "scripts" / "scaling_sweep.py"
    )
    sweep = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sweep)
    return sweep


def test_sweep_smoke_runs_records_and_resumes(tmp_path):
    sweep = load_sweep()
    out, data = tmp_path / "sweep.json", tmp_path / "data"
    threads = numba.get_num_threads()
    common = ["--smoke", "--json", str(out), "--data-dir", str(data), "--threads", str(threads)]
    assert sweep.main(common + ["--max-points", "2"]) == 0
    first = json.loads(out.read_text())["points"]
    assert len(first) == 2
    assert sweep.main(common) == 0  # resumes: the two recorded points are kept as they were
    record = json.loads(out.read_text())
    points = record["points"]
    assert points[:2] == first and len(points) == 5  # 2 sizes x 2 budgets, one point seeded twice
    src = record["source"]
    assert src["entropy_rate"] < src["window_floor"] < src["block_entropies"][0]
    for r in points:
        assert r["C"] == 6 * r["N"] * r["D"] and r["D"] == r["steps"] * 4 * 16
        assert src["val_oracle_loss"] < r["val_loss"] < math.log(8) + 0.5
        assert math.isclose(r["val_bits"], r["val_loss"] / math.log(2))
    seeds = sorted(r["seed"] for r in points if (r["size"], r["tokens"]) == ("t1", 1024))
    assert seeds == [0, 1]


def test_letter_bpe_round_trips_and_puts_the_letters_first():
    lang = MarkovLanguage(vocab_size=8, order=2, lag_weights=(1.0, 0.7), seed=0)
    text = "\n".join(lang.documents(8192))
    tok = LetterBPE.train(text, lang.alphabet, 24)
    assert tok.vocab_size == 24
    assert [tok.encode(c) for c in lang.alphabet] == [[i] for i in range(8)]
    doc = next(lang.documents(2048, seed=3))
    ids = tok.encode(doc)
    assert tok.decode(ids) == doc and len(ids) < len(doc) and max(ids) < 24
    assert tok.lengths_V[ids].sum() == len(doc)
    assert [len(tok.decode([i])) for i in range(24)] == tok.lengths_V.tolist()
    with pytest.raises(ValueError, match="outside the alphabet"):
        tok.encode("0a1")


def test_bpe_oracle_without_merges_is_the_letters_oracle(tmp_path):
    """With no merges a token is a letter: both oracles score the same windows alike."""
    sweep = load_sweep()
    lang = MarkovLanguage(vocab_size=8, order=2, lag_weights=(1.0, 0.7), seed=0)
    letters = LetterBPE.train("\n".join(lang.documents(8192)), lang.alphabet, 8)
    chars = write_language_shards(lang, tmp_path / "c", 8192, 2048, shard_size=4096)
    bpe = write_language_shards(lang, tmp_path / "b", 8192, 2048, shard_size=4096,
                                tokenizer=letters)  # fmt: skip
    assert [(s.split, s.num_tokens) for s in bpe.shards] == [
        (s.split, s.num_tokens) for s in chars.shards
    ]
    expected = sweep.oracle_loss(lang, chars, 8, 16)
    assert math.isclose(sweep.bpe_oracle(lang, bpe, letters, 8, 16), expected, rel_tol=1e-12)


def test_sweep_smoke_bpe_arm_records_bits_per_letter_and_resumes(tmp_path):
    sweep = load_sweep()
    out = tmp_path / "bpe.json"
    common = ["--smoke", "--tokenizer", "bpe", "--json", str(out), "--data-dir",
              str(tmp_path / "data"), "--threads", str(numba.get_num_threads())]  # fmt: skip
    assert sweep.main(common + ["--max-points", "3"]) == 0
    assert sweep.main(common) == 0  # resumes
    record = json.loads(out.read_text())
    src, points = record["source"], record["points"]
    assert "--tokenizer bpe --vocab-size 16" in record["command"] and len(points) == 5
    tok = src["tokenizer"]
    assert tok["vocab_size"] == 16 and len(tok["merges"]) == 8
    assert tok["val_letters_per_token"] == src["val_letters"] / src["val_tokens"] > 1
    for r in points:
        assert r["C"] == 6 * r["N"] * r["D"] and r["D"] == r["steps"] * 4 * 16
        assert r["D"] < r["letters"] < r["D"] * max(len(m) for m in tok["merges"])
        per_letter = r["val_loss"] / tok["val_letters_per_token"]  # nats per letter
        assert math.isclose(r["val_bits"], per_letter / math.log(2))
        assert src["val_oracle_letter_loss"] < per_letter < math.log(8) + 0.5
    assert sweep.main(common + ["--vocab-size", "12"]) == 2  # another tokenizer: refused
    with pytest.raises(SystemExit):
        sweep.main(["--smoke", "--json", str(out), "--vocab-size", "12"])  # char arm: no vocab

"""3.5's records over seeds (``sitp.examples.gpt_figures.record_seeds``): a run's seeds made
later, on another machine, join the record beside the earlier runs, whose folders are gone,
and each run says where it ran."""

import json
from dataclasses import asdict

import pytest

from sitp.examples import gpt_figures
from sitp.models import MODELS

CPU_BEFORE = {"model": "an earlier CPU", "llvm_cpu_name": "rocketlake", "isa": "AVX-512"}


def _train_config(seed, weight_decay):
    return {
        "steps": 4,
        "batch_size": 32,
        "lr": 3e-3,
        "weight_decay": weight_decay,
        "warmup": 1,
        "seed": seed,
        "data": "names",
        "eval_every": 2,
    }


def _model_config():
    return {**asdict(MODELS["gpt"].make_config()), "vocab_size": 27}


def _write_run(folder, seed, val):
    """A finished run's record.json as `sitp train` leaves it (the fields read here)."""
    folder.mkdir(parents=True)
    record = {
        "model": "gpt",
        "model_config": _model_config(),
        "train_config": _train_config(seed, 0.1),
        "num_params": 1000,
        "final": {"train": 1.5, "val": val, "test": val + 0.01},
        "history": {
            "train": [2.0] * 200,
            "eval": [
                {"step": 2, "train": 1.8, "val": val + 0.1},
                {"step": 4, "train": 1.5, "val": val},
            ],
        },
    }
    (folder / "record.json").write_text(json.dumps(record))


def _base(val):
    """The seed-42 record's entry of a run (ladder-names-long.json)."""
    return {
        "num_params": 1000,
        "model_config": _model_config(),
        "train_config": {k: v for k, v in _train_config(42, 0.1).items() if k != "eval_every"},
        "wall_s": 10.0,
        "final": {"train": 1.5, "val": val, "test": val + 0.01},
        "eval": [[2, 1.8, val + 0.1], [4, 1.5, val]],
    }


def test_new_seeds_join_an_earlier_record_and_each_run_names_its_machine(tmp_path):
    seeds = tmp_path / "seeds"
    for seed, val in ((42, 2.0), (1, 2.1), (2, 1.9)):
        _write_run(seeds / f"gpt-wd-s{seed}", seed, val)
    (seeds / "times.txt").write_text("gpt-wd-s42 0 30\ngpt-wd-s1 30 62\ngpt-wd-s2 62 90\n")
    earlier = [{"seed": s, "final": {"val": 2.0}} for s in (42, 1, 2)]
    earlier_gpt = {"num_params": 1000, "seeds": [42, 1, 2], "summary": {"val": {}}, "runs": earlier}
    previous = {"machine": CPU_BEFORE, "cpu_model": "an earlier CPU", "runs": {"gpt": earlier_gpt}}
    ladder = {"machine": CPU_BEFORE, "runs": {"gpt": _base(2.05), "gpt-wd": _base(1.95)}}

    out = gpt_figures.record_seeds(seeds, ladder, ("gpt", "gpt-wd"), "long.json", previous)

    # the run with no folder here keeps its entry, each run with the machine it ran on
    before = "an earlier CPU (rocketlake, AVX-512)"
    kept = out["runs"]["gpt"]
    assert kept == {**earlier_gpt, "runs": [{**r, "cpu": before} for r in earlier]}
    wd = out["runs"]["gpt-wd"]
    here = gpt_figures._cpu(out["machine"])
    assert [r["cpu"] for r in wd["runs"]] == [here] * 3 and here != before
    assert wd["seeds"] == [42, 1, 2]
    # seed 42 run again replaces the record's run, which it keeps as `recorded`
    assert wd["runs"][0]["recorded"] == ladder["runs"]["gpt-wd"]["final"]
    assert wd["runs"][0]["matches_record"] is False
    assert [r["wall_s"] for r in wd["runs"]] == [30.0, 32.0, 28.0]
    assert wd["summary"]["val"]["mean"] == pytest.approx(2.0)
    assert wd["summary"]["val"]["sd"] == pytest.approx(0.1)
    assert (wd["summary"]["val"]["min"], wd["summary"]["val"]["max"]) == (1.9, 2.1)


def test_without_an_earlier_record_a_run_with_no_folder_has_only_its_seed_42(tmp_path):
    seeds = tmp_path / "seeds"
    seeds.mkdir()
    ladder = {"machine": CPU_BEFORE, "runs": {"gpt": _base(2.05)}}
    out = gpt_figures.record_seeds(seeds, ladder, ("gpt",), "long.json")
    assert out["runs"]["gpt"]["seeds"] == [42] and out["runs"]["gpt"]["summary"] is None
    # the record's run stands for seed 42, with the record's machine
    assert out["runs"]["gpt"]["runs"][0]["cpu"] == "an earlier CPU (rocketlake, AVX-512)"


def test_a_seed_with_another_config_is_refused(tmp_path):
    seeds = tmp_path / "seeds"
    _write_run(seeds / "gpt-wd-s1", 1, 2.1)
    base = _base(1.95)
    base["train_config"] = {**base["train_config"], "weight_decay": 0.01}
    with pytest.raises(AssertionError, match="not the ladder's config"):
        gpt_figures.record_seeds(seeds, {"runs": {"gpt-wd": base}}, ("gpt-wd",), "long.json")

"""PyTorch training scripts run unchanged with sitp bound to ``torch``, and train alike.

``tests/scripts/`` holds two single-file character-level scripts written for PyTorch
(a makemore-style MLP; a char-rnn-style GRU with ``torch.roll`` targets), using
``torch.utils.data`` samplers and loaders, ``inference_mode``/``no_grad``, ``save``/``load``
of model and optimizer state, and an LR scheduler. ``run_with.py`` runs a script with
either library as ``torch`` in a subprocess.

Both libraries start from the same weights (drawn by numpy inside the scripts) and, with
``--order numpy``, read the same batches, so their losses must agree step by step. With
the scripts' default order (``RandomSampler``/``SubsetRandomSampler``), sitp's draws are
its own, so that run is checked for what does not depend on the draws.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import sitp

SCRIPTS = Path(__file__).parent / "scripts"
STEPS = {"makemore_mlp": 15, "char_shift_rnn": 8}


@pytest.fixture
def words_file(tmp_path):
    """A few hundred made-up names: syllables drawn by a seeded numpy generator."""
    rng = np.random.default_rng(0)
    syllables = [
        "an",
        "na",
        "el",
        "li",
        "mar",
        "jo",
        "ra",
        "be",
        "th",
        "is",
        "ka",
        "ve",
        "ro",
        "sa",
        "mi",
        "q",
        "zy",
    ]
    words = sorted({"".join(rng.choice(syllables, rng.integers(1, 4))) for _ in range(300)})
    path = tmp_path / "words.txt"
    path.write_text("\n".join(words) + "\n")
    return path


def run_all(words_file, out):
    """Every (library, script, order) run, started together and collected as JSON."""
    env = dict(os.environ, PYTHONPATH=str(Path(sitp.__file__).parents[1]), PYTHONWARNINGS="ignore")
    jobs = [
        (lib, script, order)
        for script in STEPS
        for lib, order in [("torch", "numpy"), ("sitp", "numpy"), ("sitp", "torch")]
    ]
    procs = {}
    for lib, script, order in jobs:
        argv = [
            sys.executable,
            str(SCRIPTS / "run_with.py"),
            lib,
            str(SCRIPTS / f"{script}.py"),
            "--data",
            str(words_file),
            "--out",
            str(out / f"{lib}-{script}-{order}"),
            "--steps",
            str(STEPS[script]),
            "--order",
            order,
        ]
        procs[lib, script, order] = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
        )
    results = {}
    for key, proc in procs.items():
        stdout, stderr = proc.communicate(timeout=300)
        assert proc.returncode == 0, f"{key} failed:\n{stderr[-3000:]}"
        results[key] = json.loads(stdout.strip().splitlines()[-1])
    return results


def check_same_losses(runs, script):
    t, s = runs["torch", script, "numpy"], runs["sitp", script, "numpy"]
    assert len(s["train"]) == len(t["train"]) == STEPS[script]
    np.testing.assert_allclose(s["train"], t["train"], rtol=0, atol=1e-4)
    for key in t:
        np.testing.assert_allclose(s[key], t[key], rtol=0, atol=1e-4, err_msg=key)
    assert t["train"][-1] < t["train"][0]  # it trains at all, so the comparison means something


def check_round_trip(runs, script):
    for lib in ("torch", "sitp"):
        r = runs[lib, script, "numpy"]
        final = "eval" if script == "makemore_mlp" else "bpc"
        assert r[f"{final}_reloaded"] == r[final], lib  # the reloaded weights, bit for bit


def check_own_random_order(runs, script):
    s, t = runs["sitp", script, "torch"], runs["torch", script, "numpy"]
    first = "eval0" if script == "makemore_mlp" else "bpc0"
    np.testing.assert_allclose(s[first], t[first], rtol=0, atol=1e-5)  # before any batch
    assert np.all(np.isfinite(s["train"])) and len(s["train"]) == STEPS[script]
    assert np.mean(s["train"][-3:]) < np.mean(s["train"][:3])


def check_files_cross_load(out):
    """The scripts' checkpoints: sitp's load in torch, torch's load in sitp."""
    import torch

    from_sitp = torch.load(out / "sitp-makemore_mlp-numpy" / "model.pt")
    from_torch = sitp.load(out / "torch-makemore_mlp-numpy" / "model.pt")
    assert from_sitp["chars"] == from_torch["chars"] and from_sitp["step"] == from_torch["step"]
    for k, v in from_sitp["model"].items():
        np.testing.assert_allclose(from_torch["model"][k].numpy(), v.numpy(), atol=1e-4)
    assert set(from_sitp["optimizer"]["state"]) == set(from_torch["optimizer"]["state"])


def test_scripts_run_unchanged_and_match_torch(words_file, tmp_path):
    """One test for all runs, so that the subprocesses start once even with xdist."""
    runs = run_all(words_file, tmp_path)
    for script in sorted(STEPS):
        check_same_losses(runs, script)
        check_round_trip(runs, script)
        check_own_random_order(runs, script)
    check_files_cross_load(tmp_path)


def test_sitp_lacks_no_module_the_scripts_import():
    env = dict(os.environ, PYTHONPATH=str(Path(sitp.__file__).parents[1]))
    code = (
        "import sys; sys.path.insert(0, %r);"
        "import run_with, importlib; sys.meta_path.insert(0, run_with._Alias());"
        "import torch.utils.data.dataloader as d, torch.nn.modules, torch.utils.data.sampler;"
        "print(d.DataLoader.__module__)"
    ) % str(SCRIPTS)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "sitp.utils.data.dataloader"

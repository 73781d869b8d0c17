"""Two more PyTorch scripts run unchanged with sitp bound to ``torch``, and train alike.

``tests/scripts/nanogpt_train.py`` trains tests/torch_style_gpt.py the way nanoGPT's
train.py does on a CPU; ``tests/scripts/word_lm.py`` is a word-level language model in
the style of PyTorch's word_language_model example (LSTM, GRU, RNN or a Transformer
encoder). ``run_with.py`` runs each with either library as ``torch`` in a subprocess;
both start from the same weights (drawn by numpy inside the scripts) and read the same
batches, so their losses must agree step by step.

Tolerance: every loss is a float32 computation whose sums run in another order in each
library (their GEMMs and reductions block differently), so a loss differs by a few
float32 roundings (eps = 1.2e-7, losses near 3: about 4e-7 each) and the difference
grows slowly over the few steps of a test; measured, the largest gap is 3e-7. The
assertion allows 2e-5: fifty times that, and a hundred times smaller than what a wrong
operation moves (a wrong gradient of one parameter tensor moved a loss by 1e-2 within
three steps when the word model's weights were drawn in another order).
"""

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import sitp

SCRIPTS = Path(__file__).parent / "scripts"
ATOL = 2e-5
GPT = [
    "--max_iters=8",
    "--eval_interval=4",
    "--eval_iters=2",
    "--batch_size=4",
    "--block_size=16",
    "--n_layer=2",
    "--n_head=2",
    "--n_embd=16",
    "--batch_rng=numpy",
    "--init_numpy=True",
    "--warmup_iters=2",
    "--lr_decay_iters=8",
    "--learning_rate=3e-3",
    "--log_interval=1",
    "--always_save_checkpoint=True",
]
WORD_MODELS = ["LSTM", "Transformer"]  # GRU and RNN take the LSTM's path in the script
WORD = "--emsize 16 --nhid 16 --nlayers 2 --epochs 2 --batch_size 4 --bptt 8 --dropout 0"
WORD += " --numpy-init --max-batches 6 --lr 3 --log-interval 3"


def syllable_words(rng, n):
    syllables = ["an", "na", "el", "li", "mar", "jo", "ra", "be", "th", "is", "ka", "ve"]
    return [
        "".join(rng.choice(syllables, rng.integers(1, 4)))
        for _ in range(n)  # made-up words of one to three syllables
    ]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """A character corpus as nanoGPT's prepare.py writes one (train.bin, val.bin as
    uint16 ids, meta.pkl), and a word corpus (train.txt, valid.txt, test.txt): made-up
    sentences drawn by a seeded numpy generator."""
    root = tmp_path_factory.mktemp("scripts_more")
    rng = np.random.default_rng(0)
    chars = root / "chars"
    chars.mkdir()
    text = "\n".join(" ".join(syllable_words(rng, rng.integers(3, 9))) for _ in range(300))
    vocab = sorted(set(text))
    ids = np.array([vocab.index(c) for c in text], dtype=np.uint16)
    cut = int(0.9 * len(ids))
    ids[:cut].tofile(chars / "train.bin")
    ids[cut:].tofile(chars / "val.bin")
    with open(chars / "meta.pkl", "wb") as f:
        pickle.dump({"vocab_size": len(vocab), "itos": dict(enumerate(vocab))}, f)
    words = root / "words"
    words.mkdir()
    lexicon = syllable_words(rng, 24)
    for name, lines in [("train.txt", 120), ("valid.txt", 20), ("test.txt", 20)]:
        body = []
        for _ in range(lines):  # a chain: word i is followed by word 5i+1 or 5i+2 (mod 24)
            i = int(rng.integers(24))
            sentence = []
            for _ in range(rng.integers(4, 10)):
                sentence.append(lexicon[i])
                i = (5 * i + int(rng.integers(1, 3))) % 24
            body.append(" ".join(sentence))
        (words / name).write_text("\n".join(body) + "\n")
    return root


def start(lib, script, args, cwd):
    env = dict(os.environ, PYTHONPATH=str(Path(sitp.__file__).parents[1]), PYTHONWARNINGS="ignore")
    argv = [sys.executable, str(SCRIPTS / "run_with.py"), lib, str(SCRIPTS / script), *args]
    return subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=cwd
    )


def collect(procs):
    results = {}
    for key, proc in procs.items():
        stdout, stderr = proc.communicate(timeout=600)
        assert proc.returncode == 0, f"{key} failed:\n{stderr[-3000:]}"
        results[key] = json.loads(stdout.strip().splitlines()[-1])
    return results


@pytest.fixture(scope="module")
def gpt_runs(data):
    """Each library trains 8 iterations straight, and 4 then stops (a checkpoint at
    iteration 4); sitp trains 8 with ``--compile=True`` (``torch.compile(model)``); then
    sitp resumes from its own checkpoint and from torch's."""
    out = data / "gpt"
    base = [f"--data_dir={data / 'chars'}", *GPT]

    def run(lib, name, *extra):
        return start(lib, "nanogpt_train.py", [*base, f"--out_dir={out}/{name}", *extra], data)

    # one sitp run first: on a cold numba cache it compiles the kernels once, for all
    runs = collect(
        {
            ("torch", "full"): run("torch", "torch-full"),
            ("torch", "half"): run("torch", "torch-half", "--max_iters=4"),
            ("sitp", "full"): run("sitp", "sitp-full"),
        }
    )
    runs.update(
        collect(
            {
                ("sitp", "half"): run("sitp", "sitp-half", "--max_iters=4"),
                ("sitp", "compiled"): run("sitp", "sitp-compiled", "--compile=True"),
                ("sitp", "resume-torch"): run("sitp", "torch-half", "--init_from=resume"),
            }
        )
    )
    runs["sitp", "resume-sitp"] = collect({0: run("sitp", "sitp-half", "--init_from=resume")})[0]
    return runs


def test_nanogpt_trains_alike_step_by_step(gpt_runs):
    t, s = gpt_runs["torch", "full"], gpt_runs["sitp", "full"]
    assert t["iters"] == s["iters"] == list(range(9))
    np.testing.assert_allclose(s["train"], t["train"], rtol=0, atol=ATOL)
    assert s["lr"] == t["lr"]  # the schedule: warmup, then cosine down to min_lr
    assert s["eval"].keys() == t["eval"].keys() == {"0", "4", "8"}
    for it in t["eval"]:
        for split in ("train", "val"):
            assert abs(s["eval"][it][split] - t["eval"][it][split]) < ATOL, (it, split)
    assert np.mean(t["train"][-3:]) < np.mean(t["train"][:3])  # it trains at all


def test_nanogpt_compiled_trains_as_torch_eager(gpt_runs):
    compiled, eager = gpt_runs["sitp", "compiled"], gpt_runs["torch", "full"]
    np.testing.assert_allclose(compiled["train"], eager["train"], rtol=0, atol=ATOL)


def test_nanogpt_resumes_where_it_stopped(gpt_runs):
    """A run resumed from the checkpoint of iteration 4 trains iterations 4 to 8 as the
    uninterrupted run does: bit for bit from sitp's own checkpoint, and to the
    tolerance from torch's (a torch.save file that sitp's torch.load reads)."""
    full, own = gpt_runs["sitp", "full"], gpt_runs["sitp", "resume-sitp"]
    half = gpt_runs["sitp", "half"]
    assert half["iters"] == list(range(5)) and half["train"] == full["train"][:5]
    assert own["iters"] == list(range(4, 9))
    assert own["train"] == full["train"][4:]
    assert own["eval"]["8"] == full["eval"]["8"]
    from_torch = gpt_runs["sitp", "resume-torch"]
    np.testing.assert_allclose(
        from_torch["train"], gpt_runs["torch", "full"]["train"][4:], rtol=0, atol=ATOL
    )


@pytest.fixture(scope="module")
def word_runs(data):
    procs = {
        (lib, model): start(
            lib,
            "word_lm.py",
            [
                "--data",
                str(data / "words"),
                "--model",
                model,
                "--save",
                str(data / f"word-{lib}-{model}.pt"),
                *WORD.split(),
            ],
            data,
        )
        for model in WORD_MODELS
        for lib in ("torch", "sitp")
    }
    return collect(procs)


@pytest.mark.parametrize("model", WORD_MODELS)
def test_word_lm_trains_alike_step_by_step(word_runs, model):
    t, s = word_runs["torch", model], word_runs["sitp", model]
    assert len(s["train"]) == len(t["train"]) == 12  # 6 batches, 2 epochs
    np.testing.assert_allclose(s["train"], t["train"], rtol=0, atol=ATOL)
    np.testing.assert_allclose(s["val"], t["val"], rtol=0, atol=ATOL)
    assert s["lr"] == t["lr"]  # the same annealing decisions
    assert abs(s["test"] - t["test"]) < ATOL
    # it trains at all: the second epoch's losses on the same batches are lower
    assert np.mean(t["train"][6:]) < np.mean(t["train"][:6]) - 0.02  # measured: 0.045


@pytest.mark.parametrize("model", WORD_MODELS)
def test_word_lm_whole_module_reloads_exactly(word_runs, model):
    """The best model, saved whole and loaded under safe_globals, evaluates as it did."""
    for lib in ("torch", "sitp"):
        r = word_runs[lib, model]
        assert r["val_reloaded"] == r["best_val_loss"], lib

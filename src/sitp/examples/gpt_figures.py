"""The figures and recorded numbers of chapter 3.5, the GPT capstone.

* ``gpt-architecture.png``: the GPT drawn from the model itself. :func:`architecture_rows`
  walks the modules of a :class:`~sitp.models.gpt.GPT` and reads each box's label from
  the module's class and its weights' shapes, so the figure cannot drift from the code.
* ``gpt-ladder.png``: the loss curves of the ladder's six models (bigram, MLP, WaveNet,
  RNN, GRU, GPT) trained by ``python -m sitp train --data names`` on makemore's 32,033
  names; read from their ``record.json`` files and kept in ``ladder-names.json`` (seed
  42) and ``ladder-names-seeds.json`` (every seed: per-seed finals, mean and sd).
* ``gpt-ablation.png``: the long runs of the chapter's ablation: every seed of the runs
  repeated over seeds and their mean (``ladder-names-long-seeds.json``), and the runs of
  one seed as that one run (``ladder-names-long.json``).
* ``gpt-attention.png``: the attention probabilities of every head of the trained GPT on
  one test name, with each head's mean weight on the previous character and on the
  leading ``'.'`` over the validation names; kept in ``gpt-attention.json``, with
  (``--attention-seeds``) the same statistics of the GPTs of the ladder's other seeds::

    python -m sitp.examples.gpt_figures --record --attention-seeds build/ladder-seeds/gpt-s1 build/ladder-seeds/gpt-s2

Run from the repository root after training the ladder into ``build/ladder/MODEL``
(the commands are in the chapter)::

    python -m sitp.examples.gpt_figures --runs build/ladder --record
    python -m sitp.examples.gpt_figures            # redraw from the recorded JSON only

The ladder over seeds (``--seed N``, trained into ``build/ladder-seeds/MODEL-sN``, seed
42 again among them) is recorded with ``--seeds`` into ``ladder-names-seeds.json``, and
the ablation's GRU, GPT, GPT with weight decay and GPT with dropout over seeds
(``build/ladder-long-seeds/NAME-sN``) with ``--long-seeds`` into
``ladder-names-long-seeds.json``; both leave the seed-42 records as they are, and a run
with no folder under ``--long-seeds`` keeps what the record had for it (seeds run on
another machine join it; each run's entry names its machine)::

    python -m sitp.examples.gpt_figures --seeds build/ladder-seeds --record
    python -m sitp.examples.gpt_figures --long-seeds build/ladder-long-seeds --record

With ``build/ladder-long`` beside it (the chapter's ablation: the GRU and the GPT for
20,000 steps, the GPT also with ``--set dropout=0.1`` and with ``--weight-decay 0.1``,
in ``gru/``, ``gpt/``, ``gpt-dropout/`` and ``gpt-wd/``), ``--record`` also writes
``ladder-names-long.json``. The GPT's default run on the census names, over seeds 42, 1,
2, 3 and 4 (``python -m sitp train --model gpt --steps 3000 --eval-every 500 --threads 1
--seed N --out build/census-seeds/census-gpt-sN``), is recorded with ``--census-seeds``
into ``gpt-census.json``: the run of seed 42 and every seed's finals with their mean
and sd::

    python -m sitp.examples.gpt_figures --census-seeds build/census-seeds --record

The chapter's fences call these functions on small models and on the recorded JSON.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import statistics
from dataclasses import asdict
from pathlib import Path

import numpy as np

import sitp
import sitp.nn.functional as F
from sitp.bench import cpu_model
from sitp.data import Vocab, load_names, split_words
from sitp.models import MODELS
from sitp.models.gpt import GPT, GPTConfig
from sitp.serialization import write_atomically
from sitp.train.checkpoint import load_checkpoint

HERE = Path(__file__).resolve().parent
ASSETS = HERE.parents[2] / "docs" / "assets" / "ch03"
LADDER = ("bigram", "mlp", "wavenet", "rnn", "gru", "gpt")
LADDER_JSON = HERE / "ladder-names.json"
SEEDS_JSON = HERE / "ladder-names-seeds.json"
LONG = ("gru", "gpt", "gpt-wd", "gpt-dropout", "gpt-dropout-40k")
LONG_JSON = HERE / "ladder-names-long.json"
# the long runs repeated over seeds
LONG_SEEDS = ("gru", "gpt", "gpt-wd", "gpt-dropout", "gpt-dropout-40k")
LONG_SEEDS_JSON = HERE / "ladder-names-long-seeds.json"
CENSUS_JSON = HERE / "gpt-census.json"
ATTENTION_JSON = HERE / "gpt-attention.json"


def _matplotlib():
    import matplotlib  # late: matplotlib is slow to import

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # late: matplotlib is slow to import

    return plt


# ----------------------------------------------------------------- architecture
def describe(module) -> str:
    """A one-line label for a layer, read from its class and its weights."""
    kind = type(module).__name__
    if kind == "Linear":
        out_f, in_f = module.weight.shape
        return f"Linear {in_f}→{out_f}" + ("" if module.bias is not None else ", no bias")
    if kind == "Embedding":
        n, c = module.weight.shape
        return f"Embedding {n}×{c}"
    if kind == "LayerNorm":
        return f"LayerNorm {module.weight.shape[0]}"
    if kind == "Dropout":
        return f"Dropout p={module.p:g}"
    return kind


def architecture_rows(model) -> list[tuple[str, str, str]]:
    """(where, name, label) for each box of the figure, top to bottom, from ``model``.

    ``where`` is ``"stem"`` (outside the blocks), ``"attn"`` or ``"mlp"`` (inside the
    first block, which stands for all ``n_layer`` of them) or ``"add"`` (a residual sum).
    """
    t = model.transformer
    blk = t.h[0]
    H = blk.attn.n_head
    C = blk.attn.n_embd
    rows = [
        ("stem", "idx", f"tokens idx (B, T), T ≤ {model.block_size}"),
        ("stem", "wte", describe(t.wte) + "  (tied with lm_head)"),
        ("stem", "wpe", describe(t.wpe) + ": row t added at position t"),
        ("stem", "drop", describe(t.drop)),
        ("attn", "ln_1", describe(blk.ln_1)),
        ("attn", "c_attn", describe(blk.attn.c_attn) + "  → q, k, v"),
        ("attn", "sdpa", f"{H} heads, D = {C // H}: softmax(QKᵀ/√D + mask) V"),
        ("attn", "c_proj", describe(blk.attn.c_proj)),
        ("add", "+", "x + attn(ln_1(x))"),
        ("mlp", "ln_2", describe(blk.ln_2)),
        ("mlp", "c_fc", describe(blk.mlp.c_fc)),
        ("mlp", "gelu", describe(blk.mlp.gelu)),
        ("mlp", "c_proj", describe(blk.mlp.c_proj)),
        ("add", "+", "x + mlp(ln_2(x))"),
        ("stem", "ln_f", describe(t.ln_f)),
        ("stem", "lm_head", describe(model.lm_head) + "  (weight = wte's)"),
        ("stem", "logits", f"logits (B, T, {model.lm_head.weight.shape[0]})"),
    ]
    return rows


def architecture_figure(model, path) -> list[tuple[str, str, str]]:
    """Draws ``model`` as boxes, top to bottom; returns :func:`architecture_rows`."""
    plt = _matplotlib()
    from matplotlib.patches import FancyBboxPatch  # late: matplotlib is slow to import

    rows = architecture_rows(model)
    L = len(model.transformer.h)
    n_params = sum(p.numel() for p in model.parameters())
    fig, ax = plt.subplots(figsize=(6.4, 8.6), dpi=110)
    colors = {"stem": "#dde7f3", "attn": "#f8e3c4", "mlp": "#d9efd8", "add": "#ffffff"}
    step, y = 0.9, 0.0
    ys = []
    for where, name, label in rows:
        ys.append(y)
        w = 0.9 if where == "add" else 4.6
        box = FancyBboxPatch(
            (-w / 2, y - 0.32),
            w,
            0.64,
            boxstyle="round,pad=0.02,rounding_size=0.12" if where != "add" else "circle,pad=0.05",
            fc=colors[where],
            ec="#333333",
            lw=1.0,
        )
        ax.add_patch(box)
        if where == "add":
            ax.text(0, y, "+", ha="center", va="center", fontsize=15)
            ax.text(0.75, y, label, ha="left", va="center", fontsize=8, color="#555555")
        else:
            ax.text(
                -2.2, y, name, ha="left", va="center", fontsize=9, family="monospace", weight="bold"
            )
            ax.text(-0.9, y, label, ha="left", va="center", fontsize=8.5)
        y -= step
    for a, b in zip(ys, ys[1:]):  # the stream, top to bottom
        ax.annotate(
            "",
            xy=(0, b + 0.34),
            xytext=(0, a - 0.34),
            arrowprops=dict(arrowstyle="->", lw=1.0, color="#333333"),
        )
    first = [i for i, r in enumerate(rows) if r[0] in ("attn", "mlp", "add")]
    top, bottom = ys[first[0]] + 0.5, ys[first[-1]] - 0.5
    ax.add_patch(
        FancyBboxPatch(
            (-2.75, bottom),
            5.5,
            top - bottom,
            boxstyle="round,pad=0.02,rounding_size=0.2",
            fc="none",
            ec="#7a4f9a",
            lw=1.6,
            ls="--",
        )
    )
    ax.text(
        2.85,
        (top + bottom) / 2,
        f"Block\n× {L}",
        ha="left",
        va="center",
        fontsize=11,
        color="#7a4f9a",
        weight="bold",
    )
    for start, add in ((first[0], first[0] + 4), (first[0] + 5, first[0] + 9)):  # residuals
        y0, y1 = ys[start] + 0.45, ys[add]
        ax.plot([-2.45, -2.45], [y0, y1], color="#7a4f9a", lw=1.2)
        ax.plot([-2.45, 0], [y0, y0], color="#7a4f9a", lw=1.2)
        ax.annotate(
            "",
            xy=(-0.47, y1),
            xytext=(-2.45, y1),
            arrowprops=dict(arrowstyle="->", lw=1.2, color="#7a4f9a"),
        )
    ax.text(
        0,
        ys[0] + 0.65,
        f"GPT: {L} layers, {model.transformer.h[0].attn.n_head} heads, "
        f"width {model.transformer.h[0].attn.n_embd}, {n_params:,} parameters",
        ha="center",
        va="bottom",
        fontsize=10,
    )
    ax.set_xlim(-3.0, 4.0)
    ax.set_ylim(ys[-1] - 0.6, ys[0] + 1.1)
    ax.axis("off")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return rows


# ----------------------------------------------------------------------- ladder
def record_ladder(
    runs_dir, times_file=None, names=LADDER, out_prefix="build/ladder", with_count_bigram=True
) -> dict:
    """The ladder's runs as one JSON-able dict: config, final losses, curves, wall time.

    Args:
        runs_dir: holds ``NAME/record.json`` for each of ``names`` (default :data:`LADDER`).
        times_file: lines ``NAME START END`` (seconds since the epoch) of each run;
            default every ``runs_dir/times*.txt``.
        with_count_bigram: also score the counted bigram on the split (``count_bigram``).
    """
    runs_dir = Path(runs_dir)
    times = {}
    for times_path in sorted(runs_dir.glob("times*.txt")) if times_file is None else [times_file]:
        for line in Path(times_path).read_text().splitlines():
            parts = line.split()
            if len(parts) == 3:
                times[parts[0]] = round(float(parts[2]) - float(parts[1]), 1)

    out = {"machine": sitp.show_config(mode="dicts").get("cpu")}
    if with_count_bigram:
        words = load_names("names")
        train_w, val_w, test_w = split_words(words, seed=42)
        out["count_bigram"] = {
            "all_words": round(float(count_bigram(words, words)), 4),
            "val": round(float(count_bigram(train_w, val_w)), 4),
            "test": round(float(count_bigram(train_w, test_w)), 4),
        }
    out["runs"] = {}

    for name in names:
        path = runs_dir / name / "record.json"
        if not path.exists():
            continue
        record = json.loads(path.read_text())
        if "final" not in record:  # a run still going: its last checkpoint
            continue
        train = record["history"]["train"]
        window = 100
        curve = [
            [
                min((i + 1) * window, len(train)),
                round(sum(train[i * window : (i + 1) * window]) / window, 4),
            ]
            for i in range(len(train) // window)
        ]
        tc = record["train_config"]
        spec = MODELS[record["model"]]
        default = {**asdict(spec.make_config()), "vocab_size": record["model_config"]["vocab_size"]}
        sets = {k: v for k, v in record["model_config"].items() if default.get(k) != v}
        out["runs"][name] = {
            "command": (
                f"python -m sitp train --model {record['model']} --data {tc['data']} "
                f"--steps {tc['steps']} --eval-every {tc['eval_every']} --threads 1"
                + (f" --weight-decay {tc['weight_decay']:g}" if tc["weight_decay"] != 0.01 else "")
                + "".join(f" --set {k}={v}" for k, v in sets.items())
                + (f" --seed {tc['seed']}" if tc["seed"] != 42 else "")
                + f" --out {out_prefix}/{name}"
            ),
            "num_params": record["num_params"],
            "model_config": record["model_config"],
            "train_config": {
                k: tc[k]
                for k in ("steps", "batch_size", "lr", "weight_decay", "warmup", "seed", "data")
            },
            "wall_s": times.get(name),
            "final": {k: round(v, 4) for k, v in record["final"].items()},
            "eval": [
                [e["step"], round(e["train"], 4), round(e["val"], 4)]
                for e in record["history"]["eval"]
            ],
            "train_curve": curve,
        }
    return out


def count_bigram(fit_words, eval_words, smoothing: float = 1.0) -> float:
    """Mean NLL per character on ``eval_words`` of the bigram counted on ``fit_words``.

    makemore's 2.454 is this with ``fit_words = eval_words =`` all of names.txt and +1
    smoothing: the counting model of chapter 1, scored on the words it was counted on.
    """
    vocab = Vocab(list(fit_words) + list(eval_words))
    V = len(vocab)
    N = np.full((V, V), smoothing)
    for w in fit_words:
        ids = [0] + [vocab.stoi[c] for c in w] + [0]
        np.add.at(N, (ids[:-1], ids[1:]), 1)
    logP = np.log(N / N.sum(1, keepdims=True))
    total, n = 0.0, 0
    for w in eval_words:
        ids = [0] + [vocab.stoi[c] for c in w] + [0]
        total -= logP[ids[:-1], ids[1:]].sum()
        n += len(ids) - 1
    return total / n


def spread(values) -> dict:
    """Mean, sample standard deviation, least and greatest of ``values``, to 5 decimals."""
    values = list(values)
    return {
        "n": len(values),
        "mean": round(statistics.fmean(values), 5),
        "sd": round(statistics.stdev(values), 5),
        "min": min(values),
        "max": max(values),
    }


def record_seeds(
    seeds_dir, ladder: dict, names=LADDER, record_name=LADDER_JSON.name, previous=None
) -> dict:
    """The ladder over seeds: each model's runs, seed 42 first, and their mean and sd.

    Each run names the machine it ran on (``cpu``: the model, LLVM's name for it and
    the vector ISA); the record's own ``machine`` is the one that wrote it.

    Args:
        seeds_dir: holds ``MODEL-sSEED/record.json`` for the seeds of each model (and
            ``times*.txt``, lines ``MODEL-sSEED START END``).
        ladder: the seed-42 record, :func:`record_ladder`'s dict (``ladder-names.json``).
            A run of seed 42 in ``seeds_dir`` (the recorded run, run again with the code
            of the other seeds) takes the record's place, which the entry keeps as
            ``recorded``, with ``matches_record`` saying whether the two ended alike;
            without one, the record's run stands for seed 42.
        names: the runs of ``ladder`` to gather seeds for (``seeds_dir/NAME-sSEED``).
        record_name: the file ``ladder`` was read from, the ``source`` of its runs.
        previous: an earlier record of the same runs; a model of ``names`` with no run in
            ``seeds_dir`` keeps its entry there (its runs' ``cpu`` that record's machine
            where they name none), so that seeds run later, elsewhere, join the record
            without the folders of the earlier ones.
    """

    seeds_dir = Path(seeds_dir)
    dirs = sorted(p.name for p in seeds_dir.glob("*-s*") if (p / "record.json").exists())
    found = record_ladder(
        seeds_dir, names=dirs, out_prefix=str(seeds_dir), with_count_bigram=False
    )["runs"]
    here = sitp.show_config(mode="dicts").get("cpu")
    out = {"machine": here, "cpu_model": cpu_model(), "split_seed": 42, "runs": {}}
    for name in names:
        mine = [k for k in dirs if re.fullmatch(rf"{re.escape(name)}-s\d+", k)]
        if not mine and previous is not None and name in previous["runs"]:
            kept = previous["runs"][name]
            runs = [{**r, "cpu": r.get("cpu", _cpu(previous["machine"]))} for r in kept["runs"]]
            out["runs"][name] = {**kept, "runs": runs}
            continue
        base = ladder["runs"][name]
        runs = [
            {
                "seed": 42,
                "source": record_name,
                "cpu": _cpu(ladder.get("machine")),
                **_seed_entry(base),
            }
        ]
        for key in dirs:
            m = re.fullmatch(rf"{re.escape(name)}-s(\d+)", key)
            if m is None or key not in found:
                continue
            run = found[key]
            tc, btc = run["train_config"], base["train_config"]
            assert {k: v for k, v in tc.items() if k != "seed"} == {
                k: v for k, v in btc.items() if k != "seed"
            }, f"{key}: not the ladder's config"
            # a field the model gained since the seed-42 record has its default there
            model = re.search(r"--model (\S+)", run["command"])[1]
            default = asdict(MODELS[model].make_config())
            then = {k: base["model_config"].get(k, default.get(k)) for k in run["model_config"]}
            assert run["model_config"] == then, f"{key}: not the ladder's model"
            entry = {
                "seed": tc["seed"],
                "source": run["command"],
                "cpu": _cpu(here),
                **_seed_entry(run),
            }
            if tc["seed"] == 42:  # the recorded run, run again with this code: it replaces it
                entry["recorded"] = runs[0]["final"]
                entry["matches_record"] = run["final"] == runs[0]["final"]
                runs[0] = entry
                continue
            runs.append(entry)
        runs.sort(key=lambda r: (r["seed"] != 42, r["seed"]))
        out["runs"][name] = {
            "num_params": base["num_params"],
            "seeds": [r["seed"] for r in runs],
            "summary": {
                **{k: spread(r["final"][k] for r in runs) for k in ("train", "val", "test")},
                "best_val": spread(min(v for _, _, v in r["eval"]) for r in runs),
            }
            if len(runs) > 1
            else None,
            "runs": runs,
        }
    return out


def record_census(seeds_dir) -> dict:
    """The GPT's default run on the census names over seeds (``gpt-census.json``).

    Args:
        seeds_dir: holds ``census-gpt-sSEED/record.json`` for each seed, seed 42 among
            them (and ``times*.txt``, lines ``census-gpt-sSEED START END``).

    Returns:
        ``runs["census-gpt"]``: the run of seed 42, as :func:`record_ladder` keeps a run
        (its command, config, finals, evaluations, training curve); ``seeds``: every
        seed's finals and evaluations with their mean and sd, as :func:`record_seeds`.
    """
    seeds_dir = Path(seeds_dir)
    base = record_ladder(
        seeds_dir, names=("census-gpt-s42",), out_prefix=str(seeds_dir), with_count_bigram=False
    )["runs"]["census-gpt-s42"]
    several = record_seeds(seeds_dir, {"runs": {"census-gpt": base}}, ("census-gpt",), "")
    return {
        "machine": several["machine"],
        "cpu_model": several["cpu_model"],
        "runs": {"census-gpt": base},
        "seeds": several["runs"]["census-gpt"],
    }


def _cpu(machine) -> str | None:
    """A machine (``show_config``'s ``cpu``) in a few words: model (LLVM name, ISA)."""
    if not machine:
        return None
    return f"{machine.get('model')} ({machine.get('llvm_cpu_name')}, {machine.get('isa')})"


def _seed_entry(run: dict) -> dict:
    return {"wall_s": run["wall_s"], "final": run["final"], "eval": run["eval"]}


def ladder_figure(ladder: dict, path, published=None, seeds=None) -> None:
    """Validation loss (points, lines) and minibatch loss (faint) of each model by step.

    With ``seeds`` (:func:`record_seeds`'s dict) the points are the mean validation loss
    over the seeds at each evaluation, the band their mean ± sd, and the legend says n.
    """
    plt = _matplotlib()
    fig, ax = plt.subplots(figsize=(7.2, 4.2), dpi=110)
    for i, (name, run) in enumerate(ladder["runs"].items()):
        color = f"C{i}"
        xs, ys = zip(*run["train_curve"])
        ax.plot(xs, ys, color=color, alpha=0.25, lw=1)
        steps, _, val = zip(*run["eval"])
        label = f"{name} ({run['num_params']:,}): val {run['final']['val']:.3f}"
        if seeds is not None and seeds["runs"].get(name, {}).get("summary"):
            several = seeds["runs"][name]
            curves = np.array([[v for _, _, v in r["eval"]] for r in several["runs"]])
            assert [s for s, _, _ in several["runs"][0]["eval"]] == list(steps), name
            val, sd = curves.mean(0), curves.std(0, ddof=1)
            ax.fill_between(steps, val - sd, val + sd, color=color, alpha=0.3, lw=0)
            v = several["summary"]["val"]
            label = (
                f"{name} ({run['num_params']:,}): val {v['mean']:.4f} ± {v['sd']:.4f}, n={v['n']}"
            )
        ax.plot(steps, val, "o-", color=color, ms=3, lw=1.5, label=label)
    for label, value in (published or {}).items():
        ax.axhline(value, color="#888888", ls=":", lw=0.8)
        ax.text(ax.get_xlim()[1], value, f" {label}", va="center", fontsize=7, color="#666666")
    ax.set_xlabel("optimizer step (batch of 32)")
    ax.set_ylabel("cross-entropy (nats per character)")
    ax.set_ylim(1.75, 2.65)
    ax.set_title(
        "The ladder on makemore's names: validation (dots), minibatch (faint)"
        if seeds is None
        else "The ladder on makemore's names: validation, mean over seeds (dots) ± sd "
        "(band);\nminibatch loss of seed 42 (faint)",
        fontsize=10,
    )
    ax.legend(fontsize=8, loc="upper right")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def ablation_figure(long: dict, path, seeds=None) -> None:
    """Train (dashed) and validation (solid) losses of the long runs, every evaluation.

    With ``seeds`` (:func:`record_seeds`'s dict of the runs repeated over seeds,
    ``ladder-names-long-seeds.json``) each of those runs is drawn from its seeds: every
    seed's validation curve (thin), their mean (dots) and the mean training loss (dashed);
    the runs of ``long`` that have no seeds (weight decay, 40,000 steps) are drawn as the
    one run each is, and labelled so.
    """
    plt = _matplotlib()
    fig, ax = plt.subplots(figsize=(7.2, 4.2), dpi=110)
    several = {} if seeds is None else {k: r for k, r in seeds["runs"].items() if r["summary"]}
    for i, (name, run) in enumerate(long["runs"].items()):
        color = f"C{i}"
        if name in several:
            runs = several[name]["runs"]
            steps = [s for s, _, _ in runs[0]["eval"]]
            assert all([s for s, _, _ in r["eval"]] == steps for r in runs), name
            val = np.array([[v for _, _, v in r["eval"]] for r in runs])
            train = np.array([[t for _, t, _ in r["eval"]] for r in runs])
            for curve in val:
                ax.plot(steps, curve, "-", color=color, lw=0.8, alpha=0.45)
            best, last = several[name]["summary"]["best_val"], several[name]["summary"]["val"]
            ax.plot(
                steps,
                val.mean(0),
                "o-",
                color=color,
                ms=3,
                label=f"{name}, {len(runs)} seeds: val {best['mean']:.3f} ± {best['sd']:.3f} "
                f"best, {last['mean']:.3f} ± {last['sd']:.3f} last",
            )
            ax.plot(steps, train.mean(0), "--", color=color, lw=1, alpha=0.7)
            continue
        steps, train, val = zip(*run["eval"])
        ax.plot(
            steps,
            val,
            "o-",
            color=color,
            ms=3,
            label=f"{name}, one run (seed {run['train_config']['seed']}): val {min(val):.3f} "
            f"best, {val[-1]:.3f} last",
        )
        ax.plot(steps, train, "--", color=color, lw=1, alpha=0.7)
    ax.set_xlabel("optimizer step (batch of 32)")
    ax.set_ylabel("cross-entropy (nats per character)")
    one_run = any(name not in several for name in long["runs"])
    ax.set_title(
        "The long runs on makemore's names: validation (solid), train (dashed)"
        if not several
        else "The long runs on makemore's names: validation of every seed (thin) and their\n"
        "mean (dots), mean train loss (dashed)"
        + ("; one-run options drawn as that run" if one_run else ""),
        fontsize=10,
    )
    ax.legend(fontsize=7.5)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


# -------------------------------------------------------------------- attention
@sitp.no_grad()
def attention_maps(model, idx_BT):
    """Every head's attention probabilities, (L, B, H, T, T), and the model's logits.

    The forward pass of :class:`~sitp.models.gpt.GPT` step by step, with each block's
    probabilities recomputed from its ``ln_1`` and ``c_attn`` (no dropout: eval mode).
    """
    t = model.transformer
    B, T = idx_BT.shape
    x_BTC = t.wte(idx_BT) + t.wpe(sitp.arange(T))
    maps = []
    for block in t.h:
        h_BTC = block.ln_1(x_BTC)
        C, H = block.attn.n_embd, block.attn.n_head
        D = C // H
        q, k, _ = block.attn.c_attn(h_BTC).split(C, dim=2)
        q_BHTD = q.view(B, T, H, D).transpose(1, 2)
        k_BHTD = k.view(B, T, H, D).transpose(1, 2)
        att_BHTT = q_BHTD @ k_BHTD.transpose(-2, -1) / math.sqrt(D)
        att_BHTT = att_BHTT.masked_fill(sitp.tril(sitp.ones(T, T)) == 0, float("-inf"))
        maps.append(F.softmax(att_BHTT, dim=-1).numpy())
        x_BTC = x_BTC + block.attn(h_BTC)
        x_BTC = x_BTC + block.mlp(block.ln_2(x_BTC))

    return np.stack(maps), model.lm_head(t.ln_f(x_BTC))


def head_statistics(maps_LBHTT, lengths_B) -> dict:
    """Each head's mean weight on the previous character, on itself and on position 0.

    Averaged over the real positions t >= 1 of each sequence (``lengths_B``: tokens per
    sequence, including the leading '.').
    """
    L, B, H, T, _ = maps_LBHTT.shape
    prev, self_, first = (np.zeros((L, H)) for _ in range(3))
    n = 0
    for b, length in enumerate(lengths_B):
        for t in range(1, length):
            prev += maps_LBHTT[:, b, :, t, t - 1]
            self_ += maps_LBHTT[:, b, :, t, t]
            first += maps_LBHTT[:, b, :, t, 0]
            n += 1
    return {
        "previous": (prev / n).round(3).tolist(),
        "self": (self_ / n).round(3).tolist(),
        "first": (first / n).round(3).tolist(),
        "positions": n,
    }


def record_attention(run_dir, name=None) -> dict:
    """Loads the trained GPT in ``run_dir``; its maps on one test name, heads' statistics."""
    point = load_checkpoint(run_dir)
    record = point.record
    model = MODELS["gpt"].build(record["model_config"])
    point.load_model(model)
    model.eval()
    words = load_names(record["train_config"]["data"])
    _, val, test = split_words(words, seed=record["split_seed"])
    vocab = Vocab(words)
    if name is None:  # the first test name of eight letters or more
        name = next(w for w in test if len(w) >= 8)
    tokens = ["."] + list(name)
    idx = sitp.tensor([[vocab.stoi[c] for c in tokens]])
    maps, _ = attention_maps(model, idx)
    T = max(len(w) for w in val) + 1
    rows = [[0] + [vocab.stoi[c] for c in w] + [0] * (T - 1 - len(w)) for w in val]
    stats_maps, _ = attention_maps(model, sitp.tensor(rows))
    stats = head_statistics(stats_maps, [len(w) + 1 for w in val])
    return {
        "run": str(run_dir),
        "name": name,
        "tokens": tokens,
        "maps": maps[:, 0].round(3).tolist(),
        "heads": stats,
    }


def record_attention_seeds(run_dirs) -> dict:
    """The heads' statistics of each trained GPT in ``run_dirs`` (the first being the
    record's own run), and each model's strongest previous-character head."""
    models = []
    for run_dir in run_dirs:
        seed = load_checkpoint(run_dir).record["train_config"]["seed"]
        heads = record_attention(run_dir)["heads"]
        prev = np.array(heads["previous"])
        layer, head = np.unravel_index(prev.argmax(), prev.shape)
        models.append(
            {
                "run": str(run_dir),
                "seed": seed,
                "heads": heads,
                "top_previous": {
                    "layer": int(layer),
                    "head": int(head),
                    "weight": float(prev[layer, head]),
                },
            }
        )
    return {"seeds": [m["seed"] for m in models], "models": models}


def attention_figure(att: dict, path) -> None:
    """A grid of heatmaps, one per layer (rows) and head (columns)."""
    plt = _matplotlib()
    maps = np.array(att["maps"])  # (L, H, T, T)
    L, H, T, _ = maps.shape
    tokens = att["tokens"]
    prev = np.array(att["heads"]["previous"])
    fig, axes = plt.subplots(L, H, figsize=(2.1 * H, 2.2 * L), dpi=110, squeeze=False)
    for layer in range(L):
        for head in range(H):
            ax = axes[layer][head]
            ax.imshow(maps[layer, head], cmap="Blues", vmin=0, vmax=1)
            ax.set_xticks(range(T), tokens, fontsize=7)
            ax.set_yticks(range(T), tokens, fontsize=7)
            ax.set_title(f"layer {layer} head {head}\nprev {prev[layer, head]:.2f}", fontsize=7.5)
            ax.tick_params(length=0)
    fig.suptitle(
        f"Attention of the trained GPT on '.{att['name']}': row t = the query at "
        "position t, column s = the key it reads",
        fontsize=9,
    )
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


#: makemore's published losses on names.txt (the chapter's table quotes them).
PUBLISHED = {
    "bigram 2.454 (all words)": 2.454,
    "MLP 2.170": 2.170,
    "WaveNet 1.993": 1.993,
    "transformer ≈ 1.92 (test)": 1.92,
}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", default="build/ladder", help="the ladder's run directories")
    parser.add_argument(
        "--record",
        action="store_true",
        help="read the runs and rewrite the JSON files before drawing",
    )
    parser.add_argument(
        "--seeds",
        help="with --record: the seeds' runs (MODEL-sSEED/), recorded into "
        "ladder-names-seeds.json; ladder-names.json is left as it is",
    )
    parser.add_argument(
        "--long-seeds",
        help="with --record: the ablation's runs over seeds (gru, gpt, gpt-wd, gpt-dropout, "
        "gpt-dropout-40k: "
        "NAME-sSEED/), recorded into ladder-names-long-seeds.json; a run with no folder "
        "there keeps its entry in that record",
    )
    parser.add_argument(
        "--attention-seeds",
        nargs="+",
        help="with --record: the GPTs of other seeds (build/ladder-seeds/gpt-sN), whose "
        "heads' statistics go beside the record's under seeds in gpt-attention.json",
    )
    parser.add_argument(
        "--census-seeds",
        help="with --record: the GPT's census runs over seeds (census-gpt-sSEED/), "
        "recorded into gpt-census.json",
    )
    parser.add_argument("--out", default=str(ASSETS), help="where the PNGs go")
    args = parser.parse_args(argv)
    out = Path(args.out)
    if args.record and args.attention_seeds:
        att = json.loads(ATTENTION_JSON.read_text())
        att["seeds"] = record_attention_seeds([att["run"], *args.attention_seeds])
        write_atomically(ATTENTION_JSON, (json.dumps(att) + "\n").encode())
    if args.record and args.census_seeds:
        record = record_census(args.census_seeds)
        write_atomically(CENSUS_JSON, (json.dumps(record, indent=1) + "\n").encode())
    if args.record and args.long_seeds:
        long = json.loads(LONG_JSON.read_text())
        previous = json.loads(LONG_SEEDS_JSON.read_text()) if LONG_SEEDS_JSON.exists() else None
        record = record_seeds(args.long_seeds, long, LONG_SEEDS, LONG_JSON.name, previous)
        write_atomically(LONG_SEEDS_JSON, (json.dumps(record, indent=1) + "\n").encode())
    if args.record and args.seeds:
        record = record_seeds(args.seeds, json.loads(LADDER_JSON.read_text()))
        write_atomically(SEEDS_JSON, (json.dumps(record, indent=1) + "\n").encode())
    elif args.record and not (args.long_seeds or args.census_seeds or args.attention_seeds):
        LADDER_JSON.write_text(json.dumps(record_ladder(args.runs), indent=1) + "\n")
        long_dir = Path(args.runs + "-long")
        if long_dir.exists():  # the ablation: build/ladder-long/{gru,gpt,gpt-dropout,gpt-wd}
            LONG_JSON.write_text(
                json.dumps(record_ladder(long_dir, names=LONG, out_prefix=str(long_dir)), indent=1)
                + "\n"
            )
        ATTENTION_JSON.write_text(json.dumps(record_attention(Path(args.runs) / "gpt")) + "\n")

    sitp.manual_seed(0)
    architecture_figure(GPT(GPTConfig()), out / "gpt-architecture.png")
    seeds = json.loads(SEEDS_JSON.read_text()) if SEEDS_JSON.exists() else None
    ladder_figure(json.loads(LADDER_JSON.read_text()), out / "gpt-ladder.png", PUBLISHED, seeds)
    attention_figure(json.loads(ATTENTION_JSON.read_text()), out / "gpt-attention.png")
    if LONG_JSON.exists():
        long_seeds = json.loads(LONG_SEEDS_JSON.read_text()) if LONG_SEEDS_JSON.exists() else None
        ablation_figure(json.loads(LONG_JSON.read_text()), out / "gpt-ablation.png", long_seeds)


if __name__ == "__main__":
    main()

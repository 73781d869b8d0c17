"""The MLP block as a key-value memory, probed on chapter 3.5's trained GPT.

Geva et al. (2021) read a transformer's feed-forward block ``c_proj(gelu(c_fc(x)))``
as a memory of S = 4C cells: row i of ``c_fc.weight`` is a *key* k_i, column i of
``c_proj.weight`` a *value* v_i, and the block's output is the sum of the values, each
weighted by how strongly its key matches the input:

    mlp(x) = sum_i gelu(k_i . x + b_i) v_i + b_proj

:func:`memory` splits a block into keys and values and :func:`mlp_as_memory` computes
the block that way (the chapter's fence checks it against the module).
:func:`mlp_coefficients` runs the model and keeps every block's coefficients
``gelu(k_i . x + b_i)`` at every position; :func:`value_letters` reads each value
vector through the unembedding (the final LayerNorm's gain and centring, then the
tied ``lm_head``): the letters a cell pushes the next-character distribution towards.

:func:`record_memory` loads the trained GPT of the ladder (``build/ladder/gpt``), finds
for every cell the validation-name prefixes that activate it most, and measures how
often the character that follows a cell's top prefixes is among the letters its value
promotes, against the same count with the values of other cells (a shuffle). Run from
the repository root after the ladder's runs (chapter 3.5 has the commands)::

    python -m sitp.examples.ffn_memory --run build/ladder/gpt --record
    python -m sitp.examples.ffn_memory          # redraw from the recorded JSON only

With ``--seed-runs DIR ...`` (the GPTs of the ladder's other seeds,
``build/ladder-seeds/gpt-sN``) the record also keeps, under ``seeds``, every block's two
shares for each of those models beside ``--run``'s, and their mean and sample standard
deviation over the models: a share measured on one trained model is one draw.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import Counter
from pathlib import Path

import numpy as np

import sitp
import sitp.nn.functional as F
from sitp.data import Vocab, load_names, split_words
from sitp.models import MODELS
from sitp.train.checkpoint import load_checkpoint

HERE = Path(__file__).resolve().parent
ASSETS = HERE.parents[2] / "docs" / "assets" / "ch03"
MEMORY_JSON = HERE / "gpt-ffn-memory.json"
TOP_PREFIXES = 10  # a cell's triggers: its most activating distinct prefixes
TOP_LETTERS = 3  # a value "promotes" the letters of its three largest logits


def _matplotlib():
    import matplotlib  # late: matplotlib is slow to import

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # late: matplotlib is slow to import

    return plt


# --8<-- [start:memory]
def memory(block):
    """A block's MLP as memory cells: keys (S, C), key biases (S,), values (S, C)."""
    mlp = block.mlp
    keys_SC = mlp.c_fc.weight.detach()  # row i: the key of cell i
    values_SC = mlp.c_proj.weight.detach().t()  # column i of c_proj: the value of cell i
    return keys_SC, mlp.c_fc.bias.detach(), values_SC


def mlp_as_memory(block, x_NC):
    """``block.mlp(x)`` (eval mode) computed as a weighted sum of its values.

    Returns the output (N, C) and the coefficients (N, S): how much of each value is added.
    """
    keys_SC, bias_S, values_SC = memory(block)
    m_NS = F.gelu(x_NC @ keys_SC.t() + bias_S)  # how well x matches each key
    return m_NS @ values_SC + block.mlp.c_proj.bias.detach(), m_NS


# --8<-- [end:memory]


@sitp.no_grad()
def mlp_coefficients(model, idx_BT):
    """Every block's memory coefficients at every position, (L, B, T, S), and the logits.

    The forward pass of :class:`~sitp.models.gpt.GPT` in eval mode, block by block, with
    each MLP computed by :func:`mlp_as_memory` from its block's ``ln_2`` output.
    """
    t = model.transformer
    B, T = idx_BT.shape
    x_BTC = t.wte(idx_BT) + t.wpe(sitp.arange(T))
    coefficients = []
    for block in t.h:
        x_BTC = x_BTC + block.attn(block.ln_1(x_BTC))
        C = x_BTC.shape[-1]
        out_NC, m_NS = mlp_as_memory(block, block.ln_2(x_BTC).reshape(B * T, C))
        coefficients.append(m_NS.numpy().reshape(B, T, -1))
        x_BTC = x_BTC + out_NC.view(B, T, C)
    return np.stack(coefficients), model.lm_head(t.ln_f(x_BTC))


@sitp.no_grad()
def value_letters(model, layer):
    """Each value vector of block ``layer`` read as next-character logits, (S, V).

    A value v is added to the residual stream; the final LayerNorm subtracts the mean of
    its coordinates and multiplies by its gain before ``lm_head`` scores it, so the
    letters that v promotes are read as ``lm_head(gain * (v - mean(v)))``. That is exact
    for a stream that holds v alone (less the shift's logits, and up to the factor
    1 / std(v)); in a real stream the LayerNorm also removes the part of v along the
    normalised stream, which this reading ignores, as Geva et al.'s projection does.
    """
    _, _, values_SC = memory(model.transformer.h[layer])
    gain_C = model.transformer.ln_f.weight.detach()
    centred_SC = values_SC - values_SC.mean(dim=-1, keepdim=True)
    return (centred_SC * gain_C) @ model.lm_head.weight.detach().t()


def triggers(m_BTS, prefixes_BT, unit, k=TOP_PREFIXES):
    """The ``k`` distinct prefixes that activate cell ``unit`` most, with their coefficients.

    ``prefixes_BT[b][t]`` is the text the model has read at position t of name b (the
    leading '.' included) or None past the name's end; causality makes a prefix's
    coefficient the same wherever it appears, so each prefix is kept once.
    """
    scores = m_BTS[:, :, unit]
    order = np.argsort(scores, axis=None)[::-1]
    found, seen = [], set()
    for flat in order:
        b, t = np.unravel_index(flat, scores.shape)
        prefix = prefixes_BT[b][t]
        if prefix is None or prefix in seen:
            continue
        seen.add(prefix)
        found.append((prefix, float(scores[b, t])))
        if len(found) == k:
            break
    return found


def agreement(next_letters, value_top):
    """The share of cells whose triggers' most common next character the value promotes.

    ``next_letters[i]``: the characters that follow cell i's top prefixes in the names;
    ``value_top[i]``: the letters of value i's largest logits.
    """
    hits = [
        Counter(nexts).most_common(1)[0][0] in top for nexts, top in zip(next_letters, value_top)
    ]
    return float(np.mean(hits))


def record_memory(run_dir, show_layers=None, show=4, seed=0) -> dict:
    """Probes the trained GPT in ``run_dir`` on its validation names; the JSON of the page."""
    point = load_checkpoint(run_dir)
    record = point.record
    model = MODELS["gpt"].build(record["model_config"])
    point.load_model(model)
    model.eval()
    words = load_names(record["train_config"]["data"])
    vocab = Vocab(words)
    _, val, _ = split_words(words, seed=record["split_seed"])
    T = max(len(w) for w in val) + 1
    rows = [[0] + [vocab.stoi[c] for c in w] + [0] * (T - 1 - len(w)) for w in val]
    prefixes = [["." + w[:t] if t <= len(w) else None for t in range(T)] for w in val]
    following = {"." + w[:t]: Counter() for w in val for t in range(len(w) + 1)}
    for w in val:  # what comes after each prefix in the validation names
        for t in range(len(w) + 1):
            following["." + w[:t]][(w + ".")[t]] += 1
    m_LBTS, _ = mlp_coefficients(model, sitp.tensor(rows))
    L, S = m_LBTS.shape[0], m_LBTS.shape[-1]
    show_layers = (0, L - 1) if show_layers is None else show_layers
    rng = np.random.default_rng(seed)
    layers, cells = [], []
    for layer in range(L):
        logits_SV = value_letters(model, layer).numpy()
        top_S3 = np.argsort(-logits_SV, axis=1)[:, :TOP_LETTERS]
        value_top = [{vocab.itos[i] for i in row} for row in top_S3]
        found = [triggers(m_LBTS[layer], prefixes, u) for u in range(S)]
        nexts = [
            [c for prefix, _ in f for c in following[prefix].elements()] for f in found
        ]  # every character that followed a trigger, as often as it did
        shuffled = [value_top[i] for i in rng.permutation(S)]
        layers.append(
            {
                "layer": layer,
                "agreement": round(agreement(nexts, value_top), 3),
                "shuffled": round(agreement(nexts, shuffled), 3),
            }
        )
        if layer in show_layers:  # the cells with the largest values, for the table
            spread_S = logits_SV.max(1) - logits_SV.min(1)
            for u in np.argsort(-spread_S)[:show]:
                cells.append(
                    {
                        "layer": layer,
                        "unit": int(u),
                        "triggers": [[p, round(a, 3)] for p, a in found[u][:5]],
                        "next": Counter(nexts[u]).most_common(3),
                        "value_top": [
                            [vocab.itos[i], round(float(logits_SV[u, i]), 2)]
                            for i in np.argsort(-logits_SV[u])[:5]
                        ],
                    }
                )
    return {
        "run": str(run_dir),
        "step": record["step"],
        "names": len(val),
        "positions": int(sum(len(w) + 1 for w in val)),
        "cells_per_layer": S,
        "top_prefixes": TOP_PREFIXES,
        "top_letters": TOP_LETTERS,
        "layers": layers,
        "cells": cells,
    }


def record_seeds(run_dirs) -> dict:
    """Every block's two shares (own value, shuffled) for each trained GPT of ``run_dirs``,
    the first being the record's own run, with their mean and sample sd per block."""
    models = []
    for run_dir in run_dirs:
        seed = load_checkpoint(run_dir).record["train_config"]["seed"]
        models.append(
            {"run": str(run_dir), "seed": seed, "layers": record_memory(run_dir, show=0)["layers"]}
        )
    summary = []
    for i, row in enumerate(models[0]["layers"]):
        entry = {"layer": row["layer"]}
        for key in ("agreement", "shuffled"):
            values = [m["layers"][i][key] for m in models]
            entry[key] = {
                "mean": round(statistics.fmean(values), 4),
                "sd": round(statistics.stdev(values), 4),
                "min": min(values),
                "max": max(values),
            }
        summary.append(entry)
    return {"seeds": [m["seed"] for m in models], "models": models, "summary": summary}


def memory_figure(mem: dict, path) -> None:
    """Per layer: how often a cell's value promotes what follows its triggers, and a shuffle.

    With ``mem["seeds"]`` the bars are the mean over the trained models, each model's
    share a dot on its bar; without, the bars are the one model's shares.
    """
    plt = _matplotlib()
    layers = mem["layers"]
    x = np.arange(len(layers))
    several = mem.get("seeds")
    fig, ax = plt.subplots(figsize=(5.6, 3.4), dpi=120)
    for shift, key, label in (
        (-0.2, "agreement", "the cell's own value"),
        (0.2, "shuffled", "another cell's value (shuffled)"),
    ):
        if several is None:
            ax.bar(x + shift, [r[key] for r in layers], 0.4, label=label)
            continue
        means = [r[key]["mean"] for r in several["summary"]]
        ax.bar(x + shift, means, 0.4, label=f"{label}, mean")
        for model in several["models"]:
            ax.plot(x + shift, [r[key] for r in model["layers"]], "k.", ms=4)
    ax.set_xticks(x, [f"block {r['layer']}" for r in layers])
    ax.set_ylabel(f"share of the {mem['cells_per_layer']} cells")
    ax.set_title(
        f"Next character after a cell's top {mem['top_prefixes']} prefixes\n"
        f"among its value's top {mem['top_letters']} letters"
        + (
            ""
            if several is None
            else f"; {len(several['models'])} GPTs (seeds {several['seeds']}), one dot each"
        ),
        fontsize=9,
    )
    ax.legend(fontsize=8, frameon=False)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", default="build/ladder/gpt", help="the trained GPT's run")
    parser.add_argument("--record", action="store_true", help="probe the run, rewrite the JSON")
    parser.add_argument(
        "--seed-runs", nargs="+", default=(), help="with --record: other seeds' GPTs to probe"
    )
    parser.add_argument("--out", default=str(ASSETS), help="where the PNG goes")
    args = parser.parse_args(argv)
    if args.record:
        mem = record_memory(args.run)
        if args.seed_runs:
            mem["seeds"] = record_seeds([args.run, *args.seed_runs])
        MEMORY_JSON.write_text(json.dumps(mem, indent=1) + "\n")
    memory_figure(json.loads(MEMORY_JSON.read_text()), Path(args.out) / "gpt-ffn-memory.png")


if __name__ == "__main__":
    main()

"""Plain PyTorch code on sitp: training iterations of scripts written the usual way,
sitp against PyTorch, per iteration (issue 34).

The book's own GPT uses fused layers (attention, GELU, layer norm in one kernel each).
Code written for PyTorch usually does not: it spells attention out (a product, a mask
filled with -inf, a softmax, a product), writes GELU's tanh formula as five elementwise
ops, steps a recurrent cell through time one small matrix product at a time, builds a
tensor per sample in its ``Dataset`` and lets the ``DataLoader`` collate them. Such a
program is a long stream of small ops, and what each op costs around its arithmetic
(Python dispatch, checks, allocating the result, recording the graph) decides its speed.

The workloads, each a full training iteration (next batch from a ``DataLoader`` with the
default collation, forward, ``zero_grad``, backward, ``clip_grad_norm_``, an AdamW step
with two parameter groups), written once as PyTorch code and run with ``torch`` or with
``sitp`` in its place:

* ``bigram``: makemore's bigram, a table of next-token logits;
* ``mlp``: makemore's MLP (an embedding of a 3-token context, one tanh hidden layer);
* ``bow``: makemore's bag of words: each position the mean of the embeddings up to it
  (a softmax of a causally masked matrix of zeros, times the embeddings), then a tanh MLP;
* ``rnn``: makemore's RNN cell, ``tanh(W [x_t, h_{t-1}])``, stepped over 16 positions;
* ``gru``: makemore's GRU cell (two sigmoid gates, a reset, a tanh candidate), 16 steps;
* ``gpt``: a minGPT-style character GPT: causal attention with an explicit mask buffer,
  ``masked_fill`` and ``softmax``, the tanh GELU written out, ``nn.LayerNorm``;
* ``nanogpt``: the same sizes in nanoGPT's model file (``sitp.examples.torch_style_gpt``,
  PyTorch code too), whose attention is ``F.scaled_dot_product_attention`` and whose
  GELU is ``nn.GELU``: the operations sitp fuses;

and three pieces of the same iteration alone: ``collate`` (one batch of 64 samples
through the ``DataLoader``), ``clip`` (``clip_grad_norm_`` over the GPT's gradients) and
``adamw`` (one AdamW step over the GPT's parameters).

Part 1 times them with the fair harness :mod:`sitp.bench.ab`: each library in its own
worker, one thread, pinned to the same core, warmed, taking turns round after round; the
figure is the median iteration. ``--clock cpu`` (the default on one thread) counts the
worker's CPU seconds, not the wall clock, because the machine is shared; with
``--threads`` above 1 the wall clock is the default and the only choice. Part 2 runs the sitp side of
each model under cProfile and adds up where its time goes, by layer.

Usage::

    python scripts/plain_torch_bench.py                      # the table
    python scripts/plain_torch_bench.py --json src/sitp/examples/plain-torch-intel.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys

import numpy as np

MODELS = ("bigram", "mlp", "bow", "rnn", "gru", "gpt", "nanogpt")
PIECES = ("collate", "clip", "adamw")
CONFIG = {
    "bigram": {"vocab": 27, "block": 16, "batch": 32},
    "bow": {"vocab": 27, "block": 16, "n_embd": 16, "hidden": 32, "batch": 32},
    "mlp": {"vocab": 27, "block": 3, "n_embd": 16, "hidden": 128, "batch": 32},
    "rnn": {"vocab": 27, "block": 16, "n_embd": 16, "hidden": 32, "batch": 32},
    "gru": {"vocab": 27, "block": 16, "n_embd": 16, "hidden": 32, "batch": 32},
    "gpt": {"vocab": 65, "block": 32, "n_embd": 64, "n_head": 4, "n_layer": 2, "batch": 16},
    "nanogpt": {"vocab": 65, "block": 32, "n_embd": 64, "n_head": 4, "n_layer": 2, "batch": 16},
}


def _load_torch_style_gpt(lib: str) -> dict:
    """The namespace of ``sitp/examples/torch_style_gpt.py`` executed with ``lib``'s
    modules under the names ``torch``, ``torch.nn`` and ``torch.nn.functional``."""
    import runpy

    # by its path in the checkout: importing sitp in torch's worker would apply sitp's
    # malloc setting (4.2) to torch's process too
    here = os.path.dirname(os.path.abspath(__file__))
    path = os.path.join(here, "..", "src", "sitp", "examples", "torch_style_gpt.py")
    if lib == "torch":
        return runpy.run_path(path)
    import sitp

    names = {"torch": sitp, "torch.nn": sitp.nn, "torch.nn.functional": sitp.nn.functional}
    saved = {k: sys.modules.get(k) for k in names}
    sys.modules.update(names)
    try:
        return runpy.run_path(path)
    finally:
        for k, m in saved.items():
            if m is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = m


def _lib(name):
    if name == "torch":
        import torch
    else:
        import sitp as torch
    return torch, torch.nn, torch.nn.functional


# ---------------------------------------------------------------- the programs
def build(lib: str, model: str):
    """The model, its data loader and its optimizer, written as PyTorch code."""
    torch, nn, F = _lib(lib)
    cfg = CONFIG[model]
    V, T, B = cfg["vocab"], cfg["block"], cfg["batch"]

    class CharDataset(torch.utils.data.Dataset):
        """Windows of a token stream, one new tensor per sample (minGPT's CharDataset)."""

        def __init__(self, data, block):
            self.data, self.block = data, block

        def __len__(self):
            return len(self.data) - self.block

        def __getitem__(self, i):
            chunk = self.data[i : i + self.block + 1]
            x = torch.tensor(chunk[:-1], dtype=torch.long)
            y = torch.tensor(chunk[1:], dtype=torch.long)
            return x, y

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(V, cfg["n_embd"])
            self.mlp = nn.Sequential(
                nn.Linear(T * cfg["n_embd"], cfg["hidden"]),
                nn.Tanh(),
                nn.Linear(cfg["hidden"], V),
            )

        def forward(self, idx, targets):
            emb = self.wte(idx)  # (B, T, C)
            logits = self.mlp(emb.view(emb.size(0), -1))  # (B, V): the token after idx
            return F.cross_entropy(logits, targets[:, -1])

    class Bigram(nn.Module):
        """makemore's bigram: a table of next-token logits, one row per token."""

        def __init__(self):
            super().__init__()
            self.logits = nn.Parameter(torch.zeros((V, V)))

        def forward(self, idx, targets):
            logits = self.logits[idx]  # (B, T, V)
            return F.cross_entropy(logits.view(-1, V), targets.view(-1))

    class BoW(nn.Module):
        """makemore's bag of words: each position takes the mean of the embeddings up to
        it (the softmax of a causally masked zero matrix), then a tanh MLP."""

        def __init__(self):
            super().__init__()
            C, H = cfg["n_embd"], cfg["hidden"]
            self.wte = nn.Embedding(V, C)
            self.wpe = nn.Embedding(T, C)
            self.register_buffer("causal", torch.tril(torch.ones(T, T)).view(1, T, T))
            self.c_fc = nn.Linear(C, H)
            self.c_proj = nn.Linear(H, C)
            self.lm_head = nn.Linear(C, V)

        def forward(self, idx, targets):
            b, t = idx.size()
            pos = torch.arange(0, t, dtype=torch.long).unsqueeze(0)  # (1, t)
            x = self.wte(idx) + self.wpe(pos)  # (b, t, C)
            w = torch.zeros((b, t, t)).masked_fill(self.causal[:, :t, :t] == 0, float("-inf"))
            x = x + F.softmax(w, dim=-1) @ x  # the running mean
            x = x + self.c_proj(F.tanh(self.c_fc(x)))
            logits = self.lm_head(x)
            return F.cross_entropy(logits.view(-1, V), targets.view(-1))

    class RNNCell(nn.Module):
        def __init__(self, gru):
            super().__init__()
            C, H = cfg["n_embd"], cfg["hidden"]
            self.gru = gru
            self.xh_to_h = nn.Linear(C + H, H)
            if gru:
                self.xh_to_z = nn.Linear(C + H, H)
                self.xh_to_r = nn.Linear(C + H, H)
                self.xh_to_hbar = nn.Linear(C + H, H)

        def forward(self, xt, hprev):
            xh = torch.cat([xt, hprev], dim=1)
            if not self.gru:
                return F.tanh(self.xh_to_h(xh))
            r = F.sigmoid(self.xh_to_r(xh))
            hprev_reset = r * hprev
            xhr = torch.cat([xt, hprev_reset], dim=1)
            hbar = F.tanh(self.xh_to_hbar(xhr))
            z = F.sigmoid(self.xh_to_z(xh))
            return (1 - z) * hprev + z * hbar

    class RNN(nn.Module):
        def __init__(self, gru):
            super().__init__()
            self.start = nn.Parameter(torch.zeros(1, cfg["hidden"]))
            self.wte = nn.Embedding(V, cfg["n_embd"])
            self.cell = RNNCell(gru)
            self.lm_head = nn.Linear(cfg["hidden"], V)

        def forward(self, idx, targets):
            b, t = idx.size()
            emb = self.wte(idx)  # (b, t, n_embd)
            hprev = self.start.expand((b, -1))
            hiddens = []
            for i in range(t):
                hprev = self.cell(emb[:, i, :], hprev)
                hiddens.append(hprev)
            hidden = torch.stack(hiddens, 1)  # (b, t, hidden)
            logits = self.lm_head(hidden)
            return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))

    class NewGELU(nn.Module):
        def forward(self, x):
            c = math.sqrt(2.0 / math.pi)
            return 0.5 * x * (1.0 + torch.tanh(c * (x + 0.044715 * torch.pow(x, 3.0))))

    class CausalSelfAttention(nn.Module):
        def __init__(self):
            super().__init__()
            C = cfg["n_embd"]
            self.c_attn = nn.Linear(C, 3 * C)
            self.c_proj = nn.Linear(C, C)
            self.register_buffer("bias", torch.tril(torch.ones(T, T)).view(1, 1, T, T))
            self.n_head, self.n_embd = cfg["n_head"], C

        def forward(self, x):
            B_, T_, C = x.size()
            q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
            k = k.view(B_, T_, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
            q = q.view(B_, T_, self.n_head, C // self.n_head).transpose(1, 2)
            v = v.view(B_, T_, self.n_head, C // self.n_head).transpose(1, 2)
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))  # (B, nh, T, T)
            att = att.masked_fill(self.bias[:, :, :T_, :T_] == 0, float("-inf"))
            att = F.softmax(att, dim=-1)
            y = att @ v  # (B, nh, T, hs)
            y = y.transpose(1, 2).contiguous().view(B_, T_, C)
            return self.c_proj(y)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            C = cfg["n_embd"]
            self.ln_1 = nn.LayerNorm(C)
            self.attn = CausalSelfAttention()
            self.ln_2 = nn.LayerNorm(C)
            self.c_fc = nn.Linear(C, 4 * C)
            self.c_proj = nn.Linear(4 * C, C)
            self.act = NewGELU()

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            return x + self.c_proj(self.act(self.c_fc(self.ln_2(x))))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            C = cfg["n_embd"]
            self.wte = nn.Embedding(V, C)
            self.wpe = nn.Embedding(T, C)
            self.h = nn.ModuleList([Block() for _ in range(cfg["n_layer"])])
            self.ln_f = nn.LayerNorm(C)
            self.lm_head = nn.Linear(C, V, bias=False)

        def forward(self, idx, targets):
            b, t = idx.size()
            pos = torch.arange(0, t, dtype=torch.long).unsqueeze(0)  # (1, t)
            x = self.wte(idx) + self.wpe(pos)
            for block in self.h:
                x = block(x)
            logits = self.lm_head(self.ln_f(x))
            return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))

    class NanoGPT(nn.Module):
        """nanoGPT's model file, run with this library bound to the name torch."""

        def __init__(self):
            super().__init__()
            ns = _load_torch_style_gpt(lib)
            conf = ns["GPTConfig"](
                block_size=T,
                vocab_size=V,
                n_layer=cfg["n_layer"],
                n_head=cfg["n_head"],
                n_embd=cfg["n_embd"],
                dropout=0.0,
                bias=True,
            )
            self.gpt = ns["GPT"](conf)

        def forward(self, idx, targets):
            return self.gpt(idx, targets)[1]

    torch.manual_seed(0)
    net = {
        "bigram": Bigram,
        "bow": BoW,
        "mlp": MLP,
        "rnn": lambda: RNN(False),
        "gru": lambda: RNN(True),
        "gpt": GPT,
        "nanogpt": NanoGPT,
    }[model]()
    # minGPT's optimizer groups: weight decay on the matrices of Linear layers only
    decay = [p for n, p in net.named_parameters() if n.endswith("weight") and p.dim() == 2]
    no_decay = [p for n, p in net.named_parameters() if not (n.endswith("weight") and p.dim() == 2)]
    groups = [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=5e-4, betas=(0.9, 0.95))
    data = np.random.default_rng(0).integers(0, V, 20000).tolist()  # the same tokens for both
    g = torch.Generator().manual_seed(0)
    loader = torch.utils.data.DataLoader(
        CharDataset(data, T), batch_size=B, shuffle=True, generator=g
    )
    return torch, net, loader, opt


def workload(lib: str, model: str):
    """One training iteration of ``model`` (a key of CONFIG) per call, or one of PIECES."""
    torch, net, loader, opt = build(lib, "gpt" if model in PIECES else model)
    state = {"it": iter(loader)}

    def batch():
        try:
            return next(state["it"])
        except StopIteration:
            state["it"] = iter(loader)
            return next(state["it"])

    def step():
        x, y = batch()
        loss = net(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
        opt.step()
        return loss

    if model in MODELS:
        return step
    step()  # gradients and optimizer state, for the pieces
    params = [p for p in net.parameters() if p.grad is not None]
    if model == "collate":
        big = torch.utils.data.DataLoader(loader.dataset, batch_size=64, shuffle=False)
        it = {"it": iter(big)}

        def collate():
            try:
                return next(it["it"])
            except StopIteration:
                it["it"] = iter(big)
                return next(it["it"])

        return collate
    if model == "clip":
        return lambda: torch.nn.utils.clip_grad_norm_(params, 1e9)  # measures; scales nothing
    return opt.step


# ---------------------------------------------------------------- the comparison
def compare(args) -> dict:
    from sitp.bench import ab

    here = os.path.abspath(__file__)
    names = ["sitp", "torch"] + (["sitp_before"] if args.before else [])
    env = {"sitp_before": ab.source_tree_env(args.before)} if args.before else {}
    results = {}
    with ab.workers(names, threads=args.threads, env=env) as w:
        for name in args.only or MODELS + PIECES:
            arms = {  # the "before" arm is sitp too, from another source tree
                arm: ab.Arm(
                    w[arm],
                    f"{here}:workload",
                    {"lib": arm.split("_")[0], "model": name},
                    warmup=3,
                )
                for arm in names
            }
            ratios = [("sitp", "torch")] + ([("sitp_before", "sitp")] if args.before else [])
            res = ab.compare(
                arms,
                rounds=args.rounds,
                calls=args.calls,
                ratios=ratios,
                pause=0.05,
                clock=args.clock,
            )
            results[name] = res
            s, t = (res["arms"][k]["median"] * 1e3 for k in ("sitp", "torch"))
            r = res["ratios"]["sitp/torch"]
            before = ""
            if args.before:
                b = res["ratios"]["sitp_before/sitp"]
                before = (
                    f"  before {res['arms']['sitp_before']['median'] * 1e3:8.3f} ms "
                    f"(before/sitp {b['median']:.2f}, {b['min']:.2f}-{b['max']:.2f})"
                )
            print(
                f"{name:8s} sitp {s:8.3f} ms  torch {t:8.3f} ms  sitp/torch {r['median']:.2f} "
                f"({r['min']:.2f}-{r['max']:.2f})  torch's speed = {1 / r['median']:.2f}{before}",
                flush=True,
            )
    return results


# ---------------------------------------------------------------- the profile
LAYERS = [  # (what, path fragment): the first match names a function's layer
    ("autograd: Function.apply, Context, Node", "sitp/autograd/function.py"),
    ("autograd: the engine (backward)", "sitp/autograd/engine.py"),
    ("autograd: forward/backward of each op", "sitp/autograd/derivatives.py"),
    ("autograd: grad mode", "sitp/autograd/grad_mode.py"),
    ("Tensor methods (sitp/methods, functional)", "sitp/methods/"),
    ("Tensor methods (sitp/methods, functional)", "sitp/functional.py"),
    ("tensor layer: creation, dispatch, Tensor", "sitp/_tensor/"),
    ("shapes and strides (strides.py)", "sitp/strides.py"),
    ("CPU launchers (kernels/cpu/ops.py, blas, layout)", "sitp/kernels/cpu/ops.py"),
    ("CPU launchers (kernels/cpu/ops.py, blas, layout)", "sitp/kernels/layout.py"),
    ("CPU launchers (kernels/cpu/ops.py, blas, layout)", "sitp/kernels/cpu/blas/__init__.py"),
    ("compiled kernels (numba)", "sitp/kernels/"),
    ("nn modules and functional", "sitp/nn/"),
    ("optimizer", "sitp/optim/"),
    ("data loading and collation", "sitp/utils/data/"),
]


def _layer(filename, funcname):
    f = filename.replace(os.sep, "/")
    for layer, frag in LAYERS:
        if frag in f:
            return layer
    if "numba" in f or "Dispatcher" in funcname or "_compile_for_args" in funcname:
        return "compiled kernels (numba)"
    if filename == "~":
        return "numpy and builtins (allocation, copies)"
    if f.endswith("plain_torch_bench.py"):
        return "the script itself"
    return "other Python"


def profile(models, iters=30) -> dict:
    from sitp.bench.layers import layer_shares

    out = {}
    for model in models:
        shares, _total, calls, _stats = layer_shares(workload("sitp", model), iters, _layer)
        out[model] = {
            "iterations": iters,
            "python_calls_per_iteration": calls / iters,
            "share_by_layer": shares,
        }
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--calls", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument(
        "--clock",
        choices=("wall", "cpu"),
        default=None,
        help="default: cpu on one thread, else wall",
    )
    ap.add_argument("--only", nargs="*", help=f"a subset of {MODELS + PIECES}")
    ap.add_argument("--label", default="working tree", help="what this sitp is (a commit)")
    ap.add_argument("--skip-compare", action="store_true")
    ap.add_argument("--skip-profile", action="store_true")
    ap.add_argument("--json", help="write every figure here")
    ap.add_argument(
        "--before", help="a third arm: the sitp in DIR/src (git archive REV src | tar -x -C DIR)"
    )
    ap.add_argument("--label-before", default="before", help="what --before is (a commit)")
    args = ap.parse_args()
    if args.clock is None:  # CPU seconds stand for the wall time only on one thread (sitp.bench.ab)
        args.clock = "cpu" if args.threads == 1 else "wall"
    os.environ.setdefault("NUMBA_NUM_THREADS", str(args.threads))
    record = {
        "what": "seconds per training iteration of plain-PyTorch programs (scripts/"
        "plain_torch_bench.py), sitp against torch; per arm the median over rounds of each "
        "round's median call, and the range of the rounds",
        "config": CONFIG,
        "label": args.label,
    }
    if not args.skip_compare:
        from sitp.bench import ab

        res = compare(args)
        first = next(iter(res.values()))
        record.update(
            {
                "seconds_per_iteration": {
                    n: {
                        "sitp": r["arms"]["sitp"]["median"],
                        "torch": r["arms"]["torch"]["median"],
                        "sitp/torch": r["ratios"]["sitp/torch"],
                        **(
                            {
                                "sitp_before": r["arms"]["sitp_before"]["median"],
                                "sitp_before/sitp": r["ratios"]["sitp_before/sitp"],
                            }
                            if args.before
                            else {}
                        ),
                    }
                    for n, r in res.items()
                },
                **({"label_before": args.label_before} if args.before else {}),
                "machine": first["machine"],
                "versions": first["versions"],
                "threads": first["threads"],
                "clock": args.clock,
                "rounds": args.rounds,
                "calls": args.calls,
                "load_per_case": {n: r["load"] for n, r in res.items()},
            }
        )
        print(ab.load_line(first))
    if not args.skip_profile:
        os.environ["NUMBA_NUM_THREADS"] = "1"
        record["profile"] = profile([m for m in (args.only or MODELS) if m in MODELS])
        record["profile_note"] = (
            "cProfile of the sitp side alone, 30 iterations after 5 of warm-up: the share "
            "of its time (tottime) in each layer's functions. The profiler slows every "
            "Python call, so the shares of Python layers are inflated: a guide, not a "
            "measurement"
        )
        for m, p in record["profile"].items():
            print(f"\n{m}: {p['python_calls_per_iteration']:.0f} Python calls per iteration")
            for layer, s in p["share_by_layer"].items():
                print(f"  {100 * s:5.1f}%  {layer}")
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(record, f, indent=1)
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

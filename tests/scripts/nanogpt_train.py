"""Train a character-level GPT the way nanoGPT's train.py does on a CPU (its
shakespeare_char recipe), written for PyTorch.

The tests run this file unchanged with `import sitp as torch`
(tests/test_torch_scripts_more.py). What it exercises is what such a training script
calls: config globals overridden from the command line, the TF32 switches of
``torch.backends``, ``nullcontext`` or ``torch.amp.autocast``, ``torch.amp.GradScaler``
(disabled on a CPU, but called: scale, unscale_, step, update), batches cut from an
``np.memmap`` and made tensors with ``torch.from_numpy(... .astype(np.int64))``,
``@torch.no_grad()`` evaluation, gradient clipping, warmup then cosine decay of the
learning rate set by hand in the param groups, AdamW's ``fused`` option found with
``inspect.signature``, and checkpoints written with ``torch.save`` and resumed with
``torch.load``. The model is tests/torch_style_gpt.py (nanoGPT's model.py style).

The data directory holds ``train.bin`` and ``val.bin`` (uint16 token ids) and
``meta.pkl`` (``{"vocab_size": ...}``), as nanoGPT's prepare.py writes them:

    python tests/scripts/nanogpt_train.py --data_dir=data/chars --out_dir=runs/gpt \\
        --max_iters=2000 --device=cpu

Two options that nanoGPT does not have make the runs of two libraries comparable:
``--batch_rng=numpy`` cuts batches at offsets drawn by numpy (seeded by the iteration, so
a resumed run reads what an uninterrupted one reads), and ``--init_numpy=True`` draws
the weights with numpy. The last line printed is a JSON record of the losses.
"""

import inspect
import json
import math
import os
import pickle
import sys
import time
from ast import literal_eval
from contextlib import nullcontext

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from torch_style_gpt import GPT, GPTConfig  # noqa: E402  (nanoGPT's model.py)

# -----------------------------------------------------------------------------
# the configuration: every global below may be overridden as --name=value
out_dir = "out-chars"
data_dir = "data/chars"
eval_interval = 250
log_interval = 10
eval_iters = 20
eval_only = False
always_save_checkpoint = False
init_from = "scratch"  # 'scratch' or 'resume' (from out_dir/ckpt.pt)
# data
gradient_accumulation_steps = 1
batch_size = 12
block_size = 64
batch_rng = "torch"  # 'torch': torch.randint offsets, as nanoGPT; 'numpy': numpy's
# model
n_layer = 4
n_head = 4
n_embd = 128
dropout = 0.0
bias = False
init_numpy = False
# AdamW, with warmup then cosine decay
learning_rate = 1e-3
max_iters = 2000
weight_decay = 1e-1
beta1 = 0.9
beta2 = 0.99
grad_clip = 1.0
decay_lr = True
warmup_iters = 100
lr_decay_iters = 2000
min_lr = 1e-4
# system
device = "cpu"
dtype = "float32"  # 'float32', 'bfloat16' or 'float16' (this last one with a GradScaler)
compile = False
seed = 1337
# -----------------------------------------------------------------------------


def override(argv, names):
    """A small configurator: --name=value sets the global ``name`` to ``value``, read as
    a Python literal when it is one, and checked against the default's type."""
    for arg in argv:
        if not arg.startswith("--") or "=" not in arg:
            raise SystemExit(f"expected --name=value, got {arg!r}")
        key, text = arg[2:].split("=", 1)
        if key not in names:
            raise SystemExit(f"unknown config key: {key}")
        try:
            value = literal_eval(text)
        except (SyntaxError, ValueError):
            value = text
        default = names[key]
        if type(default) is float and type(value) is int:
            value = float(value)
        if type(value) is not type(default):
            raise SystemExit(f"--{key}: expected {type(default).__name__}, got {text!r}")
        print(f"overriding: {key} = {value!r}")
        names[key] = value


config_keys = [
    k
    for k, v in list(globals().items())
    if not k.startswith("_") and type(v) in (int, float, bool, str)
]
override(sys.argv[1:], globals())
config = {k: globals()[k] for k in config_keys}

os.makedirs(out_dir, exist_ok=True)
torch.manual_seed(seed)
torch.backends.cuda.matmul.allow_tf32 = True  # allow tf32 on matmul
torch.backends.cudnn.allow_tf32 = True  # allow tf32 on cudnn
device_type = "cuda" if "cuda" in device else "cpu"
ptdtype = getattr(torch, dtype)
ctx = (
    nullcontext()
    if device_type == "cpu"
    else torch.amp.autocast(device_type=device_type, dtype=ptdtype)
)
tokens_per_iter = gradient_accumulation_steps * batch_size * block_size
print(f"tokens per iteration will be: {tokens_per_iter:,}")


# ------------------------------------------------------------------- the data
def get_batch(split, n=0, evaluating=False):
    """Inputs and targets (B, T): ``batch_size`` windows of the split and the same
    windows one token on. ``n`` numbers the batch (training batch n, or evaluation
    batch n) for ``batch_rng='numpy'``."""
    # a fresh memmap per batch: numpy keeps a memmap's pages otherwise
    name = "train.bin" if split == "train" else "val.bin"
    data = np.memmap(os.path.join(data_dir, name), dtype=np.uint16, mode="r")
    if batch_rng == "numpy":
        rng = np.random.default_rng([seed, int(split == "train"), int(evaluating), n])
        ix = rng.integers(0, len(data) - block_size, size=batch_size).tolist()
    else:
        ix = torch.randint(len(data) - block_size, (batch_size,)).tolist()
    x = torch.stack([torch.from_numpy(data[i : i + block_size].astype(np.int64)) for i in ix])
    y = torch.stack(
        [torch.from_numpy(data[i + 1 : i + 1 + block_size].astype(np.int64)) for i in ix]
    )
    if device_type == "cuda":
        # pinned host memory lets the copy run while the GPU computes
        x, y = (
            x.pin_memory().to(device, non_blocking=True),
            y.pin_memory().to(device, non_blocking=True),
        )
    else:
        x, y = x.to(device), y.to(device)
    return x, y


iter_num = 0
best_val_loss = 1e9
with open(os.path.join(data_dir, "meta.pkl"), "rb") as f:
    meta_vocab_size = pickle.load(f)["vocab_size"]
print(f"found vocab_size = {meta_vocab_size} (inside {data_dir}/meta.pkl)")


# ------------------------------------------------------------------ the model
def numpy_init(model):
    """Weights drawn by numpy, the same under any library: N(0, 0.02) for matrices
    (0.02 / sqrt(2 n_layer) for the residual projections, as GPT-2), ones and zeros
    for LayerNorm's gains and the biases, as the model's own init."""
    rng = np.random.default_rng(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() < 2:
                continue
            std = 0.02 / math.sqrt(2 * n_layer) if name.endswith("c_proj.weight") else 0.02
            p.copy_(torch.from_numpy(rng.normal(0.0, std, tuple(p.shape)).astype(np.float32)))


model_args = dict(
    n_layer=n_layer,
    n_head=n_head,
    n_embd=n_embd,
    block_size=block_size,
    bias=bias,
    vocab_size=meta_vocab_size,
    dropout=dropout,
)
if init_from == "scratch":
    print("Initializing a new model from scratch")
    model = GPT(GPTConfig(**model_args))
    if init_numpy:
        numpy_init(model)
elif init_from == "resume":
    print(f"Resuming training from {out_dir}")
    checkpoint = torch.load(os.path.join(out_dir, "ckpt.pt"), map_location=device)
    for k in ["n_layer", "n_head", "n_embd", "block_size", "bias", "vocab_size"]:
        model_args[k] = checkpoint["model_args"][k]  # the saved shape wins
    model = GPT(GPTConfig(**model_args))
    state_dict = checkpoint["model"]
    prefix = "_orig_mod."  # what torch.compile's wrapper adds to the names
    for k in list(state_dict):
        if k.startswith(prefix):
            state_dict[k[len(prefix) :]] = state_dict.pop(k)
    model.load_state_dict(state_dict)
    iter_num = checkpoint["iter_num"]
    best_val_loss = checkpoint["best_val_loss"]
else:
    raise SystemExit(f"init_from is 'scratch' or 'resume', not {init_from!r}")
model.to(device)
print(f"number of parameters: {model.get_num_params() / 1e6:.2f}M")

# a GradScaler that does nothing unless the dtype is float16
scaler = torch.amp.GradScaler(device_type, enabled=(dtype == "float16"))


def configure_optimizers(model, weight_decay, learning_rate, betas, device_type):
    """AdamW with weight decay on the matrices only, fused when this torch has it."""
    params = {pn: p for pn, p in model.named_parameters() if p.requires_grad}
    decay = [p for p in params.values() if p.dim() >= 2]
    no_decay = [p for p in params.values() if p.dim() < 2]
    groups = [
        {"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    print(
        f"num decayed parameter tensors: {len(decay)}, with "
        f"{sum(p.numel() for p in decay):,} parameters"
    )
    print(
        f"num non-decayed parameter tensors: {len(no_decay)}, with "
        f"{sum(p.numel() for p in no_decay):,} parameters"
    )
    fused_available = "fused" in inspect.signature(torch.optim.AdamW).parameters
    use_fused = fused_available and device_type == "cuda"
    extra = dict(fused=True) if use_fused else dict()
    optimizer = torch.optim.AdamW(groups, lr=learning_rate, betas=betas, **extra)
    print(f"using fused AdamW: {use_fused}")
    return optimizer


optimizer = configure_optimizers(model, weight_decay, learning_rate, (beta1, beta2), device_type)
if init_from == "resume":
    optimizer.load_state_dict(checkpoint["optimizer"])
checkpoint = None  # free it

if compile:
    print("compiling the model...")
    model = torch.compile(model)


@torch.no_grad()
def estimate_loss():
    """The mean loss over ``eval_iters`` batches of each split, in eval mode."""
    out = {}
    model.eval()
    for split in ["train", "val"]:
        losses = torch.zeros(eval_iters)
        for k in range(eval_iters):
            X, Y = get_batch(split, k, evaluating=True)
            with ctx:
                logits, loss = model(X, Y)
            losses[k] = loss.item()
        out[split] = losses.mean().item()
    model.train()
    return out


def get_lr(it):
    """Linear warmup, then cosine decay to ``min_lr`` at ``lr_decay_iters``, then flat."""
    if it < warmup_iters:
        return learning_rate * (it + 1) / (warmup_iters + 1)
    if it > lr_decay_iters:
        return min_lr
    ratio = (it - warmup_iters) / (lr_decay_iters - warmup_iters)
    assert 0 <= ratio <= 1
    coeff = 0.5 * (1.0 + math.cos(math.pi * ratio))  # from 1 down to 0
    return min_lr + coeff * (learning_rate - min_lr)


# ------------------------------------------------------------ the training loop
record = {"iters": [], "train": [], "lr": [], "eval": {}}
X, Y = get_batch("train", iter_num * gradient_accumulation_steps)  # the first batch
t0 = time.time()
raw_model = model
while True:
    lr = get_lr(iter_num) if decay_lr else learning_rate
    for param_group in optimizer.param_groups:
        param_group["lr"] = lr

    if iter_num % eval_interval == 0:
        losses = estimate_loss()
        record["eval"][str(iter_num)] = losses
        print(f"step {iter_num}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}")
        if losses["val"] < best_val_loss or always_save_checkpoint:
            best_val_loss = min(best_val_loss, losses["val"])
            if iter_num > 0:
                checkpoint = {
                    "model": raw_model.state_dict(),
                    "optimizer": optimizer.state_dict(),
                    "model_args": model_args,
                    "iter_num": iter_num,
                    "best_val_loss": best_val_loss,
                    "config": config,
                }
                print(f"saving checkpoint to {out_dir}")
                torch.save(checkpoint, os.path.join(out_dir, "ckpt.pt"))
    if iter_num == 0 and eval_only:
        break

    # forward and backward, accumulating gradients over micro-steps
    for micro_step in range(gradient_accumulation_steps):
        with ctx:
            logits, loss = model(X, Y)
            loss = loss / gradient_accumulation_steps
        # fetch the next batch while this one's backward pass runs (on a GPU)
        X, Y = get_batch("train", iter_num * gradient_accumulation_steps + micro_step + 1)
        scaler.scale(loss).backward()
    if grad_clip != 0.0:
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)

    t1 = time.time()
    dt, t0 = t1 - t0, t1
    lossf = loss.item() * gradient_accumulation_steps
    record["iters"].append(iter_num)
    record["train"].append(lossf)
    record["lr"].append(lr)
    if iter_num % log_interval == 0:
        print(f"iter {iter_num}: loss {lossf:.4f}, time {dt * 1000:.2f}ms")
    iter_num += 1
    if iter_num > max_iters:
        break

record["best_val_loss"] = best_val_loss
print(json.dumps(record))

"""A character-level MLP language model on names, in the style of makemore's MLP
(Bengio et al. 2003): a context of the previous `block_size` characters, embedded,
concatenated, a tanh hidden layer, logits over the next character.

Written for PyTorch; the tests run it unchanged with `import sitp as torch`
(tests/test_torch_scripts.py). Run it directly:

    python tests/scripts/makemore_mlp.py --data names.txt --steps 2000 --out runs/mlp
"""

import argparse
import json
import os
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset, RandomSampler, Sampler


class CharDataset(Dataset):
    """Every (context, next char) pair of the words; '.' (index 0) pads and ends."""

    def __init__(self, words, chars, block_size):
        self.stoi = {ch: i + 1 for i, ch in enumerate(chars)}
        xs, ys = [], []
        for w in words:
            context = [0] * block_size
            for ch in w + ".":
                ix = self.stoi.get(ch, 0)
                xs.append(context)
                ys.append(ix)
                context = context[1:] + [ix]
        self.X = torch.tensor(xs)
        self.Y = torch.tensor(ys)

    def __len__(self):
        return len(self.Y)

    def __getitem__(self, i):
        return self.X[i], self.Y[i]


class NumpySampler(Sampler):
    """Indices drawn with replacement by numpy: the same order under any library."""

    def __init__(self, n, seed):
        self.n, self.rng = n, np.random.default_rng(seed)

    def __iter__(self):
        while True:
            yield int(self.rng.integers(self.n))


class InfiniteDataLoader:
    """Batches forever, as makemore's: a DataLoader over a sampler that never ends."""

    def __init__(self, dataset, sampler=None, **kwargs):
        if sampler is None:
            sampler = RandomSampler(dataset, replacement=True, num_samples=int(1e10))
        self.loader = DataLoader(dataset, sampler=sampler, **kwargs)
        self.it = iter(self.loader)

    def next(self):
        return next(self.it)


class MLP(nn.Module):
    def __init__(self, vocab_size, block_size, n_embd, n_hidden):
        super().__init__()
        self.block_size = block_size
        self.wte = nn.Embedding(vocab_size, n_embd)
        self.mlp = nn.Sequential(
            nn.Linear(block_size * n_embd, n_hidden), nn.Tanh(), nn.Linear(n_hidden, vocab_size)
        )

    def forward(self, idx, targets=None):
        emb = self.wte(idx)  # (B, block, n_embd)
        logits = self.mlp(emb.view(emb.size(0), -1))
        loss = None if targets is None else F.cross_entropy(logits, targets)
        return logits, loss


def init_from_numpy(model, seed):
    """The same starting weights under any library: numpy draws, copied in."""
    rng = np.random.default_rng(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            scale = 0.0 if name.endswith("bias") else 1.0 / np.sqrt(p.shape[-1])
            p.copy_(torch.tensor(rng.normal(0.0, scale, tuple(p.shape)).astype(np.float32)))


@torch.inference_mode()
def evaluate(model, dataset, batch_size=256):
    model.eval()
    loader = DataLoader(dataset, batch_size=batch_size, shuffle=False, num_workers=0)
    total, count = 0.0, 0
    for X, Y in loader:
        _, loss = model(X, Y)
        total += loss.item() * Y.size(0)
        count += Y.size(0)
    model.train()
    return total / count


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--data", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--block-size", type=int, default=3)
    p.add_argument("--n-embd", type=int, default=10)
    p.add_argument("--n-hidden", type=int, default=64)
    p.add_argument("--lr", type=float, default=5e-3)
    p.add_argument(
        "--order",
        choices=["numpy", "torch"],
        default="torch",
        help="batch order: numpy (the same under any library) or RandomSampler",
    )
    p.add_argument("--seed", type=int, default=3407)
    args = p.parse_args(argv)

    torch.manual_seed(args.seed)
    with open(args.data) as f:
        words = [w.strip() for w in f.read().splitlines() if w.strip()]
    chars = sorted(set("".join(words)))
    rng = np.random.default_rng(args.seed)
    perm = rng.permutation(len(words))
    n_test = max(1, len(words) // 10)
    train_words = [words[i] for i in perm[n_test:]]
    test_words = [words[i] for i in perm[:n_test]]
    train_set = CharDataset(train_words, chars, args.block_size)
    test_set = CharDataset(test_words, chars, args.block_size)

    model = MLP(len(chars) + 1, args.block_size, args.n_embd, args.n_hidden)
    init_from_numpy(model, args.seed)
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=args.lr, weight_decay=0.01, betas=(0.9, 0.99), eps=1e-8
    )
    sampler = (
        NumpySampler(len(train_set), args.seed)
        if args.order == "numpy"
        else RandomSampler(
            train_set,
            replacement=True,
            num_samples=int(1e10),
            generator=torch.Generator().manual_seed(args.seed),
        )
    )
    batches = InfiniteDataLoader(
        train_set, sampler=sampler, batch_size=args.batch_size, pin_memory=True, num_workers=0
    )

    results = {"eval0": evaluate(model, test_set), "train": []}
    for step in range(args.steps):
        X, Y = batches.next()
        _, loss = model(X, Y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        results["train"].append(loss.item())
    results["eval"] = evaluate(model, test_set)

    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "model.pt")
    torch.save(
        {
            "model": model.state_dict(),
            "optimizer": optimizer.state_dict(),
            "step": args.steps,
            "chars": chars,
        },
        path,
    )
    checkpoint = torch.load(path)
    fresh = MLP(len(checkpoint["chars"]) + 1, args.block_size, args.n_embd, args.n_hidden)
    fresh.load_state_dict(checkpoint["model"])
    results["eval_reloaded"] = evaluate(fresh, test_set)
    optimizer = torch.optim.AdamW(
        fresh.parameters(), lr=args.lr, weight_decay=0.01, betas=(0.9, 0.99), eps=1e-8
    )
    optimizer.load_state_dict(checkpoint["optimizer"])
    X, Y = batches.next()  # one more step after resuming: the optimizer state came back
    _, loss = fresh(X, Y)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    results["resumed"] = loss.item()
    results["eval_resumed"] = evaluate(fresh, test_set)
    print(json.dumps(results))
    return results


if __name__ == "__main__":
    main(sys.argv[1:])

"""A character-level recurrent model on a stream of names, in the style of the classic
char-rnn training scripts: fixed-length windows of the text, targets the inputs shifted
by one (``torch.roll``), a GRU cell stepped along the window, bits per character at the
end.

Written for PyTorch; the tests run it unchanged with `import sitp as torch`
(tests/test_torch_scripts.py). Run it directly:

    python tests/scripts/char_shift_rnn.py --data names.txt --steps 500 --out runs/rnn
"""

import argparse
import json
import math
import os
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data.dataloader import DataLoader
from torch.utils.data.dataset import Dataset, Subset
from torch.utils.data.sampler import BatchSampler, Sampler, SequentialSampler, SubsetRandomSampler


class Windows(Dataset):
    """Window i of the text: characters [i * T, (i + 1) * T + 1) as indices."""

    def __init__(self, text, stoi, T):
        self.data = torch.tensor([stoi[c] for c in text])
        self.T = T

    def __len__(self):
        return (len(self.data) - 1) // self.T

    def __getitem__(self, i):
        return self.data[i * self.T : (i + 1) * self.T + 1]


class NumpyShuffle(Sampler):
    """A numpy permutation of the indices each epoch: the same under any library."""

    def __init__(self, indices, seed):
        self.indices, self.rng = list(indices), np.random.default_rng(seed)

    def __iter__(self):
        return iter([self.indices[i] for i in self.rng.permutation(len(self.indices))])

    def __len__(self):
        return len(self.indices)


def collate(batch):
    """Inputs are the first T characters; targets are the inputs rolled left by one, with
    the character after the window in the last place."""
    chunk = torch.stack(batch)  # (B, T + 1)
    x = chunk[:, :-1]
    y = torch.roll(x, shifts=-1, dims=1).clone()
    y[:, -1] = chunk[:, -1]
    return x, y


class CharRNN(nn.Module):
    def __init__(self, vocab_size, n_embd, n_hidden):
        super().__init__()
        self.wte = nn.Embedding(vocab_size, n_embd)
        self.cell = nn.GRUCell(n_embd, n_hidden)
        self.lm_head = nn.Linear(n_hidden, vocab_size)
        self.n_hidden = n_hidden

    def forward(self, idx, targets=None):
        B, T = idx.shape
        emb = self.wte(idx)
        h = torch.zeros(B, self.n_hidden)
        hs = []
        for t in range(T):
            h = self.cell(emb[:, t], h)
            hs.append(h)
        logits = self.lm_head(torch.stack(hs, 1))
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
        return logits, loss


def init_from_numpy(model, seed):
    rng = np.random.default_rng(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            scale = 0.05 if "bias" in name else 1.0 / math.sqrt(p.shape[-1])
            p.copy_(torch.from_numpy(rng.uniform(-scale, scale, tuple(p.shape)).astype(np.float32)))


@torch.no_grad()
def bits_per_char(model, loader):
    model.eval()
    bits, count = 0.0, 0
    for x, y in loader:
        logits, _ = model(x)
        p = F.softmax(logits, dim=-1).gather(-1, y.unsqueeze(-1))
        bits += -p.log2().sum().item()
        count += y.numel()
    model.train()
    return bits / count


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--data", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--steps", type=int, default=500)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--seq-len", type=int, default=12)
    p.add_argument("--n-embd", type=int, default=16)
    p.add_argument("--n-hidden", type=int, default=32)
    p.add_argument("--lr", type=float, default=1e-2)
    p.add_argument("--order", choices=["numpy", "torch"], default="torch")
    p.add_argument("--seed", type=int, default=1337)
    args = p.parse_args(argv)

    with open(args.data) as f:
        text = "\n".join(w.strip() for w in f.read().splitlines() if w.strip()) + "\n"
    chars = sorted(set(text))
    stoi = {c: i for i, c in enumerate(chars)}
    data = Windows(text, stoi, args.seq_len)
    n_val = max(1, len(data) // 10)
    val_set = Subset(data, range(len(data) - n_val, len(data)))
    train_idx = list(range(len(data) - n_val))
    if args.order == "numpy":
        sampler = NumpyShuffle(train_idx, args.seed)
    else:
        sampler = SubsetRandomSampler(train_idx, generator=torch.Generator().manual_seed(args.seed))
    train_loader = DataLoader(
        data,
        batch_sampler=BatchSampler(sampler, args.batch_size, drop_last=True),
        collate_fn=collate,
    )
    val_loader = DataLoader(
        val_set, batch_size=64, sampler=SequentialSampler(val_set), collate_fn=collate
    )

    model = CharRNN(len(chars), args.n_embd, args.n_hidden)
    init_from_numpy(model, args.seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=args.steps)
    results = {"bpc0": bits_per_char(model, val_loader), "train": []}
    step = 0
    while step < args.steps:
        for x, y in train_loader:
            _, loss = model(x, y)
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            scheduler.step()
            results["train"].append(loss.item())
            step += 1
            if step == args.steps:
                break
    results["bpc"] = bits_per_char(model, val_loader)
    os.makedirs(args.out, exist_ok=True)
    torch.save(
        {"model": model.state_dict(), "bpc": results["bpc"]}, os.path.join(args.out, "rnn.pt")
    )
    state = torch.load(os.path.join(args.out, "rnn.pt"), map_location="cpu")
    model.load_state_dict(state["model"])
    results["bpc_reloaded"] = bits_per_char(model, val_loader)
    print(json.dumps(results))
    return results


if __name__ == "__main__":
    main(sys.argv[1:])

"""A LeNet-style network on the shapes of :mod:`sitp.data.shapes` (chapter 3.3's images).

Written as PyTorch code (``import sitp as torch``): two blocks of Conv2d, BatchNorm2d,
ReLU and MaxPool2d halve the 16x16 image twice, then one Linear layer reads the
16 channels x 4 x 4 features and gives a logit per class. :func:`train_shapes`
generates the data, trains with AdamW (the learning rate on a cosine to zero) and returns the held-out accuracy;
``scripts/train_shapes.py`` runs it over seeds and records the results in
``docs/assets/ch03/shapes-cnn.json`` (shipped here as ``shapes-cnn.json``).

Example:
    >>> from sitp.examples.shapes_cnn import lenet
    >>> model = lenet()
    >>> sum(p.numel() for p in model.parameters())
    2300
"""

from __future__ import annotations

import time

import numpy as np

import sitp as torch
import sitp.nn as nn
import sitp.nn.functional as F
from sitp.data.shapes import CLASSES, make_shapes


def lenet(n_classes: int = len(CLASSES), width: int = 8) -> nn.Module:
    """(N, 1, 16, 16) images -> (N, n_classes) logits."""
    return nn.Sequential(
        nn.Conv2d(1, width, 3, padding=1, bias=False),  # (N, w, 16, 16); BN brings the bias
        nn.BatchNorm2d(width),
        nn.ReLU(),
        nn.MaxPool2d(2),  # (N, w, 8, 8)
        nn.Conv2d(width, 2 * width, 3, padding=1, bias=False),  # (N, 2w, 8, 8)
        nn.BatchNorm2d(2 * width),
        nn.ReLU(),
        nn.MaxPool2d(2),  # (N, 2w, 4, 4)
        nn.Flatten(),  # (N, 2w * 16)
        nn.Linear(2 * width * 16, n_classes),
    )


def mlp(n_classes: int = len(CLASSES), hidden: int = 24) -> nn.Module:
    """The baseline: the 256 pixels into one hidden layer, no convolution."""
    return nn.Sequential(
        nn.Flatten(),
        nn.Linear(256, hidden),
        nn.ReLU(),
        nn.Linear(hidden, n_classes),
    )


def accuracy(model: nn.Module, X: np.ndarray, y: np.ndarray, batch: int = 500) -> float:
    """The fraction of ``X`` that ``model`` (put in eval mode) classifies as ``y``."""
    model.eval()
    right = 0
    with torch.no_grad():
        for i in range(0, len(X), batch):
            logits = model(torch.tensor(X[i : i + batch]))
            right += int((logits.argmax(1) == torch.tensor(y[i : i + batch])).sum().item())
    return right / len(X)


def train_shapes(
    seed: int = 0,
    model: str = "lenet",
    n_train: int = 4000,
    n_test: int = 1000,
    epochs: int = 8,
    batch_size: int = 50,
    lr: float = 3e-3,
    noise: float = 0.35,
) -> dict:
    """Train ``model`` ('lenet' or 'mlp') on ``n_train`` fresh images and measure it on
    ``n_test`` others.

    ``seed`` fixes the training images, the test images (from ``seed + 10_000``), the
    weights and the batches' order. Returns a dict with the held-out accuracy, the
    training loss of each epoch and the seconds the training took (wall clock and
    this process's CPU time, which a busy machine inflates less).
    """
    X, y = make_shapes(n_train, noise=noise, seed=seed)
    X_test, y_test = make_shapes(n_test, noise=noise, seed=seed + 10_000)
    torch.manual_seed(seed)
    net = lenet() if model == "lenet" else mlp()
    opt = torch.optim.AdamW(net.parameters(), lr=lr, weight_decay=1e-4)
    steps = epochs * -(-n_train // batch_size)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=steps)  # lr to 0
    order = np.random.default_rng(seed)
    losses = []
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(epochs):
        net.train()
        perm, total = order.permutation(n_train), 0.0
        for i in range(0, n_train, batch_size):
            idx = perm[i : i + batch_size]
            loss = F.cross_entropy(net(torch.tensor(X[idx])), torch.tensor(y[idx]))
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            total += loss.item() * len(idx)
        losses.append(total / n_train)
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {
        "model": model,
        "seed": seed,
        "params": sum(p.numel() for p in net.parameters()),
        "train_loss": losses,
        "test_accuracy": accuracy(net, X_test, y_test),
        "train_seconds": seconds,
        "train_cpu_seconds": cpu,
    }

"""Reduced precision (section 3.6): float16 and bfloat16 sums, a training run with loss
scaling, and two bugs from iron_learn (clipping in float32, inputs left unnormalised).

numpy has float16 but no bfloat16, so bfloat16 is emulated: a float32 whose low 16 bits
are rounded away, to nearest with ties to even, by the numba kernel :func:`to_bf16`. An
operation on two bfloat16 (or float16) values is done in float32 and then rounded; since
float32 carries more than twice their significand bits plus two, that double rounding
gives the correctly rounded result for +, -, * and / (Figueroa, 1995).

``precision-training.png`` is drawn by ``python -m sitp.examples.precision`` (seconds).
"""

from __future__ import annotations

from pathlib import Path

import numba
import numpy as np

from sitp.data import Vocab, load_names

ASSETS = Path(__file__).resolve().parents[3] / "docs" / "assets" / "ch03"


# --8<-- [start:bf16]
@numba.njit(cache=True)
def _bf16_bits(u):
    """Round the bits of a float32 to its top 16 bits, to nearest, ties to even."""
    if (u & np.uint32(0x7F800000)) == np.uint32(0x7F800000) and (u & np.uint32(0x007FFFFF)):
        return (u | np.uint32(0x00400000)) & np.uint32(0xFFFF0000)  # NaN stays a NaN
    lsb = (u >> np.uint32(16)) & np.uint32(1)  # the last bit that is kept
    return (u + np.uint32(0x7FFF) + lsb) & np.uint32(0xFFFF0000)


@numba.njit(cache=True)
def _to_bf16(x):
    bits = x.view(np.uint32)
    out = np.empty_like(bits)
    for i in range(bits.size):
        out[i] = _bf16_bits(bits[i])
    return out.view(np.float32)


def to_bf16(x) -> np.ndarray:
    """``x`` rounded to bfloat16, returned as float32 (whose low 16 bits are then zero)."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    return _to_bf16(x.reshape(-1)).reshape(x.shape)


# --8<-- [end:bf16]


def to_f16(x) -> np.ndarray:
    """``x`` rounded to float16 (numpy's, IEEE binary16), returned as float32."""
    with np.errstate(over="ignore"):  # past 65,504: inf, as IEEE says
        return np.asarray(x, dtype=np.float32).astype(np.float16).astype(np.float32)


ROUND = {
    "float32": lambda x: np.asarray(x, dtype=np.float32),
    "float16": to_f16,
    "bfloat16": to_bf16,
}


@numba.njit(cache=True)
def _sequential_sum(x, kind):
    s = np.zeros(1, dtype=np.float32)
    for i in range(x.size):
        s[0] = s[0] + x[i]  # in float32, then rounded to the type
        if kind == 2:
            s[0] = _to_bf16(s)[0]
    return s[0]


# --8<-- [start:sums]
def sequential_sum(x, dtype: str) -> float:
    """Left to right, the running sum stored in ``dtype`` after every addition."""
    x = ROUND[dtype](x)
    if dtype == "float16":  # numba has no float16: numpy's scalars
        s = np.float16(0)
        for v in x.astype(np.float16):
            s = s + v  # float16 + float16, rounded to float16
        return float(s)
    return float(_sequential_sum(x, {"float32": 0, "bfloat16": 2}[dtype]))


def pairwise_sum(x, dtype: str) -> float:
    """Halves summed recursively (numpy's and sitp's order), every partial sum in ``dtype``."""
    x = ROUND[dtype](x)
    while x.size > 1:
        if x.size % 2:
            x = np.append(x, np.float32(0))
        x = ROUND[dtype](x[0::2] + x[1::2])
    return float(x[0])


def f32_accumulated_sum(x, dtype: str) -> float:
    """Values stored in ``dtype``, the sum accumulated in float32 (mixed precision)."""
    return sequential_sum(ROUND[dtype](x), "float32")


# --8<-- [end:sums]


def sum_table(n: int = 10_000, seed: int = 0):
    """The sum of ``n`` numbers uniform in [0, 0.2) each way, per type, and the exact sum
    (float64, of the float32 values): ({dtype: {way: sum}}, exact)."""
    x = np.random.default_rng(seed).uniform(0, 0.2, n).astype(np.float32)
    return {
        dtype: {
            "sequential": sequential_sum(x, dtype),
            "pairwise": pairwise_sum(x, dtype),
            "f32 accumulator": f32_accumulated_sum(x, dtype),
        }
        for dtype in ("float32", "float16", "bfloat16")
    }, float(x.astype(np.float64).sum())


# --- the neural bigram trained with low-precision gradients --------------------------


def bigram_data(batch: int = 2**20, seed: int = 0):
    """Counts N (27, 27) of one batch of ``batch`` bigrams drawn from the census names'
    bigram frequencies: the size of a large language-model batch (GPT-3's held 3.2M
    tokens), where the mean's 1/n makes every per-token gradient small."""
    words = load_names("offline")
    vocab = Vocab(words)
    N = np.zeros((len(vocab), len(vocab)))
    for w in words:
        ix = [0] + vocab.encode(w) + [0]
        np.add.at(N, (ix[:-1], ix[1:]), 1)
    rng = np.random.default_rng(seed)
    return rng.multinomial(batch, (N / N.sum()).ravel()).reshape(N.shape).astype(float)


# --8<-- [start:mixed_step]
def mixed_precision_grad(W_VV, N_VV, dtype: str, scale: float) -> np.ndarray:
    """The gradient of the neural bigram's mean cross-entropy, with the per-example
    gradient of the logits stored in ``dtype`` and the loss multiplied by ``scale``.

    Example t's logit gradient is scale * (p - onehot(y_t)) / n: in float16 most of its
    entries fall below the smallest subnormal, 2^-24, and round to zero. Entries are
    rounded one example at a time; the sum over examples (X^T G) is accumulated in float32
    exactly, by multiplying each distinct rounded row by its count.
    """
    rnd = ROUND[dtype]
    n = N_VV.sum()
    m_V1 = N_VV.sum(axis=1, keepdims=True)  # examples per context
    w = rnd(W_VV)  # weights stored in dtype
    P_VV = np.exp(w - w.max(axis=1, keepdims=True))
    P_VV /= P_VV.sum(axis=1, keepdims=True)  # softmax in float32
    g_off = rnd(scale * P_VV / n)  # entries j != y_t
    g_on = rnd(scale * (P_VV - 1) / n)  # the entry j == y_t
    dW = (m_V1 - N_VV) * g_off + N_VV * g_on  # X^T G, in float32
    return dW / scale  # unscaled in float32


# --8<-- [end:mixed_step]


def bigram_nll(W_VV, N_VV) -> float:
    logp = W_VV - np.logaddexp.reduce(W_VV, axis=1, keepdims=True)
    return float(-(N_VV * logp).sum() / N_VV.sum())


def train_runs(steps: int = 300, lr: float = 50.0):
    """NLL per step of gradient descent for each (dtype, loss scale); float32 master weights."""
    N = bigram_data()
    runs = {}
    for dtype, scale in (
        ("float32", 1.0),
        ("float16", 1.0),
        ("float16", 2.0**16),
        ("bfloat16", 1.0),
    ):
        W = np.zeros_like(N, dtype=np.float32)
        losses = [bigram_nll(W, N)]
        for _ in range(steps):
            W = (W - lr * mixed_precision_grad(W, N, dtype, scale)).astype(np.float32)
            losses.append(bigram_nll(W, N))
        runs[(dtype, scale)] = np.array(losses)
    return runs


def underflow_fraction(W_VV, N_VV, dtype: str, scale: float) -> float:
    """The fraction of the per-example logit gradient's entries that round to zero."""
    N, W = N_VV, W_VV
    n = N.sum()
    P = np.exp(W - np.logaddexp.reduce(W, axis=1, keepdims=True))
    m = N.sum(axis=1, keepdims=True)
    rnd = ROUND[dtype]
    zero_off = (rnd(scale * P / n) == 0) * (m - N)
    zero_on = (rnd(scale * (P - 1) / n) == 0) * N
    return float((zero_off + zero_on).sum() / (m.sum() * N.shape[1]))


# --- iron_learn's two bugs -----------------------------------------------------------


# --8<-- [start:clipped_bce]
def clipped_bce(p, y, eps: float, dtype) -> float:
    """Binary cross-entropy of probabilities clipped to [eps, 1 - eps], all in ``dtype``."""
    p = np.clip(np.asarray(p, dtype), dtype(eps), dtype(1) - dtype(eps))
    y = np.asarray(y, dtype)
    with np.errstate(divide="ignore", invalid="ignore"):
        return float(-np.mean(y * np.log(p) + (1 - y) * np.log(1 - p)))


# --8<-- [end:clipped_bce]


def gd_linear(x, y, lr: float, steps: int):
    """Gradient descent on the mean squared error of y ~ a x + b; the loss per step."""
    a = b = 0.0
    losses = []
    for _ in range(steps):
        r = a * x + b - y
        losses.append(float(np.mean(r * r)))
        a -= lr * 2 * np.mean(r * x)
        b -= lr * 2 * np.mean(r)
    return np.array(losses), (a, b)


def draw(path: Path = ASSETS / "precision-training.png", steps: int = 300):
    import matplotlib.pyplot as plt  # late: matplotlib is slow to import

    runs = train_runs(steps)
    fig, ax = plt.subplots(figsize=(6.4, 3.6), constrained_layout=True)
    for (dtype, scale), losses in runs.items():
        label = dtype + ("" if scale == 1 else f", loss scale 2^{int(np.log2(scale))}")
        ax.plot(losses, label=label, ls="--" if dtype == "bfloat16" else "-")
    ax.set_xlabel("step of gradient descent (rate 50)")
    ax.set_ylabel("NLL, all bigrams")
    ax.set_ylim(2.3, 3.4)
    ax.legend()
    ax.set_title("the neural bigram with its logit gradients stored in each type", fontsize=10)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


if __name__ == "__main__":
    print(draw())

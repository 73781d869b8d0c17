"""Time causal self-attention on the CPU: sitp's fused kernels next to PyTorch's.

Usage::

    python scripts/bench_attention_cpu.py              # 1 thread, T = 32 and 256
    python scripts/bench_attention_cpu.py --threads 2 --reps 50

Inputs are laid out as the GPT makes them (sitp/models/gpt.py): one (B, T, 3C)
buffer that requires grad, split into q, k, v, each viewed as (B, T, H, D) and
transposed to (B, H, T, D) -- non-contiguous views. Two timings per library:

* ``fwd``: ``F.scaled_dot_product_attention(q, k, v, is_causal=True)`` alone, on
  the prepared views (the graph is recorded, as in training);
* ``fwd+bwd``: the whole attention core of a GPT block, from the (B, T, 3C)
  buffer: split / view / transpose, attention, ``transpose(1, 2).contiguous()
  .view(B, T, C)``, then ``backward`` down to the buffer's gradient.

Each entry is the median over ``--reps`` calls (after warm-up), in milliseconds;
the ratio is sitp's time over PyTorch's (lower is better, 1 = as fast). The
"old" columns time the attention sitp had before the fused CPU kernels (scores
by ``cpu.matmul``, masked softmax, ``cpu.matmul`` again; still the path for a
float mask that needs its gradient), in the same run, so that the load of a
shared machine weighs on all three alike.
"""
from __future__ import annotations

import argparse
import os
import statistics
import time


def medians_ms(fns, reps):
    """Median time of each function, in ms; the calls are interleaved (one of each
    per round), so that a change in the machine's load weighs on all alike."""
    for fn in fns:
        for _ in range(3):
            fn()
    times = [[] for _ in fns]
    for _ in range(reps):
        for fn, ts in zip(fns, times):
            t0 = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t0)
    return [1e3 * statistics.median(ts) for ts in times]


def old_sdpa():
    """F.scaled_dot_product_attention as it was: the matmul / masked-softmax node."""
    from sitp.autograd import Function
    from sitp.nn._functions import attention

    class OldAttention(Function):
        forward = staticmethod(attention._attention_exact_forward)
        backward = staticmethod(attention._attention_exact_backward)

    class OldF:
        @staticmethod
        def scaled_dot_product_attention(q, k, v, is_causal):
            return OldAttention.apply(q, k, v, None, 1.0 / q.shape[-1] ** 0.5, is_causal)

    return OldF


def workload(lib, F, B, H, T, D, dtype):
    """The two timed functions (fwd, fwd+bwd) for one library."""
    C = H * D
    qkv = lib.randn(B, T, 3 * C, dtype=dtype).requires_grad_(True)
    g = lib.randn(B, T, C, dtype=dtype)

    def heads(x):
        q, k, v = x.split(C, dim=2)
        return [t.view(B, T, H, D).transpose(1, 2) for t in (q, k, v)]

    q, k, v = heads(qkv)

    def fwd():
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    def fwd_bwd():
        qkv.grad = None
        q_, k_, v_ = heads(qkv)
        y = F.scaled_dot_product_attention(q_, k_, v_, is_causal=True)
        y.transpose(1, 2).contiguous().view(B, T, C).backward(g)

    return fwd, fwd_bwd


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--T", type=int, nargs="+", default=[32, 256])
    ap.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    args = ap.parse_args()

    import numba
    import torch

    import sitp
    import sitp.nn.functional as SF

    numba.set_num_threads(args.threads)
    torch.set_num_threads(args.threads)
    B, H, D = 32, 4, 16
    print(f"causal attention, B={B} H={H} D={D} {args.dtype}, {args.threads} thread(s), "
          f"median of {args.reps} interleaved; load average {os.getloadavg()[0]:.2f}\n")
    print("| T | pass | old sitp (ms) | sitp (ms) | torch (ms) | old / torch | sitp / torch |")
    print("|---:|---|---:|---:|---:|---:|---:|")
    for T in args.T:
        fns = (workload(sitp, old_sdpa(), B, H, T, D, getattr(sitp, args.dtype))
               + workload(sitp, SF, B, H, T, D, getattr(sitp, args.dtype))
               + workload(torch, torch.nn.functional, B, H, T, D, getattr(torch, args.dtype)))
        of, ofb, sf, sfb, tf, tfb = medians_ms(fns, args.reps)
        for name, o, s, t in (("fwd", of, sf, tf), ("fwd+bwd", ofb, sfb, tfb)):
            print(f"| {T} | {name} | {o:.3f} | {s:.3f} | {t:.3f} | {o / t:.2f} | {s / t:.2f} |")


if __name__ == "__main__":
    main()

"""``python -m sitp.bench gpu-gemm`` and ``gpu-attention``: the GPU kernels, timed (4.4, 4.6).

gpu-gemm prints the GFLOP/s of every rung of the GEMM ladder (``sitp.kernels.cuda.gemm``) and of
cuBLAS (through CuPy, or PyTorch's CUDA build; TF32 off, so all of them do fp32
arithmetic) for square N x N float32 products, and each rung's share of cuBLAS.

gpu-attention prints the time of naive, fused-softmax and flash attention (forward),
flash backward, and the device memory each allocates, for head width 64 over sequence
lengths T, and the shortest T at which flash beats naive.

Both need a real GPU. Under numba's CUDA simulator they say so in one line and exit 1:
simulated kernels run each thread in Python, and their timings mean nothing.

Times come from CUDA events around the launches (median of several), after a warm-up
call that compiles the kernel and allocates the outputs, which later calls reuse: the
numbers time kernels, not cudaMalloc. Memory is measured separately, with fresh buffers.
Both subcommands share this module; ``add_arguments``
tells them apart by the parser's name.
"""

import json
import math
import statistics
import sys

import numpy as np

from sitp.kernels.cuda.launch import has_gpu, no_gpu_reason


def add_arguments(p):
    if p.prog.split()[-1] == "gpu-attention":
        p.add_argument(
            "--lengths",
            type=int,
            nargs="+",
            default=[512, 1024, 2048, 4096, 8192],
            help="sequence lengths T",
        )
        p.add_argument("--batch", type=int, default=1, help="batch size B")
        p.add_argument("--heads", type=int, default=8, help="heads H")
        p.add_argument("--head-dim", type=int, default=64, help="head width D")
        p.add_argument("--causal", action="store_true", help="causal masking")
    else:
        p.add_argument(
            "--sizes", type=int, nargs="+", default=[1024, 2048, 4096], help="matrix sizes N"
        )
        p.add_argument("--kernels", nargs="+", default=None, help="rungs to time (default: all)")
    p.add_argument("--repeats", type=int, default=5, help="timed calls per measurement")
    p.add_argument("--json", help="also write the results to this JSON file")


def main(args):
    if not has_gpu():
        print(f"python -m sitp.bench {args.command}: {no_gpu_reason()}", file=sys.stderr)
        return 1
    if args.command == "gpu-attention":
        return attention_main(args)
    return gemm_main(args)


def device_name():
    from numba import cuda  # late: numba-cuda is optional; only GPU runs need it

    dev = cuda.get_current_device()
    name = getattr(dev, "name", "simulated device")
    name = name.decode() if isinstance(name, bytes) else name
    major, minor = dev.compute_capability
    return f"{name} (compute capability {major}.{minor})"


# --8<-- [start:timer]
def gpu_time(fn, repeats=5):
    """Median seconds of ``fn()`` between two CUDA events, after one warm-up call.

    Events are recorded in the GPU's stream, so the time is the GPU's, not Python's;
    synchronising on the second event waits for the launches in between to finish.
    """
    from numba import cuda  # late: numba-cuda is optional; only GPU runs need it

    fn()  # compiles on the first call
    cuda.synchronize()
    times = []
    for _ in range(repeats):
        start, end = cuda.event(), cuda.event()
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)  # milliseconds
    return statistics.median(times)


# --8<-- [end:timer]


def cublas_matmul(n, repeats):
    """(library name, seconds) of an n x n fp32 product through cuBLAS, or None."""
    try:
        import cupy  # late: cupy is optional (the bench extra)

        cupy.cuda.Device(0).use()
        a = cupy.random.random((n, n), dtype=cupy.float32)
        b = cupy.random.random((n, n), dtype=cupy.float32)
        start, end = cupy.cuda.Event(), cupy.cuda.Event()
        a @ b
        times = []
        for _ in range(repeats):
            start.record()
            a @ b
            end.record()
            end.synchronize()
            times.append(cupy.cuda.get_elapsed_time(start, end) / 1e3)
        return "cuBLAS (CuPy)", statistics.median(times)
    except ImportError:
        pass
    try:
        import torch  # late: torch is optional (the book extra)

        if not torch.cuda.is_available():
            return None
        torch.backends.cuda.matmul.allow_tf32 = False  # fp32 arithmetic, like our kernels
        a = torch.rand(n, n, device="cuda")
        b = torch.rand(n, n, device="cuda")
        a @ b
        times = []
        for _ in range(repeats):
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            a @ b
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        return "cuBLAS (torch)", statistics.median(times)
    except ImportError:
        return None


def gemm_main(args):
    from numba import cuda  # late: numba-cuda is optional; only GPU runs need it

    from sitp.kernels.cuda import gemm as G  # late: imports numba.cuda (optional)

    kernels = args.kernels or list(G.KERNELS)
    print(f"GEMM ladder, float32, C = A @ B, square N; {device_name()}\n")
    rows = {}
    ref = {}
    rng = np.random.default_rng(0)
    for n in args.sizes:
        A = cuda.to_device(rng.random((n, n), dtype=np.float32))
        B = cuda.to_device(rng.random((n, n), dtype=np.float32))
        C = cuda.device_array((n, n), dtype=np.float32)
        flop = 2.0 * n**3
        got = cublas_matmul(n, args.repeats)
        if got:
            ref[n] = (got[0], flop / got[1] / 1e9)
        for k in kernels:
            sec = gpu_time(lambda: G.gemm_device(A, B, C, kernel=k), args.repeats)
            rows.setdefault(k, {})[n] = flop / sec / 1e9
    header = "| kernel | " + " | ".join(f"N={n} GFLOP/s | % cuBLAS" for n in args.sizes) + " |"
    print(header)
    print("|---" * (1 + 2 * len(args.sizes)) + "|")
    for k in kernels:
        cells = []
        for n in args.sizes:
            g = rows[k][n]
            cells += [f"{g:,.0f}", f"{100 * g / ref[n][1]:.1f}%" if n in ref else "n/a"]
        print(f"| {k} | " + " | ".join(cells) + " |")
    if ref:
        lib = next(iter(ref.values()))[0]
        print(
            f"| {lib} | "
            + " | ".join(
                f"{ref[n][1]:,.0f} | 100%" if n in ref else "n/a | n/a" for n in args.sizes
            )
            + " |"
        )
    else:
        print(
            "\ncuBLAS: neither CuPy nor a CUDA build of PyTorch is importable; "
            "install one to get the % column"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {
                    "device": device_name(),
                    "gflops": rows,
                    "cublas": {n: v[1] for n, v in ref.items()},
                },
                f,
                indent=1,
            )
    return 0


def attention_main(args):
    from numba import cuda  # late: numba-cuda is optional; only GPU runs need it

    from sitp.kernels.cuda import attention as attn  # late: imports numba.cuda (optional)

    B, H, D = args.batch, args.heads, args.head_dim
    print(f"Attention, float32, B={B} H={H} D={D} causal={args.causal}; {device_name()}\n")
    print(
        "| T | naive ms | fused ms | flash fwd ms | flash bwd ms | naive MiB | fused MiB "
        "| flash MiB | flash / naive |"
    )
    print("|---" * 9 + "|")
    rng = np.random.default_rng(0)
    results = {}
    for T in args.lengths:
        Q, K, V, dO = (
            cuda.to_device(rng.standard_normal((B, H, T, D), dtype=np.float32)) for _ in range(4)
        )
        r = {}
        for method in ("naive", "fused", "flash"):
            try:  # memory first, with fresh buffers; then time with reused ones
                r[method + "_mib"] = allocated_mib(
                    lambda: attn.attention_device(Q, K, V, args.causal, method, buffers={})
                )
                kept = {}
                r[method] = gpu_time(
                    lambda: attn.attention_device(Q, K, V, args.causal, method, buffers=kept),
                    args.repeats,
                )
                del kept
            except Exception as e:  # out of memory at long T is a result, not a crash
                if "OUT_OF_MEMORY" not in str(e).upper().replace(" ", "_"):
                    raise
                r[method] = r[method + "_mib"] = math.nan
                r[method + "_oom"] = True
        O, L = attn.attention_device(Q, K, V, args.causal, "flash")
        kept = {}
        r["flash_bwd"] = gpu_time(
            lambda: attn.flash_backward_device(Q, K, V, O, L, dO, args.causal, buffers=kept),
            args.repeats,
        )
        results[T] = r

        def ms(x):
            return "OOM" if math.isnan(x) else f"{1e3 * x:.2f}"

        def mib(method):
            x = r[method + "_mib"]
            return "OOM" if r.get(method + "_oom") else "n/a" if math.isnan(x) else f"{x:,.1f}"

        print(
            f"| {T} | {ms(r['naive'])} | {ms(r['fused'])} | {ms(r['flash'])} | "
            f"{ms(r['flash_bwd'])} | {mib('naive')} | {mib('fused')} | "
            f"{mib('flash')} | {r['flash'] / r['naive']:.2f} |"
        )
    wins = [T for T, r in results.items() if r["flash"] < r["naive"] or math.isnan(r["naive"])]
    if wins:
        print(f"\nflash forward beats naive from T = {min(wins)} on (of the lengths measured)")
    else:
        print("\nnaive is faster than flash at every length measured")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {
                    "device": device_name(),
                    "B": B,
                    "H": H,
                    "D": D,
                    "causal": args.causal,
                    "results": results,
                },
                f,
                indent=1,
            )
    return 0


def allocated_mib(fn):
    """Device memory (MiB) that fn allocates, O included: the drop in free memory while
    numba is told to defer every deallocation until fn has returned."""
    from numba import cuda  # late: numba-cuda is optional; only GPU runs need it

    ctx = cuda.current_context()
    cuda.synchronize()
    if not hasattr(ctx, "get_memory_info"):  # the simulator has no device memory to ask about
        return math.nan
    if hasattr(ctx, "deallocations"):
        ctx.deallocations.clear()  # free what earlier calls left pending
    with cuda.defer_cleanup():
        free0 = ctx.get_memory_info().free
        out = fn()
        cuda.synchronize()
        free1 = ctx.get_memory_info().free
        del out
    return (free0 - free1) / 2**20

"""Command line: ``python -m sitp.bench <subcommand> [options]``.

Each subcommand lives in its own module under ``sitp.bench`` and provides
``add_arguments(parser)`` and ``main(args)``. To add one, add a line to COMMANDS.
Only the chosen subcommand's module is imported (argparse parses twice: once to
learn the subcommand, once with its options), so a GPU benchmark's imports cost
nothing to someone timing the CPU.
"""

import argparse
import importlib

# name: (module, one-line help)
COMMANDS = {
    "config": (
        "sitp.bench.config",
        "the CPU, vector ISA, GEMM tile, numba settings and cache sitp uses",
    ),
    "gemm": (
        "sitp.bench.gemm",
        "CPU GEMM ladder, saxpy and sgemv against numpy/OpenBLAS (section 2.3)",
    ),
    "roofline": (
        "sitp.bench.roofline",
        "measure peak FLOP/s and memory bandwidth, draw the roofline (section 2.3)",
    ),
    "microkernel": (
        "sitp.bench.microkernel",
        "the GEMM micro-kernel with each numba detail undone (section 2.3)",
    ),
    "gpu-gemm": (
        "sitp.bench.gpu",
        "GPU GEMM ladder against cuBLAS, GFLOP/s (section 4.4; needs a GPU)",
    ),
    "gpu-attention": (
        "sitp.bench.gpu",
        "naive, fused and flash attention: time and memory (section 4.6; needs a GPU)",
    ),
}


def build_parser():
    """The top-level parser and one (option-less) subparser per command."""
    parser = argparse.ArgumentParser(
        prog="python -m sitp.bench", description="Benchmarks behind the book's numbers."
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="SUBCOMMAND")
    subparsers = {}
    for name, (_, help_) in COMMANDS.items():
        # add_help=False: "-h" must reach the second pass, after the options exist
        subparsers[name] = sub.add_parser(name, help=help_, description=help_, add_help=False)
    return parser, subparsers


def main(argv=None):
    parser, subparsers = build_parser()
    first, _ = parser.parse_known_args(argv)
    module = importlib.import_module(COMMANDS[first.command][0])
    p = subparsers[first.command]
    p.add_argument("-h", "--help", action="help", help="show this help message and exit")
    module.add_arguments(p)
    return module.main(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())

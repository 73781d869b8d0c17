"""Where a Python program's time goes, by layer: cProfile's own time of each function,
summed over the layers a function's file belongs to (scripts/op_overhead.py,
scripts/plain_torch_bench.py). The profiler slows every Python call, so the shares of
the Python layers are inflated: a guide to where to look, not a measurement."""

from __future__ import annotations

import cProfile
import pstats
from collections.abc import Callable


def layer_shares(
    fn: Callable[[], object],
    calls: int,
    layer_of: Callable[[str, str], str | None],
    warmup: int = 5,
) -> tuple[dict[str, float], float, int, pstats.Stats]:
    """Run ``fn`` ``calls`` times under cProfile (after ``warmup`` calls) and sum each
    function's own time (tottime) into ``layer_of(filename, function name)``; a layer of
    None leaves the function out (the caller's own loop, say).

    Returns the shares of the layers, largest first, rounded to 0.001; the total own
    time in seconds; the number of Python calls counted; pstats' table."""
    for _ in range(warmup):
        fn()
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(calls):
        fn()
    pr.disable()
    by_layer: dict[str, float] = {}
    total, n_calls = 0.0, 0
    stats = pstats.Stats(pr)
    for (fname, _line, func), (_cc, nc, tt, _ct, _callers) in stats.stats.items():
        layer = layer_of(fname, func)
        if layer is None:
            continue
        by_layer[layer] = by_layer.get(layer, 0.0) + tt
        total += tt
        n_calls += nc
    shares = {k: round(v / total, 3) for k, v in sorted(by_layer.items(), key=lambda kv: -kv[1])}
    return shares, total, n_calls, stats

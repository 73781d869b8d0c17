"""sitp.bench.layers: a program's own time under cProfile, summed by layer."""

import math

from sitp.bench.layers import layer_shares


def _slow():
    # A plain loop, no calls: all of its time is its own. (A generator fed to sum() let the
    # profiler charge each resume to the builtin, and on a loaded CI machine "rest" won.)
    total, i = 0, 0
    while i < 20000:
        total += i * i
        i += 1
    return total


def _fast():
    return 1


def test_shares_sum_to_one_by_layer_and_leave_out_what_the_caller_says():
    def program():
        _slow()
        _fast()

    def layer_of(filename, func):
        if func == "program":
            return None  # the caller's own frame, left out
        return "slow" if func == "_slow" else "rest"

    shares, total, calls, stats = layer_shares(program, 20, layer_of, warmup=1)
    assert list(shares)[0] == "slow" and set(shares) == {"slow", "rest"}
    assert math.isclose(sum(shares.values()), 1.0, abs_tol=0.002)
    assert total > 0 and calls >= 20 * 2 and stats.stats

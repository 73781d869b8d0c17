"""sitp.distributed.spawn: a plain function of __main__ or of a module, run on MPI ranks,
its return values back in rank order; a rank that raises named in the error; functions
that cannot travel refused with the reason (no job started for those)."""

from __future__ import annotations

import numpy as np
import pytest

import sitp.distributed as dist
from dist_util import requires_mpi
from sitp.distributed.spawn import ProcessRaisedException, _pack

SCALE = 10.0  # a module-level value the function reads: pickled to the ranks


def _helper(x):
    return x * SCALE


def ranks_sum(rank, n):
    import sitp

    dist.init_process_group()
    x = sitp.full((n,), float(rank + 1))
    dist.all_reduce(x)
    print(f"rank {rank} of {dist.get_world_size()}", flush=True)
    return _helper(x.sum().item()), np.arange(rank + 1).tolist()


def fails_on_one(rank):
    dist.init_process_group()
    if rank == 1:
        raise ValueError("rank one gives up")
    dist.barrier()


@requires_mpi
def test_results_in_rank_order(capsys):
    out = dist.spawn(ranks_sum, args=(3,), nprocs=2, timeout=60)
    # 1 + 2 summed over the ranks, 3 entries, times SCALE; then each rank's own list
    assert out == [(90.0, [0]), (90.0, [0, 1])]
    printed = capsys.readouterr().out
    assert "rank 0 of 2" in printed and "rank 1 of 2" in printed


@requires_mpi
def test_a_rank_that_raises_is_named():
    with pytest.raises(ProcessRaisedException, match="rank one gives up") as e:
        dist.spawn(fails_on_one, nprocs=2, timeout=60)
    assert e.value.error_index == 1


def test_what_cannot_travel_is_refused():
    with pytest.raises(TypeError, match="lambda"):
        _pack(lambda rank: rank)

    def inner(rank):
        return rank + SCALE_LOCAL

    SCALE_LOCAL = 1  # noqa: N806
    with pytest.raises(TypeError, match="closure"):
        _pack(inner)
    with pytest.raises(ValueError, match="nprocs"):
        dist.spawn(ranks_sum, nprocs=0)
    with pytest.raises(TypeError, match="args must be a tuple"):
        dist.spawn(ranks_sum, args=[3])


MAIN = """
import numpy as np
import sitp.distributed as dist

OFFSET = 3


def helper(x):
    return x + OFFSET


def main(rank, n):
    return helper(np.ones(n).sum() + rank)
"""


def test_main_functions_travel_as_source(tmp_path):
    from sitp.distributed._spawn_rank import rebuild

    script = tmp_path / "page.py"
    script.write_text(MAIN)
    ns = {"__name__": "__main__"}
    exec(compile(MAIN, str(script), "exec"), ns)
    payload = _pack(ns["main"])
    kinds = {name: kind for name, kind, _ in payload["entries"]}
    assert kinds == {"main": "source", "helper": "source", "np": "module", "OFFSET": "value"}
    assert rebuild(payload)(1, 4) == 8.0  # rebuilt in a fresh namespace


def test_importable_functions_travel_by_name():
    # a function of this module is importable: sent by name, with nothing else
    assert _pack(ranks_sum)["fn"] == ("import", (__name__, "ranks_sum"))
    ns = {"__name__": "__main__", "np": np}
    exec(compile("def f(rank):\n    return np.ones(rank)\n", __file__, "exec"), ns)
    f = ns["f"]
    f.__code__ = f.__code__.replace(co_filename="<nowhere>")
    with pytest.raises(TypeError, match="source"):
        _pack(f)

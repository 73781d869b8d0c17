"""The ring all-reduce's defining property, measured: each rank sends 2 (p - 1)/p of the
tensor, under twice it whatever p is (chapter 7.2), at p = 2, 3 and 4 (4 ranks
oversubscribe a 2-core machine; the tensors are tiny).

The bytes are those ``ring_all_reduce`` hands to ``isend``, counted by
``sitp.distributed.CommCounter``; this file is also the script the ranks run. One job of 4
ranks measures all three sizes of ring: ``ring_all_reduce`` runs on the default group, so
for p = 2 and 3 the first p ranks make a group and run it as their default group for the
call (a launch per p would cost three startups of the ranks).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from dist_util import requires_mpi, run_ranks

N = 1200  # float32 elements; 2, 3 and 4 divide it
ODD = 1001  # and a size none of them divides


def measure(p):
    """On the default group: the ring's bytes for each size, gathered to every rank."""
    import sitp
    import sitp.distributed as dist
    from sitp.distributed.ring import ring_all_reduce

    r = dist.get_rank()
    sent = {}
    for n in (N, ODD):
        x = sitp.tensor(np.random.default_rng(r).standard_normal(n).astype(np.float32))
        want = x.clone()
        dist.all_reduce(want)
        with dist.CommCounter() as ring:
            ring_all_reduce(x)
        np.testing.assert_allclose(x.numpy(), want.numpy(), rtol=1e-5, atol=1e-5)
        with dist.CommCounter() as model:  # the counter's ring schedule for all_reduce
            dist.all_reduce(want)
        sent[n] = (ring.bytes_sent, ring.calls.get("isend", 0), model.bytes_sent)
    everyone = [None] * p
    dist.all_gather_object(everyone, sent)
    return {str(n): [e[n] for e in everyone] for n in sent}


def main() -> None:
    import sitp.distributed as dist
    from sitp.distributed import _c10d

    dist.init_process_group()
    world = _c10d._WORLD
    results = {}
    for p in (2, 3, 4):
        sub = dist.new_group(list(range(p))) if p < world.size() else world
        if sub is not dist.GroupMember.NON_GROUP_MEMBER:
            _c10d._WORLD = sub  # the first p ranks: a world of p for this call
            try:
                results[p] = measure(p)
            finally:
                _c10d._WORLD = world
        dist.barrier()
    if dist.get_rank() == 0:
        print("BYTES " + json.dumps(results), flush=True)
    dist.destroy_process_group()


@requires_mpi
def test_bytes_per_rank_do_not_grow_with_p():
    per_rank = {}
    out = run_ranks(Path(__file__), nproc=4, timeout=60).stdout
    line = next(line for line in out.splitlines() if line.startswith("BYTES "))
    for p, by_size in json.loads(line[6:]).items():
        p = int(p)
        got = {int(n): rows for n, rows in by_size.items()}
        assert [len(rows) for rows in got.values()] == [p, p]
        for n, rows in got.items():
            for rank, (sent, sends, model) in enumerate(rows):
                assert sends == 2 * (p - 1), (p, rank, sends)  # one chunk per step
                assert sent == model, (p, n, rank, sent, model)  # the counter's schedule
        # n divisible by p: every rank sends exactly 2 (p - 1)/p of the 4N bytes
        assert all(row[0] == 2 * (p - 1) * 4 * N // p for row in got[N]), (p, got[N])
        # otherwise the chunks differ by one element: within 2 (p - 1) elements of it
        for row in got[ODD]:
            assert abs(row[0] - 2 * (p - 1) * 4 * ODD / p) <= 2 * (p - 1) * 4, (p, row)
        per_rank[p] = got[N][0][0] / (4 * N)
    # 1, 4/3, 3/2 of the tensor: growing towards 2, never past it
    assert per_rank[2] < per_rank[3] < per_rank[4] < 2, per_rank
    assert per_rank == pytest.approx({p: 2 * (p - 1) / p for p in (2, 3, 4)})


if __name__ == "__main__":
    sys.exit(main())

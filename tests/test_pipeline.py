"""Pipeline parallelism (sitp.distributed.pipelining) on 2 MPI ranks against one process:
GPipe and 1F1B give the loss and the gradients of the whole batch (float64), and keep
the number of micro-batches in flight each schedule promises (m for GPipe, p - r for
1F1B on stage r).

As tests/test_zero_stages.py, this file is also the script the ranks run.
"""

from __future__ import annotations

import sys

import numpy as np
import pytest

import dist_util
import sitp
import sitp.distributed as dist
from sitp.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

M, ROWS = 4, 8  # micro-batches, rows in the batch


def _model():
    sitp.manual_seed(0)
    layers = []
    for a, b in ((5, 16), (16, 16), (16, 16), (16, 3)):
        layers += [sitp.nn.Linear(a, b), sitp.nn.Tanh()]
    return sitp.nn.Sequential(*layers[:-1]).double()


def check(schedule_class):
    r, p = dist.get_rank(), dist.get_world_size()
    whole = _model()
    rng = np.random.default_rng(0)
    X = sitp.tensor(rng.standard_normal((ROWS, 5)))
    Y = sitp.tensor(rng.standard_normal((ROWS, 3)))
    loss = sitp.nn.functional.mse_loss(whole(X), Y)
    loss.backward()
    cut = len(whole) // p + 1  # rank 0: Linear, Tanh, Linear, Tanh; rank 1: the rest
    mine = list(whole)[:cut] if r == 0 else list(whole)[cut:]
    stage_model = _model()
    piece = sitp.nn.Sequential(*(list(stage_model)[:cut] if r == 0 else list(stage_model)[cut:]))
    stage = PipelineStage(piece, r, p)
    sched = schedule_class(stage, M, loss_fn=sitp.nn.functional.mse_loss)
    losses = []
    if r == 0:
        sched.step(X)
    else:
        out = sched.step(target=Y, losses=losses)
        assert tuple(out.shape) == (ROWS, 3)
        mean = sum(v.item() for v in losses) / M  # equal micro-batches: the batch's mean
        assert abs(mean - loss.item()) < 1e-12, (mean, loss.item())
    for a, b in zip(piece.parameters(), (q for m in mine for q in m.parameters())):
        diff = float(np.abs(a.grad.numpy() - b.grad.numpy()).max())
        assert diff < 1e-12, (schedule_class.__name__, diff)
    want = M if schedule_class is ScheduleGPipe else p - r
    assert sched.max_in_flight == want, (schedule_class.__name__, r, sched.max_in_flight)
    assert [kind for kind, *_ in sched.timeline].count("B") == M


def main() -> None:
    dist.init_process_group()
    for name, cls in (("gpipe", ScheduleGPipe), ("1f1b", Schedule1F1B)):
        check(cls)
        if dist.get_rank() == 0:
            print(f"ok {name}", flush=True)
    dist.destroy_process_group()


# ------------------------------------------------------------------ the pytest side
CHECKS = ["gpipe", "1f1b"]


@pytest.fixture(scope="module")
def ranks_output():
    return dist_util.ranks_output(__file__)


@pytest.mark.parametrize("check_name", CHECKS)
def test_two_ranks(ranks_output, check_name):
    assert check_name in dist_util.checks_passed(ranks_output), ranks_output


def test_refusals():
    with pytest.raises(ValueError, match="init_process_group"):
        PipelineStage(sitp.nn.Linear(2, 2), 0, 1)


if __name__ == "__main__":
    sys.exit(main())

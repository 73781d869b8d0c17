"""ZeRO stages 1 and 2 as the paper defines them (sitp.distributed.ZeroOptimizer), on 2 MPI
ranks, against one process on the whole batch; their bytes against one all-reduce's and
against torch-style ZeroRedundancyOptimizer's; their gradient and optimizer memory.

As tests/test_ddp.py, this file is also the script the ranks run: ``main()`` makes every
check on both ranks and rank 0 prints ``ok <check>`` after each.

The reference is one process with AdamW on the 2B rows that the 2 ranks share (B each):
the ranks' averaged gradients differ from its gradient only in the order of additions,
so the weights agree to float64 round-off (1e-12) or float32's (allclose).
"""

from __future__ import annotations

import sys

import numpy as np
import pytest

import dist_util
import sitp
import sitp.distributed as dist
from sitp.distributed.optim import ZeroRedundancyOptimizer
from sitp.models.gpt import GPT, GPTConfig
from sitp.nn.parallel import DistributedDataParallel as DDP

STEPS = 3
B = 2  # rows per rank
KW = {"lr": 1e-2, "weight_decay": 0.1}


def _gpt(dtype):
    # tied weights (wte is the embedding and lm_head): its hook fires once, after both uses
    cfg = GPTConfig(block_size=8, vocab_size=11, n_layer=1, n_head=2, n_embd=16)
    return GPT(cfg).to(dtype)


def _data(seed):
    idx = np.random.default_rng(seed).integers(0, 11, (STEPS, 2 * B, 8))
    return idx, np.roll(idx, -1, axis=2)


def _loss(model, x, y):
    return model(sitp.tensor(x), sitp.tensor(y))[1]


def _pair(dtype):
    sitp.manual_seed(10 + dist.get_rank())  # different weights until rank 0's are sent
    model = _gpt(dtype)
    ref = _gpt(dtype)
    return model, ref


def check_equals_one_process(stage, dtype, **kw):
    """ZeRO on 2 ranks and AdamW on one process: the same losses and weights."""
    rank, p = dist.get_rank(), dist.get_world_size()
    model, ref = _pair(dtype)
    zero = dist.ZeroOptimizer(model.parameters(), sitp.optim.AdamW, stage=stage, **kw, **KW)
    ref.load_state_dict(model.state_dict())  # rank 0's weights, broadcast by the constructor
    adamw = sitp.optim.AdamW(ref.parameters(), **KW)
    X, Y = _data(stage)
    mine = slice(rank * B, (rank + 1) * B)
    for s in range(STEPS):
        loss = _loss(model, X[s, mine], Y[s, mine])
        loss.backward()
        if stage == 2:  # the full gradients are gone once backward has reduced them
            assert all(q.grad is None for q in model.parameters())
        zero.step()
        zero.zero_grad()
        ref_loss = _loss(ref, X[s], Y[s])
        ref_loss.backward()
        adamw.step()
        adamw.zero_grad()
        both = loss.detach().clone()
        dist.all_reduce(both, op=dist.ReduceOp.AVG)  # the mean over 2B rows
        np.testing.assert_allclose(both.item(), ref_loss.item(), rtol=1e-5)
    if dtype is sitp.float64:
        diff = max(
            float(np.abs(a.detach().numpy() - b.detach().numpy()).max())
            for a, b in zip(model.parameters(), ref.parameters())
        )
        assert diff < 1e-12, f"stage {stage}: weights differ by {diff:.3g}"
    else:  # Adam divides by the gradient's size: where a gradient is round-off from zero,
        # reassociation can move its update by a part of lr; bound it at 1% of lr
        for a, b in zip(model.parameters(), ref.parameters()):
            np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-4, atol=1e-4)
    # the shards' moments, gathered, are AdamW's moments
    state = zero.full_state()
    twin = {id(q): r for q, r in zip(model.parameters(), ref.parameters())}
    for k in ("exp_avg", "exp_avg_sq"):
        for b, pieces in zip(zero.buckets, state[k]):
            want = np.concatenate([adamw.state[twin[id(q)]][k].numpy().ravel() for q in b.params])
            tol = (1e-10 if dtype is sitp.float64 else 1e-4) * np.abs(want).max()
            np.testing.assert_allclose(pieces.numpy(), want, rtol=0, atol=tol)
    n = sum(q.numel() for q in model.parameters())
    shard = sum(b.chunk for b in zero.buckets)
    assert zero.state_bytes() == 2 * shard * model.lm_head.weight.element_size()
    assert shard * p == sum(b.padded for b in zero.buckets) < n + p * len(zero.buckets)
    zero.remove_hooks()
    return zero


def check_bytes():
    """One step of stage 1 sends one all-reduce's bytes of the padded parameters; DDP with
    ZeroRedundancyOptimizer sends about 1.5 times that."""
    p, rank = dist.get_world_size(), dist.get_rank()
    X, Y = _data(7)
    mine = slice(rank * B, (rank + 1) * B)
    sent = {}
    for stage in (1, 2):
        model, _ = _pair(sitp.float32)
        zero = dist.ZeroOptimizer(
            model.parameters(), sitp.optim.AdamW, stage=stage, bucket_cap_mb=0.002, **KW
        )
        with dist.CommCounter() as comm:
            _loss(model, X[0, mine], Y[0, mine]).backward()
            zero.step()
        padded = sum(b.padded for b in zero.buckets) * 4
        assert comm.bytes_sent == 2 * (p - 1) * padded // p, (comm, padded)
        assert set(comm.calls) == {"reduce_scatter_tensor", "all_gather_into_tensor"}
        # the same as one all-reduce of the padded gradient
        with dist.CommCounter() as one:
            dist.all_reduce(sitp.zeros(padded // 4))
        assert comm.bytes_sent == one.bytes_sent
        sent[stage] = comm.bytes_sent
        zero.remove_hooks()
    model, _ = _pair(sitp.float32)
    ddp = DDP(model)
    zro = ZeroRedundancyOptimizer(model.parameters(), sitp.optim.AdamW, **KW)
    with dist.CommCounter() as comm:
        _loss(ddp, X[0, mine], Y[0, mine]).backward()
        zro.step()
    per_rank = [None] * p
    dist.all_gather_object(per_rank, (comm.bytes_sent, sent[1]))
    ratio = np.mean([z for z, _ in per_rank]) / np.mean([s for _, s in per_rank])
    assert abs(ratio - 1.5) < 0.02, per_rank  # all-reduce (2(p-1)/p) + broadcasts ((p-1)/p)
    return ratio


def check_memory():
    """Stage 1 holds the whole (padded) gradient and its shard; stage 2 the shard and the
    buckets in flight: about 1/p of it with small buckets."""
    p, rank = dist.get_world_size(), dist.get_rank()
    X, Y = _data(8)
    mine = slice(rank * B, (rank + 1) * B)
    peaks = {}
    for stage in (1, 2):
        model, _ = _pair(sitp.float32)
        zero = dist.ZeroOptimizer(
            model.parameters(), sitp.optim.AdamW, stage=stage, bucket_cap_mb=0.002, **KW
        )
        for _ in range(2):
            _loss(model, X[0, mine], Y[0, mine]).backward()
            zero.step()
            zero.zero_grad()
        padded = sum(b.padded for b in zero.buckets) * 4
        shard = padded // p
        largest = max(b.padded for b in zero.buckets) * 4
        if stage == 1:
            assert zero.peak_grad_bytes == padded + shard, (zero.peak_grad_bytes, padded, shard)
        else:  # the shard, one bucket's gradients and their packed copy, what backward has
            # computed of the next bucket meanwhile (at most one bucket more)
            assert shard < zero.peak_grad_bytes <= shard + 3 * largest, (
                zero.peak_grad_bytes,
                shard,
                largest,
            )
        peaks[stage] = zero.peak_grad_bytes
        zero.remove_hooks()
    return peaks[2] / peaks[1]


def main() -> None:
    dist.init_process_group()
    rank = dist.get_rank()

    def ok(name, value=None):
        if rank == 0:
            print(f"ok {name}" + ("" if value is None else f" {value:.3g}"), flush=True)

    check_equals_one_process(1, sitp.float64)
    ok("stage1_float64")
    check_equals_one_process(2, sitp.float64, bucket_cap_mb=0.002)
    ok("stage2_float64")
    check_equals_one_process(1, sitp.float32, bucket_cap_mb=0.002)
    ok("stage1_float32")
    ok("bytes", check_bytes())
    ok("memory", check_memory())
    dist.destroy_process_group()


# ------------------------------------------------------------------ the pytest side
CHECKS = ["stage1_float64", "stage2_float64", "stage1_float32", "bytes", "memory"]


@pytest.fixture(scope="module")
def ranks_output():
    return dist_util.ranks_output(__file__)


@pytest.mark.parametrize("check", CHECKS)
def test_two_ranks(ranks_output, check):
    assert dist_util.checks_passed(ranks_output) == CHECKS, ranks_output


def test_refusals():
    model = sitp.nn.Linear(2, 2)
    with pytest.raises(ValueError, match="init_process_group"):
        dist.ZeroOptimizer(model.parameters(), sitp.optim.AdamW, lr=0.1)
    with pytest.raises(ValueError, match="stage must be 1 or 2"):
        dist.ZeroOptimizer(model.parameters(), sitp.optim.AdamW, stage=3, lr=0.1)


if __name__ == "__main__":
    sys.exit(main())

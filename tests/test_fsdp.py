"""ZeRO-3 (sitp.distributed.fsdp.fully_shard) on 2 MPI ranks against one process on the
whole batch; its bytes against 3 (p - 1)/p of the padded model; the gathered parameter
memory against the root's and two blocks' buffers; ZeroOptimizer's state_dict.

As tests/test_zero_stages.py, this file is also the script the ranks run: ``main()`` makes
every check on both ranks and rank 0 prints ``ok <check>`` after each.

The reference is one process with AdamW on the 2B rows the 2 ranks share (B each): the
averaged gradients differ only in the order of the additions, so the weights agree to
float64 round-off (1e-12) or float32's (allclose).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pytest

import dist_util
import sitp
import sitp.distributed as dist
from sitp.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from sitp.distributed.fsdp import (
    full_state_dict,
    fully_shard,
    max_unsharded_bytes,
    reset_max_unsharded_bytes,
    unsharded_bytes,
)
from sitp.models.gpt import GPT, GPTConfig

STEPS = 3
B = 2  # rows per rank
KW = {"lr": 1e-2, "weight_decay": 0.1}


def _gpt(dtype):
    # two blocks (so that prefetch has a next unit); tied wte/lm_head in the root's unit
    cfg = GPTConfig(block_size=8, vocab_size=11, n_layer=2, n_head=2, n_embd=16)
    sitp.manual_seed(0)
    return GPT(cfg).to(dtype)


def _data(seed):
    idx = np.random.default_rng(seed).integers(0, 11, (STEPS, 2 * B, 8))
    return idx, np.roll(idx, -1, axis=2)


def _loss(model, x, y):
    return model(sitp.tensor(x), sitp.tensor(y))[1]


def _shard(model, **kw):
    for block in model.transformer.h:
        fully_shard(block, **kw)
    return fully_shard(model, **kw)


def check_equals_one_process(dtype):
    """fully_shard on 2 ranks and AdamW on one process: the same losses and weights; the
    parameters hold no memory outside forward and backward; no full gradient is kept."""
    rank = dist.get_rank()
    ref = _gpt(dtype)
    model = _shard(_gpt(dtype))
    adamw_ref = sitp.optim.AdamW(ref.parameters(), **KW)
    adamw = sitp.optim.AdamW(model.parameters(), **KW)
    units = [model, *model.transformer.h]
    shards = [u._fsdp_unit.shard for u in units]
    assert {id(q) for q in model.parameters()} == {id(q) for q in shards}  # the optimizer's
    X, Y = _data(1)
    mine = slice(rank * B, (rank + 1) * B)
    for s in range(STEPS):
        loss = _loss(model, X[s, mine], Y[s, mine])
        assert unsharded_bytes() == 0  # every unit freed after its forward
        loss.backward()
        assert unsharded_bytes() == 0
        assert all(q.grad is None for u in units for q in u._fsdp_unit.params)
        adamw.step()
        adamw.zero_grad()
        ref_loss = _loss(ref, X[s], Y[s])
        ref_loss.backward()
        adamw_ref.step()
        adamw_ref.zero_grad()
        both = loss.detach().clone()
        dist.all_reduce(both, op=dist.ReduceOp.AVG)
        np.testing.assert_allclose(both.item(), ref_loss.item(), rtol=1e-5)
    full, want = full_state_dict(model), ref.state_dict()
    assert len(full) == len({id(q) for q in ref.parameters()}), sorted(full)
    for name, v in full.items():
        a, b = v.numpy(), want[name].detach().numpy()
        if dtype is sitp.float64:
            assert np.abs(a - b).max() < 1e-12, (name, np.abs(a - b).max())
        else:  # Adam divides by the gradient's size: reassociation moves a near-zero one
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4, err_msg=name)


def check_bytes():
    """One step sends (p - 1)/p of the padded model three times (two all-gathers and a
    reduce-scatter); two without resharding after forward."""
    p, rank = dist.get_world_size(), dist.get_rank()
    X, Y = _data(2)
    mine = slice(rank * B, (rank + 1) * B)
    for reshard, times in ((True, 3), (False, 2)):
        model = _shard(_gpt(sitp.float32), reshard_after_forward=reshard)
        padded = sum(u._fsdp_unit.padded for u in [model, *model.transformer.h]) * 4
        with dist.CommCounter() as comm:
            _loss(model, X[0, mine], Y[0, mine]).backward()
        assert comm.bytes_sent == times * (p - 1) * padded // p, (reshard, comm, padded)
        assert set(comm.calls) == {"all_gather_into_tensor", "reduce_scatter_tensor"}
        assert comm.calls["reduce_scatter_tensor"] == 3  # one per unit


def check_memory():
    """With the order known (after one step), at most the root's buffer and two blocks'
    (the one running and the one prefetched) are gathered at once."""
    rank = dist.get_rank()
    X, Y = _data(3)
    mine = slice(rank * B, (rank + 1) * B)
    model = _shard(_gpt(sitp.float32))
    root = model._fsdp_unit.padded * 4
    block = max(b._fsdp_unit.padded for b in model.transformer.h) * 4
    _loss(model, X[0, mine], Y[0, mine]).backward()  # records the order
    reset_max_unsharded_bytes()
    _loss(model, X[1, mine], Y[1, mine]).backward()
    assert max_unsharded_bytes() == root + 2 * block, (max_unsharded_bytes(), root, block)


def _rss() -> int:
    """This process's resident memory in bytes (Linux's /proc/self/statm)."""
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE")


def check_pages_freed():
    """Resharding hands the gathered buffer's pages back to the system: the resident
    memory falls by the buffer's size (8 MB here), and gathering brings it back."""
    if not Path("/proc/self/statm").exists():
        return
    unit = fully_shard(sitp.nn.Linear(1024, 1024).double())  # 8 MiB gathered
    size = unit._fsdp_unit.padded * 8
    unit.unshard()
    gathered = _rss()
    unit.reshard()
    freed = _rss()
    unit.unshard()
    again = _rss()
    assert gathered - freed > 0.9 * size, (gathered, freed, size)
    assert again - freed > 0.9 * size, (again, freed, size)
    unit.reshard()


def check_zero_state_dict():
    """ZeroOptimizer.state_dict() is AdamW's over the same parameters; it loads into a
    ZeroOptimizer of the other stage and into a plain AdamW, which then take the same
    next step."""
    rank = dist.get_rank()
    X, Y = _data(4)
    mine = slice(rank * B, (rank + 1) * B)
    model, ref = _gpt(sitp.float64), _gpt(sitp.float64)
    zero = dist.ZeroOptimizer(model.parameters(), sitp.optim.AdamW, stage=1, **KW)
    adamw = sitp.optim.AdamW(ref.parameters(), **KW)
    for s in range(2):
        _loss(model, X[s, mine], Y[s, mine]).backward()
        zero.step()
        zero.zero_grad()
        _loss(ref, X[s], Y[s]).backward()
        adamw.step()
        adamw.zero_grad()
    sd, want = zero.state_dict(), adamw.state_dict()
    assert sorted(sd["state"]) == sorted(want["state"])
    for i, st in want["state"].items():
        for k in ("exp_avg", "exp_avg_sq"):
            assert np.abs(sd["state"][i][k].numpy() - st[k].numpy()).max() < 1e-12
        assert float(sd["state"][i]["step"]) == float(st["step"])
    # into stage 2 over a copy of the model, and into a plain AdamW
    twin = _gpt(sitp.float64)
    twin.load_state_dict(model.state_dict())
    zero2 = dist.ZeroOptimizer(
        twin.parameters(), sitp.optim.AdamW, stage=2, bucket_cap_mb=0.002, **KW
    )
    zero2.load_state_dict(sd)
    plain_model = _gpt(sitp.float64)
    plain_model.load_state_dict(model.state_dict())
    plain = sitp.optim.AdamW(plain_model.parameters(), **KW)
    plain.load_state_dict(sd)
    _loss(twin, X[2, mine], Y[2, mine]).backward()
    zero2.step()
    _loss(plain_model, X[2], Y[2]).backward()
    plain.step()
    diff = max(
        float(np.abs(a.detach().numpy() - b.detach().numpy()).max())
        for a, b in zip(twin.parameters(), plain_model.parameters())
    )
    assert diff < 1e-12, diff
    zero2.remove_hooks()


def check_full_state_dict():
    """get_state_dict gathers the full weights and AdamW state at their names (as one
    process's AdamW has them); they load into a plain model and AdamW, and back into a
    freshly sharded model with set_state_dict; all three then take the same next step."""
    rank = dist.get_rank()
    X, Y = _data(5)
    mine = slice(rank * B, (rank + 1) * B)
    ref, model = _gpt(sitp.float64), _shard(_gpt(sitp.float64))
    adamw_ref = sitp.optim.AdamW(ref.parameters(), **KW)
    adamw = sitp.optim.AdamW(model.parameters(), **KW)
    for s in range(2):
        _loss(model, X[s, mine], Y[s, mine]).backward()
        adamw.step()
        adamw.zero_grad()
        _loss(ref, X[s], Y[s]).backward()
        adamw_ref.step()
        adamw_ref.zero_grad()
    msd, osd = get_state_dict(model, adamw)
    named = dict(ref.named_parameters())
    for name, v in msd.items():
        assert np.abs(v.numpy() - named[name].detach().numpy()).max() < 1e-12, name
        for k in ("exp_avg", "exp_avg_sq"):
            want = adamw_ref.state[named[name]][k].numpy()
            assert np.abs(osd["state"][name][k].numpy() - want).max() < 1e-12, (name, k)
    # into a plain model and AdamW on one process ...
    plain = _gpt(sitp.float64)
    plain.load_state_dict(msd, strict=False)  # the tied head shares wte's tensor
    order = [n for n, _ in plain.named_parameters()]
    plain_opt = sitp.optim.AdamW(plain.parameters(), **KW)
    group = {k: v for k, v in osd["param_groups"][0].items() if k != "params"}
    plain_opt.load_state_dict(
        {
            "state": {i: osd["state"][n] for i, n in enumerate(order)},
            "param_groups": [{**group, "params": list(range(len(order)))}],
        }
    )
    # ... and into a sharded model that starts from other weights
    sitp.manual_seed(7)
    again = _gpt(sitp.float64)
    for block in again.transformer.h:
        fully_shard(block)
    fully_shard(again)
    again_opt = sitp.optim.AdamW(again.parameters(), **KW)
    set_state_dict(again, again_opt, model_state_dict=msd, optim_state_dict=osd)
    for m, opt, rows in (
        (model, adamw, mine),
        (plain, plain_opt, slice(None)),
        (again, again_opt, mine),
    ):
        _loss(m, X[2, rows], Y[2, rows]).backward()
        opt.step()
    want = dict(plain.named_parameters())
    for m in (model, again):
        for name, v in full_state_dict(m).items():
            diff = np.abs(v.numpy() - want[name].detach().numpy()).max()
            assert diff < 1e-12, (name, diff)


def main() -> None:
    dist.init_process_group()
    rank = dist.get_rank()

    def ok(name):
        if rank == 0:
            print(f"ok {name}", flush=True)

    check_equals_one_process(sitp.float64)
    ok("float64")
    check_equals_one_process(sitp.float32)
    ok("float32")
    check_bytes()
    ok("bytes")
    check_memory()
    ok("memory")
    check_pages_freed()
    ok("pages_freed")
    check_zero_state_dict()
    ok("zero_state_dict")
    check_full_state_dict()
    ok("full_state_dict")
    dist.destroy_process_group()


# ------------------------------------------------------------------ the pytest side
CHECKS = [
    "float64",
    "float32",
    "bytes",
    "memory",
    "pages_freed",
    "zero_state_dict",
    "full_state_dict",
]


@pytest.fixture(scope="module")
def ranks_output():
    return dist_util.ranks_output(__file__)


@pytest.mark.parametrize("check", CHECKS)
def test_two_ranks(ranks_output, check):
    assert check in dist_util.checks_passed(ranks_output), ranks_output


def test_refusals():
    model = sitp.nn.Linear(2, 2)
    with pytest.raises(ValueError, match="init_process_group"):
        fully_shard(model)
    with pytest.raises(NotImplementedError, match="mesh"):
        fully_shard(model, mesh=object())
    with pytest.raises(TypeError, match="reshard_after_forward"):
        fully_shard(model, reshard_after_forward="yes")


if __name__ == "__main__":
    sys.exit(main())

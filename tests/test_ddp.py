"""DistributedDataParallel, ZeroRedundancyOptimizer and the ring all-reduce, on 2 MPI ranks.

This file is also the script the ranks run: ``main()`` below, started once by the
launcher (``run_ranks``), makes every check in turn on both ranks and rank 0 prints
``ok <check>`` after each; the tests read those lines. A failed assertion on either rank
ends the job at once, with that rank's traceback (the launcher aborts the other ranks),
and the whole job is bounded by a timeout.

The reference for data parallelism is one process on the whole batch: 2 ranks with
batches of B, each taking the mean loss over its B rows, averaged by DDP, are one process
with the mean over 2B rows. The two differ only in the order of additions: one process
sums the 2B rows of a weight gradient inside one matrix product, DDP sums B rows on each
rank and then adds the two halves (the halving itself is exact). In float64 the weights
after 20 steps agree to 1e-12; in float32 to float32's rounding (allclose).
"""

from __future__ import annotations

import inspect
import sys
from pathlib import Path

import numpy as np
import pytest

import sitp
import sitp.distributed as dist
from dist_util import IN_CI, mpi_missing, run_ranks
from sitp.autograd import engine
from sitp.distributed.optim import ZeroRedundancyOptimizer as ZeRO
from sitp.distributed.ring import ring_all_reduce
from sitp.models.gpt import GPT, GPTConfig
from sitp.nn.parallel import DistributedDataParallel as DDP
from sitp.nn.parallel.distributed import assign_buckets

STEPS = 20
B = 4  # rows per rank: the single process takes 2B


# ------------------------------------------------------------------ the rank side
def _mlp(dtype):
    m = sitp.nn.Sequential(sitp.nn.Linear(6, 16), sitp.nn.Tanh(), sitp.nn.Linear(16, 3))
    return m.to(dtype)


def _gpt(dtype):
    # tied weights: wte is used by the embedding and by lm_head, so its hook must wait
    # for both gradients
    cfg = GPTConfig(block_size=8, vocab_size=11, n_layer=1, n_head=2, n_embd=16)
    return GPT(cfg).to(dtype)


def _copy(make, src):
    ref = make()
    ref.load_state_dict(src.state_dict())
    return ref


def _max_diff(a, b):
    return max(float(np.abs(p.detach().numpy() - q.detach().numpy()).max()) for p, q in zip(a, b))


def _same_on_all_ranks(tensors):
    """Whether every rank holds the same values (rank 0's gathered against each)."""
    for t in tensors:
        got = [sitp.zeros_like(t) for _ in range(dist.get_world_size())]
        dist.all_gather(got, t.detach().contiguous())
        if any(not np.array_equal(g.numpy(), got[0].numpy()) for g in got):
            return False
    return True


def _batches(rng, kind, dtype):
    if kind == "mlp":
        X = rng.standard_normal((STEPS, 2 * B, 6))
        Y = rng.standard_normal((STEPS, 2 * B, 3))
        return X.astype(dtype), Y.astype(dtype)
    idx = rng.integers(0, 11, (STEPS, 2 * B, 8))
    return idx, np.roll(idx, -1, axis=2)


def _loss(model, kind, x, y):
    if kind == "mlp":
        return sitp.nn.functional.mse_loss(model(sitp.tensor(x)), sitp.tensor(y))
    return model(sitp.tensor(x), sitp.tensor(y))[1]


def check_ddp_equals_one_process(kind, dtype, tol, **ddp_kwargs):
    rank = dist.get_rank()
    np_dtype = {sitp.float64: np.float64, sitp.float32: np.float32}[dtype]

    def make():
        return _mlp(dtype) if kind == "mlp" else _gpt(dtype)

    sitp.manual_seed(10 + rank)  # different initial weights on each rank ...
    model = make()
    ddp = DDP(model, bucket_cap_mb=0.0002, **ddp_kwargs)  # ... until rank 0's are broadcast
    assert _same_on_all_ranks(model.parameters()), "parameters not broadcast"
    assert len(ddp._buckets) > 1, "the test should exercise several buckets"
    assert all(k.startswith("module.") for k in ddp.state_dict())
    ref = _copy(make, model)

    opt_cls = sitp.optim.SGD if kind == "mlp" else sitp.optim.AdamW
    kw = {"lr": 0.1, "momentum": 0.9} if kind == "mlp" else {"lr": 1e-2}
    opt, ref_opt = opt_cls(model.parameters(), **kw), opt_cls(ref.parameters(), **kw)
    X, Y = _batches(np.random.default_rng(0), kind, np_dtype)
    mine = slice(rank * B, (rank + 1) * B)
    for s in range(STEPS):
        _loss(ddp, kind, X[s, mine], Y[s, mine]).backward()
        if ddp.gradient_as_bucket_view:  # .grad is its bucket's memory: no copy back
            flats = {id(b.flat._storage) for b in ddp._buckets}
            assert all(id(p.grad._storage) in flats for p in model.parameters())
        opt.step()
        # zeroing in place keeps the bucket views (set_to_none drops them: they come back)
        opt.zero_grad(set_to_none=not ddp.gradient_as_bucket_view or s % 2 == 1)
        _loss(ref, kind, X[s], Y[s]).backward()
        ref_opt.step()
        ref_opt.zero_grad()
    diff = _max_diff(model.parameters(), ref.parameters())
    assert _same_on_all_ranks(model.parameters()), "the replicas drifted apart"
    assert diff <= tol, f"{kind} {dtype}: DDP and one process differ by {diff:.3g} > {tol:g}"
    return diff


def check_no_sync():
    """Two micro-batches of B/2 per rank, the first under no_sync(): one exchange per step,
    the same weights as one process on 2B rows."""
    rank = dist.get_rank()
    sitp.manual_seed(0)
    model = _mlp(sitp.float64)
    ddp = DDP(model)
    ref = _copy(lambda: _mlp(sitp.float64), model)
    opt = sitp.optim.SGD(model.parameters(), lr=0.1)
    ref_opt = sitp.optim.SGD(ref.parameters(), lr=0.1)
    X, Y = _batches(np.random.default_rng(1), "mlp", np.float64)
    half = B // 2
    for s in range(STEPS):
        first = slice(rank * B, rank * B + half)
        second = slice(rank * B + half, (rank + 1) * B)
        with ddp.no_sync():
            (_loss(ddp, "mlp", X[s, first], Y[s, first]) / 2).backward()
        local = [p.grad.clone() for p in model.parameters()]
        assert not _same_on_all_ranks(local), "no_sync() still all-reduced"
        (_loss(ddp, "mlp", X[s, second], Y[s, second]) / 2).backward()
        opt.step()
        opt.zero_grad()
        _loss(ref, "mlp", X[s], Y[s]).backward()
        ref_opt.step()
        ref_opt.zero_grad()
    diff = _max_diff(model.parameters(), ref.parameters())
    assert diff <= 1e-12, f"no_sync accumulation differs from one batch by {diff:.3g}"
    return diff


def check_zero():
    """ZeRO-1 over AdamW (each rank steps its shard, then broadcasts it) equals AdamW."""
    sitp.manual_seed(0)
    model = _mlp(sitp.float64)
    ddp = DDP(model)
    ref = _copy(lambda: _mlp(sitp.float64), model)
    kw = {"lr": 1e-2, "weight_decay": 0.1}
    zero = ZeRO(model.parameters(), sitp.optim.AdamW, **kw)
    ref_opt = sitp.optim.AdamW(ref.parameters(), **kw)
    # the shards are disjoint and cover the model; each rank keeps only its own state
    mine = sorted(zero._index[id(p)] for g in zero.optim.param_groups for p in g["params"])
    shares = [None] * dist.get_world_size()
    dist.all_gather_object(shares, mine)
    assert sorted(sum(shares, [])) == list(range(len(list(model.parameters())))), shares
    assert all(shares), f"a rank owns nothing: {shares}"
    X, Y = _batches(np.random.default_rng(2), "mlp", np.float64)
    rank = dist.get_rank()
    for s in range(STEPS):
        _loss(
            ddp, "mlp", X[s, rank * B : (rank + 1) * B], Y[s, rank * B : (rank + 1) * B]
        ).backward()
        zero.step()
        zero.zero_grad()
        _loss(ref, "mlp", X[s], Y[s]).backward()
        ref_opt.step()
        ref_opt.zero_grad()
    assert len(zero.optim.state) == len(mine)  # moments only for this rank's share
    diff = _max_diff(model.parameters(), ref.parameters())
    assert diff <= 1e-12, f"ZeRO-1 AdamW differs from AdamW by {diff:.3g}"
    # the consolidated state is AdamW's, numbered as AdamW numbers it
    zero.consolidate_state_dict(to=0)
    if rank == 0:
        sd, ref_sd = zero.state_dict(), ref_opt.state_dict()
        assert sorted(sd["state"]) == sorted(ref_sd["state"])
        for i, st in ref_sd["state"].items():
            for k, v in st.items():
                np.testing.assert_allclose(sd["state"][i][k].numpy(), v.numpy(), rtol=0, atol=1e-12)
        assert sd["param_groups"][0]["lr"] == ref_sd["param_groups"][0]["lr"]
    else:
        with pytest.raises(RuntimeError, match="consolidate_state_dict"):
            zero.state_dict()
    # resumed from that state, with the learning rate changed as a scheduler would,
    # ZeRO takes the same next step as the AdamW that was not interrupted
    sd = [zero.state_dict() if rank == 0 else None]
    dist.broadcast_object_list(sd, src=0)
    resumed = ZeRO(model.parameters(), sitp.optim.AdamW, **kw)
    resumed.load_state_dict(sd[0])
    for opt in (resumed, ref_opt):
        opt.param_groups[0]["lr"] = 5e-3
    _loss(ddp, "mlp", X[0, rank * B : (rank + 1) * B], Y[0, rank * B : (rank + 1) * B]).backward()
    resumed.step()
    _loss(ref, "mlp", X[0], Y[0]).backward()
    ref_opt.step()
    diff = max(diff, _max_diff(model.parameters(), ref.parameters()))
    assert diff <= 1e-12, f"resumed ZeRO-1 differs from AdamW by {diff:.3g}"
    return diff


def check_ring():
    rank = dist.get_rank()
    rng = np.random.default_rng(rank)
    for n in (1, 2, 3, 7, 1001):  # 1 and the odd sizes do not divide by the 2 ranks
        for dtype in (np.float64, np.int64):
            x = sitp.tensor((rng.standard_normal(n) * 100).astype(dtype))
            ring, mpi = x.clone(), x.clone()
            ring_all_reduce(ring)
            dist.all_reduce(mpi)
            # with 2 ranks both add the same two numbers: equal to the bit
            np.testing.assert_array_equal(ring.numpy(), mpi.numpy())
    x = sitp.arange(12, dtype=sitp.float64).view(3, 4).t() * (rank + 1)  # not contiguous
    expected = sitp.arange(12, dtype=sitp.float64).view(3, 4).t() * 3
    ring_all_reduce(x)
    np.testing.assert_array_equal(x.numpy(), expected.numpy())


class _TwoHeads:
    """A model whose ``extra`` layer takes part in the loss only when ``use_extra``."""

    @staticmethod
    def make():
        class TwoHeads(sitp.nn.Module):
            def __init__(self):
                super().__init__()
                self.body = sitp.nn.Linear(4, 4).double()
                self.extra = sitp.nn.Linear(4, 4).double()
                self.use_extra = False

            def forward(self, x):
                h = self.body(x)
                return self.extra(h) if self.use_extra else h

        return TwoHeads()


def check_unused_parameters():
    rank = dist.get_rank()
    sitp.manual_seed(0)
    x = sitp.tensor(np.random.default_rng(rank).standard_normal((3, 4)))
    # without find_unused_parameters, a parameter with no gradient is an error
    ddp = DDP(_TwoHeads.make())
    with pytest.raises(RuntimeError, match=r"extra\.weight.*find_unused_parameters=True"):
        ddp(x).sum().backward()
    # with it: a parameter no rank uses keeps .grad None; the others are averaged
    model = _TwoHeads.make()
    ddp = DDP(model, find_unused_parameters=True)
    ddp(x).sum().backward()
    assert model.extra.weight.grad is None and model.extra.bias.grad is None
    local = model.body.weight.grad.clone()  # the average; recompute this rank's own
    mine = _TwoHeads.make()
    mine.load_state_dict(model.state_dict())
    mine(x).sum().backward()
    both = [sitp.zeros_like(local) for _ in range(2)]
    dist.all_gather(both, mine.body.weight.grad)
    np.testing.assert_allclose(local.numpy(), ((both[0] + both[1]) / 2).numpy(), atol=1e-15)
    # a parameter only rank 1 uses: both ranks get rank 1's gradient / 2, as torch
    model.zero_grad()
    model.use_extra = rank == 1
    ddp(x).sum().backward()
    own = sitp.zeros_like(model.extra.weight)
    if rank == 1:
        mine.use_extra = True
        mine.zero_grad()
        mine(x).sum().backward()
        own = mine.extra.weight.grad
    dist.broadcast(own, src=1)
    np.testing.assert_allclose(model.extra.weight.grad.numpy(), own.numpy() / 2, atol=1e-15)


def check_overlap():
    """A full bucket's all_reduce starts inside backward, before earlier layers' gradients
    exist: the order of events, seen from hooks that run after DDP's own."""
    model = _mlp(sitp.float64)
    ddp = DDP(model, bucket_cap_mb=0.0002)  # two buckets: the last layer's, the first's
    events = []
    for name, p in model.named_parameters():
        engine.register_post_accumulate_grad_hook(p, lambda p, name=name: events.append(name))
    launch = dist.all_reduce

    def recorded(tensor, *args, **kwargs):
        events.append(f"all_reduce({tensor.numel()})")
        return launch(tensor, *args, **kwargs)

    dist.all_reduce = recorded  # the module DDP calls through
    try:
        ddp(sitp.zeros(2, 6, dtype=sitp.float64)).sum().backward()
    finally:
        dist.all_reduce = launch
    # bucket 0 holds the last layer (2.weight, 2.bias: 48 + 3 elements), bucket 1 the
    # first (96 + 16): bucket 0's all_reduce is under way before the first layer's
    # gradients are computed
    assert sorted(events) == sorted(
        ["2.weight", "2.bias", "0.weight", "0.bias", "all_reduce(51)", "all_reduce(112)"]
    ), events
    first_layer = min(events.index("0.weight"), events.index("0.bias"))
    assert events.index("all_reduce(51)") < first_layer < events.index("all_reduce(112)"), events


def check_buffers():
    rank = dist.get_rank()
    model = _mlp(sitp.float64)
    model.register_buffer("seen", sitp.full((2,), float(rank)))
    ddp = DDP(model)
    assert model.seen.tolist() == [0.0, 0.0]  # rank 0's, from the construction
    model.seen.fill_(float(rank + 5))
    ddp(sitp.zeros(1, 6, dtype=sitp.float64))
    assert model.seen.tolist() == [5.0, 5.0]  # broadcast_buffers: rank 0's at each forward


def main() -> None:
    dist.init_process_group()
    rank = dist.get_rank()

    def ok(name, value=None):
        if rank == 0:
            print(f"ok {name}" + ("" if value is None else f" {value:.3g}"), flush=True)

    ok("ddp_mlp_float64", check_ddp_equals_one_process("mlp", sitp.float64, 1e-12))
    ok("ddp_mlp_float32", check_ddp_equals_one_process("mlp", sitp.float32, 1e-5))
    ok("ddp_gpt_float64", check_ddp_equals_one_process("gpt", sitp.float64, 1e-12))
    ok(
        "ddp_gpt_bucket_view",
        check_ddp_equals_one_process("gpt", sitp.float64, 1e-12, gradient_as_bucket_view=True),
    )
    ok("no_sync", check_no_sync())
    ok("zero", check_zero())
    check_ring()
    ok("ring")
    check_unused_parameters()
    ok("unused")
    check_overlap()
    ok("overlap")
    check_buffers()
    ok("buffers")
    dist.destroy_process_group()


# ------------------------------------------------------------------ the pytest side
CHECKS = [
    "ddp_mlp_float64",
    "ddp_mlp_float32",
    "ddp_gpt_float64",
    "ddp_gpt_bucket_view",
    "no_sync",
    "zero",
    "ring",
    "unused",
    "overlap",
    "buffers",
]


@pytest.fixture(scope="module")
def ranks_output():
    if mpi_missing():
        if IN_CI:  # make test installs MPI: never skip there
            pytest.fail(f"CI=true: {mpi_missing()}")
        pytest.skip(mpi_missing())
    return run_ranks(Path(__file__), nproc=2, timeout=90).stdout


@pytest.mark.parametrize("check", CHECKS)
def test_two_ranks(ranks_output, check):
    lines = [line.split() for line in ranks_output.splitlines() if line.startswith("ok ")]
    assert [parts[1] for parts in lines] == CHECKS, ranks_output
    assert any(parts[1] == check for parts in lines)


def test_buckets_in_reverse_parameter_order():
    params = [sitp.zeros(n) for n in (100, 50, 50, 300, 10)]  # float32: 4 bytes each
    # walking from the last parameter: 10 + 300 elements pass the first cap (400 bytes)
    assert assign_buckets(params, bucket_cap_bytes=400, first_bucket_bytes=400) == [
        [4, 3],
        [2, 1],
        [0],
    ]
    mixed = [sitp.zeros(10), sitp.zeros(10, dtype=sitp.float64), sitp.zeros(10)]
    assert assign_buckets(mixed, 1 << 20) == [[2, 0], [1]]  # one bucket per dtype


if __name__ == "__main__":
    sys.exit(main())


def test_torch_signatures_and_refusals():
    """Every parameter name of torch's constructors is accepted; outside a process group
    the constructors say what to call first; torch's options sitp lacks are refused."""
    import torch  # here, not at the top: the ranks, which run this file, need no torch
    import torch.distributed.optim
    import torch.nn.parallel

    for ours, theirs in (
        (DDP, torch.nn.parallel.DistributedDataParallel),
        (ZeRO, torch.distributed.optim.ZeroRedundancyOptimizer),
    ):
        want = set(inspect.signature(theirs.__init__).parameters)
        assert want <= set(inspect.signature(ours.__init__).parameters), ours
    model = sitp.nn.Linear(2, 2)
    assert not dist.is_initialized()
    with pytest.raises(ValueError, match="init_process_group"):
        DDP(model)
    with pytest.raises(ValueError, match="init_process_group"):
        ZeRO(model.parameters(), sitp.optim.AdamW, lr=0.1)
    with pytest.raises(NotImplementedError, match="static_graph"):
        DDP(model, static_graph=True)
    with pytest.raises(TypeError, match="optimizer class"):
        ZeRO(model.parameters(), "AdamW", lr=0.1)

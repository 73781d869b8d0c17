"""Tensor parallelism (sitp.distributed.tensor.parallel) on 2 MPI ranks against one
process: the GPT's MLP under ColwiseParallel/RowwiseParallel, its attention split by
heads, and a whole block; outputs and every gradient in float64, and the bytes of the
two all-reduces per block (one forward, one backward per pair of layers).

As tests/test_zero_stages.py, this file is also the script the ranks run.
"""

from __future__ import annotations

import sys

import numpy as np
import pytest

import dist_util
import sitp
import sitp.distributed as dist
from sitp.distributed.tensor import Shard
from sitp.distributed.tensor.parallel import (
    ColwiseParallel,
    RowwiseParallel,
    SequenceParallel,
    parallelize_module,
)
from sitp.examples.tensor_parallel import HeadParallelAttention
from sitp.models.gpt import MLP, Block, CausalSelfAttention, GPTConfig
from sitp.utils.checkpoint import saved_tensor_bytes

CFG = GPTConfig(block_size=8, vocab_size=11, n_layer=1, n_head=4, n_embd=16)
B, T = 2, 8


def _twins(make):
    sitp.manual_seed(0)
    ref = make().double()
    sitp.manual_seed(0)
    tp = make().double()
    return ref, tp


def _run(module, x, w):
    x = x.clone().requires_grad_(True)
    y = module(x)
    (y * w).sum().backward()
    return y, x.grad


def _close(a, b, what):
    diff = float(np.abs(a.detach().numpy() - b.detach().numpy()).max())
    assert diff < 1e-12, (what, diff)


def _inputs(seed):
    rng = np.random.default_rng(seed)
    return sitp.tensor(rng.standard_normal((B, T, CFG.n_embd))), sitp.tensor(
        rng.standard_normal((B, T, CFG.n_embd))
    )


def _slice(t, dim, p, r):
    k = t.shape[dim] // p
    return t[r * k : (r + 1) * k] if dim == 0 else t[:, r * k : (r + 1) * k]


def check_mlp():
    """ColwiseParallel c_fc, RowwiseParallel c_proj: the MLP's output, input gradient and
    each rank's slices of the weight gradients as one process's; one all-reduce of the
    (B, T, C) activations forward and one backward."""
    p, r = dist.get_world_size(), dist.get_rank()
    ref, tp = _twins(lambda: MLP(CFG))
    parallelize_module(tp, None, {"c_fc": ColwiseParallel(), "c_proj": RowwiseParallel()})
    assert tuple(tp.c_fc.weight.shape) == (4 * CFG.n_embd // p, CFG.n_embd)
    assert tuple(tp.c_proj.weight.shape) == (CFG.n_embd, 4 * CFG.n_embd // p)
    x, w = _inputs(1)
    y_ref, gx_ref = _run(ref, x, w)
    with dist.CommCounter() as comm:
        y, gx = _run(tp, x, w)
    _close(y, y_ref, "output")
    _close(gx, gx_ref, "input gradient")
    _close(tp.c_fc.weight.grad, _slice(ref.c_fc.weight.grad, 0, p, r), "c_fc.weight")
    _close(tp.c_fc.bias.grad, _slice(ref.c_fc.bias.grad, 0, p, r), "c_fc.bias")
    _close(tp.c_proj.weight.grad, _slice(ref.c_proj.weight.grad, 1, p, r), "c_proj.weight")
    _close(tp.c_proj.bias.grad, ref.c_proj.bias.grad, "c_proj.bias")
    n = B * T * CFG.n_embd * 8
    assert comm.calls == {"all_reduce": 2}, comm
    assert comm.bytes_sent == 2 * (2 * (p - 1) * n // p), comm


def check_attention():
    """The attention split by heads: output and gradients as one process's."""
    p, r = dist.get_world_size(), dist.get_rank()
    ref, _ = _twins(lambda: CausalSelfAttention(CFG))
    tp = HeadParallelAttention(ref)
    x, w = _inputs(2)
    y_ref, gx_ref = _run(ref, x, w)
    with dist.CommCounter() as comm:
        y, gx = _run(tp, x, w)
    _close(y, y_ref, "output")
    _close(gx, gx_ref, "input gradient")
    _close(tp.c_proj.weight.grad, _slice(ref.c_proj.weight.grad, 1, p, r), "c_proj.weight")
    _close(tp.c_proj.bias.grad, ref.c_proj.bias.grad, "c_proj.bias")
    C = CFG.n_embd
    g = ref.c_attn.weight.grad
    want = sitp.cat([g[i * C :][r * C // p : (r + 1) * C // p] for i in range(3)])
    _close(tp.c_attn.weight.grad, want, "c_attn.weight")
    assert comm.calls == {"all_reduce": 2}, comm


def check_block():
    """A whole block: layer norms replicated, attention by heads, MLP by columns and
    rows: two all-reduces forward, two backward."""
    ref, tp = _twins(lambda: Block(CFG))
    # the plan first: parallelize_module broadcasts rank 0's weights, which must not
    # overwrite the other ranks' heads
    parallelize_module(tp, None, {"mlp.c_fc": ColwiseParallel(), "mlp.c_proj": RowwiseParallel()})
    tp.attn = HeadParallelAttention(ref.attn)
    x, w = _inputs(3)
    y_ref, gx_ref = _run(ref, x, w)
    with dist.CommCounter() as comm:
        y, gx = _run(tp, x, w)
    _close(y, y_ref, "output")
    _close(gx, gx_ref, "input gradient")
    _close(tp.ln_1.weight.grad, ref.ln_1.weight.grad, "ln_1.weight")
    assert comm.calls == {"all_reduce": 4}, comm


def check_sequence_parallel():
    """Sequence parallelism: a block on this rank's T/p positions gives those positions
    of one process's output and input gradient, the layer norms' summed gradients, the
    same tensor-parallel bytes as the all-reduces (as all-gathers and reduce-scatters),
    and keeps fewer activation bytes than tensor parallelism alone."""
    p, r = dist.get_world_size(), dist.get_rank()
    ref, sp = _twins(lambda: Block(CFG))
    _, tp = _twins(lambda: Block(CFG))
    plan = {
        "ln_1": SequenceParallel(),
        "ln_2": SequenceParallel(),
        "mlp.c_fc": ColwiseParallel(input_layouts=Shard(1)),
        "mlp.c_proj": RowwiseParallel(output_layouts=Shard(1)),
    }
    parallelize_module(sp, None, plan)
    sp.attn = HeadParallelAttention(ref.attn, sequence_parallel=True)
    parallelize_module(tp, None, {"mlp.c_fc": ColwiseParallel(), "mlp.c_proj": RowwiseParallel()})
    tp.attn = HeadParallelAttention(ref.attn)
    x, w = _inputs(4)
    y_ref, gx_ref = _run(ref, x, w)
    mine = slice(r * T // p, (r + 1) * T // p)
    xs = x[:, mine].contiguous().requires_grad_(True)
    with dist.CommCounter() as comm:
        y = sp(xs)
        loss = (y * w[:, mine]).sum()
        kept_sp = saved_tensor_bytes(loss)
        loss.backward()
    _close(y, y_ref[:, mine], "output")
    _close(xs.grad, gx_ref[:, mine], "input gradient")
    for name in ("ln_1.weight", "ln_2.bias"):
        a = dict(sp.named_parameters())[name].grad
        _close(a, dict(ref.named_parameters())[name].grad, name)
    n = B * T * CFG.n_embd * 8
    assert comm.calls["all_gather_into_tensor"] == 4 and comm.calls["reduce_scatter_tensor"] == 4
    moved = comm.by_op["all_gather_into_tensor"] + comm.by_op["reduce_scatter_tensor"]
    assert moved == 4 * 2 * (p - 1) * n // p, comm  # the 4 all-reduces' bytes
    xt = x.clone().requires_grad_(True)
    kept_tp = saved_tensor_bytes((tp(xt) * w).sum())
    assert kept_sp < kept_tp, (kept_sp, kept_tp)


def main() -> None:
    dist_util.run_checks(
        (
            ("mlp", check_mlp),
            ("attention", check_attention),
            ("block", check_block),
            ("sequence", check_sequence_parallel),
        )
    )


# ------------------------------------------------------------------ the pytest side
CHECKS = ["mlp", "attention", "block", "sequence"]


ranks_output, test_two_ranks = dist_util.rank_check_tests(__file__, CHECKS)


def test_refusals():
    with pytest.raises(ValueError, match="init_process_group"):
        parallelize_module(sitp.nn.Linear(4, 4), None, ColwiseParallel())
    with pytest.raises(ValueError, match="parallelize_plan"):
        parallelize_module(sitp.nn.Linear(4, 4), None, None)


if __name__ == "__main__":
    sys.exit(main())

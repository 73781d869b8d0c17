"""The chapter's GPT trained on 2 MPI ranks against one process (sitp.examples.parallel_gpt):
tensor parallelism, sequence parallelism (also with the batch's gradients accumulated
over two backward passes) and the two pipeline schedules each take three AdamW steps,
in float64, and must give one process's loss at every step and its weights at the end
(each rank's slices of the split matrices, the rest whole). The GPT ties its head to its
token embedding, so the pipeline's two copies of that matrix are checked too.

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
from sitp.examples.parallel_gpt import (
    pipeline_loss,
    pipeline_stage,
    sequence_parallel_loss,
    sum_tied_grads,
    tensor_parallel_gpt,
)
from sitp.models.gpt import GPT, GPTConfig

CFG = GPTConfig(block_size=8, vocab_size=11, n_layer=2, n_head=4, n_embd=16)
B, T, STEPS, M = 4, 8, 3, 2  # rows, positions, AdamW steps, micro-batches
TOL = 1e-10


def _model():
    sitp.manual_seed(0)
    return GPT(CFG).double()


def _batches():
    rng = np.random.default_rng(0)
    return [
        (
            sitp.tensor(rng.integers(0, CFG.vocab_size, (B, T))),
            sitp.tensor(rng.integers(0, 11, (B, T))),
        )
        for _ in range(STEPS)
    ]


def _optimizer(model):
    return sitp.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)


def _one_process():
    """Losses at each step and the final weights of one process on the whole batch."""
    model, losses = _model(), []
    opt = _optimizer(model)
    for x, y in _batches():
        opt.zero_grad()
        _, loss = model(x, y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}


def _same(a, b, what):
    diff = float(np.abs(np.asarray(a) - np.asarray(b)).max())
    assert diff < TOL, (what, diff)


def _rank_slice(name, full, p, r):
    """This rank's part of the one-process weight ``name`` under tensor parallelism."""
    C = CFG.n_embd
    mine = slice(r * C // p, (r + 1) * C // p)
    if name.endswith("attn.c_attn.weight") or name.endswith("attn.c_attn.bias"):
        return np.concatenate([full[i * C : (i + 1) * C][mine] for i in range(3)])
    if name.endswith("attn.c_proj.weight"):
        return full[:, mine]
    k = full.shape[0] // p
    if name.endswith("mlp.c_fc.weight") or name.endswith("mlp.c_fc.bias"):
        return full[r * k : (r + 1) * k]
    if name.endswith("mlp.c_proj.weight"):
        k = full.shape[1] // p
        return full[:, r * k : (r + 1) * k]
    return full  # whole on every rank


def check_tensor(sequence_parallel: bool, accumulate: int = 1):
    """With ``accumulate`` > 1 the batch's rows go through in that many backward passes
    whose gradients add up in ``.grad`` (each loss scaled by its share of the rows)."""
    p, r = dist.get_world_size(), dist.get_rank()
    want_losses, want = _one_process()
    model = tensor_parallel_gpt(_model(), sequence_parallel=sequence_parallel)
    opt = _optimizer(model)
    for step, (x, y) in enumerate(_batches()):
        opt.zero_grad()
        whole, k = 0.0, B // accumulate
        for i in range(accumulate):
            xi, yi = x[i * k : (i + 1) * k], y[i * k : (i + 1) * k]
            if sequence_parallel:
                loss = sequence_parallel_loss(model, xi, yi) / accumulate
                part = loss.detach().clone()
                dist.all_reduce(part)  # the ranks' shares: these rows' loss
            else:
                _, loss = model(xi, yi)
                loss = loss / accumulate
                part = loss.detach()
            loss.backward()
            whole += part.item()
        opt.step()
        _same(whole, want_losses[step], f"loss at step {step}")
    got = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    assert set(got) == set(want), set(got) ^ set(want)
    split = 0
    for name, full in want.items():
        part = _rank_slice(name, full, p, r)
        split += part.shape != full.shape
        assert got[name].shape == part.shape, (name, got[name].shape, part.shape)
        _same(got[name], part, name)
    assert split == 6 * CFG.n_layer  # c_attn, c_fc (weight, bias), both c_proj weights


def check_pipeline(schedule_class):
    p, r = dist.get_world_size(), dist.get_rank()
    want_losses, want = _one_process()
    model = _model()
    stage_module = pipeline_stage(model, r, p)
    schedule = schedule_class(PipelineStage(stage_module, r, p), M, loss_fn=pipeline_loss)
    opt = _optimizer(stage_module)
    for step, (x, y) in enumerate(_batches()):
        opt.zero_grad()
        losses = []
        if r == 0:
            schedule.step(x)
        else:
            schedule.step(target=y, losses=losses)
        sum_tied_grads(stage_module)
        opt.step()
        if r == p - 1:  # equal micro-batches: the mean of theirs is the batch's
            _same(sum(v.item() for v in losses) / M, want_losses[step], f"loss at step {step}")
    names = {}
    for name, q in model.named_parameters(remove_duplicate=False):
        names.setdefault(id(q), []).append(name)
    held = list(stage_module.parameters())
    assert held, "a stage without parameters"
    for q in held:
        for name in names[id(q)]:
            _same(q.detach().numpy(), want[name], f"stage {r}: {name}")
    tied = model.transformer.wte.weight
    assert tied is model.lm_head.weight
    if r in (0, p - 1):  # each end holds a copy of the tied matrix
        assert any(q is tied for q in held), r


def main() -> None:
    dist_util.run_checks(
        (
            ("tensor", lambda: check_tensor(False)),
            ("sequence", lambda: check_tensor(True)),
            ("sequence-accumulated", lambda: check_tensor(True, accumulate=2)),
            ("gpipe", lambda: check_pipeline(ScheduleGPipe)),
            ("1f1b", lambda: check_pipeline(Schedule1F1B)),
        )
    )


# ------------------------------------------------------------------ the pytest side
CHECKS = ["tensor", "sequence", "sequence-accumulated", "gpipe", "1f1b"]


ranks_output, test_two_ranks = dist_util.rank_check_tests(__file__, CHECKS)


def test_refusals():
    for change, name in (({"rope": True}, "rope=True"), ({"dropout": 0.1}, "dropout=0.1")):
        model = GPT(GPTConfig(**{**vars(CFG), **change}))
        with pytest.raises(ValueError, match=name):
            tensor_parallel_gpt(model)
        with pytest.raises(ValueError, match=name):
            pipeline_stage(model, 0, 2)
    with pytest.raises(ValueError, match="3 stages"):
        pipeline_stage(GPT(CFG), 0, 3)
    with pytest.raises(ValueError, match="stage 2 of 2"):
        pipeline_stage(GPT(CFG), 2, 2)


if __name__ == "__main__":
    sys.exit(main())

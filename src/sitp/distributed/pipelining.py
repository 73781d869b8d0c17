"""Pipeline parallelism: ``PipelineStage``, ``ScheduleGPipe`` and ``Schedule1F1B``, torch's
names (torch.distributed.pipelining; chapter 7.6).

The model is cut into ``p`` consecutive pieces, one per rank: stage ``r`` runs its layers
on what stage ``r - 1`` sends it and sends its output to stage ``r + 1``; backward runs
the other way, each stage sending the gradient of its input back. One batch would keep
one stage busy at a time, so the batch is cut into ``m`` micro-batches that follow each
other down the pipe. The schedules differ in the order of a stage's forward (F) and
backward (B) passes:

- **GPipe** (Huang et al., 2019): every forward, then every backward. A stage keeps the
  activations of all ``m`` micro-batches until their backward.
- **1F1B** (PipeDream-Flush, Narayanan et al., 2021): stage ``r`` runs ``p - r - 1``
  forwards, then alternates one forward and one backward, then the backwards left. At
  most ``p - r`` micro-batches are in flight on stage ``r``: its activation memory is
  bounded by ``p``, not ``m``.

Both leave the same idle time, the *bubble*: the first stage waits ``p - 1`` steps for
the first gradient, the last waited ``p - 1`` steps for the first activation. With a
forward costing ``t_f`` and a backward ``t_b`` on every stage, a step takes ``(m + p -
1)(t_f + t_b)`` of which each stage computes ``m (t_f + t_b)``: idle over busy is ``(p -
1)/m``.

A step of either schedule accumulates each stage's parameter gradients over the
micro-batches, divided by ``m`` (torch's ``scale_grads=True``), so with a loss that is a
mean over a micro-batch's rows they are the gradients of the mean over the whole batch.

Messages: every send is an ``isend`` (waited for at the end of the step), so that two
neighbours sending to each other at once (1F1B's steady state) never wait on each
other; a tensor travels after a small header with its dtype and shape. ``timeline``
records each pass's start and end (``time.perf_counter``) on this rank, for the bubble.
"""

from __future__ import annotations

import time

from sitp import distributed as dist
from sitp import dtypes
from sitp._tensor import creation
from sitp._tensor.tensor import Tensor
from sitp.autograd import engine
from sitp.autograd.grad_mode import no_grad
from sitp.functional import cat

__all__ = ["PipelineStage", "Schedule1F1B", "ScheduleGPipe"]

_DTYPES = [dtypes.float32, dtypes.float64, dtypes.int64]
_HEADER = 10  # dtype code, ndim, up to 8 dims


class PipelineStage:
    """One stage of a pipeline: ``submodule`` on rank ``stage_index`` of ``num_stages``
    (one stage per rank of the default group, torch's simplest case)."""

    def __init__(self, submodule, stage_index: int, num_stages: int, device=None, group=None):
        if not dist.is_initialized():
            raise ValueError(
                "PipelineStage needs the default process group: call "
                "sitp.distributed.init_process_group() first"
            )
        p = dist.get_world_size(group)
        if num_stages != p or stage_index != dist.get_rank(group):
            raise ValueError(
                f"PipelineStage: sitp runs stage r on rank r of {p} ranks (got stage "
                f"{stage_index} of {num_stages} on rank {dist.get_rank(group)})"
            )
        self.submod, self.stage_index, self.num_stages = submodule, stage_index, num_stages
        self.group = group
        self.is_first, self.is_last = stage_index == 0, stage_index == num_stages - 1
        self._sends = []

    def _rank(self, stage: int) -> int:
        return stage if self.group is None else dist.get_global_rank(self.group, stage)

    def send(self, t: Tensor, stage: int) -> None:
        """Send ``t`` (a header, then its data) to ``stage``, without waiting."""
        t = t.detach().contiguous()
        head = [_DTYPES.index(t.dtype), t.dim(), *t.shape] + [0] * (_HEADER - 2 - t.dim())
        header = creation.tensor(head, dtype=dtypes.int64)
        dst = self._rank(stage)
        self._sends += [(dist.isend(header, dst), header), (dist.isend(t, dst), t)]

    def recv(self, stage: int) -> Tensor:
        """Receive the next tensor ``stage`` sent."""
        header = creation.zeros(_HEADER, dtype=dtypes.int64)
        src = self._rank(stage)
        dist.recv(header, src)
        code, ndim, *dims = [int(v) for v in header.tolist()]
        t = creation.empty(tuple(dims[:ndim]), dtype=_DTYPES[code])
        dist.recv(t, src)
        return t

    def wait_sends(self) -> None:
        for work, _ in self._sends:
            work.wait()
        self._sends = []


class _Schedule:
    """What both schedules share: the micro-batches, one forward and one backward pass,
    the step's end."""

    def __init__(self, stage: PipelineStage, n_microbatches: int, loss_fn=None, scale_grads=True):
        if n_microbatches < 1:
            raise ValueError(f"n_microbatches must be at least 1 (got {n_microbatches})")
        if stage.is_last and loss_fn is None:
            raise ValueError("the last stage's schedule needs a loss_fn(output, target)")
        self.stage, self.m, self.loss_fn, self.scale_grads = (
            stage,
            n_microbatches,
            loss_fn,
            scale_grads,
        )
        self.timeline: list[tuple[str, int, float, float]] = []  # (F or B, micro-batch, start, end)
        self.max_in_flight = 0  # the most micro-batches whose activations were kept at once

    def _split(self, x):
        if x is None:
            return [None] * self.m
        if x.shape[0] % self.m:
            raise ValueError(
                f"a batch of {x.shape[0]} rows cannot be cut into {self.m} equal micro-batches"
            )
        k = x.shape[0] // self.m
        return [x[i * k : (i + 1) * k] for i in range(self.m)]

    def _forward(self, i: int) -> None:
        st = self.stage
        x = self._inputs[i] if st.is_first else st.recv(st.stage_index - 1)
        if not st.is_first:
            x.requires_grad = True
        start = time.perf_counter()
        out = st.submod(x)
        if st.is_last:
            loss = self.loss_fn(out, self._targets[i])
            self._outputs[i] = out.detach()
            if self._losses is not None:
                self._losses.append(loss.detach())
            out = loss
        self.timeline.append(("F", i, start, time.perf_counter()))
        self._kept[i] = (x, out)
        self.max_in_flight = max(self.max_in_flight, len(self._kept))
        if not st.is_last:
            st.send(out, st.stage_index + 1)

    def _backward(self, i: int) -> None:
        st = self.stage
        x, out = self._kept.pop(i)
        grad = None if st.is_last else st.recv(st.stage_index + 1)
        start = time.perf_counter()
        if st.is_last:  # the loss's gradient, 1/m: every stage's gradients are scaled
            scale = 1.0 / self.m if self.scale_grads else 1.0
            engine.backward(out, creation.full((), scale, dtype=out.dtype))
        else:
            engine.backward(out, grad)
        self.timeline.append(("B", i, start, time.perf_counter()))
        if not st.is_first:
            st.send(x.grad, st.stage_index - 1)

    def step(self, *args, target=None, losses=None):
        """One training step on a batch: the first stage passes it (``step(x)``), the last
        passes ``target=`` (and may pass ``losses=[]`` to receive each micro-batch's loss),
        the others nothing. Returns the last stage's output (the micro-batches'
        outputs concatenated), None elsewhere."""
        st = self.stage
        self._inputs = self._split(args[0] if st.is_first else None)
        self._targets = self._split(target if st.is_last else None)
        self._losses, self._kept, self._outputs = losses, {}, [None] * self.m
        self.timeline, self.max_in_flight = [], 0
        self._run()
        st.wait_sends()
        if st.is_last:
            with no_grad():
                return cat(self._outputs)
        return None

    def _run(self) -> None:
        raise NotImplementedError


# --8<-- [start:schedules]
class ScheduleGPipe(_Schedule):
    """Every micro-batch's forward, then every backward (in reverse order)."""

    def _run(self) -> None:
        for i in range(self.m):
            self._forward(i)
        for i in reversed(range(self.m)):
            self._backward(i)


class Schedule1F1B(_Schedule):
    """``p - r - 1`` forwards, then one forward and one backward in turn, then the
    backwards left: at most ``p - r`` micro-batches in flight on stage ``r``."""

    def _run(self) -> None:
        p, r = self.stage.num_stages, self.stage.stage_index
        warmup = min(p - r - 1, self.m)
        f = b = 0
        for _ in range(warmup):
            self._forward(f)
            f += 1
        while f < self.m:
            self._forward(f)
            f += 1
            self._backward(b)
            b += 1
        while b < self.m:
            self._backward(b)
            b += 1


# --8<-- [end:schedules]

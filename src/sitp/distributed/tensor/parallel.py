"""Tensor parallelism, Megatron-style (Shoeybi et al., 2019; chapter 7.5):
``parallelize_module`` with ``ColwiseParallel`` and ``RowwiseParallel``, torch's names
(torch.distributed.tensor.parallel).

A ``Linear`` computes ``y = x W^T + b`` with ``W`` of shape (out, in). Split across ``p``
ranks two ways:

- **column-parallel** (``ColwiseParallel``): rank ``r`` keeps rows ``r`` of ``p`` of ``W``
  (and of ``b``): out/p output features. Its input is the whole ``x``; its output is its
  slice of ``y``'s features. No communication forward; backward, each rank's gradient
  of ``x`` covers only its features, so they are summed over the ranks (an all-reduce).
- **row-parallel** (``RowwiseParallel``): rank ``r`` keeps columns ``r`` of ``p`` of
  ``W`` (in/p input features). Its input is that slice of ``x``'s features (what a
  column-parallel layer before it produced); each rank's product is a partial sum of
  ``y``, summed over the ranks (an all-reduce) before the bias, which every rank keeps
  whole. Backward needs no communication.

A column-parallel layer followed by a row-parallel one (the MLP's ``c_fc`` and
``c_proj``; attention's ``c_attn``, split by heads, and ``c_proj``) keeps whatever runs
between them, GELU or attention for ``H/p`` heads, on the local slice: one all-reduce
forward and one backward per pair. Megatron names the two as the functions ``f``
(:func:`copy_to_parallel`: identity forward, all-reduce backward) and ``g``
(:func:`reduce_from_parallel`: all-reduce forward, identity backward).

sitp has no DTensor: a parallelized ``Linear``'s weight *is* the local slice (a plain
tensor of shape (out/p, in) or (out, in/p)), as with torch's ``use_local_output=True``
and ``.to_local()``. The layouts are the styles' defaults (Megatron's), not options;
``device_mesh`` is a 1-D :class:`~sitp.distributed.device_mesh.DeviceMesh` (one dimension
of a larger mesh, for tensor parallelism inside data parallelism), a process group, or
None (the default group).
"""

from __future__ import annotations

import fnmatch
import types

from sitp import distributed as dist
from sitp._tensor import creation
from sitp.autograd.function import Function
from sitp.autograd.grad_mode import no_grad
from sitp.distributed.device_mesh import group_of
from sitp.distributed.tensor import Replicate, Shard

__all__ = [
    "ColwiseParallel",
    "ParallelStyle",
    "RowwiseParallel",
    "SequenceParallel",
    "copy_to_parallel",
    "gather_from_sequence_parallel",
    "parallelize_module",
    "reduce_from_parallel",
    "reduce_scatter_to_sequence_parallel",
]


# --8<-- [start:f_and_g]
class _CopyToParallel(Function):
    """Megatron's f: the identity forward; backward, the ranks' gradients summed."""

    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return x._alias(x.shape, x._strides, x._offset)

    @staticmethod
    def backward(ctx, grad):
        grad = grad.contiguous().clone()
        dist.all_reduce(grad, group=ctx.group)
        return grad, None


class _ReduceFromParallel(Function):
    """Megatron's g: forward, the ranks' partial sums summed; backward, the identity."""

    @staticmethod
    def forward(ctx, x, group):
        out = x.contiguous().clone()
        dist.all_reduce(out, group=group)
        return out

    @staticmethod
    def backward(ctx, grad):
        return grad, None


# --8<-- [end:f_and_g]


# --8<-- [start:sequence]
def _all_gather_seq(x, group):
    """(B, T/p, ...) on each rank -> (B, T, ...) on every rank, the ranks' pieces in order."""
    p = dist.get_world_size(group)
    x = x.contiguous()
    out = creation.empty((p, *x.shape), dtype=x.dtype)  # (p, B, T/p, ...)
    dist.all_gather_into_tensor(out, x, group=group)
    B, t = x.shape[0], x.shape[1]
    return out.transpose(0, 1).reshape(B, p * t, *x.shape[2:])


def _reduce_scatter_seq(x, group):
    """(B, T, ...) partial sums on each rank -> this rank's (B, T/p, ...) of their sum."""
    p = dist.get_world_size(group)
    B, T, rest = x.shape[0], x.shape[1], tuple(x.shape[2:])
    if T % p:
        raise ValueError(f"a sequence of {T} positions cannot be split over {p} ranks")
    pieces = x.reshape(B, p, T // p, *rest).transpose(0, 1).contiguous()  # (p, B, T/p, ...)
    out = creation.empty((B, T // p, *rest), dtype=x.dtype)
    dist.reduce_scatter_tensor(out, pieces, group=group)
    return out


class _GatherSequence(Function):
    """Into a tensor-parallel region: all-gather the sequence; backward, reduce-scatter."""

    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return _all_gather_seq(x, group)

    @staticmethod
    def backward(ctx, grad):
        return _reduce_scatter_seq(grad, ctx.group), None


class _ReduceScatterSequence(Function):
    """Out of a tensor-parallel region: reduce-scatter along the sequence; backward,
    all-gather."""

    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return _reduce_scatter_seq(x, group)

    @staticmethod
    def backward(ctx, grad):
        return _all_gather_seq(grad, ctx.group), None


# --8<-- [end:sequence]


def gather_from_sequence_parallel(x, group=None):
    """Megatron's ``g`` of sequence parallelism: the ranks' (B, T/p, C) pieces all-gathered
    into (B, T, C); backward, the gradient reduce-scattered back to the pieces."""
    return _GatherSequence.apply(x, group)


def reduce_scatter_to_sequence_parallel(x, group=None):
    """Megatron's ``g-bar``: the ranks' partial (B, T, C) sums reduce-scattered along the
    sequence into (B, T/p, C); backward, the gradient all-gathered."""
    return _ReduceScatterSequence.apply(x, group)


def copy_to_parallel(x, group=None):
    """Megatron's ``f``: ``x`` unchanged; its gradient summed over the group's ranks."""
    return _CopyToParallel.apply(x, group)


def reduce_from_parallel(x, group=None):
    """Megatron's ``g``: ``x`` summed over the group's ranks; its gradient unchanged."""
    return _ReduceFromParallel.apply(x, group)


class ParallelStyle:
    """How one module is split (torch's base class of the styles)."""

    def _apply(self, module, group):
        raise NotImplementedError


def _check_linear(module, style: str) -> None:
    w = getattr(module, "weight", None)
    if w is None or w.dim() != 2 or not hasattr(module, "bias"):
        raise ValueError(
            f"{style} splits a Linear (a 2-D weight and a bias, possibly None); got "
            f"{type(module).__name__}"
        )


def _split(t, dim: int, p: int, r: int, name: str):
    n = t.shape[dim]
    if n % p:
        raise ValueError(f"{name} has {n} entries along dim {dim}, not a multiple of {p} ranks")
    k = n // p
    part = t[r * k : (r + 1) * k] if dim == 0 else t[:, r * k : (r + 1) * k]
    return part.contiguous().clone()


# --8<-- [start:styles]
class ColwiseParallel(ParallelStyle):
    """Split a ``Linear``'s output features: rank ``r`` keeps rows ``r`` of ``p`` of the
    weight and the bias; its input is the whole ``x`` and its output its slice of the
    features (torch's defaults: ``input_layouts=Replicate()``,
    ``output_layouts=Shard(-1)``, ``use_local_output=True``). ``input_layouts=Shard(1)``:
    the input comes split along the sequence (sequence parallelism) and is all-gathered."""

    def __init__(self, *, input_layouts=None, output_layouts=None, use_local_output=True):
        self.seq_input = _layout(input_layouts, Replicate(), "ColwiseParallel", "input_layouts")
        _layout(output_layouts, Shard(-1), "ColwiseParallel", "output_layouts")
        if use_local_output is not True:
            raise NotImplementedError("sitp has no DTensor: use_local_output must be True")

    def _apply(self, module, group):
        _check_linear(module, "ColwiseParallel")
        p, r = dist.get_world_size(group), dist.get_rank(group)
        with no_grad():
            module.weight.data = _split(module.weight.detach(), 0, p, r, "the weight")
            if module.bias is not None:
                module.bias.data = _split(module.bias.detach(), 0, p, r, "the bias")

        enter = gather_from_sequence_parallel if self.seq_input else copy_to_parallel

        def forward(self, x):
            y = enter(x, group) @ self.weight.t()  # (..., out/p)
            return y if self.bias is None else y + self.bias

        object.__setattr__(module, "forward", types.MethodType(forward, module))


class RowwiseParallel(ParallelStyle):
    """Split a ``Linear``'s input features: rank ``r`` keeps columns ``r`` of ``p`` of the
    weight and the whole bias; its input is its slice of the features, and the partial
    products are summed over the ranks before the bias (torch's defaults:
    ``input_layouts=Shard(-1)``, ``output_layouts=Replicate()``). ``output_layouts=Shard(1)``:
    the sums are reduce-scattered along the sequence instead (sequence parallelism)."""

    def __init__(self, *, input_layouts=None, output_layouts=None, use_local_output=True):
        _layout(input_layouts, Shard(-1), "RowwiseParallel", "input_layouts")
        self.seq_output = _layout(output_layouts, Replicate(), "RowwiseParallel", "output_layouts")
        if use_local_output is not True:
            raise NotImplementedError("sitp has no DTensor: use_local_output must be True")

    def _apply(self, module, group):
        _check_linear(module, "RowwiseParallel")
        p, r = dist.get_world_size(group), dist.get_rank(group)
        with no_grad():
            module.weight.data = _split(module.weight.detach(), 1, p, r, "the weight")

        leave = reduce_scatter_to_sequence_parallel if self.seq_output else reduce_from_parallel
        seq_output = self.seq_output

        def forward(self, x):
            y = leave(x @ self.weight.t(), group)  # the partial sums, summed
            if self.bias is None:
                return y
            # on this rank's positions only, the bias's gradient is a part: f sums it
            return y + (copy_to_parallel(self.bias, group) if seq_output else self.bias)

        object.__setattr__(module, "forward", types.MethodType(forward, module))


class SequenceParallel(ParallelStyle):
    """A layer that works on each position alone (a layer norm, a dropout) run on this
    rank's positions only, ``(B, T/p, C)``, with its weights whole on every rank (torch's
    ``SequenceParallel()``, sequence dimension 1). Each rank's weight gradient covers its
    positions: during the call the layer reads each weight through Megatron's ``f``,
    whose backward sums that part over the ranks before it reaches ``.grad`` (so that
    gradients accumulated over micro-batches are summed once each)."""

    def _apply(self, module, group):
        for m in module.modules():  # the layer, and any layer inside it with weights
            if any(q is not None for q in m._parameters.values()):
                _read_through_f(m, group)


def _read_through_f(module, group) -> None:
    """During ``module``'s call its own weights are read through ``f``."""
    inner = module.forward

    def forward(self, *args, **kwargs):
        own = dict(self._parameters)
        try:
            for name, q in own.items():
                if q is not None and q.requires_grad:
                    self._parameters[name] = copy_to_parallel(q, group)
            return inner(*args, **kwargs)
        finally:
            self._parameters.update(own)

    object.__setattr__(module, "forward", types.MethodType(forward, module))


# --8<-- [end:styles]


def _layout(given, default, style: str, name: str) -> bool:
    """True for a sequence-sharded layout (``Shard(1)``), False for the default."""
    if given is None or given == default:
        return False
    if given == Shard(1):
        return True
    raise NotImplementedError(
        f"{style}: {name}={given!r} is not implemented (sitp takes {default!r}, the "
        "default, or Shard(1) for sequence parallelism)"
    )


def parallelize_module(module, device_mesh=None, parallelize_plan=None, *, src_data_rank=0):
    """Split ``module``'s layers across the ranks by ``parallelize_plan``, in place.

    Args:
        module: the model (every rank builds the same one).
        device_mesh: the ranks to split across: a 1-D DeviceMesh (``mesh["tp"]`` of a
            2-D one), a process group, or None (the default group).
        parallelize_plan: a style for ``module`` itself, or a dict from a submodule's
            dotted name (``fnmatch`` patterns allowed, as torch's) to a style.
        src_data_rank: the rank, within ``device_mesh``, whose weights are broadcast
            before the split (torch's default 0); None keeps each rank's own.

    Returns:
        The module.
    """
    if parallelize_plan is None:
        raise ValueError("parallelize_module: give a parallelize_plan (a style or a dict of them)")
    if not dist.is_initialized():
        raise ValueError(
            "parallelize_module needs the default process group: call "
            "sitp.distributed.init_process_group() first"
        )
    group = group_of(device_mesh, "parallelize_module", ("tensor-parallel", "tp"))
    if src_data_rank is not None:
        with no_grad():
            for q in module.parameters():
                dist.broadcast(q.data, group=group, group_src=src_data_rank)
    if isinstance(parallelize_plan, ParallelStyle):
        parallelize_plan._apply(module, group)
        return module
    if not isinstance(parallelize_plan, dict):
        raise TypeError(
            "parallelize_module: parallelize_plan must be a ParallelStyle or a dict of them "
            f"(got {type(parallelize_plan).__name__})"
        )
    names = dict(module.named_modules())
    for pattern, style in parallelize_plan.items():
        if not isinstance(style, ParallelStyle):
            raise TypeError(f"parallelize_module: the plan's {pattern!r} is not a ParallelStyle")
        hits = [n for n in names if n and fnmatch.fnmatchcase(n, pattern)]
        if not hits:
            raise ValueError(f"parallelize_module: no submodule matches {pattern!r}")
        for n in hits:
            style._apply(names[n], group)
    return module

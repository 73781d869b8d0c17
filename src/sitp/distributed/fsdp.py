"""ZeRO-3, fully sharded data parallelism: ``fully_shard`` (torch.distributed.fsdp's
name; chapter 7.4).

ZeRO-1 and -2 (``zero.py``) shard what the optimizer keeps and the gradients; every rank
still holds every weight. ZeRO-3 shards the weights too. Each module given to
:func:`fully_shard` becomes a *unit*: its parameters (those not in a unit of its own
below it) are laid end to end in one flat buffer, padded with zeros to a multiple of
``p`` ranks and cut into ``p`` equal chunks; rank ``r`` keeps chunk ``r``, the unit's
*shard*, and nothing else. The shard is the parameter the optimizer sees:
``module.parameters()`` yields the shards (as torch's FSDP2 yields sharded DTensors), so
``AdamW(model.parameters())`` keeps moments for ``1/p`` of the model.

Around each unit's forward:

- **before** it, the unit's flat buffer is allocated and all-gathered from the shards
  (``unshard``), and each original parameter points into it again;
- **after** it, the buffer is freed (``reshard``): its memory pages are handed back to
  the operating system (``madvise(MADV_DONTNEED)`` on the anonymous mapping it lives in),
  as torch's FSDP resizes an unsharded parameter's storage to zero. The addresses stay
  valid: the autograd graph still holds the parameters it saved, and every view of them
  (a layer norm keeps a numpy view of its weight), now reading zeros and using no memory;
- **before the unit's backward** (an identity node on its outputs, whose backward runs
  first), the buffer is gathered again at the same addresses, so everything saved holds
  its values once more;
- **after it** (each parameter's post-accumulate-grad hook), the unit's gradients are
  laid out as the buffer was, reduce-scattered (the average over the ranks, chunk ``r``
  to rank ``r``, accumulated into the shard's ``.grad``), and freed with the buffer.

*Prefetch*: the order of the units is recorded in the first forward; from then on each
unit starts the all-gather of the next one (in forward; of the one before it, in
backward) as it begins, so that at most two units are gathered at once besides the
root's.

Per step each rank sends ``(p - 1)/p`` of the padded parameters three times (the gather
before forward, the gather before backward, the reduce-scatter): ``3 (p - 1)/p`` of the
model, 1.5 times DDP's all-reduce. ``reshard_after_forward=False`` keeps each unit
gathered from its forward to its backward (torch's option: ZeRO-2's traffic, ``2 (p -
1)/p``, and more memory).

Shortcuts, said once: CPU tensors of one dtype per unit (the buffer is a numpy array
over an anonymous ``mmap``; where ``madvise`` is missing, freeing is only counted); the
default process group (no DeviceMesh, no hybrid sharding, no mixed precision policy); a
parameter that is resharded reads zeros until :meth:`FSDPModule.unshard`
(``full_state_dict`` gathers every weight); apply ``fully_shard`` after ``.to(dtype)``,
bottom-up (the blocks, then the root), as torch requires.

The instruments: :func:`unsharded_bytes` and :func:`max_unsharded_bytes` (the gathered
buffers alive on this rank, now and at most); the shards are fixed at ``1/p`` of the
padded model.
"""

from __future__ import annotations

import mmap
import weakref

import numpy as np

from sitp import distributed as dist
from sitp._tensor import creation
from sitp._tensor.tensor import Tensor
from sitp.autograd import engine
from sitp.autograd.function import Function
from sitp.autograd.grad_mode import is_grad_enabled, no_grad
from sitp.strides import contiguous_strides

__all__ = [
    "FSDPModule",
    "fully_shard",
    "full_state_dict",
    "unsharded_bytes",
    "max_unsharded_bytes",
    "reset_max_unsharded_bytes",
]

# ------------------------------------------------------------------ the instrument
_LIVE: dict[int, int] = {}  # id(unit) -> bytes of its gathered buffer, while gathered
_PEAK = [0]


def unsharded_bytes() -> int:
    """Bytes of gathered (unsharded) parameter buffers alive on this rank now."""
    return sum(_LIVE.values())


def max_unsharded_bytes() -> int:
    """The most bytes of gathered parameter buffers alive at once on this rank since the
    last :func:`reset_max_unsharded_bytes` (as ``torch.cuda.max_memory_allocated``)."""
    return _PEAK[0]


def reset_max_unsharded_bytes() -> None:
    _PEAK[0] = unsharded_bytes()


# ------------------------------------------------------------------ one unit
_SHARDS: weakref.WeakValueDictionary = weakref.WeakValueDictionary()  # id -> shard
_UNITS: weakref.WeakSet = weakref.WeakSet()
_SERIAL = [0]  # units are numbered as made: the same order on every rank
_FORWARD: list | None = None  # the units of the forward in progress, in order
_CALLBACK_QUEUED = [False]
_DONTNEED = getattr(mmap, "MADV_DONTNEED", None) if hasattr(mmap.mmap, "madvise") else None


class _PreBackward(Function):
    """The identity on a unit's output; its backward, the first of the unit's to run,
    gathers the unit's parameters again."""

    @staticmethod
    def forward(ctx, unit, x):
        ctx.unit = unit
        return x._alias(x.shape, x._strides, x._offset)

    @staticmethod
    def backward(ctx, grad):
        ctx.unit.pre_backward()
        return None, grad


# --8<-- [start:unit]
class _Unit:
    """The parameters of one ``fully_shard``-ed module: a flat, padded buffer of
    ``padded = p * chunk`` elements, of which this rank keeps ``shard`` (chunk ``rank``)."""

    def __init__(self, module, reshard_after_forward: bool):
        self.module = module
        self.reshard_after_forward = reshard_after_forward
        found, index = [], {}
        for prefix, m in module.named_modules():
            for name, q in list(m._parameters.items()):
                if q is None or _SHARDS.get(id(q)) is q:  # a unit below owns it
                    continue
                if id(q) not in index:  # a tied weight is laid out once
                    index[id(q)] = len(found)
                    found.append((q, f"{prefix}.{name}" if prefix else name))
                del m._parameters[name]
                object.__setattr__(m, name, q)  # forward still finds m.<name>
        if not found:
            raise ValueError(
                f"fully_shard: {type(module).__name__} has no parameters of its own (units "
                "below it took them all)"
            )
        self.params = [q for q, _ in found]
        self.names = [n for _, n in found]
        kinds = {(q.dtype, q.device.type) for q in self.params}
        if len(kinds) > 1 or any(dev != "cpu" for _, dev in kinds):
            raise ValueError(
                f"fully_shard needs the unit's parameters on the CPU in one dtype (got {kinds})"
            )
        p, self.rank = dist.get_world_size(), dist.get_rank()
        self.dtype = self.params[0].dtype
        self.offsets, at = [], 0
        for q in self.params:
            self.offsets.append(at)
            at += q.numel()
        self.numel = at
        self.chunk = -(-at // p)  # ceil
        self.padded = p * self.chunk
        # The gathered buffer: a numpy array over an anonymous mapping, whose pages are
        # handed back to the system to free it (its addresses stay valid)
        self._map = mmap.mmap(-1, max(self.padded * self.dtype.itemsize, 1))
        self.flat = np.frombuffer(self._map, self.dtype.np, count=self.padded)
        self.flat_t = Tensor._make(self.flat, (self.padded,), (1,), 0, self.dtype)
        with no_grad():
            for q, off in zip(self.params, self.offsets):
                self.flat[off : off + q.numel()] = q.detach()._np().reshape(-1)
            if self.padded:
                dist.broadcast(self.flat_t, src=0)  # rank 0's values, as DDP
            start = self.rank * self.chunk
            mine = self.flat[start : start + self.chunk].copy()
            self.shard = Tensor._make(mine, (self.chunk,), (1,), 0, self.dtype)
        self.shard.requires_grad = True
        _SHARDS[id(self.shard)] = self.shard
        for q, off in zip(self.params, self.offsets):  # each parameter: a view of the buffer
            q._storage, q._offset = self.flat, off
            q._strides = contiguous_strides(tuple(q.shape))
            q.grad = None
        self.state = "unsharded"
        self.work = None
        self.next_forward = self.next_backward = None  # prefetch targets, once known
        self.in_backward = False
        self.ready = 0
        _LIVE[id(self)] = self.flat.nbytes
        self.hooks = [
            engine.register_post_accumulate_grad_hook(q, self.on_grad) for q in self.params
        ]
        _SERIAL[0] += 1
        self.serial = _SERIAL[0]
        _UNITS.add(self)

    # --8<-- [end:unit]
    def _track(self) -> None:
        if self.state == "sharded":
            _LIVE.pop(id(self), None)
        else:
            _LIVE[id(self)] = self.padded * self.dtype.itemsize
        _PEAK[0] = max(_PEAK[0], unsharded_bytes())

    # --8<-- [start:gather]
    def unshard(self, async_op: bool = False) -> None:
        """Allocate the buffer and all-gather the shards into it (``async_op``: start the
        gather and return; the next ``unshard`` waits for it)."""
        if self.state == "sharded":  # the same addresses; the pages come back as written
            self.state = "gathering"
            self._track()
            self.work = dist.all_gather_into_tensor(self.flat_t, self.shard.detach(), async_op=True)
        if self.state == "gathering" and not async_op:
            self.work.wait()
            self.work, self.state = None, "unsharded"

    def reshard(self) -> None:
        """Free the buffer: every parameter of the unit keeps its shape and address, and
        its memory goes back to the operating system (the pages read zeros until the next
        gather)."""
        if self.state == "gathering":
            self.work.wait()
            self.work = None
        if self.state != "sharded":
            if _DONTNEED is not None:
                self._map.madvise(_DONTNEED)
            self.state = "sharded"
            self._track()

    # --8<-- [end:gather]
    def pre_forward(self) -> bool:
        global _FORWARD
        root = _FORWARD is None
        _FORWARD = [self] if root else _FORWARD + [self]
        self.unshard()
        if self.next_forward is not None:
            self.next_forward.unshard(async_op=True)  # prefetch
        return root

    def post_forward(self, out, root: bool):
        global _FORWARD
        if is_grad_enabled():
            out = _map(out, lambda t: _PreBackward.apply(self, t) if t.requires_grad else t)
        if self.reshard_after_forward:
            self.reshard()
        if root:  # the order of this forward: next time, each unit prefetches the next
            order, _FORWARD = _FORWARD, None
            backward = order[:1] + order[:0:-1]  # the root first (its output), then reversed
            for seq, attr in ((order, "next_forward"), (backward, "next_backward")):
                for a, b in zip(seq, seq[1:] + [None]):
                    setattr(a, attr, b)
        return out

    # --8<-- [start:backward]
    def pre_backward(self) -> None:
        if self.in_backward:  # another output of the unit got there first
            return
        self.in_backward = True
        if not _CALLBACK_QUEUED[0]:
            _CALLBACK_QUEUED[0] = True
            engine.queue_callback(_end_of_backward)
        self.unshard()
        if self.next_backward is not None:
            self.next_backward.unshard(async_op=True)  # prefetch

    def on_grad(self, q) -> None:
        """A parameter's gradient is complete; the last one reduces the unit's."""
        self.ready += 1
        if self.ready == len(self.params):
            self.reduce_grads()

    def reduce_grads(self) -> None:
        """Average the unit's gradients over the ranks into the shard's ``.grad`` (a
        reduce-scatter of the flat, padded gradient), free them and the buffer."""
        with no_grad():
            flat = np.zeros(self.padded, self.dtype.np)
            for q, off in zip(self.params, self.offsets):
                if q.grad is not None:
                    flat[off : off + q.numel()] = q.grad._np().reshape(-1)
                    q.grad = None
            flat = Tensor._make(flat, (self.padded,), (1,), 0, self.dtype)
            mine = creation.empty(self.chunk, dtype=self.dtype)
            dist.reduce_scatter_tensor(mine, flat, op=dist.ReduceOp.AVG)
            if self.shard.grad is None:
                self.shard.grad = mine
            else:
                self.shard.grad.add_(mine)
        self.ready, self.in_backward = 0, False
        self.reshard()

    # --8<-- [end:backward]


def _end_of_backward() -> None:
    """When backward ends: a unit some of whose parameters got no gradient reduces what it
    has (zeros for the rest, on every rank alike); a prefetched buffer is freed."""
    _CALLBACK_QUEUED[0] = False
    units = sorted(_UNITS, key=lambda u: u.serial)
    for unit in units:
        if unit.in_backward:
            unit.reduce_grads()
    for unit in units:
        if unit.state != "sharded" and unit.reshard_after_forward:
            unit.reshard()


def _map(out, f):
    """``f`` applied to every floating-point tensor of a forward's output."""
    if isinstance(out, Tensor):
        return f(out) if out.dtype.is_floating_point else out
    if isinstance(out, (tuple, list)):
        return type(out)(_map(o, f) for o in out)
    if isinstance(out, dict):
        return {k: _map(v, f) for k, v in out.items()}
    return out


# ------------------------------------------------------------------ the module side
class FSDPModule:
    """The class ``fully_shard`` mixes into a module's (torch's ``FSDPModule``): its call
    gathers the unit's parameters before forward and frees them after."""

    def __call__(self, *args, **kwargs):
        global _FORWARD
        unit = self.__dict__["_fsdp_unit"]
        root = unit.pre_forward()
        try:
            out = super().__call__(*args, **kwargs)
        except BaseException:
            if root:
                _FORWARD = None
            raise
        return unit.post_forward(out, root)

    def unshard(self, async_op: bool = False) -> None:
        """Gather this module's parameters (not those of units below it)."""
        self.__dict__["_fsdp_unit"].unshard(async_op)

    def reshard(self) -> None:
        """Free this module's gathered parameters."""
        self.__dict__["_fsdp_unit"].reshard()


_CLASSES: dict = {}


def fully_shard(module, *, mesh=None, reshard_after_forward: bool = True):
    """Shard ``module``'s parameters over the default process group (ZeRO-3); returns
    the module, whose class now also derives from :class:`FSDPModule`.

    Call it on each block first, then on the root (torch's order): a unit takes the
    parameters that no unit below it has taken. Every rank calls it with the same model;
    rank 0's values are broadcast.

    Args:
        module: an ``nn.Module``, after any ``.to(dtype)``.
        mesh: must be None (sitp shards over the default process group; torch's
            DeviceMesh is not implemented).
        reshard_after_forward: free the gathered parameters after forward (ZeRO-3, the
            default) or keep them until backward has used them.
    """
    if mesh is not None:
        raise NotImplementedError(
            "fully_shard: sitp shards over the default process group; mesh must be None"
        )
    if not isinstance(reshard_after_forward, bool):
        raise TypeError(
            f"fully_shard: reshard_after_forward must be a bool (got {reshard_after_forward!r})"
        )
    if not dist.is_initialized():
        raise ValueError(
            "fully_shard needs the default process group: call "
            "sitp.distributed.init_process_group() first"
        )
    if not hasattr(module, "named_modules") or not hasattr(module, "_parameters"):
        raise TypeError(f"fully_shard: expected an nn.Module (got {type(module).__name__})")
    if isinstance(module, FSDPModule):
        raise ValueError(f"fully_shard: {type(module).__name__} is sharded already")
    unit = _Unit(module, reshard_after_forward)
    object.__setattr__(module, "_fsdp_unit", unit)
    module._parameters["_flat_param"] = unit.shard  # what module.parameters() yields
    cls = type(module)
    if cls not in _CLASSES:
        _CLASSES[cls] = type(f"FSDP{cls.__name__}", (FSDPModule, cls), {})
    module.__class__ = _CLASSES[cls]
    unit.reshard()
    return module


def full_state_dict(module) -> dict:
    """Every parameter of a sharded model at its original name, gathered (a collective:
    every rank calls it; each gets copies). For checks and checkpoints."""
    out = {}
    for prefix, m in module.named_modules():
        unit = m.__dict__.get("_fsdp_unit")
        if unit is None:
            continue
        was = unit.state
        unit.unshard()
        for q, name in zip(unit.params, unit.names):
            out[f"{prefix}.{name}" if prefix else name] = q.detach().clone()
        if was == "sharded":
            unit.reshard()
    return out

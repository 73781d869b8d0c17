"""``DistributedDataParallel``: data parallelism with gradients all-reduced in buckets
while backward runs (chapter 7.2), as ``torch.nn.parallel.DistributedDataParallel``.

Every rank holds the whole model and runs it on its own slice of the batch. The model
starts identical on all ranks (rank 0's parameters and buffers are broadcast when it is
wrapped); after each backward every gradient is the average over the ranks, so the same
optimizer step keeps the copies identical. With a loss that is a mean over the batch,
``p`` ranks with batches of ``B`` take the steps one process takes with batches of
``p B``.

The average is formed while backward still runs. The parameters are grouped into
*buckets* of about ``bucket_cap_mb`` megabytes, in reverse order of ``parameters()``:
backward produces the last layer's gradients first. A hook on each parameter
(:func:`sitp.autograd.engine.register_post_accumulate_grad_hook`) copies its finished
gradient into its bucket; once a bucket is full, one non-blocking ``all_reduce`` starts
on it and backward goes on to earlier layers while MPI adds. The buckets are started in
their order on every rank (MPI requires the same order of collectives everywhere). A
callback queued on the engine (:func:`sitp.autograd.engine.queue_callback`) waits for
them at the end of ``backward()`` and writes the averages into ``.grad``. Waiting there,
rather than at the optimizer step, means that whatever reads the gradients between
``backward()`` and ``step()`` (``clip_grad_norm_``, a printed gradient norm) sees the
averaged ones, as under torch. MPI advances a non-blocking collective only while the
process is inside an MPI call (MPICH runs no progress thread unless
``MPICH_ASYNC_PROGRESS=1``), so each hook also asks the buckets in flight whether they
have finished (``MPI_Test``), which moves them along.

Shortcuts, each said where it is taken: the buckets are laid out in reverse parameter
order from the first step (torch starts in parameter order and rebuilds them after the
first backward in the order the gradients arrived); a parameter that receives no
gradient is reported at the end of that backward, not at the next forward.
"""

from __future__ import annotations

import contextlib

from sitp import distributed as dist
from sitp._tensor import creation
from sitp._tensor.tensor import Tensor
from sitp.autograd import engine
from sitp.autograd.grad_mode import is_grad_enabled, no_grad
from sitp.distributed.device_mesh import group_of
from sitp.nn.modules.module import Module

_FIRST_BUCKET_BYTES = 1024 * 1024  # torch's dist._DEFAULT_FIRST_BUCKET_BYTES: start early
_DEFAULT_BUCKET_CAP_MB = 25


# --8<-- [start:buckets]
def assign_buckets(params, bucket_cap_bytes: int, first_bucket_bytes: int = _FIRST_BUCKET_BYTES):
    """Group ``params`` into buckets, walking them in reverse (the order backward produces
    their gradients); one open bucket per dtype and device, closed once it holds at least
    its cap in bytes. The first bucket of each kind is capped at ``first_bucket_bytes`` so
    that the first all-reduce starts soon after backward begins.

    Returns a list of buckets, each a list of indices into ``params``.
    """
    buckets, open_, sizes, caps = [], {}, {}, {}
    for i in reversed(range(len(params))):
        p = params[i]
        key = (p.dtype, p.device)
        open_.setdefault(key, []).append(i)
        sizes[key] = sizes.get(key, 0) + p.numel() * p.element_size()
        if sizes[key] >= caps.setdefault(key, first_bucket_bytes):
            buckets.append(open_.pop(key))
            sizes[key], caps[key] = 0, bucket_cap_bytes
    buckets.extend(b for b in open_.values() if b)
    return buckets


class _Bucket:
    """Gradients reduced together: one flat tensor, and a view of it per parameter."""

    def __init__(self, params):
        self.params = params
        n = sum(p.numel() for p in params)
        self.flat = creation.zeros(n, dtype=params[0].dtype, device=params[0].device)
        self.views, offset = [], 0
        for p in params:
            self.views.append(self.flat[offset : offset + p.numel()].view(p.shape))
            offset += p.numel()
        self.pending = 0  # gradients still to come in this backward
        self.work = None  # the all_reduce in flight


# --8<-- [end:buckets]


def _tensors_in(obj):
    """The tensors in a forward's output (a tensor, or nested tuples, lists and dicts)."""
    if isinstance(obj, Tensor):
        yield obj
    elif isinstance(obj, (list, tuple)):
        for o in obj:
            yield from _tensors_in(o)
    elif isinstance(obj, dict):
        for o in obj.values():
            yield from _tensors_in(o)


def _broadcast_coalesced(tensors, src: int = 0, group=None) -> None:
    """Copy rank ``src``'s ``tensors`` into every rank's: one broadcast per dtype and
    device, of the tensors packed into one flat buffer."""
    kinds = {}
    for t in tensors:
        kinds.setdefault((t.dtype, t.device), []).append(t)
    with no_grad():
        for (dtype, device), ts in kinds.items():
            flat = creation.empty(sum(t.numel() for t in ts), dtype=dtype, device=device)
            offset = 0
            views = []
            for t in ts:
                views.append(flat[offset : offset + t.numel()].view(t.shape))
                views[-1].copy_(t)
                offset += t.numel()
            dist.broadcast(flat, src=src, group=group)
            for t, v in zip(ts, views):
                t.copy_(v)


class DistributedDataParallel(Module):
    """Wrap ``module`` so that its gradients are averaged over the ranks of the process
    group during ``backward()`` (``torch.nn.parallel.DistributedDataParallel``).

    Call ``sitp.distributed.init_process_group()`` first. ``state_dict()`` keys carry the
    prefix ``module.``, as torch's; the wrapped model is ``.module``.

    Args:
        module: the model; the same on every rank up to its initial values, which rank
            0's overwrite.
        device_ids: None, or one device (a list of one) for a GPU model, as torch.
        output_device, dim: accepted for torch's signature (one device per process).
        broadcast_buffers: copy rank 0's buffers to every rank at each forward.
        init_sync: broadcast rank 0's parameters and buffers when wrapping.
        bucket_cap_mb: the size of a bucket in MiB (25).
        find_unused_parameters: allow parameters that take no part in the loss: their
            unused state is found by walking the forward's graph, and their share of the
            average is zero. Without it such a parameter is an error.
        gradient_as_bucket_view: leave each ``.grad`` as a view of its bucket (no copy
            back, less memory).

        process_group: the ranks to average over (default: all); ``device_mesh``, a 1-D
            DeviceMesh, names them too (``mesh["dp"]`` of a data x tensor-parallel mesh).

    The other parameters of torch's signature (``static_graph``,
    mixed precision, ...) raise NotImplementedError unless left at their defaults.
    """

    def __init__(
        self,
        module,
        device_ids=None,
        output_device=None,
        dim=0,
        broadcast_buffers=None,
        init_sync=True,
        process_group=None,
        bucket_cap_mb=None,
        find_unused_parameters=False,
        check_reduction=False,
        gradient_as_bucket_view=False,
        static_graph=False,
        delay_all_reduce_named_params=None,
        param_to_hook_all_reduce=None,
        mixed_precision=None,
        device_mesh=None,
        skip_all_reduce_unused_params=False,
        bucket_cap_mb_list=None,
        batched_grad_copy=False,
        forward_sync_buffers=None,
    ):
        super().__init__()
        if not isinstance(module, Module):
            raise TypeError(
                f"DistributedDataParallel wraps an nn.Module (got {type(module).__name__})"
            )
        unsupported = {
            "static_graph": (static_graph, False),
            "delay_all_reduce_named_params": (delay_all_reduce_named_params, None),
            "param_to_hook_all_reduce": (param_to_hook_all_reduce, None),
            "mixed_precision": (mixed_precision, None),
            "skip_all_reduce_unused_params": (skip_all_reduce_unused_params, False),
            "bucket_cap_mb_list": (bucket_cap_mb_list, None),
            "batched_grad_copy": (batched_grad_copy, False),
            "forward_sync_buffers": (forward_sync_buffers, None),
        }
        for name, (value, default) in unsupported.items():
            if value is not default and value != default:
                raise NotImplementedError(
                    f"DistributedDataParallel({name}=...) is not implemented in sitp "
                    f"(leave it at {default!r})"
                )
        if device_ids is not None and len(device_ids) != 1:
            raise ValueError(
                "device_ids can only be None or contain a single element "
                f"(one device per process); got {device_ids!r}"
            )
        # torch's first bucket is small (1 MiB) only with the default cap
        first_bucket_bytes = _FIRST_BUCKET_BYTES if bucket_cap_mb is None else None
        if bucket_cap_mb is None:
            bucket_cap_mb = _DEFAULT_BUCKET_CAP_MB
        if not bucket_cap_mb > 0:
            raise ValueError(f"bucket_cap_mb must be positive (got {bucket_cap_mb})")
        if not dist.is_initialized():
            raise ValueError(
                "DistributedDataParallel needs the default process group: call "
                "sitp.distributed.init_process_group() first"
            )
        self.module = module
        self.device_ids = device_ids
        self.output_device = output_device
        self.dim = dim
        self.broadcast_buffers = True if broadcast_buffers is None else bool(broadcast_buffers)
        self.find_unused_parameters = bool(find_unused_parameters)
        self.gradient_as_bucket_view = bool(gradient_as_bucket_view)
        self.check_reduction = check_reduction
        self.bucket_bytes_cap = int(bucket_cap_mb * 1024 * 1024)
        self.require_backward_grad_sync = True  # False inside no_sync()
        self.require_forward_param_sync = True
        if process_group is not None and device_mesh is not None:
            raise ValueError("DistributedDataParallel: give process_group or device_mesh, not both")
        if device_mesh is not None:
            process_group = group_of(
                device_mesh, "DistributedDataParallel", ("data-parallel", "dp")
            )
        self.process_group = process_group  # None: the default group
        self.world_size = dist.get_world_size(process_group)
        # the group's first rank (a global rank) is the source of the initial values
        self._src = 0 if process_group is None else process_group.ranks[0]

        named = [(n, p) for n, p in module.named_parameters() if p.requires_grad]
        if not named:
            raise RuntimeError(
                "DistributedDataParallel is not needed when a module doesn't have any "
                "parameter that requires a gradient."
            )
        self._names = [n for n, _ in named]
        self._params = [p for _, p in named]
        if init_sync and self.world_size > 1:
            _broadcast_coalesced(
                list(module.parameters()) + list(module.buffers()), self._src, process_group
            )

        buckets = assign_buckets(
            self._params, self.bucket_bytes_cap, first_bucket_bytes or self.bucket_bytes_cap
        )
        self._buckets = [_Bucket([self._params[i] for i in b]) for b in buckets]
        self._where = {}  # id(param) -> (bucket number, place in the bucket)
        for k, b in enumerate(self._buckets):
            for j, p in enumerate(b.params):
                self._where[id(p)] = (k, j)
        self._index = {id(p): i for i, p in enumerate(self._params)}
        if self.gradient_as_bucket_view:
            with no_grad():
                for b in self._buckets:
                    for p, v in zip(b.params, b.views):
                        if p.grad is not None:
                            v.copy_(p.grad)
                        p.grad = v
        self._armed = False  # this backward reduces (set by a forward outside no_sync)
        self._queued = False  # the end-of-backward callback is queued
        self._ready = [False] * len(self._params)
        self._used = [False] * len(self._params)  # this rank's backward produced a gradient
        self._next = 0  # the next bucket to start: buckets start in order on every rank
        self._hooks = [
            engine.register_post_accumulate_grad_hook(p, self._make_hook(p)) for p in self._params
        ]

    # ------------------------------------------------------------------ forward
    def forward(self, *inputs, **kwargs):
        if self.broadcast_buffers and self.world_size > 1:
            buffers = list(self.module.buffers())
            if buffers:
                _broadcast_coalesced(buffers, self._src, self.process_group)
        out = self.module(*inputs, **kwargs)
        if is_grad_enabled() and self.require_backward_grad_sync:
            self._prepare_for_backward(out)
        else:
            self._armed = False
        return out

    @contextlib.contextmanager
    def no_sync(self):
        """Inside this context, backward accumulates gradients locally without
        all-reducing them; the first backward after it reduces the sum (gradient
        accumulation over micro-batches with one exchange per step)."""
        old = self.require_backward_grad_sync
        self.require_backward_grad_sync = False
        try:
            yield
        finally:
            self.require_backward_grad_sync = old

    # --8<-- [start:reduce]
    def _prepare_for_backward(self, out) -> None:
        """Arm the hooks for the backward of this forward's output."""
        self._armed, self._queued, self._next = True, False, 0
        self._ready = [False] * len(self._params)
        self._used = [False] * len(self._params)
        for b in self._buckets:
            b.pending, b.work = len(b.params), None
        if self.find_unused_parameters:  # what the graph does not reach is ready now
            reached = set()
            for t in _tensors_in(out):
                if t.grad_fn is not None:
                    for node in engine.toposort(t.grad_fn):
                        reached.update(id(x) for x in node.inputs if x is not None)
                elif t.requires_grad:
                    reached.add(id(t))
            for p in self._params:
                if id(p) not in reached:
                    self._mark_ready(p)

    def _make_hook(self, p):
        def hook(_):
            if not self._armed:  # no_sync(), or a backward that no DDP forward armed
                return
            if not self._queued:  # the first gradient of this backward
                engine.queue_callback(self._finish)
                self._queued = True
            self._used[self._index[id(p)]] = p.grad is not None
            self._mark_ready(p)

        return hook

    def _mark_ready(self, p) -> None:
        """``p``'s gradient is final: copy it into its bucket; start every bucket that is
        now full, in bucket order."""
        i = self._index[id(p)]
        if self._ready[i]:
            raise RuntimeError(
                f"Expected to mark a variable ready only once: parameter {self._names[i]!r} "
                "received its gradient twice in one backward (backward run twice after one "
                "forward?)"
            )
        self._ready[i] = True
        k, j = self._where[id(p)]
        bucket, view = self._buckets[k], self._buckets[k].views[j]
        with no_grad():
            if p.grad is None:
                view.zero_()
            elif p.grad is not view:
                view.copy_(p.grad)
        bucket.pending -= 1
        while self._next < len(self._buckets) and self._buckets[self._next].pending == 0:
            b = self._buckets[self._next]
            b.flat.div_(self.world_size)  # the sum of grad / p is the average
            b.work = dist.all_reduce(
                b.flat, op=dist.ReduceOp.SUM, group=self.process_group, async_op=True
            )
            self._next += 1
        for b in self._buckets[: self._next]:  # let MPI advance the reductions in flight
            if b.work is not None:
                b.work.is_completed()

    def _finish(self) -> None:
        """At the end of backward: wait for every bucket, write the averages into ``.grad``."""
        self._queued = False
        missing = [i for i, r in enumerate(self._ready) if not r]
        if missing and self.find_unused_parameters:
            for i in missing:  # reached by the graph, but no gradient came
                self._mark_ready(self._params[i])
            missing = []
        for b in self._buckets[: self._next]:
            b.work.wait()
        self._armed = False
        if missing:
            names = ", ".join(self._names[i] for i in missing)
            raise RuntimeError(
                f"DistributedDataParallel: on rank {dist.get_rank()} these parameters "
                f"received no gradient in this backward: {names}. Every parameter must take "
                "part in the loss, or pass find_unused_parameters=True to "
                "DistributedDataParallel (torch reports this at the next forward: 'Expected "
                "to have finished reduction in the prior iteration')."
            )
        used = None
        if self.find_unused_parameters:  # which parameters some rank used
            flags = creation.tensor([float(u) for u in self._used])
            dist.all_reduce(flags, group=self.process_group)
            used = flags.tolist()
        with no_grad():
            for b in self._buckets:
                for p, v in zip(b.params, b.views):
                    if used is not None and used[self._index[id(p)]] == 0:
                        continue  # no rank used it: its .grad stays as it was
                    if self.gradient_as_bucket_view:
                        p.grad = v
                    elif p.grad is None:
                        p.grad = v.clone()
                    else:
                        p.grad.copy_(v)

    # --8<-- [end:reduce]

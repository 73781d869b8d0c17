"""ZeRO stages 1 and 2 as the ZeRO paper defines them (Rajbhandari et al., 2020; chapter
7.4): gradients reduce-scattered into flat, padded shards, one per rank; each rank steps
the optimizer on its shard only; the updated shards all-gathered back into every rank's
parameters.

torch has no class for this (its ``ZeroRedundancyOptimizer``, in
``sitp.distributed.optim``, all-reduces every gradient and broadcasts each owner's
parameters instead; FSDP's ``SHARD_GRAD_OP`` is the nearest). :class:`ZeroOptimizer` is
sitp's name for it. It replaces DDP *and* the optimizer: wrap nothing in
DistributedDataParallel, run forward and backward on this rank's batch, call ``step()``.

The layout. The parameters are cut into buckets (walking them backwards, as backward
produces their gradients); each bucket's elements are laid end to end in one flat buffer,
padded with zeros to a multiple of ``p`` ranks, and cut into ``p`` equal chunks. Rank
``r``'s *shard* is its chunk of every bucket, one flat tensor that the wrapped optimizer
(AdamW, say) steps as its only parameter, so the moments exist for the shard only. The
padding's gradient is zero and its weight stays zero.

- **Stage 1** (optimizer state sharded): each ``.grad`` is a view of its bucket's flat
  gradient buffer, so backward writes the whole gradient there; ``step()`` reduce-scatters
  each bucket (the average of the ranks' gradients, chunk ``r`` to rank ``r``), steps the
  shard, and all-gathers the updated chunks into every rank's parameters. Per step a rank
  sends ``(p - 1)/p`` of the padded gradient and ``(p - 1)/p`` of the padded parameters:
  exactly one ring all-reduce's bytes.
- **Stage 2** (gradients sharded too): each gradient, once complete (a post-accumulate
  hook), is copied into its bucket's flat buffer and freed (``.grad`` is None); a full
  bucket is reduce-scattered at once, during backward, and freed too. A rank holds its
  gradient shard, the buckets being filled and the gradients backward has computed but
  not yet handed over. The same bytes as stage 1.

Shortcuts, said once: one parameter group, of one dtype and device; gradients are not
accumulated over several backward passes (each stage-2 reduce-scatter overwrites its
chunk of the shard's gradient); the shard is a copy of this rank's chunk of the
parameters (``p``-th of them, float32 here, where mixed precision would keep it as the
float32 master copy); the collectives run one after the other, not overlapped with
compute.

The instruments: :class:`sitp.distributed.CommCounter` counts the bytes sent;
``peak_grad_bytes`` is the most gradient memory the rank held (every distinct storage
behind a parameter's ``.grad``, the flat buffers being reduced and the shard's gradient,
sampled after each gradient arrives, before each reduce-scatter and at ``step()``);
:meth:`state_bytes` the optimizer state.
"""

from __future__ import annotations

from sitp import distributed as dist
from sitp._tensor import creation
from sitp.autograd import engine
from sitp.autograd.grad_mode import no_grad


class _Bucket:
    """Some parameters laid end to end in a flat buffer of ``padded = p * chunk`` elements."""

    def __init__(self, params, p: int, offset: int):
        self.params = params
        self.index = {id(q): i for i, q in enumerate(params)}
        self.numel = sum(q.numel() for q in params)
        self.chunk = -(-self.numel // p)  # ceil: each rank's share of the padded buffer
        self.padded = p * self.chunk
        self.offset = offset  # where this bucket's chunk starts in the shard
        self.flat_grad = None  # stage 1: the gradients' home; stage 2: only while reducing
        self.ready = 0  # stage 2: gradients complete in this backward
        self.reduced = False

    def views(self, flat):
        """Each parameter's piece of a flat buffer of this bucket, in its shape."""
        out, at = [], 0
        for q in self.params:
            out.append(flat[at : at + q.numel()].view(q.shape))
            at += q.numel()
        return out


# --8<-- [start:init]
class ZeroOptimizer:
    """ZeRO stage 1 or 2 around ``optimizer_class``, on the default process group.

    Every rank constructs it with the same parameters in the same order (rank 0's values
    are broadcast to the others) and calls :meth:`step` together after its backward.

    Args:
        params: the model's parameters (one group).
        optimizer_class: the optimizer each rank runs on its shard, e.g. ``sitp.optim.AdamW``.
        stage: 1 (optimizer state sharded) or 2 (gradients too).
        bucket_cap_mb: the largest bucket, in MiB (DDP's option). Default: one bucket for
            stage 1 (its gradients are all reduced at ``step()`` anyway), 25 for stage 2.
        **defaults: the options of ``optimizer_class`` (``lr=...``, ...).
    """

    def __init__(self, params, optimizer_class, stage: int = 1, bucket_cap_mb=None, **defaults):
        if stage not in (1, 2):
            raise ValueError(
                f"stage must be 1 or 2 (got {stage!r}); stage 3 shards the weights too"
            )
        if not dist.is_initialized():
            raise ValueError(
                "ZeroOptimizer needs the default process group: call "
                "sitp.distributed.init_process_group() first"
            )
        params = list(params)
        if not params or any(isinstance(q, dict) for q in params):
            raise NotImplementedError(
                "ZeroOptimizer takes one list of parameters (parameter groups are not implemented)"
            )
        kinds = {(q.dtype, q.device.type) for q in params}
        if len(kinds) != 1:
            raise ValueError(
                f"ZeroOptimizer needs parameters of one dtype and device (got {kinds})"
            )
        if not callable(optimizer_class):
            raise TypeError(f"optimizer_class must be an optimizer class (got {optimizer_class!r})")
        self.stage, self.params = stage, params
        self.world_size, self.rank = dist.get_world_size(), dist.get_rank()
        p = self.world_size
        if bucket_cap_mb is None:
            bucket_cap_mb = float("inf") if stage == 1 else 25
        if not bucket_cap_mb > 0:
            raise ValueError(f"bucket_cap_mb must be positive (got {bucket_cap_mb!r})")
        cap = bucket_cap_mb
        cap_bytes = cap * 2**20
        self.buckets, current, size, offset = [], [], 0, 0
        for q in reversed(params):  # backward's order: the last layer's gradients first
            current.append(q)
            size += q.numel() * q.element_size()
            if size >= cap_bytes:
                self.buckets.append(_Bucket(current, p, offset))
                offset += self.buckets[-1].chunk
                current, size = [], 0
        if current:
            self.buckets.append(_Bucket(current, p, offset))
            offset += self.buckets[-1].chunk
        self._bucket_of = {id(q): b for b in self.buckets for q in b.params}
        dtype, device = params[0].dtype, params[0].device
        with no_grad():
            # this rank's shard: chunk `rank` of every bucket, after rank 0's values are sent
            self.shard = creation.zeros(offset, dtype=dtype, device=device)
            for b in self.buckets:
                flat = self._pack(b, [q.detach() for q in b.params])
                dist.broadcast(flat, src=0)
                for q, v in zip(b.params, b.views(flat)):
                    q.copy_(v)
                self._mine(b, self.shard).copy_(self._mine(b, flat, whole=True))
                if stage == 1:  # the gradients live in the bucket from now on
                    b.flat_grad = creation.zeros(b.padded, dtype=dtype, device=device)
                    for q, v in zip(b.params, b.views(b.flat_grad)):
                        q.grad = v
        self.shard.requires_grad = True
        self.shard.grad = creation.zeros_like(self.shard)
        self.optim = optimizer_class([self.shard], **defaults)
        self.param_groups = self.optim.param_groups
        self.peak_grad_bytes = 0
        self._in_flight = []  # flat buffers being reduced (stage 2), counted as gradients
        self._hooks = []
        if stage == 2:
            self._hooks = [
                engine.register_post_accumulate_grad_hook(q, self._on_grad) for q in params
            ]

    # --8<-- [end:init]

    def _pack(self, b: _Bucket, tensors):
        """A padded flat buffer of bucket ``b`` holding ``tensors`` (None: zeros)."""
        flat = creation.zeros(b.padded, dtype=self.shard.dtype, device=self.shard.device)
        for t, v in zip(tensors, b.views(flat)):
            if t is not None:
                v.copy_(t)
        return flat

    def _mine(self, b: _Bucket, flat, whole: bool = False):
        """This rank's chunk of bucket ``b``: in a padded flat buffer of the bucket
        (``whole``), or in a shard-sized buffer."""
        start = self.rank * b.chunk if whole else b.offset
        return flat[start : start + b.chunk]

    # ------------------------------------------------------------ measuring
    def grad_bytes(self) -> int:
        """The gradient memory this rank holds now: each distinct storage behind a
        parameter's ``.grad``, the flat buffers being reduced, the shard's gradient."""
        seen = {}
        for t in [*(q.grad for q in self.params), *self._in_flight, self.shard.grad]:
            if t is not None:
                seen[id(t._storage)] = t._storage.nbytes
        return sum(seen.values())

    def _sample(self) -> None:
        self.peak_grad_bytes = max(self.peak_grad_bytes, self.grad_bytes())

    def state_bytes(self) -> int:
        """Bytes of optimizer state (tensors of more than one element) on this rank."""
        return sum(
            v.numel() * v.element_size()
            for st in self.optim.state.values()
            for v in st.values()
            if hasattr(v, "numel") and v.dim() > 0
        )

    # --8<-- [start:step]
    def _reduce_scatter(self, b: _Bucket) -> None:
        """Average bucket ``b``'s gradient over the ranks; this rank receives its chunk,
        into its place in the shard's gradient. Stage 2 then frees the bucket."""
        with no_grad():
            if b.flat_grad is None:  # stage 2, a parameter without a gradient: zeros
                b.flat_grad = self._pack(b, [q.grad for q in b.params])
                self._in_flight.append(b.flat_grad)
            self._sample()
            dist.reduce_scatter_tensor(
                self._mine(b, self.shard.grad), b.flat_grad, op=dist.ReduceOp.AVG
            )
            if self.stage == 2:  # only the shard's chunk is kept
                self._in_flight = [t for t in self._in_flight if t is not b.flat_grad]
                b.flat_grad = None
        b.reduced = True

    def _on_grad(self, q) -> None:
        """Stage 2's hook: a parameter's gradient is complete. It is copied into its
        bucket's flat buffer and freed; a full bucket is reduce-scattered."""
        b = self._bucket_of[id(q)]
        self._sample()
        with no_grad():
            if b.flat_grad is None:
                b.flat_grad = creation.zeros(b.padded, dtype=q.dtype, device=q.device)
                self._in_flight.append(b.flat_grad)
            b.views(b.flat_grad)[b.index[id(q)]].copy_(q.grad)
            q.grad = None
        b.ready += 1
        if b.ready == len(b.params):
            self._reduce_scatter(b)

    def step(self, closure=None):
        """Reduce-scatter what backward has not reduced yet, step this rank's shard, and
        all-gather the updated shards into every rank's parameters."""
        loss = None if closure is None else closure()
        self._sample()
        for b in self.buckets:
            if not b.reduced:  # stage 1: every bucket; stage 2: a bucket with an unused parameter
                self._reduce_scatter(b)
            b.reduced, b.ready = False, 0
        self.optim.step()
        with no_grad():
            for b in self.buckets:
                flat = creation.empty(b.padded, dtype=self.shard.dtype, device=self.shard.device)
                dist.all_gather_into_tensor(flat, self._mine(b, self.shard))
                for q, v in zip(b.params, b.views(flat)):
                    q.copy_(v)
        return loss

    # --8<-- [end:step]

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Clear the gradients: stage 1 zeroes its buckets in place (each ``.grad`` stays a
        view of one), stage 2 drops any full gradient; the shard's gradient is zeroed."""
        with no_grad():
            for b in self.buckets:
                if b.flat_grad is not None:
                    b.flat_grad.zero_()
                elif set_to_none:
                    for q in b.params:
                        q.grad = None
            self.shard.grad.zero_()

    def full_state(self) -> dict:
        """The whole optimizer state, gathered from every rank's shard (a collective): for
        each state tensor of the shard (``exp_avg``, ...), one flat tensor per bucket in
        the bucket's element order, padding removed. For checks and checkpoints."""
        st = self.optim.state.get(self.shard, {})
        out = {}
        with no_grad():
            for k, v in st.items():
                if not hasattr(v, "dim") or v.dim() == 0:
                    continue
                pieces = []
                for b in self.buckets:
                    flat = creation.empty(b.padded, dtype=v.dtype, device=v.device)
                    dist.all_gather_into_tensor(flat, self._mine(b, v))
                    pieces.append(flat[: b.numel])
                out[k] = pieces
        return out

    # --8<-- [start:state_dict]
    def state_dict(self) -> dict:
        """The whole optimizer's state in the wrapped optimizer's own format, numbered by
        the parameters as a plain optimizer over ``params`` numbers them (a collective:
        every rank calls it, every rank gets it). It holds no trace of ``p``, so it loads
        into a ``ZeroOptimizer`` on any number of ranks, or into the plain optimizer."""
        full = self.full_state()
        index = {id(q): i for i, q in enumerate(self.params)}
        mine = self.optim.state.get(self.shard, {})
        scalars = {
            k: v.clone() if hasattr(v, "clone") else v
            for k, v in mine.items()
            if not hasattr(v, "dim") or v.dim() == 0
        }
        state = {i: dict(scalars) for i in range(len(self.params))} if mine else {}
        for k, pieces in full.items():
            for b, flat in zip(self.buckets, pieces):
                for q, v in zip(b.params, b.views(flat)):
                    state[index[id(q)]][k] = v.clone()
        group = {k: v for k, v in self.optim.param_groups[0].items() if k != "params"}
        group["params"] = list(range(len(self.params)))
        return {"state": state, "param_groups": [group]}

    def load_state_dict(self, state_dict: dict) -> None:
        """Load a :meth:`state_dict` (or a plain optimizer's over the same parameters),
        keeping this rank's chunk of each state tensor: the state re-sharded for this
        number of ranks."""
        groups = state_dict["param_groups"]
        if len(groups) != 1 or len(groups[0]["params"]) != len(self.params):
            raise ValueError(
                f"ZeroOptimizer.load_state_dict: expected one group of {len(self.params)} "
                f"parameters (got {[len(g['params']) for g in groups]})"
            )
        numbers = groups[0]["params"]
        saved = state_dict["state"]
        shard_state = {}
        if saved:
            first = saved[numbers[0]]
            by_q = {id(q): saved[i] for q, i in zip(self.params, numbers)}
            with no_grad():
                for k, v in first.items():
                    if not hasattr(v, "dim") or v.dim() == 0:
                        shard_state[k] = v
                        continue
                    flat = creation.zeros_like(self.shard)
                    for b in self.buckets:
                        whole = self._pack(b, [by_q[id(q)][k] for q in b.params])
                        self._mine(b, flat).copy_(self._mine(b, whole, whole=True))
                    shard_state[k] = flat
        group = {k: v for k, v in groups[0].items() if k != "params"}
        group["params"] = [0]
        self.optim.load_state_dict(
            {"state": {0: shard_state} if shard_state else {}, "param_groups": [group]}
        )
        self.param_groups = self.optim.param_groups

    # --8<-- [end:state_dict]

    def remove_hooks(self) -> None:
        for h in self._hooks:
            h.remove()
        self._hooks = []

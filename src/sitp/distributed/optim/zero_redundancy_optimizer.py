"""``ZeroRedundancyOptimizer``: ZeRO stage 1, optimizer state sharded across the ranks
(chapter 7.3), as ``torch.distributed.optim.ZeroRedundancyOptimizer``.

Under data parallelism every rank holds the same parameters, the same averaged gradients
and, with a plain optimizer, the same optimizer state: AdamW's two moments are twice the
parameters' memory, repeated on every rank. ZeRO-1 keeps that state once. The parameters
are dealt out to the ranks; each rank builds the wrapped optimizer over its own share,
steps only those parameters, and then each parameter is broadcast from the rank that
owns it, so every rank again holds the whole updated model. Per rank the optimizer
state shrinks by the number of ranks; the price is one broadcast of the parameters per
step.

The deal is greedy by size, as torch's: within each parameter group, the largest
parameter first, each to the rank that owns the fewest elements so far.
"""

from __future__ import annotations

from sitp import distributed as dist
from sitp._tensor import creation
from sitp.autograd.grad_mode import no_grad
from sitp.optim.optimizer import Optimizer


# --8<-- [start:partition]
def partition_parameters(param_groups, world_size: int) -> list[list[dict]]:
    """Which rank owns which parameters: for each rank, its share of every group (the
    group's options with ``"params"`` cut down to that rank's parameters).

    Greedy by size: the parameters of a group, largest first, each go to the rank with
    the fewest elements so far (ties to the lowest rank); the counts carry over from one
    group to the next.
    """
    sizes = [0] * world_size
    shares = [[] for _ in range(world_size)]
    for group in param_groups:
        per_rank = [[] for _ in range(world_size)]
        for p in sorted(group["params"], key=lambda t: t.numel(), reverse=True):
            rank = sizes.index(min(sizes))
            per_rank[rank].append(p)
            sizes[rank] += p.numel()
        for rank, params in enumerate(per_rank):
            shares[rank].append({**group, "params": params})
    return shares


# --8<-- [end:partition]


class ZeroRedundancyOptimizer(Optimizer):
    """Wrap ``optimizer_class`` so that each rank keeps the state of its share of the
    parameters only (``torch.distributed.optim.ZeroRedundancyOptimizer``).

    Call ``sitp.distributed.init_process_group()`` first; every rank constructs it with
    the same parameters in the same order and calls :meth:`step` together.

    Args:
        params: the parameters, or parameter groups, as for any optimizer.
        optimizer_class: the optimizer to shard, e.g. ``sitp.optim.AdamW``.
        process_group, parameters_as_bucket_view, overlap_with_ddp: torch's options;
            only their defaults are implemented (other values raise NotImplementedError).
        **defaults: the options passed to ``optimizer_class`` (``lr=...``, ...).

    ``param_groups`` are the global groups: a learning-rate scheduler may change their
    options, which :meth:`step` passes on to the local optimizer, ``self.optim``.
    """

    def __init__(
        self,
        params,
        optimizer_class,
        process_group=None,
        parameters_as_bucket_view: bool = False,
        overlap_with_ddp: bool = False,
        **defaults,
    ):
        for name, value in (
            ("process_group", process_group),
            ("parameters_as_bucket_view", parameters_as_bucket_view or None),
            ("overlap_with_ddp", overlap_with_ddp or None),
        ):
            if value is not None:
                raise NotImplementedError(
                    f"ZeroRedundancyOptimizer({name}=...) is not implemented in sitp"
                )
        if not (isinstance(optimizer_class, type) and issubclass(optimizer_class, Optimizer)):
            raise TypeError(
                f"optimizer_class must be an optimizer class such as sitp.optim.AdamW "
                f"(got {optimizer_class!r})"
            )
        if not dist.is_initialized():
            raise ValueError(
                "ZeroRedundancyOptimizer needs the default process group: call "
                "sitp.distributed.init_process_group() first"
            )
        super().__init__(params, defaults)
        self._optim_constructor = optimizer_class
        self._optim_defaults = defaults
        self.world_size = dist.get_world_size()
        self.rank = dist.get_rank()
        self._all_state_dicts = []
        self._shares = partition_parameters(self.param_groups, self.world_size)
        self._index = {id(p): i for i, p in enumerate(self._all_params())}
        self.optim = optimizer_class(self._shares[self.rank], **defaults)

    def _all_params(self):
        return [p for g in self.param_groups for p in g["params"]]

    def add_param_group(self, param_group) -> None:
        if hasattr(self, "optim"):
            raise NotImplementedError(
                "ZeroRedundancyOptimizer.add_param_group after construction is not "
                "implemented in sitp: pass every group to the constructor"
            )
        super().add_param_group(param_group)

    # --8<-- [start:step]
    def step(self, closure=None):
        """Step the local optimizer on this rank's share, then broadcast each parameter
        from its owner so that every rank holds the whole updated model."""
        for glob, local in zip(self.param_groups, self.optim.param_groups):
            for k, v in glob.items():  # a scheduler's changes reach the local optimizer
                if k != "params":
                    local[k] = v
        loss = self.optim.step(closure)
        self._sync_parameters()
        return loss

    def _sync_parameters(self) -> None:
        """One broadcast per owner (and dtype and device): the owner packs its updated
        parameters into one flat buffer, the others unpack it."""
        with no_grad():
            for owner in range(self.world_size):
                kinds = {}
                for group in self._shares[owner]:
                    for p in group["params"]:
                        kinds.setdefault((p.dtype, p.device), []).append(p)
                for (dtype, device), ps in kinds.items():
                    flat = creation.empty(sum(p.numel() for p in ps), dtype=dtype, device=device)
                    views, offset = [], 0
                    for p in ps:
                        views.append(flat[offset : offset + p.numel()].view(p.shape))
                        offset += p.numel()
                    if owner == self.rank:
                        for p, v in zip(ps, views):
                            v.copy_(p)
                    dist.broadcast(flat, src=owner)
                    if owner != self.rank:
                        for p, v in zip(ps, views):
                            p.copy_(v)

    # --8<-- [end:step]

    # ------------------------------------------------------------ checkpoints
    def _to_global(self, rank: int, local: dict) -> dict:
        """A rank's local state dict with its parameters renumbered as in the global groups."""
        state = {}
        for group, lgroup in zip(self._shares[rank], local["param_groups"]):
            for p, i in zip(group["params"], lgroup["params"]):
                if i in local["state"]:
                    state[self._index[id(p)]] = local["state"][i]
        return state

    def consolidate_state_dict(self, to: int = 0) -> None:
        """Collect every rank's optimizer state on rank ``to`` (a collective: call it on
        all ranks), after which :meth:`state_dict` works there."""
        local = self.optim.state_dict()  # tensors pickle (sitp.serialization)
        gathered = [None] * self.world_size
        dist.all_gather_object(gathered, local)
        self._all_state_dicts = gathered if self.rank == to else []

    def state_dict(self) -> dict:
        """The whole optimizer's state, numbered as an unsharded optimizer over the same
        groups numbers it: load it into ``optimizer_class(params)`` or back into a
        ZeroRedundancyOptimizer. Only on the rank that :meth:`consolidate_state_dict`
        collected on."""
        if not self._all_state_dicts:
            raise RuntimeError(
                "Optimizer state has not been consolidated on this rank. "
                f"Please call `consolidate_state_dict(to={self.rank})` on "
                "all ranks beforehand if you meant to save the global state."
            )
        state = {}
        for rank, local in enumerate(self._all_state_dicts):
            state.update(self._to_global(rank, local))
        groups, start = [], 0
        for g, lg in zip(self.param_groups, self.optim.param_groups):
            packed = {k: v for k, v in lg.items() if k != "params"}
            packed.update({k: v for k, v in g.items() if k != "params"})
            packed["params"] = list(range(start, start + len(g["params"])))
            start += len(g["params"])
            groups.append(packed)
        return {"state": dict(sorted(state.items())), "param_groups": groups}

    def load_state_dict(self, state_dict: dict) -> None:
        """Load a whole optimizer's state (from :meth:`state_dict`, or an unsharded
        optimizer's over the same groups); each rank keeps its share's."""
        saved = state_dict["param_groups"]
        if len(saved) != len(self.param_groups):
            raise ValueError("loaded state dict has a different number of parameter groups")
        for s, g in zip(saved, self.param_groups):
            if len(s["params"]) != len(g["params"]):
                raise ValueError(
                    "loaded state dict contains a parameter group "
                    "that doesn't match the size of optimizer's group"
                )
            g.update({k: v for k, v in s.items() if k != "params"})
        at = {
            id(p): i
            for s, g in zip(saved, self.param_groups)
            for i, p in zip(s["params"], g["params"])
        }
        local_state, local_groups, n = {}, [], 0
        for s, group in zip(saved, self._shares[self.rank]):
            ids = []
            for p in group["params"]:
                if at[id(p)] in state_dict["state"]:
                    local_state[n] = state_dict["state"][at[id(p)]]
                ids.append(n)
                n += 1
            local_groups.append({**{k: v for k, v in s.items() if k != "params"}, "params": ids})
        self.optim.load_state_dict({"state": local_state, "param_groups": local_groups})

"""``get_state_dict`` and ``set_state_dict`` (torch.distributed.checkpoint.state_dict's
names) for a model sharded by ``fully_shard`` and an optimizer over its shards
(chapter 7.4).

A sharded state is cut for one number of ranks. These two turn it into the *full*
state, every tensor whole at its parameter's name (torch's
``StateDictOptions(full_state_dict=True)``, the only option here), and back: a
checkpoint written on ``p`` ranks loads on any other number, each rank keeping its chunk
of every unit's flat, padded layout for its own ``p``. Both are collectives: every rank
calls them.

The optimizer's state dict is keyed by parameter name, as torch's is: ``{"state": {name:
{"step": ..., "exp_avg": tensor, ...}}, "param_groups": [{..., "params": [names]}]}``.
One parameter group; the optimizer's state is elementwise (SGD's momentum, Adam's
moments), so a shard's state is the shard's piece of each parameter's.
"""

from __future__ import annotations

from sitp import distributed as dist
from sitp._tensor import creation
from sitp.autograd.grad_mode import no_grad

__all__ = ["get_state_dict", "set_state_dict"]


def _units(model):
    """(name prefix, unit) for every fully_shard-ed module of ``model``."""
    out = []
    for prefix, m in model.named_modules():
        unit = m.__dict__.get("_fsdp_unit")
        if unit is not None:
            out.append((f"{prefix}." if prefix else "", unit))
    if not out:
        raise ValueError("get_state_dict/set_state_dict: the model has no fully_shard-ed module")
    return out


def _gather(unit, chunk):
    """The whole padded flat buffer of ``unit`` from every rank's ``chunk``."""
    flat = creation.empty(unit.padded, dtype=chunk.dtype)
    dist.all_gather_into_tensor(flat, chunk.detach().contiguous())
    return flat


def _split(unit, flat, prefix):
    """Each parameter's piece of a flat buffer, at its full name, in its shape."""
    return {
        prefix + name: flat[off : off + q.numel()].view(q.shape).clone()
        for q, name, off in zip(unit.params, unit.names, unit.offsets)
    }


def _pack(unit, tensors, prefix):
    """This rank's chunk of the flat, padded layout of ``tensors`` (by full name)."""
    flat = creation.zeros(unit.padded, dtype=unit.dtype)
    for q, name, off in zip(unit.params, unit.names, unit.offsets):
        flat[off : off + q.numel()] = tensors[prefix + name].reshape(-1).to(unit.dtype)
    start = unit.rank * unit.chunk
    return flat[start : start + unit.chunk].clone()


def get_state_dict(model, optimizers):
    """The full model and optimizer state: ``(model_state_dict, optim_state_dict)``."""
    optim = optimizers[0] if isinstance(optimizers, (list, tuple)) else optimizers
    model_sd, state, names = {}, {}, []
    with no_grad():
        for prefix, unit in _units(model):
            model_sd.update(_split(unit, _gather(unit, unit.shard), prefix))
            names += [prefix + n for n in unit.names]
            mine = optim.state.get(unit.shard, {})
            for k, v in mine.items():
                if hasattr(v, "dim") and v.dim() > 0:
                    for name, t in _split(unit, _gather(unit, v), prefix).items():
                        state.setdefault(name, {})[k] = t
                else:  # a scalar (the step): the same for every parameter of the unit
                    for name in unit.names:
                        state.setdefault(prefix + name, {})[k] = (
                            v.clone() if hasattr(v, "clone") else v
                        )
    if len(optim.param_groups) != 1:
        raise NotImplementedError("get_state_dict: one parameter group only")
    group = {k: v for k, v in optim.param_groups[0].items() if k != "params"}
    return model_sd, {"state": state, "param_groups": [{**group, "params": names}]}


def set_state_dict(model, optimizers, *, model_state_dict, optim_state_dict):
    """Load a full state (from :func:`get_state_dict`, on any number of ranks) into a
    sharded model and its optimizer: each rank keeps its chunks."""
    optim = optimizers[0] if isinstance(optimizers, (list, tuple)) else optimizers
    saved = optim_state_dict["state"]
    new_state = {}
    with no_grad():
        for prefix, unit in _units(model):
            unit.reshard()  # a gathered buffer would hold the old weights
            unit.shard.copy_(_pack(unit, model_state_dict, prefix))
            first = saved.get(prefix + unit.names[0])
            if first is None:
                continue
            st = {}
            for k, v in first.items():
                if hasattr(v, "dim") and v.dim() > 0:
                    st[k] = _pack(unit, {n: s[k] for n, s in saved.items()}, prefix)
                else:
                    st[k] = v.clone() if hasattr(v, "clone") else v
            new_state[id(unit.shard)] = st
    groups = optim_state_dict["param_groups"]
    for k, v in groups[0].items():
        if k != "params":
            optim.param_groups[0][k] = v
    for q in optim.param_groups[0]["params"]:
        if id(q) in new_state:
            optim.state[q] = new_state[id(q)]

"""The base of every optimizer: parameter groups, per-parameter state, and checkpoints.

An optimizer owns a list of *parameter groups*. Each group is a dict with the tensors it
updates under ``"params"`` and its own hyperparameters (``"lr"``, ``"weight_decay"``,
...); whatever a group does not set is taken from the optimizer's ``defaults``. The
running statistics of an algorithm (a momentum buffer, Adam's moments) live in
``self.state[p]``, one dict per parameter, created lazily at its first step.

``state_dict()`` has PyTorch's format: parameters are replaced by integer ids, numbered
through the groups in order, so a checkpoint can be loaded into a fresh optimizer built
over new tensors of the same shapes (even a ``torch.optim`` checkpoint).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Callable, Iterable

import numpy as np

from sitp._tensor.creation import tensor as _tensor
from sitp._tensor.tensor import Tensor
from sitp.autograd.grad_mode import enable_grad
from sitp.strides import numel


class _RequiredParameter:
    """The default of an option that every group must set (PyTorch's ``required``)."""

    def __repr__(self) -> str:
        return "<required parameter>"


required = _RequiredParameter()


_CONTIGUOUS = {}  # (shape, strides) -> whether that layout is contiguous (a parameter's stays)


def _flats(*ts, device=False):
    """The storages of contiguous tensors of one dtype as 1-D arrays, all on the CPU (or,
    with ``device``, all on the GPU), or None: what the optimizers' one-pass updates need
    (a parameter, its gradient, its state)."""
    out, dtype = [], ts[0].dtype
    for t in ts:
        s, key = t._storage, (t._shape, t._strides)
        c = _CONTIGUOUS.get(key)
        if c is None:
            if len(_CONTIGUOUS) > 4096:  # (a program that makes ever new shapes)
                _CONTIGUOUS.clear()
            c = _CONTIGUOUS[key] = t.is_contiguous()
        on_cpu = s.__class__ is np.ndarray
        if on_cpu is device or t.dtype is not dtype or not c:
            return None
        out.append(s[t._offset : t._offset + numel(t._shape)])
    return out


def _one_pass(name, cpu_update, *ts):
    """(update, flat arrays) for an optimizer's one-pass update of ``ts`` (a parameter,
    its gradient, its state): ``cpu_update`` on the flat storages of contiguous CPU
    tensors, the function ``name`` of ``kernels/cuda/fused.py`` on those of contiguous
    CUDA tensors of one float dtype; None for anything else (the composed path)."""
    flats = _flats(*ts)
    if flats is not None:
        return cpu_update, flats
    if not ts[0].dtype.is_floating_point or not hasattr(ts[0]._storage, "copy_to_host"):
        return None
    flats = _flats(*ts, device=True)
    if flats is None:
        return None
    from sitp.kernels.cuda import fused  # late: numba.cuda only for CUDA tensors

    return getattr(fused, name), flats


def _as_sitp(value) -> Tensor:
    """A tensor from a checkpoint as a sitp tensor (a torch tensor is copied through numpy)."""
    if isinstance(value, Tensor):
        return value
    return _tensor(np.asarray(value.detach().cpu().numpy()))


class Optimizer:
    """Base class: holds ``param_groups`` and ``state``; subclasses implement ``step``.

    Args:
        params: an iterable of tensors (or of ``(name, tensor)`` pairs, as
            ``model.named_parameters()`` yields), or of dicts (parameter groups) each with
            a ``"params"`` entry and any options that differ from ``defaults``.
        defaults: the options of a group that does not set them.

    >>> import sitp
    >>> w, b = sitp.zeros(3, requires_grad=True), sitp.zeros(1, requires_grad=True)
    >>> opt = sitp.optim.SGD([{"params": [w]}, {"params": [b], "lr": 0.5}], lr=0.1)
    >>> [g["lr"] for g in opt.param_groups]
    [0.1, 0.5]
    """

    def __init__(self, params: Iterable, defaults: dict[str, Any]):
        self.defaults = defaults
        self.state: defaultdict[Tensor, dict[str, Any]] = defaultdict(dict)
        self.param_groups: list[dict[str, Any]] = []
        if isinstance(params, Tensor):
            raise TypeError(
                "params argument given to the optimizer should be an iterable of Tensors "
                f"or dicts, but got {type(params).__name__}"
            )
        param_groups = list(params)
        if len(param_groups) == 0:
            raise ValueError("optimizer got an empty parameter list")
        if not isinstance(param_groups[0], dict):
            param_groups = [{"params": param_groups}]
        for group in param_groups:
            self.add_param_group(group)

    # --8<-- [start:add_param_group]
    def add_param_group(self, param_group: dict[str, Any]) -> None:
        """Add a group of parameters with its own options (e.g. a new layer to fine-tune)."""
        if not isinstance(param_group, dict):
            raise TypeError(f"param_group must be a dict, but got {type(param_group).__name__}")
        params = param_group["params"]
        if isinstance(params, Tensor):
            params = [params]
        elif isinstance(params, set):
            raise TypeError(
                "optimizer parameters need to be organized in ordered collections, "
                "but the ordering of tensors in sets will change between runs. "
                "Please use a list instead."
            )
        params = list(params)
        if any(isinstance(p, tuple) for p in params):  # from model.named_parameters()
            if not all(isinstance(p, tuple) and len(p) == 2 for p in params):
                raise ValueError(
                    "all optimizer params should be with/without names. "
                    "Some param names are missing"
                )
            param_group["param_names"] = [name for name, _ in params]
            params = [p for _, p in params]
        param_group["params"] = params
        for p in param_group["params"]:
            if not isinstance(p, Tensor):
                raise TypeError(
                    f"optimizer can only optimize Tensors, but one of the params "
                    f"is {type(p).__name__}"
                )
            if not p.is_leaf:
                raise ValueError("can't optimize a non-leaf Tensor")
        for name, default in self.defaults.items():  # what the group leaves out
            if default is required and name not in param_group:
                raise ValueError(
                    f"parameter group didn't specify a value of required "
                    f"optimization parameter {name}"
                )
            param_group.setdefault(name, default)
        self._validate(param_group)
        seen = {id(p) for g in self.param_groups for p in g["params"]}
        if any(id(p) in seen for p in param_group["params"]):
            raise ValueError("some parameters appear in more than one parameter group")
        self.param_groups.append(param_group)

    # --8<-- [end:add_param_group]

    def _validate(self, group: dict[str, Any]) -> None:
        """Raise ValueError for an invalid option of ``group`` (subclasses check theirs)."""

    # --8<-- [start:zero_grad]
    def zero_grad(self, set_to_none: bool = True) -> None:
        """Forget the gradients of the last backward pass before the next one.

        ``set_to_none=True`` (the default, as in PyTorch) drops each ``.grad``, so the next
        ``backward()`` allocates it afresh instead of adding into zeros.
        """
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                if set_to_none:
                    p.grad = None
                else:
                    if p.grad.grad_fn is not None:
                        p.grad.detach_()
                    else:
                        p.grad.requires_grad_(False)
                    p.grad.zero_()

    # --8<-- [end:zero_grad]

    def step(self, closure: Callable[[], Any] | None = None):
        """Update every parameter that has a gradient; return ``closure()``'s loss if given."""
        raise NotImplementedError

    def _closure_loss(self, closure):
        if closure is None:
            return None
        with enable_grad():
            return closure()

    # --8<-- [start:state_dict]
    def state_dict(self) -> dict[str, Any]:
        """The optimizer's state as ``{"state": {id: {...}}, "param_groups": [...]}``.

        Parameters are numbered 0, 1, 2, ... through the groups in order; the tensors in
        ``"state"`` are the optimizer's own (not copies), as in PyTorch.
        """
        ids: dict[int, int] = {}
        groups = []
        for group in self.param_groups:
            packed = {k: v for k, v in group.items() if k != "params"}
            for p in group["params"]:
                ids.setdefault(id(p), len(ids))
            packed["params"] = [ids[id(p)] for p in group["params"]]
            groups.append(packed)
        state = {ids[id(p)]: s for p, s in self.state.items()}
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore a ``state_dict()``: groups' options and each parameter's state.

        The tensors are copied (cast to their parameter's dtype; ``"step"`` is kept as
        is), so the loaded optimizer never shares memory with the checkpoint.
        """
        saved_groups = state_dict["param_groups"]
        if len(saved_groups) != len(self.param_groups):
            raise ValueError("loaded state dict has a different number of parameter groups")
        if any(
            len(s["params"]) != len(g["params"]) for s, g in zip(saved_groups, self.param_groups)
        ):
            raise ValueError(
                "loaded state dict contains a parameter group "
                "that doesn't match the size of optimizer's group"
            )
        id_map = {
            i: p
            for s, g in zip(saved_groups, self.param_groups)
            for i, p in zip(s["params"], g["params"])
        }

        def cast(p: Tensor, key: str, value):
            if isinstance(value, Tensor) or hasattr(value, "detach"):
                value = _as_sitp(value)
                if key != "step" and value.is_floating_point():
                    value = value.to(p.dtype)
                return value.detach().clone()
            return value

        self.state = defaultdict(dict)
        for i, s in state_dict["state"].items():
            if i in id_map:
                p = id_map[i]
                self.state[p] = {k: cast(p, k, v) for k, v in s.items()}
        self.param_groups = [
            {**{k: v for k, v in s.items() if k != "params"}, "params": g["params"]}
            for s, g in zip(saved_groups, self.param_groups)
        ]

    # --8<-- [end:state_dict]

    def __repr__(self) -> str:
        lines = [f"{type(self).__name__} ("]
        for i, group in enumerate(self.param_groups):
            lines.append(f"Parameter Group {i}")
            lines += [f"    {k}: {group[k]}" for k in sorted(group) if k != "params"]
        return "\n".join(lines) + "\n)"

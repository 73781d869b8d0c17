"""Learning-rate schedules: set each parameter group's ``"lr"`` as a function of the step.

A scheduler is stepped once per optimizer step (or per epoch), *after* ``optimizer.step()``::

    for step in range(num_steps):
        loss = ...; optimizer.zero_grad(); loss.backward(); optimizer.step()
        scheduler.step()

Every sitp scheduler computes its closed form from the base rates: ``lr_t = f(t) * base_lr``.
PyTorch's StepLR and CosineAnnealingLR instead update the current rate recursively
(``lr_t = lr_{t-1} * ratio``), which lets several schedulers act on one optimizer; the
values agree to rounding, but in sitp a rate changed by hand is overwritten at the next
step.
"""

from __future__ import annotations

import functools
import math
import types
from typing import Any

from sitp.optim.optimizer import Optimizer


class LRScheduler:
    """Base class: subclasses implement ``get_lr()`` for the step ``self.last_epoch``.

    Args:
        optimizer: the optimizer whose groups' ``"lr"`` this scheduler sets.
        last_epoch: the index of the last step taken; -1 (the default) starts afresh and
            records each group's current ``"lr"`` as its ``"initial_lr"``.
    """

    def __init__(self, optimizer: Optimizer, last_epoch: int = -1):
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"{type(optimizer).__name__} is not an Optimizer")
        self.optimizer = optimizer
        if last_epoch == -1:
            for group in optimizer.param_groups:
                group.setdefault("initial_lr", group["lr"])
        else:
            for i, group in enumerate(optimizer.param_groups):
                if "initial_lr" not in group:
                    raise KeyError(
                        f"param 'initial_lr' is not specified in param_groups[{i}] "
                        "when resuming a scheduler with last_epoch >= 0"
                    )
        self.base_lrs: list[float] = [group["initial_lr"] for group in optimizer.param_groups]
        self.last_epoch = last_epoch
        self._step_count = 0
        self.step()  # sets the rates of step last_epoch + 1 (step 0 for a fresh start)

    def get_lr(self) -> list[float]:
        """The learning rate of each group at step ``self.last_epoch``."""
        raise NotImplementedError

    # --8<-- [start:step]
    def step(self, epoch: int | None = None) -> None:
        """Advance to the next step (or to ``epoch``) and write its rates into the groups."""
        self._step_count += 1
        self.last_epoch = self.last_epoch + 1 if epoch is None else epoch
        for group, lr in zip(self.optimizer.param_groups, self.get_lr()):
            group["lr"] = lr
        self._last_lr = [group["lr"] for group in self.optimizer.param_groups]

    # --8<-- [end:step]

    def get_last_lr(self) -> list[float]:
        """The rates set by the last ``step()``, one per parameter group."""
        return self._last_lr

    def state_dict(self) -> dict[str, Any]:
        """Everything but the optimizer (which has its own ``state_dict``)."""
        return {k: v for k, v in self.__dict__.items() if k != "optimizer"}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.__dict__.update(state_dict)


class LambdaLR(LRScheduler):
    """``lr = base_lr * lr_lambda(step)``; one function, or a list with one per group.

    >>> import sitp
    >>> opt = sitp.optim.SGD([sitp.zeros(1, requires_grad=True)], lr=1.0)
    >>> sched = sitp.optim.lr_scheduler.LambdaLR(opt, lambda step: 0.5 ** step)
    >>> for _ in range(3):
    ...     opt.step(); sched.step()
    >>> sched.get_last_lr()
    [0.125]
    """

    def __init__(self, optimizer: Optimizer, lr_lambda, last_epoch: int = -1):
        if isinstance(lr_lambda, (list, tuple)):
            if len(lr_lambda) != len(optimizer.param_groups):
                raise ValueError(
                    f"Expected {len(optimizer.param_groups)} lr_lambdas, but got {len(lr_lambda)}"
                )
            self.lr_lambdas = list(lr_lambda)
        else:
            self.lr_lambdas = [lr_lambda] * len(optimizer.param_groups)
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        return [base_lr * f(self.last_epoch) for f, base_lr in zip(self.lr_lambdas, self.base_lrs)]

    def state_dict(self) -> dict[str, Any]:
        """As PyTorch: a function is not saved (None); a callable object saves its ``__dict__``."""
        state = {k: v for k, v in self.__dict__.items() if k not in ("optimizer", "lr_lambdas")}
        state["lr_lambdas"] = [
            None
            if isinstance(f, types.FunctionType)
            else dict(vars(f))
            if hasattr(f, "__dict__")
            else None
            for f in self.lr_lambdas
        ]
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        state_dict = dict(state_dict)
        lr_lambdas = state_dict.pop("lr_lambdas")
        self.__dict__.update(state_dict)
        for f, saved in zip(self.lr_lambdas, lr_lambdas):
            if saved is not None:
                f.__dict__.update(saved)


class StepLR(LRScheduler):
    """Multiply the rate by ``gamma`` every ``step_size`` steps:
    ``lr = base_lr * gamma ** (step // step_size)``."""

    def __init__(
        self, optimizer: Optimizer, step_size: int, gamma: float = 0.1, last_epoch: int = -1
    ):
        self.step_size = step_size
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        return [
            base_lr * self.gamma ** (self.last_epoch // self.step_size) for base_lr in self.base_lrs
        ]


class CosineAnnealingLR(LRScheduler):
    r"""Half a cosine from ``base_lr`` down to ``eta_min`` over ``T_max`` steps.

    .. math:: \eta_t = \eta_{min} + \tfrac12(\eta_{base} - \eta_{min})(1 + \cos(\pi t / T_{max}))

    As in PyTorch, past ``T_max`` the cosine continues (the rate rises again, with
    period ``2 * T_max``); choose ``T_max`` = the number of steps you will take.
    """

    def __init__(
        self, optimizer: Optimizer, T_max: int, eta_min: float = 0.0, last_epoch: int = -1
    ):
        self.T_max = T_max
        self.eta_min = eta_min
        super().__init__(optimizer, last_epoch)

    # --8<-- [start:cosine]
    def get_lr(self) -> list[float]:
        cos = math.cos(math.pi * self.last_epoch / self.T_max)
        return [
            self.eta_min + (base_lr - self.eta_min) * (1 + cos) / 2 for base_lr in self.base_lrs
        ]

    # --8<-- [end:cosine]


# --8<-- [start:warmup_cosine]
# --8<-- [start:warmup_cosine_factor]
def _warmup_cosine(
    step: int,
    *,
    num_warmup_steps: int,
    num_training_steps: int,
    num_cycles: float,
    min_lr_ratio: float,
) -> float:
    if step < num_warmup_steps:  # linear warmup: 0, 1/w, 2/w, ...
        return step / max(1, num_warmup_steps)
    progress = (step - num_warmup_steps) / max(1, num_training_steps - num_warmup_steps)
    progress = min(progress, 1.0)  # after the schedule: stay at the bottom
    cosine = 0.5 * (1.0 + math.cos(math.pi * num_cycles * 2.0 * progress))
    return min_lr_ratio + (1.0 - min_lr_ratio) * max(0.0, cosine)


# --8<-- [end:warmup_cosine_factor]


def get_cosine_schedule_with_warmup(
    optimizer: Optimizer,
    num_warmup_steps: int,
    num_training_steps: int,
    num_cycles: float = 0.5,
    last_epoch: int = -1,
    *,
    min_lr_ratio: float = 0.0,
) -> LambdaLR:
    """Linear warmup from 0 to the base rate, then cosine decay to ``min_lr_ratio * base``.

    The schedule of Hugging Face's function of the same name (with its ``num_cycles=0.5``,
    half a cosine), plus a floor ``min_lr_ratio`` as in nanoGPT's ``get_lr``; after
    ``num_training_steps`` the rate stays at the floor.
    """
    if not 0 <= num_warmup_steps <= num_training_steps:
        raise ValueError(
            f"need 0 <= num_warmup_steps <= num_training_steps, got "
            f"{num_warmup_steps} and {num_training_steps}"
        )
    if not 0.0 <= min_lr_ratio <= 1.0:
        raise ValueError(f"min_lr_ratio must be in [0, 1], got {min_lr_ratio}")
    factor = functools.partial(
        _warmup_cosine,
        num_warmup_steps=num_warmup_steps,
        num_training_steps=num_training_steps,
        num_cycles=num_cycles,
        min_lr_ratio=min_lr_ratio,
    )
    return LambdaLR(optimizer, factor, last_epoch)


# --8<-- [end:warmup_cosine]


__all__: list[str] = [
    "LRScheduler",
    "LambdaLR",
    "StepLR",
    "CosineAnnealingLR",
    "get_cosine_schedule_with_warmup",
]

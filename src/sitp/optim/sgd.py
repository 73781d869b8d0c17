"""Stochastic gradient descent, with momentum (heavy ball or Nesterov) and weight decay.

The update of one parameter :math:`\\theta` with gradient :math:`g` is PyTorch's::

    g = g + weight_decay * theta                      # L2 penalty, folded into g
    b = momentum * b + (1 - dampening) * g            # b = g at the first step
    g = g + momentum * b  if nesterov  else  b
    theta = theta - lr * g
"""

from __future__ import annotations

from typing import Iterable

from sitp.autograd.grad_mode import no_grad
from sitp.optim.optimizer import Optimizer


class SGD(Optimizer):
    """Gradient descent with optional momentum, Nesterov momentum and weight decay.

    Args:
        params: tensors, or parameter groups (dicts) with per-group options.
        lr: learning rate (step size).
        momentum: the momentum factor :math:`\\mu` (0 turns momentum off).
        dampening: scales the new gradient added to the momentum buffer by ``1 - dampening``.
        weight_decay: L2 penalty :math:`\\lambda`: adds :math:`\\lambda\\theta` to the gradient.
        nesterov: use Nesterov's look-ahead form (needs momentum > 0 and no dampening).
        maximize: ascend the objective instead of descending it.
        foreach, fused: accepted for compatibility with PyTorch and ignored (sitp has one
            implementation: a loop over the parameters).

    >>> import sitp
    >>> w = sitp.tensor([1.0, -2.0], requires_grad=True)
    >>> opt = sitp.optim.SGD([w], lr=0.2, momentum=0.5)
    >>> for _ in range(100):
    ...     opt.zero_grad()
    ...     (w * w).sum().backward()    # the minimum is at w = 0
    ...     opt.step()
    >>> bool(w.abs().max() < 1e-3)
    True
    """

    def __init__(
        self,
        params: Iterable,
        lr: float = 1e-3,
        momentum: float = 0.0,
        dampening: float = 0.0,
        weight_decay: float = 0.0,
        nesterov: bool = False,
        *,
        maximize: bool = False,
        foreach: bool | None = None,
        differentiable: bool = False,
        fused: bool | None = None,
    ):
        if differentiable:
            raise NotImplementedError("sitp's optimizers are not differentiable")
        defaults = dict(
            lr=lr,
            momentum=momentum,
            dampening=dampening,
            weight_decay=weight_decay,
            nesterov=nesterov,
            maximize=maximize,
            foreach=foreach,
            fused=fused,
        )
        super().__init__(params, defaults)

    def _validate(self, group) -> None:
        if not group["lr"] >= 0.0:
            raise ValueError(f"Invalid learning rate: {group['lr']} (must be >= 0)")
        if not group["momentum"] >= 0.0:
            raise ValueError(f"Invalid momentum value: {group['momentum']} (must be >= 0)")
        if not group["weight_decay"] >= 0.0:
            raise ValueError(f"Invalid weight_decay value: {group['weight_decay']} (must be >= 0)")
        if group["nesterov"] and (group["momentum"] <= 0 or group["dampening"] != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")

    # --8<-- [start:step]
    def step(self, closure=None):
        """One update of every parameter that has a gradient; returns ``closure()``'s loss."""
        loss = self._closure_loss(closure)
        with no_grad():
            for group in self.param_groups:
                lr, mu, wd = group["lr"], group["momentum"], group["weight_decay"]
                for p in group["params"]:
                    if p.grad is None:
                        continue
                    g = p.grad if not group["maximize"] else -p.grad
                    if wd != 0:
                        g = g.add(p, alpha=wd)  # g + λθ: the gradient of λ/2 |θ|²
                    if mu != 0:
                        state = self.state[p]
                        buf = state.get("momentum_buffer")
                        if buf is None:  # first step: b = g
                            buf = state["momentum_buffer"] = g.detach().clone()
                        else:  # b = μ b + (1 - dampening) g
                            buf.mul_(mu).add_(g, alpha=1 - group["dampening"])
                        g = g.add(buf, alpha=mu) if group["nesterov"] else buf
                    p.add_(g, alpha=-lr)  # θ = θ - lr g
        return loss

    # --8<-- [end:step]

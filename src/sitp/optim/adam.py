"""Adam and AdamW: per-coordinate step sizes from running moments of the gradient.

For a parameter :math:`\\theta` with gradient :math:`g` at step :math:`t` (PyTorch's update)::

    m = beta1 * m + (1 - beta1) * g                   # first moment (a lerp toward g)
    v = beta2 * v + (1 - beta2) * g * g               # second moment
    m_hat = m / (1 - beta1**t);  v_hat = v / (1 - beta2**t)     # bias correction
    theta = theta - lr * m_hat / (sqrt(v_hat) + eps)

Adam's ``weight_decay`` adds :math:`\\lambda\\theta` to :math:`g` (an L2 penalty, which
then passes through the moments); AdamW's multiplies :math:`\\theta` by
:math:`1 - \\mathrm{lr}\\,\\lambda` before the step (decoupled weight decay).
"""

from __future__ import annotations

from typing import Iterable

import numpy as np

from sitp._tensor.creation import tensor, zeros_like
from sitp.autograd.grad_mode import no_grad
from sitp.dtypes import float32
from sitp.functional import maximum
from sitp.kernels.cpu.fused.adam import adam_update
from sitp.optim.optimizer import Optimizer, _one_pass


def _bump(step):
    """``step += 1`` for an optimizer's 0-d step counter; returns the new count.

    On the CPU the counter's one entry is bumped in its storage, which skips the
    trip through the op layer (two kernel launches and ``.item()``) that would
    otherwise be paid once per parameter per step.
    """
    s = step._storage
    if isinstance(s, np.ndarray):
        s[step._offset] += 1
        return float(s[step._offset])
    step += 1
    return step.item()


class Adam(Optimizer):
    """Adam (Kingma and Ba, 2015), optionally AMSGrad; ``weight_decay`` is an L2 penalty.

    Args:
        params: tensors, or parameter groups (dicts) with per-group options.
        lr: learning rate :math:`\\alpha`.
        betas: decay rates :math:`(\\beta_1, \\beta_2)` of the moment averages, each in [0, 1).
        eps: added to :math:`\\sqrt{\\hat v}` so that the step stays finite.
        weight_decay: :math:`\\lambda`; Adam adds :math:`\\lambda\\theta` to the gradient.
        amsgrad: divide by the running maximum of :math:`\\hat v` (Reddi et al., 2018).
        maximize: ascend the objective instead of descending it.
        decoupled_weight_decay: decay the weights directly, as AdamW does.
        foreach, fused: accepted for compatibility with PyTorch and ignored: contiguous CPU
            tensors always take the one-pass kernel of ``kernels/cpu/fused/adam.py``, and
            contiguous CUDA tensors the one of ``kernels/cuda/fused.py``.

    >>> import sitp
    >>> w = sitp.tensor([3.0, -1.0], requires_grad=True)
    >>> opt = sitp.optim.Adam([w], lr=0.1)
    >>> for _ in range(200):
    ...     opt.zero_grad()
    ...     ((w - 1) ** 2).sum().backward()   # the minimum is at w = 1
    ...     opt.step()
    >>> bool((w - 1).abs().max() < 1e-2)
    True
    """

    def __init__(
        self,
        params: Iterable,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        amsgrad: bool = False,
        *,
        maximize: bool = False,
        foreach: bool | None = None,
        capturable: bool = False,
        differentiable: bool = False,
        fused: bool | None = None,
        decoupled_weight_decay: bool = False,
    ):
        if differentiable or capturable:
            raise NotImplementedError("sitp's optimizers are neither differentiable nor capturable")
        defaults = dict(
            lr=lr,
            betas=tuple(betas),
            eps=eps,
            weight_decay=weight_decay,
            amsgrad=amsgrad,
            maximize=maximize,
            foreach=foreach,
            fused=fused,
            decoupled_weight_decay=decoupled_weight_decay,
        )
        super().__init__(params, defaults)

    def _validate(self, group) -> None:
        if not group["lr"] >= 0.0:
            raise ValueError(f"Invalid learning rate: {group['lr']} (must be >= 0)")
        if not group["eps"] >= 0.0:
            raise ValueError(f"Invalid epsilon value: {group['eps']} (must be >= 0)")
        betas = group["betas"]
        if len(betas) != 2:
            raise ValueError(f"betas must be a pair (beta1, beta2), got {betas}")
        for i, beta in enumerate(betas):
            if not 0.0 <= beta < 1.0:
                raise ValueError(f"Invalid beta parameter at index {i}: {beta} (must be in [0, 1))")
        if not group["weight_decay"] >= 0.0:
            raise ValueError(f"Invalid weight_decay value: {group['weight_decay']} (must be >= 0)")

    def _init_state(self, p, amsgrad: bool) -> dict:
        """Zero moments and a step counter (a float32 0-d tensor, as PyTorch keeps it)."""
        state = self.state[p]
        if len(state) == 0:
            state["step"] = tensor(0.0, dtype=float32)
            state["exp_avg"] = zeros_like(p)
            state["exp_avg_sq"] = zeros_like(p)
            if amsgrad:
                state["max_exp_avg_sq"] = zeros_like(p)
        return state

    # --8<-- [start:step]
    def step(self, closure=None):
        """One update of every parameter that has a gradient; returns ``closure()``'s loss."""
        loss = self._closure_loss(closure)
        with no_grad():
            for group in self.param_groups:
                lr, (beta1, beta2), eps = group["lr"], group["betas"], group["eps"]
                wd, amsgrad = group["weight_decay"], group["amsgrad"]
                for p in group["params"]:
                    if p.grad is None:
                        continue
                    g = p.grad if not group["maximize"] else -p.grad
                    state = self._init_state(p, amsgrad)
                    m, v = state["exp_avg"], state["exp_avg_sq"]
                    t = _bump(state["step"])  # step += 1, as a float
                    found = None if amsgrad else _one_pass("adam_update", adam_update, p, g, m, v)
                    if found is not None:
                        # the same update in one pass (kernels/cpu/fused/adam.py; on a GPU,
                        # kernels/cuda/fused.py)
                        update, arrays = found
                        update(
                            *arrays,
                            lr,
                            beta1,
                            beta2,
                            eps,
                            wd,
                            group["decoupled_weight_decay"],
                            1 - beta1**t,
                            (1 - beta2**t) ** 0.5,
                        )
                        p._vc[0] += 1  # an in-place write, as p.add_
                        continue
                    if wd != 0:
                        if group["decoupled_weight_decay"]:
                            p.mul_(1 - lr * wd)  # AdamW: θ = (1 - lr λ) θ
                        else:
                            g = g.add(p, alpha=wd)  # Adam: L2, g = g + λθ
                    m.lerp_(g, 1 - beta1)  # m = β1 m + (1 - β1) g
                    v.mul_(beta2).addcmul_(g, g, value=1 - beta2)  # v = β2 v + (1 - β2) g²
                    bias_correction1 = 1 - beta1**t
                    bias_correction2 = 1 - beta2**t
                    if amsgrad:  # v_max = max(v_max, v)
                        v_max = state["max_exp_avg_sq"]
                        v = v_max.copy_(maximum(v_max, v))
                    # θ = θ - lr m̂ / (sqrt(v̂) + ε), with m̂ = m / bc1 and v̂ = v / bc2
                    denom = (v.sqrt() / bias_correction2**0.5).add_(eps)
                    p.addcdiv_(m, denom, value=-lr / bias_correction1)
        return loss

    # --8<-- [end:step]


class AdamW(Adam):
    """Adam with decoupled weight decay (Loshchilov and Hutter, 2019).

    Before each Adam step the weights shrink by a factor :math:`1 - \\mathrm{lr}\\,\\lambda`;
    the decay never enters the moments, so every weight decays at the same relative rate
    whatever the size of its gradients. Note the default ``weight_decay=1e-2``.

    >>> import sitp
    >>> w = sitp.tensor([3.0, -1.0], requires_grad=True)
    >>> opt = sitp.optim.AdamW([w], lr=0.1, weight_decay=0.1)
    >>> opt.param_groups[0]["decoupled_weight_decay"]
    True
    """

    def __init__(
        self,
        params: Iterable,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 1e-2,
        amsgrad: bool = False,
        *,
        maximize: bool = False,
        foreach: bool | None = None,
        capturable: bool = False,
        differentiable: bool = False,
        fused: bool | None = None,
    ):
        super().__init__(
            params,
            lr,
            betas,
            eps,
            weight_decay,
            amsgrad,
            maximize=maximize,
            foreach=foreach,
            capturable=capturable,
            differentiable=differentiable,
            fused=fused,
            decoupled_weight_decay=True,
        )

    def load_state_dict(self, state_dict) -> None:
        super().load_state_dict(state_dict)
        for group in self.param_groups:  # an AdamW stays AdamW, as in PyTorch
            group["decoupled_weight_decay"] = True

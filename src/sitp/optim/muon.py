"""Muon: momentum whose update matrix is orthogonalised by a Newton–Schulz iteration.

For a 2-D parameter :math:`W` of shape (A, B) with gradient :math:`G`, one step of
``torch.optim.Muon`` (PyTorch 2.13) is::

    M = momentum * M + (1 - momentum) * G              # a lerp toward G (M = 0 at first)
    U = (1 - momentum) * G + momentum * M  if nesterov  else  M
    O = newton_schulz(U)                               # U with its singular values pushed near 1
    W = W * (1 - lr * weight_decay)                    # decoupled weight decay
    W = W - lr * scale(A, B) * O

``scale`` keeps the size of the update comparable across shapes: ``sqrt(max(1, A/B))``
(``adjust_lr_fn="original"``, the default) or ``0.2 * sqrt(max(A, B))``
(``"match_rms_adamw"``, so that Muon can reuse AdamW's learning rate and weight
decay; Liu et al., 2025, "Muon is Scalable for LLM Training").

Orthogonalising: if :math:`U = S \\Sigma V^\\top` (SVD), the update we want is
:math:`S V^\\top`, the same directions with every singular value set to 1, so that no
direction of the update dominates. An SVD per step is slow; instead
:func:`newton_schulz` divides :math:`U` by its Frobenius norm (all singular values
then lie in [0, 1]) and applies a few times the odd polynomial

.. math:: X \\leftarrow a X + (b\\, X X^\\top + c\\, (X X^\\top)^2) X,

which maps each singular value :math:`\\sigma` to :math:`a\\sigma + b\\sigma^3 + c\\sigma^5`
and leaves the singular vectors alone. The default coefficients (3.4445, -4.775,
2.0315; Keller Jordan's, 2024) make the slope at 0 steep, so that small singular
values grow fast; after 5 steps they land between about 0.7 and 1.2, not exactly at 1,
which works as well in training. The iteration runs on the wide orientation (the
transpose when A > B), so that :math:`X X^\\top` is the smaller Gram matrix.

Where sitp differs from PyTorch: PyTorch runs the iteration in bfloat16; sitp has no
bfloat16 and runs it in the parameter's dtype (float32 or float64), so the two agree
to bfloat16's precision (about 3 digits) per step, not to float32's.
"""

from __future__ import annotations

import math
from typing import Iterable

from sitp._tensor.creation import zeros_like
from sitp._tensor.tensor import Tensor
from sitp.autograd.grad_mode import no_grad
from sitp.optim.optimizer import Optimizer

_ADJUST_LR_FNS = (None, "original", "match_rms_adamw")


def _check_ns(ns_coefficients, ns_steps) -> None:
    if ns_steps >= 100:
        raise ValueError(
            f"ns_steps must be less than 100 for computational efficiency, got {ns_steps}"
        )
    if len(ns_coefficients) != 3:
        raise ValueError(
            f"ns_coefficients must be a tuple of exactly 3 values (a, b, c), got {ns_coefficients!r}"
        )


# --8<-- [start:newton_schulz]
def newton_schulz(
    G: Tensor,
    ns_coefficients: tuple[float, float, float] = (3.4445, -4.775, 2.0315),
    ns_steps: int = 5,
    eps: float = 1e-7,
) -> Tensor:
    """Approximately orthogonalise a matrix: its singular values moved near 1.

    Args:
        G: a 2-D tensor (A, B).
        ns_coefficients: (a, b, c) of the odd polynomial a x + b x^3 + c x^5 that each
            step applies to every singular value.
        ns_steps: the number of steps (fewer than 100).
        eps: the smallest norm divided by, so that a zero matrix stays zero.

    Returns:
        A tensor of G's shape and dtype with G's singular vectors.

    >>> import sitp
    >>> O = newton_schulz(sitp.tensor([[3.0, 0.0], [0.0, 0.5]]))
    >>> [round(O[i, i].item(), 2) for i in range(2)]  # singular values 3 and 0.5 -> near 1
    [0.71, 1.04]
    """
    if G.ndim != 2:
        raise ValueError(f"newton_schulz expects a 2-D matrix, got shape {tuple(G.shape)}")
    _check_ns(ns_coefficients, ns_steps)
    a, b, c = ns_coefficients
    wide = G.shape[0] <= G.shape[1]
    X_AB = G if wide else G.T  # (A, B) with A <= B from here on
    X_AB = X_AB / X_AB.norm().clamp(min=eps)  # singular values now in [0, 1]
    for _ in range(ns_steps):
        A_AA = X_AB @ X_AB.T  # the Gram matrix X X^T
        P_AA = A_AA * b + (A_AA @ A_AA) * c  # b A + c A^2
        X_AB = X_AB * a + P_AA @ X_AB  # sigma -> a sigma + b sigma^3 + c sigma^5
    return X_AB if wide else X_AB.T


# --8<-- [end:newton_schulz]


def _adjusted_lr(lr: float, adjust_lr_fn: str | None, shape) -> float:
    """The learning rate for a parameter of this (A, B) shape."""
    A, B = shape[:2]
    if adjust_lr_fn in (None, "original"):
        return lr * math.sqrt(max(1.0, A / B))
    return lr * 0.2 * math.sqrt(max(A, B))  # "match_rms_adamw"


class Muon(Optimizer):
    """Muon (Jordan et al., 2024) for the 2-D parameters of hidden layers.

    Embeddings, the output head, gains and biases belong to another optimizer such as
    AdamW; Muon raises ValueError for a parameter that is not 2-D.

    Args:
        params: 2-D tensors, ``(name, tensor)`` pairs, or parameter groups (dicts).
        lr: learning rate, before the per-shape adjustment.
        weight_decay: :math:`\\lambda`: each step multiplies the parameter by
            :math:`1 - \\mathrm{lr}\\,\\lambda` (decoupled, as in AdamW).
        momentum: the momentum buffer's decay :math:`\\mu` (a lerp toward the gradient).
        nesterov: orthogonalise :math:`(1 - \\mu) g + \\mu M` instead of :math:`M`.
        ns_coefficients: the (a, b, c) of :func:`newton_schulz`.
        eps: the smallest norm :func:`newton_schulz` divides by.
        ns_steps: Newton–Schulz steps per update (fewer than 100).
        adjust_lr_fn: ``None`` or ``"original"`` (scale by ``sqrt(max(1, A/B))``), or
            ``"match_rms_adamw"`` (scale by ``0.2 * sqrt(max(A, B))``).

    >>> import sitp
    >>> W = sitp.tensor([[2.0, 0.0], [0.0, 0.1]], requires_grad=True)
    >>> opt = sitp.optim.Muon([W], lr=0.05, weight_decay=0.0)
    >>> for _ in range(60):
    ...     opt.zero_grad()
    ...     (W * W).sum().backward()    # the minimum is at W = 0
    ...     opt.step()
    >>> bool(W.abs().max() < 0.1)       # each step moves about lr, whatever the gradient's size
    True
    """

    def __init__(
        self,
        params: Iterable,
        lr: float = 1e-3,
        weight_decay: float = 0.1,
        momentum: float = 0.95,
        nesterov: bool = True,
        ns_coefficients: tuple[float, float, float] = (3.4445, -4.775, 2.0315),
        eps: float = 1e-7,
        ns_steps: int = 5,
        adjust_lr_fn: str | None = None,
    ):
        defaults = dict(
            lr=lr,
            weight_decay=weight_decay,
            momentum=momentum,
            nesterov=nesterov,
            ns_coefficients=ns_coefficients,
            eps=eps,
            ns_steps=ns_steps,
            adjust_lr_fn=adjust_lr_fn,
        )
        super().__init__(params, defaults)

    def _validate(self, group) -> None:
        if not group["lr"] >= 0.0:
            raise ValueError(f"Learning rate should be >= 0 but is: {group['lr']}")
        if not group["momentum"] >= 0.0:
            raise ValueError(f"momentum should be >= 0 but is: {group['momentum']}")
        if not group["weight_decay"] >= 0.0:
            raise ValueError(f"weight decay should be >= 0 but is: {group['weight_decay']}")
        if group["adjust_lr_fn"] not in _ADJUST_LR_FNS:
            raise ValueError(
                f"Adjust learning rate function {group['adjust_lr_fn']!r} is not supported "
                f"(choose None, 'original' or 'match_rms_adamw')"
            )
        _check_ns(group["ns_coefficients"], group["ns_steps"])
        for p in group["params"]:
            if p.ndim != 2:
                raise ValueError(
                    f"Muon only supports 2D parameters whereas we found a parameter with "
                    f"size: {tuple(p.shape)}"
                )

    # --8<-- [start:step]
    def step(self, closure=None):
        """One update of every parameter that has a gradient; returns ``closure()``'s loss."""
        loss = self._closure_loss(closure)
        with no_grad():
            for group in self.param_groups:
                lr, wd, mu = group["lr"], group["weight_decay"], group["momentum"]
                for p in group["params"]:
                    if p.grad is None:
                        continue
                    g = p.grad
                    state = self.state[p]
                    if "momentum_buffer" not in state:
                        state["momentum_buffer"] = zeros_like(g)
                    buf = state["momentum_buffer"]
                    buf.lerp_(g, 1 - mu)  # M = mu M + (1 - mu) g
                    update = g.lerp(buf, mu) if group["nesterov"] else buf
                    O = newton_schulz(
                        update, group["ns_coefficients"], group["ns_steps"], group["eps"]
                    )
                    p.mul_(1 - lr * wd)
                    p.add_(O, alpha=-_adjusted_lr(lr, group["adjust_lr_fn"], p.shape))
        return loss

    # --8<-- [end:step]

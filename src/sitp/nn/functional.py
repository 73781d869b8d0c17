"""``sitp.nn.functional``: the stateless layers and losses, with PyTorch's signatures.

``import sitp.nn.functional as F`` gives the names model code expects
(``F.cross_entropy``, ``F.layer_norm``, ``F.scaled_dot_product_attention``, ...).
Most functions here are short compositions of tensor ops, so autograd derives
their gradients; the others are one autograd node each, over fused kernels with their
own backward (``sitp/nn/_functions/``, which calls the kernels of
``sitp/backends/cpu/fused/`` and ``sitp/backends/cuda/fused.py``): :func:`linear`,
:func:`gelu`, :func:`cross_entropy`, :func:`layer_norm`, :func:`rms_norm` and
:func:`scaled_dot_product_attention`.

Where sitp differs from PyTorch, the docstring says so.
"""

from __future__ import annotations

import math
import warnings

import numpy as np

from sitp._tensor.creation import arange, full, tensor
from sitp._tensor.tensor import Tensor
from sitp.dtypes import bool_, int64
from sitp.functional import cat, one_hot, where  # noqa: F401  (one_hot: re-exported)
from sitp.nn._functions import attention as _attention
from sitp.nn._functions import binary_cross_entropy as _bce
from sitp.nn._functions import cross_entropy as _ce
from sitp.nn._functions import gelu as _gelu
from sitp.nn._functions import layer_norm as _ln
from sitp.nn._functions import linear as _linear
from sitp.nn._functions import rms_norm as _rms
from sitp.nn._functions import softmax as _softmax
from sitp.random import rand
from sitp.strides import broadcast_shapes

__all__ = [
    "binary_cross_entropy",
    "binary_cross_entropy_with_logits",
    "conv1d",
    "cross_entropy",
    "dropout",
    "elu",
    "embedding",
    "gelu",
    "huber_loss",
    "kl_div",
    "l1_loss",
    "layer_norm",
    "leaky_relu",
    "linear",
    "log_softmax",
    "logsigmoid",
    "mse_loss",
    "nll_loss",
    "one_hot",
    "pad",
    "relu",
    "rms_norm",
    "scaled_dot_product_attention",
    "sigmoid",
    "silu",
    "smooth_l1_loss",
    "softmax",
    "softplus",
    "tanh",
]


# ------------------------------------------------------------------ helpers
def _reduction(size_average, reduce, reduction):
    """PyTorch's legacy ``size_average``/``reduce`` flags, mapped to ``reduction``."""
    if size_average is not None or reduce is not None:
        size_average = True if size_average is None else size_average
        reduce = True if reduce is None else reduce
        reduction = "none" if not reduce else ("mean" if size_average else "sum")
    if reduction not in ("none", "mean", "sum"):
        raise ValueError(f"{reduction} is not a valid value for reduction")
    return reduction


def _reduce(loss, reduction):
    if reduction == "none":
        return loss
    return loss.sum() if reduction == "sum" else loss.mean()


def _on_host(*tensors):
    """Whether every tensor lives on the CPU. The fused kernels of
    ``sitp.backends.cpu.fused`` are numba CPU code. On a GPU,
    :func:`layer_norm` and :func:`cross_entropy` (class-index targets) run the fused
    CUDA kernels of ``sitp.backends.cuda.fused``; the other cases, and
    :func:`scaled_dot_product_attention`, fall back to compositions of ops, each of
    which runs on the tensors' own backend."""
    return all(t is None or isinstance(t._storage, np.ndarray) for t in tensors)


def _check_tensor(name, x):
    if not isinstance(x, Tensor):
        raise TypeError(f"{name}(): expected a sitp Tensor, got {type(x).__name__}")


# -------------------------------------------------------------- activations
def relu(input: Tensor, inplace: bool = False) -> Tensor:
    """max(x, 0).

    >>> import sitp
    >>> import sitp.nn.functional as F
    >>> F.relu(sitp.tensor([-1.0, 0.0, 2.0]))
    tensor([0., 0., 2.])
    """
    return input.relu_() if inplace and hasattr(input, "relu_") else input.relu()


def gelu(input: Tensor, approximate: str = "none") -> Tensor:
    """x * Phi(x) (``approximate='none'``) or its tanh approximation (``'tanh'``, GPT-2's).

    Float tensors on the CPU take the fused kernels of ``backends/cpu/fused/gelu.py`` (one
    vectorised pass each way); other tensors, the generic unary op.
    """
    if approximate not in ("none", "tanh"):
        raise RuntimeError(f"approximate argument must be either none or tanh, got {approximate!r}")
    if input.dtype.is_floating_point and _on_host(input):
        return _gelu.GELU.apply(input, approximate)
    return input._unary("gelu" if approximate == "none" else "gelu_tanh")


def silu(input: Tensor, inplace: bool = False) -> Tensor:
    """x * sigmoid(x) (also called swish)."""
    return input._unary("silu")


def tanh(input: Tensor) -> Tensor:
    return input.tanh()


def sigmoid(input: Tensor) -> Tensor:
    return input.sigmoid()


def leaky_relu(input: Tensor, negative_slope: float = 0.01, inplace: bool = False) -> Tensor:
    """x where x > 0, else negative_slope * x."""
    return input.where(input > 0, input * negative_slope)


def elu(input: Tensor, alpha: float = 1.0, inplace: bool = False) -> Tensor:
    """x where x > 0, else alpha * (exp(x) - 1)."""
    return input.where(input > 0, alpha * input.clamp(max=0).expm1())


def softplus(input: Tensor, beta: float = 1.0, threshold: float = 20.0) -> Tensor:
    """log(1 + exp(beta x)) / beta, and x itself where beta x > threshold (as PyTorch)."""
    bx = input * beta
    soft = (bx.clamp(max=threshold).exp().log1p()) / beta
    return input.where(bx > threshold, soft)


def logsigmoid(input: Tensor) -> Tensor:
    """log(sigmoid(x)) = -softplus(-x), computed without overflow."""
    return -((-input).relu() + (-input.abs()).exp().log1p())


def _softmax_dim(ndim):
    warnings.warn(
        "Implicit dimension choice for softmax has been deprecated. "
        "Change the call to include dim=X as an argument.",
        stacklevel=3,
    )
    return 0 if ndim in (0, 1, 3) else 1


def softmax(input: Tensor, dim=None, _stacklevel: int = 3, dtype=None) -> Tensor:
    """exp(x) / sum(exp(x)) along ``dim`` (stable: the row max is subtracted first)."""
    return input.softmax(_softmax_dim(input.ndim) if dim is None else dim, dtype=dtype)


def log_softmax(input: Tensor, dim=None, _stacklevel: int = 3, dtype=None) -> Tensor:
    """x - logsumexp(x) along ``dim``."""
    return input.log_softmax(_softmax_dim(input.ndim) if dim is None else dim, dtype=dtype)


# ------------------------------------------------------------------- layers
def linear(input: Tensor, weight: Tensor, bias=None) -> Tensor:
    """x @ W^T + b, with W of shape (out_features, in_features).

    >>> import sitp
    >>> import sitp.nn.functional as F
    >>> F.linear(sitp.ones(2, 3), sitp.ones(4, 3), sitp.zeros(4)).shape
    sitp.Size([2, 4])
    """
    if input.shape[-1:] != weight.shape[-1:]:
        raise RuntimeError(
            f"linear(): input of shape {tuple(input.shape)} and weight of shape "
            f"{tuple(weight.shape)}: the last dims ({input.shape[-1] if input.ndim else None} "
            f"and {weight.shape[-1]}) must match (weight is (out_features, in_features))"
        )
    if _linear.fits(input, weight, bias):  # one node, one GEMM (see nn/_functions/linear.py)
        return _linear.Linear.apply(input, weight, bias)
    out = input @ weight.t() if weight.ndim == 2 else input @ weight
    return out if bias is None else out + bias


def dropout(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> Tensor:
    """Zero each entry with probability p and scale the rest by 1/(1-p) (inverted dropout).

    The mask is drawn with :func:`sitp.rand` from sitp's default generator, so
    ``sitp.manual_seed`` makes it repeatable (it does not reproduce PyTorch's mask).
    """
    if p < 0.0 or p > 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    if not training or p == 0.0:
        return input
    if p == 1.0:
        return input * 0
    keep = (rand(*input.shape, dtype=input.dtype, device=input.device) >= p).to(input.dtype) * (
        1.0 / (1.0 - p)
    )
    out = input * keep
    return input.copy_(out) if inplace else out


def embedding(
    input: Tensor,
    weight: Tensor,
    padding_idx=None,
    max_norm=None,
    norm_type: float = 2.0,
    scale_grad_by_freq: bool = False,
    sparse: bool = False,
) -> Tensor:
    """Rows of ``weight`` picked by the integer tensor ``input``: ``weight[input]``.

    The backward scatter-adds: a row used twice gets both gradients. The row
    ``padding_idx`` gets none. sitp has no ``max_norm``, ``scale_grad_by_freq``
    or ``sparse``.
    """
    if max_norm is not None or scale_grad_by_freq or sparse:
        raise NotImplementedError(
            "embedding(): max_norm, scale_grad_by_freq and sparse are not in sitp"
        )
    if not isinstance(input, Tensor) or input.dtype is not int64:
        raise RuntimeError(
            "embedding(): expected an int64 (Long) tensor of indices, got "
            f"{getattr(input, 'dtype', type(input).__name__)}"
        )
    if weight.ndim != 2:
        raise RuntimeError(
            f"embedding(): weight must be 2-D (num_embeddings, embedding_dim), "
            f"got shape {tuple(weight.shape)}"
        )
    out = weight[input]
    if padding_idx is not None:
        if padding_idx < 0:
            padding_idx += weight.shape[0]
        pad_rows = (input == padding_idx).unsqueeze(-1)
        out = out.detach().where(pad_rows, out)  # same values; no gradient to that row
    return out


# --8<-- [start:layer_norm]
def layer_norm(
    input: Tensor, normalized_shape, weight=None, bias=None, eps: float = 1e-5
) -> Tensor:
    """Normalize over the last ``len(normalized_shape)`` dims, then scale and shift.

    y = (x - mean) / sqrt(var + eps) * weight + bias, with the biased variance.
    One fused kernel forward and one backward (``LayerNorm`` on the CPU,
    ``LayerNormGPU`` on a GPU, both in ``sitp/nn/_functions/layer_norm.py``).

    >>> import sitp
    >>> import sitp.nn.functional as F
    >>> F.layer_norm(sitp.tensor([[1.0, 2.0, 3.0]]), (3,))
    tensor([[-1.2247,  0.0000,  1.2247]])
    """
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    k = len(shape)
    if k == 0 or input.ndim < k or tuple(input.shape[input.ndim - k :]) != shape:
        raise RuntimeError(
            f"Given normalized_shape={list(shape)}, expected input with shape [*, "
            f"{', '.join(map(str, shape))}], but got input of size {list(input.shape)}"
        )
    for name, t in (("weight", weight), ("bias", bias)):
        if t is not None and tuple(t.shape) != shape:
            raise RuntimeError(
                f"layer_norm(): {name} of shape {tuple(t.shape)} does not match "
                f"normalized_shape {shape}"
            )
    x = input if input.dtype.is_floating_point else input.float()
    if not _on_host(x, weight, bias):
        if _ln.gpu_fits(x, weight, bias, math.prod(shape)):  # the fused GPU kernels
            return _ln.LayerNormGPU.apply(x, weight, bias, math.prod(shape), eps)
        return _layer_norm_composed(x, k, weight, bias, eps)
    return _ln.LayerNorm.apply(x, weight, bias, math.prod(shape), eps)


# --8<-- [end:layer_norm]


def _layer_norm_composed(x, k, weight, bias, eps):
    """What ``_ln.LayerNorm`` computes, as a composition of ops (the device
    fallback where ``sitp.backends.cuda.fused`` does not apply)."""
    dims = tuple(range(x.ndim - k, x.ndim))
    xc = x - x.mean(dims, keepdim=True)
    y = xc * ((xc * xc).mean(dims, keepdim=True) + eps).rsqrt()
    if weight is not None:
        y = y * weight
    return y if bias is None else y + bias


# --8<-- [start:rms_norm]
def rms_norm(input: Tensor, normalized_shape, weight=None, eps=None) -> Tensor:
    """Divide by the root mean square over the last ``len(normalized_shape)`` dims, then scale.

    y = x / sqrt(mean(x^2) + eps) * weight: layer norm without the mean and the bias
    (Zhang and Sennrich, 2019). ``eps=None`` means the input dtype's machine epsilon,
    as in PyTorch. The output has the input's dtype. On the CPU one fused kernel
    forward and one backward (``RMSNorm`` in ``sitp/nn/_functions/rms_norm.py``); on a
    GPU, or with a weight of another dtype, a composition of ops.

    >>> import sitp
    >>> import sitp.nn.functional as F
    >>> F.rms_norm(sitp.tensor([[3.0, -4.0]]), (2,))  # rms = sqrt((9 + 16) / 2)
    tensor([[0.8485, -1.1314]])
    """
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    k = len(shape)
    if k == 0:
        raise RuntimeError(
            "Expected normalized_shape to be at least 1-dimensional, i.e., containing at "
            "least one element, but got normalized_shape = []"
        )
    if input.ndim < k:  # ValueError here, RuntimeError below: torch's types
        raise ValueError(
            f"Input tensor must have at least {k} dimensions, but got {input.ndim} "
            f"(normalized_shape={list(shape)}, input of size {list(input.shape)})"
        )
    if tuple(input.shape[input.ndim - k :]) != shape:
        raise RuntimeError(
            f"Given normalized_shape={list(shape)}, expected input with shape [*, "
            f"{', '.join(map(str, shape))}], but got input of size {list(input.shape)}"
        )
    if weight is not None and tuple(weight.shape) != shape:
        raise RuntimeError(
            f"Expected weight to be of same shape as normalized_shape, but got weight of "
            f"shape {list(weight.shape)} and normalized_shape = {list(shape)}"
        )
    if not input.dtype.is_floating_point:
        raise NotImplementedError(f'"rms_norm" not implemented for {input.dtype}')
    if eps is None:
        eps = float(np.finfo(input.dtype.np).eps)
    n = math.prod(shape)
    fused = _on_host(input, weight) and n > 0 and input.numel() > 0
    if fused and (weight is None or weight.dtype == input.dtype):
        return _rms.RMSNorm.apply(input, weight, n, eps)
    dims = tuple(range(input.ndim - k, input.ndim))
    y = input * ((input * input).mean(dims, keepdim=True) + eps).rsqrt()
    if weight is not None:
        y = y * weight
    return y if y.dtype == input.dtype else y.to(input.dtype)


# --8<-- [end:rms_norm]


# --8<-- [start:conv1d]
def conv1d(
    input: Tensor, weight: Tensor, bias=None, stride=1, padding=0, dilation=1, groups: int = 1
) -> Tensor:
    """1-D convolution (cross-correlation, as PyTorch) of (N, C_in, L) by (C_out, C_in/groups, K).

    out[n, o, t] = bias[o] + sum_{c, k} weight[o, c, k] * x[n, c, t*stride + k*dilation - padding]

    Built from existing ops, so autograd differentiates it: pad, *unfold* by
    indexing (each output position t gathers its K inputs, an (L_out, K)
    index table), then one batched matmul per group. The unfold costs K times
    the input's memory -- fine for a WaveNet on names, not for long signals.
    ``padding`` is an int, ``'valid'`` or ``'same'``.
    """
    stride, dilation = _single(stride, "stride"), _single(dilation, "dilation")
    unbatched = input.ndim == 2
    x = input.unsqueeze(0) if unbatched else input
    if x.ndim != 3 or weight.ndim != 3:
        raise RuntimeError(
            f"conv1d(): expected a 2-D (C_in, L) or 3-D (N, C_in, L) input and a 3-D "
            f"(C_out, C_in/groups, K) weight, got input {tuple(input.shape)} and weight {tuple(weight.shape)}"
        )
    N, C_in, L = x.shape
    C_out, C_g, K_ = weight.shape
    if C_in != C_g * groups or C_out % groups:
        raise RuntimeError(
            f"Given groups={groups}, weight of size {list(weight.shape)}, expected input"
            f"{list(input.shape)} to have {C_g * groups} channels, but got {C_in} channels instead"
        )
    if padding == "valid":
        left = right = 0
    elif padding == "same":
        if stride != 1:
            raise ValueError("padding='same' is not supported for strided convolutions")
        total = dilation * (K_ - 1)
        left, right = total // 2, total - total // 2
    else:
        left = right = _single(padding, "padding")
    Lp = L + left + right
    L_out = (Lp - dilation * (K_ - 1) - 1) // stride + 1
    if L_out <= 0:
        raise RuntimeError(
            f"conv1d(): calculated padded input size per channel: ({Lp}). Kernel size: "
            f"({dilation * (K_ - 1) + 1}, dilated). Kernel size can't be greater than actual input size"
        )
    # --8<-- [start:conv1d_unfold]
    if left or right:
        x = pad(x, (left, right))  # (N, C_in, Lp)
    dev = x.device
    idx_LK = (
        arange(L_out, device=dev).unsqueeze(1) * stride + arange(K_, device=dev) * dilation
    )  # (L_out, K)
    cols = x[:, :, idx_LK]  # (N, C_in, L_out, K)
    G = groups
    cols = cols.reshape(N, G, C_g, L_out, K_).permute(0, 1, 3, 2, 4)  # (N, G, L_out, C_g, K)
    cols = cols.reshape(N, G, L_out, C_g * K_)
    w = weight.reshape(G, C_out // G, C_g * K_).transpose(1, 2)  # (G, C_g*K, C_out/G)
    out = (cols @ w).permute(0, 1, 3, 2).reshape(N, C_out, L_out)  # (N, C_out, L_out)
    if bias is not None:
        out = out + bias.unsqueeze(1)
    return out.squeeze(0) if unbatched else out
    # --8<-- [end:conv1d_unfold]


# --8<-- [end:conv1d]


def _single(v, name):
    if isinstance(v, (tuple, list)):
        if len(v) != 1:
            raise ValueError(f"conv1d(): {name} must be an int or a 1-tuple, got {v}")
        v = v[0]
    return int(v)


def pad(input: Tensor, pad, mode: str = "constant", value=None) -> Tensor:
    """Pad the last ``len(pad) // 2`` dims: ``pad = (left_last, right_last, left_prev, ...)``.

    Modes ``'constant'`` (negative pads crop), ``'reflect'``, ``'replicate'`` and
    ``'circular'``; padding is concatenation (constant) or indexing (the others),
    so gradients flow back through it.
    """
    pad = tuple(int(p) for p in pad)
    if len(pad) % 2 or len(pad) // 2 > input.ndim:
        raise RuntimeError(
            f"Padding length must be divisible by 2 and at most twice the number of dims; "
            f"got pad={pad} for input of shape {tuple(input.shape)}"
        )
    if mode != "constant" and value:
        raise RuntimeError(f'Padding mode "{mode}" doesn\'t take in value argument')
    x = input
    for i in range(len(pad) // 2):
        d = input.ndim - 1 - i
        lo, hi = pad[2 * i], pad[2 * i + 1]
        n = x.shape[d]
        if mode == "constant":
            if lo < 0 or hi < 0:  # negative padding crops
                x = x.narrow(d, max(-lo, 0), n - max(-lo, 0) - max(-hi, 0))
            side = []
            for width in (lo, hi):
                s = list(x.shape)
                s[d] = max(width, 0)
                side.append(
                    [full(s, 0 if value is None else value, dtype=x.dtype, device=x.device)]
                    if width > 0
                    else []
                )
            x = cat(side[0] + [x] + side[1], d) if side[0] or side[1] else x
            continue
        if mode == "reflect" and (lo >= n or hi >= n):
            raise RuntimeError(
                f"reflect padding ({lo}, {hi}) must be smaller than the size {n} "
                f"of dim {d} (input of shape {tuple(input.shape)})"
            )
        if mode == "reflect":  # ... 2 1 | 0 1 2 ... n-1 | n-2 ...
            idx = [abs(j) if j < n else 2 * (n - 1) - j for j in range(-lo, n + hi)]
        elif mode == "replicate":
            idx = [min(max(j, 0), n - 1) for j in range(-lo, n + hi)]
        elif mode == "circular":
            idx = [j % n for j in range(-lo, n + hi)]
        else:
            raise NotImplementedError(f"pad(): mode {mode!r} is not in sitp")
        x = x.index_select(d, tensor(idx, dtype=int64, device=x.device))
    return x


# ------------------------------------------------------------------- losses
# --8<-- [start:cross_entropy]
def cross_entropy(
    input: Tensor,
    target: Tensor,
    weight=None,
    size_average=None,
    ignore_index: int = -100,
    reduce=None,
    reduction: str = "mean",
    label_smoothing: float = 0.0,
) -> Tensor:
    """Cross-entropy between logits and class indices (or class probabilities).

    ``input`` is (N, C), (N, C, d1, ...) or unbatched (C,); ``target`` holds class
    indices of shape (N,), (N, d1, ...) or (): the loss of a row is
    -log softmax(input)[target], mixed with the mean over all classes by
    ``label_smoothing``, times ``weight[target]``. Rows whose target is
    ``ignore_index`` count for nothing, also in the mean's denominator (which is
    the sum of the counted rows' weights). A float ``target`` of the input's
    shape is a distribution over classes instead.

    Class-index targets run one fused kernel forward and one backward
    (``CrossEntropy`` on the CPU, ``CrossEntropyGPU`` on a GPU, both in
    ``sitp/nn/_functions/cross_entropy.py``); the gradient of a row is
    ``softmax(input) - smoothed one_hot(target)``.

    >>> import sitp
    >>> import sitp.nn.functional as F
    >>> logits = sitp.tensor([[2.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    >>> round(F.cross_entropy(logits, sitp.tensor([0, 2])).item(), 4)
    0.6691
    """
    reduction = _reduction(size_average, reduce, reduction)
    _check_tensor("cross_entropy", input)
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"label_smoothing must be between 0.0 and 1.0. Got: {label_smoothing}")
    if input.ndim == 0:
        raise RuntimeError("cross_entropy(): input must have at least one dim (the classes)")
    x = input if input.dtype.is_floating_point else input.float()
    class_dim = 0 if x.ndim == 1 else 1
    C = x.shape[class_dim]
    if weight is not None and tuple(weight.shape) != (C,):
        raise RuntimeError(
            f"cross_entropy(): weight of shape {tuple(weight.shape)} should have "
            f"one entry per class ({C},)"
        )
    if target.dtype.is_floating_point:
        return _cross_entropy_probs(x, target, weight, reduction, label_smoothing, class_dim)
    if target.dtype is not int64:
        raise RuntimeError(
            f"cross_entropy(): expected target of dtype int64 (class indices) or "
            f"floating (probabilities), got {target.dtype}"
        )
    batch_shape = tuple(x.shape[:class_dim]) + tuple(x.shape[class_dim + 1 :])
    if tuple(target.shape) != batch_shape:
        if x.ndim == 2 and target.ndim == 1:
            raise ValueError(
                f"Expected input batch_size ({x.shape[0]}) to match target "
                f"batch_size ({target.shape[0]})."
            )
        raise RuntimeError(
            f"cross_entropy(): input of shape {tuple(x.shape)} (classes at dim {class_dim}) "
            f"expects a target of shape {batch_shape}, got {tuple(target.shape)}"
        )
    if x.ndim > 2:  # (N, C, d1, ...) -> (N, d1, ..., C) -> rows of C
        x = x.permute(0, *range(2, x.ndim), 1)
    x_RC, t_R = x.reshape(-1, C), target.reshape(-1)
    if _on_host(x, target, weight):
        loss = _ce.CrossEntropy.apply(
            x_RC, t_R, weight, ignore_index, float(label_smoothing), reduction
        )
    else:
        if _ce.gpu_fits(x_RC, t_R, weight):  # the fused GPU kernels, when they apply
            loss = _ce.CrossEntropyGPU.apply(
                x_RC, t_R, weight, ignore_index, float(label_smoothing), reduction
            )
        else:
            loss = _cross_entropy_composed(
                x_RC, t_R, weight, ignore_index, float(label_smoothing), reduction
            )
    return loss.reshape(batch_shape) if reduction == "none" else loss


# --8<-- [end:cross_entropy]


def _cross_entropy_composed(x_RC, t_R, weight, ignore_index, eps, reduction):
    """What ``_ce.CrossEntropy`` computes, as a composition of ops (the device
    fallback where ``sitp.backends.cuda.fused`` does not apply)."""
    C = x_RC.shape[1]
    logp = x_RC.log_softmax(1)
    loss, w_R, keep = _nll_rows(logp, t_R, weight, ignore_index, "cross_entropy")
    if eps:
        wl = logp if weight is None else logp * weight.to(logp.dtype)
        loss = (1 - eps) * loss - (eps / C) * wl.sum(1) * keep.to(logp.dtype)
    if reduction == "none":
        return loss
    return loss.sum() if reduction == "sum" else loss.sum() / w_R.sum()


def _nll_rows(logp_RC, t_R, weight, ignore_index, name):
    """(-weight[t] * logp[r, t] per row r, weight[t] per row, kept rows), ignored rows 0."""
    C = logp_RC.shape[1]
    keep = t_R != ignore_index
    # On the GPU the gather below flags a bad class index itself, and the error comes at
    # the next sync: checking here would copy to the host in every training step.
    if t_R.numel() and not t_R.is_cuda:
        bad = keep & ((t_R < 0) | (t_R >= C))
        if bad.any().item():
            v = int(t_R.cpu()[bad.cpu()][0].item())
            raise IndexError(
                f"Target {v} is out of bounds: {name} expects class indices in "
                f"[0, {C}) or ignore_index={ignore_index}"
            )
    safe = t_R * keep.long()  # ignored rows -> class 0
    picked = logp_RC.gather(1, safe.unsqueeze(1)).squeeze(1)  # (R,)
    w_R = keep.to(logp_RC.dtype)
    if weight is not None:
        w_R = weight.to(logp_RC.dtype)[safe] * w_R
    return -picked * w_R, w_R, keep


def _cross_entropy_probs(x, target, weight, reduction, eps, class_dim):
    """cross_entropy with class probabilities as targets (composed from ops)."""
    if tuple(target.shape) != tuple(x.shape):
        raise RuntimeError(
            f"cross_entropy(): probability targets must have the input's shape "
            f"{tuple(x.shape)}, got {tuple(target.shape)}"
        )
    C = x.shape[class_dim]
    t = target.to(x.dtype)
    if eps > 0:
        t = t * (1 - eps) + eps / C
    logp = x.log_softmax(class_dim)
    prod = logp * t
    if weight is not None:
        prod = prod * weight.to(x.dtype).reshape((C,) + (1,) * (x.ndim - class_dim - 1))
    loss = -prod.sum(class_dim)
    if reduction == "mean":
        return loss.sum() / (x.numel() // C) if x.numel() else loss.sum() * math.nan
    return _reduce(loss, reduction)


def nll_loss(
    input: Tensor,
    target: Tensor,
    weight=None,
    size_average=None,
    ignore_index: int = -100,
    reduce=None,
    reduction: str = "mean",
) -> Tensor:
    """Negative log-likelihood of log-probabilities ``input`` (N, C[, d...]) at class ``target``.

    loss = -weight[t] * input[t] per row; the mean divides by the sum of the
    counted rows' weights. Composed of ``gather`` and arithmetic.
    """
    reduction = _reduction(size_average, reduce, reduction)
    if input.ndim == 0:
        raise RuntimeError("nll_loss(): input must have at least one dim (the classes)")
    class_dim = 0 if input.ndim == 1 else 1
    C = input.shape[class_dim]
    batch_shape = tuple(input.shape[:class_dim]) + tuple(input.shape[class_dim + 1 :])
    if target.dtype is not int64:
        raise RuntimeError(f"nll_loss(): expected target of dtype int64, got {target.dtype}")
    if weight is not None and tuple(weight.shape) != (C,):
        raise RuntimeError(
            f"weight tensor should be defined either for all {C} classes or no classes "
            f"but got weight tensor of shape: {list(weight.shape)}"
        )
    if tuple(target.shape) != batch_shape:
        if input.ndim == 2 and target.ndim == 1:
            raise ValueError(
                f"Expected input batch_size ({input.shape[0]}) to match target "
                f"batch_size ({target.shape[0]})."
            )
        raise RuntimeError(
            f"nll_loss(): input of shape {tuple(input.shape)} expects a target of "
            f"shape {batch_shape}, got {tuple(target.shape)}"
        )
    x = input.permute(*[d for d in range(input.ndim) if d != class_dim], class_dim).reshape(-1, C)
    loss, w_R, _ = _nll_rows(x, target.reshape(-1), weight, ignore_index, "nll_loss")
    if reduction == "none":
        return loss.reshape(batch_shape)
    return loss.sum() if reduction == "sum" else loss.sum() / w_R.sum()


def mse_loss(
    input: Tensor,
    target: Tensor,
    size_average=None,
    reduce=None,
    reduction: str = "mean",
    weight=None,
) -> Tensor:
    """Mean (or sum) of squared differences; shapes broadcast (PyTorch warns when they differ).
    With ``weight`` (the input's shape), the mean divides by the sum of the weights."""
    reduction = _reduction(size_average, reduce, reduction)
    if tuple(input.shape) != tuple(target.shape):
        warnings.warn(
            f"Using a target size ({tuple(target.shape)}) that is different to the input size "
            f"({tuple(input.shape)}). This will likely lead to incorrect results due to "
            f"broadcasting. Please ensure they have the same size.",
            stacklevel=2,
        )
        broadcast_shapes(input.shape, target.shape)
    d = input - target
    return _weighted(d * d, weight, input, reduction)


def binary_cross_entropy(
    input: Tensor,
    target: Tensor,
    weight=None,
    size_average=None,
    reduce=None,
    reduction: str = "mean",
) -> Tensor:
    """-(y log x + (1 - y) log(1 - x)) for probabilities x; each log is clamped at -100,
    so x = 0 or 1 gives a finite loss (as PyTorch)."""
    reduction = _reduction(size_average, reduce, reduction)
    if tuple(target.shape) != tuple(input.shape):
        raise ValueError(
            f"Using a target size ({tuple(target.shape)}) that is different to the input size "
            f"({tuple(input.shape)}) is deprecated. Please ensure they have the same size."
        )
    if input.numel() and not ((input >= 0) & (input <= 1)).all().item():
        raise RuntimeError("all elements of input should be between 0 and 1")
    loss = _bce.BinaryCrossEntropy.apply(input, target.to(input.dtype))
    if weight is not None:
        loss = loss * weight
    return _reduce(loss, reduction)


def binary_cross_entropy_with_logits(
    input: Tensor,
    target: Tensor,
    weight=None,
    size_average=None,
    reduce=None,
    reduction: str = "mean",
    pos_weight=None,
) -> Tensor:
    """Sigmoid and binary cross-entropy in one stable expression of the logits ``input``.

    ``pos_weight`` (broadcast along the last dim) multiplies the loss of positive targets.
    """
    reduction = _reduction(size_average, reduce, reduction)
    if tuple(target.shape) != tuple(input.shape):
        raise ValueError(
            f"Target size ({tuple(target.shape)}) must be the same as input size "
            f"({tuple(input.shape)})"
        )
    if pos_weight is not None:
        broadcast_shapes(pos_weight.shape, input.shape)
        pos_weight = pos_weight.to(input.dtype)
    loss = _bce.BinaryCrossEntropyWithLogits.apply(input, target.to(input.dtype), pos_weight)
    if weight is not None:
        loss = loss * weight
    return _reduce(loss, reduction)


def _check_same_size(name, input, target):
    """The elementwise losses broadcast a target of another shape, with torch's warning."""
    if tuple(input.shape) != tuple(target.shape):
        warnings.warn(
            f"Using a target size ({tuple(target.shape)}) that is different to the input size "
            f"({tuple(input.shape)}). This will likely lead to incorrect results due to "
            f"broadcasting. Please ensure they have the same size.",
            stacklevel=3,
        )
        try:
            broadcast_shapes(input.shape, target.shape)
        except (RuntimeError, ValueError):
            raise RuntimeError(
                f"{name}(): the size of input {tuple(input.shape)} and target "
                f"{tuple(target.shape)} do not broadcast"
            ) from None


def _weighted(loss, weight, input, reduction, mean_over_weight=True):
    """``loss * weight`` reduced as torch's weighted l1/mse losses do: the mean divides by
    the sum of the weights (huber_loss's, ``mean_over_weight=False``, by the count)."""
    if weight is None:
        return _reduce(loss, reduction)
    if tuple(weight.shape) != tuple(input.shape):
        raise ValueError("Weights and input must have the same size.")
    loss = loss * weight
    if reduction == "mean" and mean_over_weight:
        return loss.sum() / weight.sum()
    return _reduce(loss, reduction)


def l1_loss(
    input: Tensor,
    target: Tensor,
    size_average=None,
    reduce=None,
    reduction: str = "mean",
    weight=None,
) -> Tensor:
    """Mean (or sum) of absolute differences ``|input - target|``, times ``weight`` if given."""
    reduction = _reduction(size_average, reduce, reduction)
    _check_same_size("l1_loss", input, target)
    return _weighted((input - target).abs(), weight, input, reduction)


def smooth_l1_loss(
    input: Tensor,
    target: Tensor,
    size_average=None,
    reduce=None,
    reduction: str = "mean",
    beta: float = 1.0,
) -> Tensor:
    """Squared below ``beta``, absolute above: ``0.5 d^2 / beta`` if ``|d| < beta``, else
    ``|d| - 0.5 beta``, for ``d = input - target``. ``beta=0`` is :func:`l1_loss`."""
    reduction = _reduction(size_average, reduce, reduction)
    if beta < 0:
        raise RuntimeError("smooth_l1_loss does not support negative values for beta.")
    _check_same_size("smooth_l1_loss", input, target)
    a = (input - target).abs()
    if beta == 0.0:
        return _reduce(a, reduction)
    loss = where(a < beta, a * a * (0.5 / beta), a - 0.5 * beta)
    return _reduce(loss, reduction)


def huber_loss(
    input: Tensor,
    target: Tensor,
    reduction: str = "mean",
    delta: float = 1.0,
    weight=None,
) -> Tensor:
    """``0.5 d^2`` if ``|d| <= delta``, else ``delta (|d| - 0.5 delta)``: smooth_l1 times
    ``delta`` (with ``beta = delta``), so its slope far out is ``delta``, not 1."""
    reduction = _reduction(None, None, reduction)
    if delta <= 0:
        raise RuntimeError("huber_loss does not support non-positive values for delta.")
    _check_same_size("huber_loss", input, target)
    a = (input - target).abs()
    loss = where(a <= delta, a * a * 0.5, (a - 0.5 * delta) * delta)
    return _weighted(loss, weight, input, reduction, mean_over_weight=False)


def kl_div(
    input: Tensor,
    target: Tensor,
    size_average=None,
    reduce=None,
    reduction: str = "mean",
    log_target: bool = False,
) -> Tensor:
    """KL(target || model) pointwise, for log-probabilities ``input``:
    ``target * (log target - input)`` (0 where target is 0), or with ``log_target``
    ``exp(target) * (target - input)``.

    ``reduction='batchmean'`` divides the sum by the batch size ``input.shape[0]``,
    which is the KL divergence per sample; ``'mean'`` divides by every element, as
    torch does (and warns that it is not the KL divergence).
    """
    if reduction == "batchmean":
        red = "sum"
    else:
        red = _reduction(size_average, reduce, reduction)
        if red == "mean":
            warnings.warn(
                "reduction: 'mean' divides the total loss by both the batch size and the "
                "support size.'batchmean' divides only by the batch size, and aligns with "
                "the KL div math definition.'mean' will be changed to behave the same as "
                "'batchmean' in the next major release.",
                stacklevel=2,
            )
    _check_same_size("kl_div", input, target)
    if log_target:
        loss = target.exp() * (target - input)
    else:
        pos = target > 0
        t_log = where(pos, target, full((), 1.0, dtype=target.dtype, device=target.device)).log()
        loss = target * t_log - target * input  # x log x -> 0 at x = 0
    if reduction == "batchmean":
        total = loss.sum()
        return total / input.shape[0] if input.ndim else total
    return _reduce(loss, red)


# ---------------------------------------------------------------- attention
# --8<-- [start:sdpa]
def scaled_dot_product_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attn_mask=None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale=None,
    enable_gqa: bool = False,
) -> Tensor:
    """softmax(Q K^T * scale + mask) V for Q (..., L, D), K (..., S, D), V (..., S, Dv).

    ``attn_mask`` is a bool tensor (True = may attend) or a float tensor added to
    the scores, broadcastable to (..., L, S). ``is_causal`` lets query i attend to
    keys j <= i. ``scale`` defaults to 1/sqrt(D). ``enable_gqa`` shares each
    key/value head among H_q/H_kv query heads (dim -3).

    Without dropout this is one node, ``_attention.Attention``: scores, a fused masked
    softmax kernel, and the weighted sum; backward recomputes the probabilities.
    A query row with no key to attend to (fully masked) outputs zeros and passes
    no gradient -- what PyTorch's CPU kernels do; the naive composition would give NaN.
    """
    for name, t in (("query", query), ("key", key), ("value", value)):
        _check_tensor("scaled_dot_product_attention", t)
        if t.ndim < 2:
            raise RuntimeError(
                f"scaled_dot_product_attention(): {name} must be at least 2-D "
                f"(..., T, D), got shape {tuple(t.shape)}"
            )
    if query.shape[-1] != key.shape[-1] or key.shape[-2] != value.shape[-2]:
        raise RuntimeError(
            f"scaled_dot_product_attention(): query {tuple(query.shape)}, key {tuple(key.shape)} "
            f"and value {tuple(value.shape)} must be (..., L, D), (..., S, D), (..., S, Dv)"
        )
    if is_causal and attn_mask is not None:
        raise RuntimeError(
            "_scaled_dot_product_attention: Explicit attn_mask should not be set "
            "when is_causal=True"
        )
    if not 0.0 <= dropout_p <= 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {dropout_p}")
    if enable_gqa and query.ndim >= 3 and key.shape[-3] != query.shape[-3]:
        key, value = _repeat_heads(key, query.shape[-3]), _repeat_heads(value, query.shape[-3])
    dt = query.dtype
    key, value = key.to(dt), value.to(dt)
    L, S = query.shape[-2], key.shape[-2]
    scores_shape = broadcast_shapes(query.shape[:-2], key.shape[:-2]) + (L, S)
    if attn_mask is not None:
        if attn_mask.dtype is not bool_:
            attn_mask = attn_mask.to(dt)
        try:
            broadcast_shapes(attn_mask.shape, scores_shape)
        except Exception:
            raise RuntimeError(
                f"scaled_dot_product_attention(): attn_mask of shape "
                f"{tuple(attn_mask.shape)} cannot broadcast to the scores' shape "
                f"{scores_shape}"
            ) from None
    scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else float(scale)
    if not _on_host(query, key, value, attn_mask):
        return _sdpa_composed(query, key, value, attn_mask, dropout_p, bool(is_causal), scale)
    if dropout_p == 0.0:
        return _attention.Attention.apply(query, key, value, attn_mask, scale, bool(is_causal))
    p_LS = _softmax.MaskedSoftmax.apply(query @ key.mT, attn_mask, scale, bool(is_causal))
    return dropout(p_LS, dropout_p) @ value


# --8<-- [end:sdpa]


def _sdpa_composed(q, k, v, mask, dropout_p, causal, scale):
    """Attention as a composition of ops (the GPU path), with the fused path's semantics.

    Masked scores are set to the dtype's most negative finite number rather than
    -inf, and rows with no key are zeroed after the softmax: no NaN appears, in
    the values or in the gradients.
    """
    L, S = q.shape[-2], k.shape[-2]
    s = (q @ k.mT) * scale  # (..., L, S)
    allowed = None
    if causal:
        allowed = arange(L, device=q.device).unsqueeze(1) >= arange(S, device=q.device)
    elif mask is not None and mask.dtype is bool_:
        allowed = mask
    elif mask is not None:
        allowed = mask != -math.inf
        s = s + mask.masked_fill(~allowed, 0.0)
    if allowed is not None:
        s = s.masked_fill(~allowed, float(np.finfo(q.dtype.np).min))
    p = s.softmax(-1)
    if allowed is not None:
        p = p * allowed.any(-1, keepdim=True).to(p.dtype)  # rows with no key: 0
    return dropout(p, dropout_p) @ v


def _repeat_heads(t, h):
    """(..., H_kv, S, D) -> (..., h, S, D), each head repeated h // H_kv times."""
    hk = t.shape[-3]
    if h % hk:
        raise RuntimeError(f"enable_gqa: {h} query heads is not a multiple of {hk} key/value heads")
    lead = tuple(t.shape[:-3])
    return (
        t.unsqueeze(-3).expand(*lead, hk, h // hk, *t.shape[-2:]).reshape(*lead, h, *t.shape[-2:])
    )

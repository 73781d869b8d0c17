"""``sitp.nn.functional``: the stateless layers and losses, with PyTorch's signatures.

``import sitp.nn.functional as F`` gives the names model code expects
(``F.cross_entropy``, ``F.layer_norm``, ``F.scaled_dot_product_attention``, ...).
Most functions here are short compositions of tensor ops, so autograd derives
their gradients; the others are one autograd node each, over fused kernels with their
own backward (``sitp/nn/_functions/``, which calls the kernels of
``sitp/kernels/cpu/fused/`` and ``sitp/kernels/cuda/fused.py``): :func:`linear`,
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
from sitp.autograd.grad_mode import no_grad
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
    "adaptive_avg_pool2d",
    "avg_pool2d",
    "batch_norm",
    "binary_cross_entropy",
    "binary_cross_entropy_with_logits",
    "conv1d",
    "conv2d",
    "cross_entropy",
    "dropout",
    "dropout2d",
    "elu",
    "embedding",
    "gelu",
    "huber_loss",
    "interpolate",
    "kl_div",
    "l1_loss",
    "layer_norm",
    "leaky_relu",
    "linear",
    "log_softmax",
    "logsigmoid",
    "max_pool2d",
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
    ``sitp.kernels.cpu.fused`` are numba CPU code. On a GPU,
    :func:`layer_norm` and :func:`cross_entropy` (class-index targets) run the fused
    CUDA kernels of ``sitp.kernels.cuda.fused``; the other cases, and
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

    Float tensors on the CPU take the fused kernels of ``kernels/cpu/fused/gelu.py`` (one
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
    """log(sigmoid(x)) = -softplus(-x), computed without overflow; its gradient is
    sigmoid(-x) everywhere, 1/2 at 0 (a form built from relu and abs has no slope there)."""
    return -softplus(-input)


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
    fallback where ``sitp.kernels.cuda.fused`` does not apply)."""
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


# ------------------------------------------------------------- image layers
def _pair(v, name, fn):
    if isinstance(v, (tuple, list)):
        if len(v) != 2:
            raise RuntimeError(f"{fn}(): {name} must be an int or a pair of ints, got {v}")
        return int(v[0]), int(v[1])
    return int(v), int(v)


def _image(input, fn, what="3D (unbatched) or 4D (batched)"):
    """(input as (N, C, H, W), whether it was unbatched (C, H, W))."""
    _check_tensor(fn, input)
    if input.ndim not in (3, 4):
        raise RuntimeError(
            f"Expected {what} input to {fn}, but got input of size: {list(input.shape)}"
        )
    return (input.unsqueeze(0), True) if input.ndim == 3 else (input, False)


# --8<-- [start:window_index]
def _window_index(H, W, kernel, stride, dilation, out=None):
    """The im2col table of a 2-D sliding window over an (H, W) grid, as numpy int64.

    Entry (p, k) is the flat position ``h * W + w`` of tap k = (i, j) of output p =
    (oh, ow): h = oh * stride_h + i * dilation_h, w likewise. Indexing an (N, H*W, C)
    tensor with it gathers every window at once, (N, H_out*W_out, KH*KW, C); its
    backward scatter-adds, so the taps that windows share sum their gradients.
    """
    (KH, KW), (sh, sw), (dh, dw) = kernel, stride, dilation
    H_out, W_out = out or ((H - dh * (KH - 1) - 1) // sh + 1, (W - dw * (KW - 1) - 1) // sw + 1)
    h = (np.arange(H_out) * sh)[:, None, None, None] + (np.arange(KH) * dh)[None, None, :, None]
    w = (np.arange(W_out) * sw)[None, :, None, None] + (np.arange(KW) * dw)[None, None, None, :]
    return (h * W + w).reshape(H_out * W_out, KH * KW), H_out, W_out  # (P, KK)


# --8<-- [end:window_index]


# --8<-- [start:conv2d]
def conv2d(
    input: Tensor, weight: Tensor, bias=None, stride=1, padding=0, dilation=1, groups: int = 1
) -> Tensor:
    """2-D convolution (cross-correlation, as PyTorch) of (N, C_in, H, W) by
    (C_out, C_in/groups, KH, KW).

    out[n, o, y, x] = bias[o] + sum_{c, i, j} weight[o, c, i, j]
                      * input[n, c, y*sh + i*dh - ph, x*sw + j*dw - pw]

    Built as :func:`conv1d` is: pad, gather every window with one index table
    (im2col, :func:`_window_index`) into (N, H_out*W_out, KH*KW*C_in), then one GEMM
    per group against the weight as a (KH*KW*C_in, C_out) matrix. Autograd
    differentiates the composition: the GEMM's backward, then a scatter-add of the
    windows' gradients (col2im). The gathered matrix costs KH*KW times the input's
    memory. ``padding`` is an int, a pair, ``'valid'`` or ``'same'``.
    """
    fn = "conv2d"
    (sh, sw), (dh, dw) = _pair(stride, "stride", fn), _pair(dilation, "dilation", fn)
    x, unbatched = _image(input, fn)
    if weight.ndim != 4:
        raise RuntimeError(
            f"conv2d(): expected a 4-D weight (C_out, C_in/groups, KH, KW), got {list(weight.shape)}"
        )
    N, C_in, H, W = x.shape
    C_out, C_g, KH, KW = weight.shape
    G = groups
    if C_out % G:
        raise RuntimeError(
            f"Given groups={G}, expected weight to be divisible by {G} at dimension 0, "
            f"but got weight of size [{list(weight.shape)}] instead"
        )
    if C_in != C_g * G:
        raise RuntimeError(
            f"Given groups={G}, weight of size {list(weight.shape)}, expected input"
            f"{list(x.shape)} to have {C_g * G} channels, but got {C_in} channels instead"
        )
    if bias is not None and tuple(bias.shape) != (C_out,):
        raise RuntimeError(
            f"Given weight of size {list(weight.shape)}, expected bias to be 1-dimensional "
            f"with {C_out} elements, but got bias of size {list(bias.shape)} instead"
        )
    if padding == "valid":
        pads = (0, 0, 0, 0)
    elif padding == "same":
        if (sh, sw) != (1, 1):
            raise RuntimeError("padding='same' is not supported for strided convolutions")
        th, tw = dh * (KH - 1), dw * (KW - 1)  # the extra row/column, if odd, goes last
        pads = (tw // 2, tw - tw // 2, th // 2, th - th // 2)
    else:
        ph, pw = _pair(padding, "padding", fn)
        pads = (pw, pw, ph, ph)
    Hp, Wp = H + pads[2] + pads[3], W + pads[0] + pads[1]
    if Hp < dh * (KH - 1) + 1 or Wp < dw * (KW - 1) + 1:
        raise RuntimeError(
            f"Calculated padded input size per channel: ({Hp} x {Wp}). Kernel size: "
            f"({dh * (KH - 1) + 1} x {dw * (KW - 1) + 1}). Kernel size can't be greater "
            f"than actual input size"
        )
    if any(pads):
        x = pad(x, pads)  # (N, C_in, Hp, Wp)
    idx, H_out, W_out = _window_index(Hp, Wp, (KH, KW), (sh, sw), (dh, dw))
    P, KK = idx.shape
    x_NSC = x.permute(0, 2, 3, 1).reshape(N, Hp * Wp, C_in)  # channels last (a view)
    cols = x_NSC[:, tensor(idx, dtype=int64, device=x.device)]  # (N, P, KK, C_in)
    if G == 1:
        w = weight.permute(2, 3, 1, 0).reshape(KK * C_in, C_out)  # rows in cols' order
        out = cols.reshape(N * P, KK * C_in) @ w  # (N*P, C_out): one GEMM
        out = out.reshape(N, P, C_out).permute(0, 2, 1)  # (N, C_out, P)
    else:
        cols = cols.reshape(N, P, KK, G, C_g).permute(0, 3, 1, 2, 4)  # (N, G, P, KK, C_g)
        cols = cols.reshape(N, G, P, KK * C_g)
        w = weight.reshape(G, C_out // G, C_g, KH, KW).permute(0, 3, 4, 2, 1)
        w = w.reshape(G, KK * C_g, C_out // G)
        out = (cols @ w).permute(0, 1, 3, 2)  # (N, G, C_out/G, P)
    out = out.reshape(N, C_out, H_out, W_out)
    if bias is not None:
        out = out + bias.view(1, C_out, 1, 1)
    return out.squeeze(0) if unbatched else out


# --8<-- [end:conv2d]


def _pool_geometry(x, kernel_size, stride, padding, dilation, ceil_mode, fn):
    """Output size and padding of a 2-D pooling, with torch's rules and messages: a pad
    at most half the (dilated) kernel; with ``ceil_mode`` a last window that starts in
    the right padding is dropped."""
    k = _pair(kernel_size, "kernel_size", fn)
    s = k if stride is None or stride == [] or stride == () else _pair(stride, "stride", fn)
    p, d = _pair(padding, "padding", fn), _pair(dilation, "dilation", fn)
    for i in range(2):
        if 2 * p[i] > k[i]:
            raise RuntimeError(
                f"pad should be at most half of effective kernel size, but got pad={p[i]}, "
                f"kernel_size={k[i]} and dilation={d[i]}"
            )
    out = []
    for i, n in enumerate(x.shape[2:]):
        span = n + 2 * p[i] - d[i] * (k[i] - 1) - 1
        o = (span + (s[i] - 1 if ceil_mode else 0)) // s[i] + 1
        if ceil_mode and (o - 1) * s[i] >= n + p[i]:
            o -= 1
        out.append(o)
    if min(out) < 1:
        C, H, W = x.shape[1:]
        raise RuntimeError(
            f"Given input size: ({C}x{H}x{W}). Calculated output size: "
            f"({C}x{out[0]}x{out[1]}). Output size is too small"
        )
    return k, s, p, d, tuple(out)


def _pool_windows(x, k, s, p, d, out, value):
    """Every pooling window of x (N, C, H, W) padded with ``value``: (N, C, P, KH*KW),
    the index table and the padded width."""
    N, C, H, W = x.shape
    need = [(out[i] - 1) * s[i] + d[i] * (k[i] - 1) + 1 for i in range(2)]  # padded extent
    right = [max(need[0] - H - p[0], 0), max(need[1] - W - p[1], 0)]
    if p[0] or p[1] or right[0] or right[1]:
        x = pad(x, (p[1], right[1], p[0], right[0]), value=value)
    Hp, Wp = x.shape[2], x.shape[3]
    idx, _, _ = _window_index(Hp, Wp, k, s, d, out)
    cols = x.reshape(N, C, Hp * Wp)[:, :, tensor(idx, dtype=int64, device=x.device)]
    return cols, idx, Wp  # cols (N, C, P, KK)


def max_pool2d(
    input: Tensor,
    kernel_size,
    stride=None,
    padding=0,
    dilation=1,
    ceil_mode: bool = False,
    return_indices: bool = False,
):
    """The maximum of each (dilated) window of (N, C, H, W) or (C, H, W).

    Pads with -inf, gathers the windows (as :func:`conv2d` does) and takes ``max`` over
    each; the gradient goes to the first maximum of each window. ``return_indices``
    also gives, for each output, the flat position ``h * W + w`` of its maximum in the
    (unpadded) input plane, as torch does.
    """
    fn = "max_pool2d"
    x, unbatched = _image(input, fn)
    k, s, p, d, out = _pool_geometry(x, kernel_size, stride, padding, dilation, ceil_mode, fn)
    N, C, H, W = x.shape
    cols, idx, Wp = _pool_windows(x, k, s, p, d, out, -math.inf)
    values, arg = cols.max(3)  # (N, C, P): the value and its tap
    values = values.reshape(N, C, *out)
    if not return_indices:
        return values.squeeze(0) if unbatched else values
    hp, wp = np.divmod(idx, Wp)  # padded (row, column) of each tap
    plane = tensor((hp - p[0]) * W + (wp - p[1]), dtype=int64, device=x.device)  # (P, KK)
    flat = arange(idx.shape[0], device=x.device) * idx.shape[1] + arg  # (N, C, P)
    indices = plane.reshape(-1)[flat].reshape(N, C, *out)
    if unbatched:
        return values.squeeze(0), indices.squeeze(0)
    return values, indices


def avg_pool2d(
    input: Tensor,
    kernel_size,
    stride=None,
    padding=0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
    divisor_override=None,
) -> Tensor:
    """The mean of each window of (N, C, H, W) or (C, H, W).

    The divisor of a window, as torch counts it: its size clipped to the padded input
    (``count_include_pad=True``), or the number of input cells in it (False), or
    ``divisor_override``. Windows are gathered and summed, so autograd spreads each
    output's gradient over its window.
    """
    fn = "avg_pool2d"
    x, unbatched = _image(input, fn)
    k, s, p, _, out = _pool_geometry(x, kernel_size, stride, padding, 1, ceil_mode, fn)
    N, C, H, W = x.shape
    cols, _, _ = _pool_windows(x, k, s, p, (1, 1), out, 0.0)
    if divisor_override:
        div = np.full(out, float(divisor_override))
    else:
        sizes = []
        for i, n in enumerate((H, W)):
            lo = np.arange(out[i]) * s[i] - p[i]
            hi = np.minimum(lo + k[i], n + p[i])
            inside = np.minimum(hi, n) - np.maximum(lo, 0)
            sizes.append(hi - lo if count_include_pad else inside)
        div = np.outer(sizes[0], sizes[1]).astype(np.float64)  # (H_out, W_out)
    div_t = tensor(div.reshape(-1), dtype=x.dtype, device=x.device)
    y = (cols.sum(3) / div_t).reshape(N, C, *out)
    return y.squeeze(0) if unbatched else y


def _adaptive_matrix(n_in, n_out, dtype, device):
    """(n_out, n_in): row i averages cells floor(i*n_in/n_out) .. ceil((i+1)*n_in/n_out)-1."""
    A = np.zeros((n_out, n_in))
    for i in range(n_out):
        lo, hi = (i * n_in) // n_out, -((-(i + 1) * n_in) // n_out)
        A[i, lo:hi] = 1.0 / (hi - lo)
    return tensor(A, dtype=dtype, device=device)


def adaptive_avg_pool2d(input: Tensor, output_size) -> Tensor:
    """Average-pool (N, C, H, W) to ``output_size`` (an int, or a pair whose None keeps
    that dim), with torch's windows (which may overlap).

    A window is a range of rows times a range of columns, so its mean is separable: two
    small averaging matrices, ``A_h @ x @ A_w^T``.
    """
    _check_tensor("adaptive_avg_pool2d", input)
    if input.ndim not in (3, 4):
        raise RuntimeError(
            f"adaptive_avg_pool2d(): Expected 3D or 4D tensor, but got {list(input.shape)}"
        )
    H, W = input.shape[-2:]
    oh, ow = output_size if isinstance(output_size, (tuple, list)) else (output_size,) * 2
    oh, ow = H if oh is None else int(oh), W if ow is None else int(ow)
    A_h = _adaptive_matrix(H, oh, input.dtype, input.device)  # (oh, H)
    A_w = _adaptive_matrix(W, ow, input.dtype, input.device)  # (ow, W)
    return A_h @ input @ A_w.mT


# --8<-- [start:batch_norm]
def batch_norm(
    input: Tensor,
    running_mean,
    running_var,
    weight=None,
    bias=None,
    training: bool = False,
    momentum: float = 0.1,
    eps: float = 1e-5,
) -> Tensor:
    """Normalise each channel (dim 1) of (N, C, ...) over every other dim, then scale
    and shift.

    Training: the batch's mean and biased variance, and the running estimates (when
    given) move towards them in place, ``running = (1 - momentum) * running +
    momentum * batch`` (with the unbiased variance). Otherwise: the running estimates.
    """
    C = input.shape[1] if input.ndim > 1 else 0
    for name, t in (("running_mean", running_mean), ("running_var", running_var)):
        if t is not None and t.numel() != C:
            raise RuntimeError(f"{name} should contain {C} elements not {t.numel()}")
    dims = (0,) + tuple(range(2, input.ndim))
    shape = (1, C) + (1,) * (input.ndim - 2)
    if training:
        n = input.numel() // max(C, 1)
        if n <= 1:
            raise ValueError(
                f"Expected more than 1 value per channel when training, got input size "
                f"{tuple(input.shape)}"
            )
        mean = input.mean(dims)
        var = input.var(dims, correction=0)
        if running_mean is not None:
            with no_grad():
                running_mean.mul_(1 - momentum).add_(mean.detach() * momentum)
                running_var.mul_(1 - momentum).add_(var.detach() * (momentum * n / (n - 1)))
    else:
        mean, var = running_mean, running_var
    y = (input - mean.view(shape)) * (var.view(shape) + eps).rsqrt()
    if weight is not None:
        y = y * weight.view(shape)
    if bias is not None:
        y = y + bias.view(shape)
    return y


# --8<-- [end:batch_norm]


def dropout2d(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False):
    """Zero whole channels: each (n, c) plane of (N, C, H, W) is kept with probability
    1 - p and scaled by 1/(1-p), or zeroed. A 3-D input is taken as (N, C, L), as torch
    does (with its warning). The mask is sitp's own draw, not torch's."""
    if p < 0.0 or p > 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    if input.ndim < 2:
        raise RuntimeError("Feature dropout requires at least 2 dimensions in the input")
    if input.ndim == 3:
        warnings.warn(
            "dropout2d: Received a 3D input to dropout2d and assuming that channel-wise 1D "
            "dropout behavior is desired - input is interpreted as shape (N, C, L), where C "
            "is the channel dim. This behavior will change in a future release to interpret "
            "the input as one without a batch dimension, i.e. shape (C, H, W). To maintain "
            "the 1D channel-wise dropout behavior, please switch to using dropout1d instead.",
            stacklevel=2,
        )
    elif input.ndim != 4:
        warnings.warn(
            f"dropout2d: Received a {input.ndim}-D input to dropout2d, which is deprecated "
            f"and will result in an error in a future release. To retain the behavior and "
            f"silence this warning, please use dropout instead. Note that dropout2d exists "
            f"to provide channel-wise dropout on inputs with 2 spatial dimensions, a channel "
            f"dimension, and an optional batch dimension (i.e. 3D or 4D inputs).",
            stacklevel=2,
        )
    if not training or p == 0.0:
        return input
    mask_shape = tuple(input.shape[:2]) + (1,) * (input.ndim - 2)
    keep = (rand(*mask_shape, dtype=input.dtype, device=input.device) >= p).to(input.dtype)
    out = input * (keep * (1.0 / (1.0 - p)) if p < 1.0 else keep)
    return input.copy_(out) if inplace else out


def _source_index(n_in, n_out, scale, mode, align_corners):
    """Where output cell i samples the input, as torch computes it: the float source
    coordinate (linear modes) or the integer cell (nearest modes)."""
    i = np.arange(n_out, dtype=np.float64)
    if mode in ("nearest", "nearest-exact"):
        r = np.float32(1.0 / scale if scale else n_in / n_out)  # torch: in float
        shift = 0.5 if mode == "nearest-exact" else 0.0
        src = np.floor((i.astype(np.float32) + np.float32(shift)) * r).astype(np.int64)
        return np.minimum(src, n_in - 1)
    if align_corners:
        return i * ((n_in - 1) / (n_out - 1)) if n_out > 1 else np.zeros(n_out)
    r = 1.0 / scale if scale else n_in / n_out
    return np.maximum((i + 0.5) * r - 0.5, 0.0)


def _linear_matrix(n_in, n_out, scale, align_corners, dtype, device):
    """(n_out, n_in): row i mixes the two input cells around its source coordinate."""
    src = _source_index(n_in, n_out, scale, "linear", align_corners)
    lo = np.minimum(np.floor(src).astype(np.int64), n_in - 1)
    hi = np.minimum(lo + 1, n_in - 1)
    lam = src - lo
    M = np.zeros((n_out, n_in))
    np.add.at(M, (np.arange(n_out), lo), 1.0 - lam)
    np.add.at(M, (np.arange(n_out), hi), lam)
    return tensor(M, dtype=dtype, device=device)


def interpolate(
    input: Tensor,
    size=None,
    scale_factor=None,
    mode: str = "nearest",
    align_corners=None,
    recompute_scale_factor=None,
    antialias: bool = False,
) -> Tensor:
    """Resize the spatial dims of (N, C, L) or (N, C, H, W).

    Modes ``'nearest'``, ``'nearest-exact'``, ``'linear'`` (3-D) and ``'bilinear'``
    (4-D), with ``align_corners`` for the linear ones. Nearest is an index_select per
    dim; (bi)linear is separable, one small interpolation matrix per dim, so it is a
    matmul and autograd has its backward. sitp has no bicubic, trilinear, area or
    antialias.
    """
    _check_tensor("interpolate", input)
    spatial = input.ndim - 2
    if spatial not in (1, 2):
        raise NotImplementedError(
            f"interpolate(): sitp resizes 3-D and 4-D inputs, got {input.ndim}-D"
        )
    linear = {"linear": 1, "bilinear": 2}
    if mode in linear:
        if linear[mode] != spatial:
            raise NotImplementedError(
                f"Got {input.ndim}D input, but {mode} mode needs {linear[mode] + 2}D input"
            )
        align_corners = bool(align_corners)
    elif mode in ("nearest", "nearest-exact"):
        if align_corners is not None:
            raise ValueError(
                "align_corners option can only be set with the interpolating modes: "
                "linear | bilinear | bicubic | trilinear"
            )
    else:
        raise NotImplementedError(f"interpolate(): mode {mode!r} is not in sitp")
    if antialias:
        raise NotImplementedError("interpolate(): antialias is not in sitp")
    if (size is None) == (scale_factor is None):
        raise ValueError(
            "only one of size or scale_factor should be defined"
            if size is not None
            else "either size or scale_factor should be defined"
        )
    n_in = tuple(input.shape[2:])
    if size is not None:
        out = tuple(size) if isinstance(size, (tuple, list)) else (size,) * spatial
        scales = (None,) * spatial
    else:
        sf = scale_factor if isinstance(scale_factor, (tuple, list)) else (scale_factor,) * spatial
        out = tuple(int(math.floor(n * f)) for n, f in zip(n_in, sf))
        scales = (None,) * spatial if recompute_scale_factor else tuple(float(f) for f in sf)
    if len(out) != spatial:
        raise ValueError(
            f"Input and output must have the same number of spatial dimensions, but got "
            f"input with spatial dimensions of {list(n_in)} and output size of {list(out)}."
        )
    y = input
    for i in range(spatial):
        d = 2 + i
        if mode in linear:
            M = _linear_matrix(n_in[i], out[i], scales[i], align_corners, y.dtype, y.device)
            y = y @ M.mT if d == y.ndim - 1 else M @ y  # (.., n_in) -> (.., n_out)
        else:
            src = _source_index(n_in[i], out[i], scales[i], mode, None)
            y = y.index_select(d, tensor(src, dtype=int64, device=y.device))
    return y


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
    fallback where ``sitp.kernels.cuda.fused`` does not apply)."""
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
    broadcast_shapes(input.shape, target.shape)  # torch broadcasts here without a warning
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

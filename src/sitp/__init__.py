"""sitp: a small PyTorch with its own kernels, built chapter by chapter in
*The Structure and Interpretation of Tensor Programs*.

``import sitp as torch`` runs much PyTorch model code unchanged.
"""

from sitp import _env  # noqa: F401  (must run before numba is imported)

from sitp import cuda, dtypes, random
from sitp import autograd  # noqa: E402
from sitp.autograd.grad_mode import enable_grad, is_grad_enabled, no_grad, set_grad_enabled  # noqa: E402
from sitp.autograd.grad_mode import inference_mode, is_inference_mode_enabled  # noqa: E402
from sitp._tensor.creation import (arange, as_tensor, empty, empty_like, eye, from_numpy, full,  # noqa: E402
                       full_like, linspace, ones, ones_like, tensor, zeros, zeros_like)
from sitp.dtypes import bool_ as bool  # noqa: E402,A001
from sitp.dtypes import double, dtype, float, float32, float64, int64, long  # noqa: E402,A001
from sitp.functional import (cat, concat, concatenate, maximum, minimum, one_hot,  # noqa: E402
                              stack, topk, where)
from sitp.random import (Generator, bernoulli, get_rng_state, initial_seed, manual_seed,  # noqa: E402
                     multinomial, normal, rand, rand_like, randint, randint_like, randn,
                     randn_like, randperm, seed, set_rng_state)
from sitp._tensor.tensor import Size, Tensor, device  # noqa: E402
from sitp.methods import matmul  # noqa: E402  (installs the Tensor methods)
from sitp.serialization import load, save  # noqa: E402
from sitp._config import show_config  # noqa: E402

from sitp import linalg, nn, optim, utils  # noqa: E402  (after the Tensor: they build on it)

__version__ = "0.1.0"

int = int64  # noqa: A001  (sitp has one integer type)
get_default_dtype = lambda: float32  # noqa: E731


def is_tensor(obj) -> "builtins.bool":
    return isinstance(obj, Tensor)


def numel(t: Tensor) -> "builtins.int":
    return t.numel()


def _forward(name):
    def fn(input, *args, **kwargs):
        return getattr(input, name)(*args, **kwargs)

    fn.__name__ = name
    fn.__qualname__ = name
    fn.__doc__ = f"``sitp.{name}(x, ...)`` is ``x.{name}(...)``."
    return fn


for _name in [
    "exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "relu", "abs", "sin", "cos", "pow",
    "square", "log1p", "expm1", "erf", "sign", "floor", "ceil", "round", "trunc", "reciprocal",
    "clamp", "clip", "sum", "mean", "prod", "max", "min", "amax", "amin", "argmax", "argmin",
    "var", "std", "softmax", "log_softmax", "logsumexp", "cumsum", "all", "any", "gather",
    "index_select", "masked_fill", "split", "chunk", "unbind", "tril", "triu", "nonzero",
    "transpose", "permute", "reshape", "flatten", "squeeze", "unsqueeze", "narrow", "flip",
    "allclose", "equal", "isnan", "isinf", "isfinite", "mm", "bmm", "t", "atan2", "logical_not",
    "logical_and", "logical_or", "select", "repeat", "lerp", "norm",
    "log10", "log2", "exp2", "roll",
]:
    globals()[_name] = _forward(_name)
del _name


def split(tensor, split_size_or_sections, dim: int = 0):
    """``torch.split``: ``tensor.split(split_size_or_sections, dim)``, under torch's
    parameter name for the function form (the method's is ``split_size``)."""
    return tensor.split(split_size_or_sections, dim)


import builtins  # noqa: E402

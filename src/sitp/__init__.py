"""sitp: a small PyTorch with its own kernels, built chapter by chapter in
*The Structure and Interpretation of Tensor Programs*.

``import sitp as torch`` runs much PyTorch model code unchanged.
"""

from sitp import _env  # noqa: F401  (must run before numba is imported)

# isort: split
# The layers, bottom to top (docs/layout.md): kernels, the tensor, autograd, the
# methods (importing sitp.methods installs them on Tensor), the PyTorch mirror.
from sitp import autograd, cuda, dtypes, random
from sitp._config import __version__, get_num_threads, set_num_threads, show_config
from sitp._tensor.creation import (
    arange,
    as_tensor,
    empty,
    empty_like,
    eye,
    from_numpy,
    full,
    full_like,
    linspace,
    ones,
    ones_like,
    tensor,
    zeros,
    zeros_like,
)
from sitp._tensor.tensor import Size, Tensor, device
from sitp.autograd.grad_mode import (
    enable_grad,
    inference_mode,
    is_grad_enabled,
    is_inference_mode_enabled,
    no_grad,
    set_grad_enabled,
)
from sitp.dtypes import bool_ as bool  # noqa: A001
from sitp.dtypes import double, dtype, float, float32, float64, int64, long  # noqa: A001
from sitp.functional import (
    argsort,
    cat,
    concat,
    concatenate,
    maximum,
    minimum,
    one_hot,
    sort,
    stack,
    topk,
    where,
)
from sitp.methods import matmul
from sitp.random import (
    Generator,
    bernoulli,
    get_rng_state,
    initial_seed,
    manual_seed,
    multinomial,
    normal,
    rand,
    rand_like,
    randint,
    randint_like,
    randn,
    randn_like,
    randperm,
    seed,
    set_rng_state,
)
from sitp.serialization import load, save

from sitp import linalg, nn, optim, utils  # isort: skip  (the mirror builds on the above)
from sitp.compile import compile  # isort: skip  # noqa: A004  (6: above the mirror)
from sitp import onnx  # isort: skip  (torch.onnx: export through the capture of compile)
from sitp import accelerator  # isort: skip  (torch.accelerator: the GPU, or none)
from sitp import amp  # isort: skip  (torch.amp: autocast, GradScaler)
from sitp import backends  # isort: skip  (torch.backends: the switches)
from sitp._legacy import (  # isort: skip  (torch.LongTensor & co.: dtype-checking types)
    BFloat16Tensor,
    BoolTensor,
    ByteTensor,
    CharTensor,
    DoubleTensor,
    FloatTensor,
    HalfTensor,
    IntTensor,
    LongTensor,
    ShortTensor,
)


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
    "add",
    "sub",
    "mul",
    "div",
    "eq",
    "ne",
    "lt",
    "gt",
    "le",
    "ge",
    "exp",
    "log",
    "sqrt",
    "rsqrt",
    "tanh",
    "sigmoid",
    "relu",
    "abs",
    "sin",
    "cos",
    "pow",
    "square",
    "log1p",
    "expm1",
    "erf",
    "sign",
    "floor",
    "ceil",
    "round",
    "trunc",
    "reciprocal",
    "clamp",
    "clip",
    "sum",
    "mean",
    "prod",
    "max",
    "min",
    "amax",
    "amin",
    "argmax",
    "argmin",
    "var",
    "std",
    "softmax",
    "log_softmax",
    "logsumexp",
    "cumsum",
    "all",
    "any",
    "gather",
    "index_select",
    "masked_fill",
    "split",
    "chunk",
    "unbind",
    "tril",
    "triu",
    "nonzero",
    "transpose",
    "permute",
    "reshape",
    "flatten",
    "squeeze",
    "unsqueeze",
    "narrow",
    "flip",
    "allclose",
    "equal",
    "isnan",
    "isinf",
    "isfinite",
    "mm",
    "bmm",
    "t",
    "atan2",
    "logical_not",
    "logical_and",
    "logical_or",
    "select",
    "repeat",
    "lerp",
    "norm",
    "log10",
    "log2",
    "exp2",
    "roll",
    "neg",
    "clamp_min",
    "clamp_max",
    "hypot",
    "logaddexp",
]:
    globals()[_name] = _forward(_name)
del _name


def split(tensor, split_size_or_sections, dim: int = 0):  # noqa: F811  (torch's parameter name)
    """``torch.split``: ``tensor.split(split_size_or_sections, dim)``, under torch's
    parameter name for the function form (the method's is ``split_size``)."""
    return tensor.split(split_size_or_sections, dim)


import builtins  # noqa: E402

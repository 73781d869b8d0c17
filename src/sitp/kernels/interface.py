"""The backend interface, written down once: what ``sitp/kernels/cpu/ops.py`` and
``sitp/kernels/cuda/ops.py`` each provide.

A backend is a module of plain functions with the names and parameters below (the
stubs here are the documentation; ``tests/test_backend_interface.py`` checks that both
backends define all of them, with the same parameter names). The tensor layer picks the
module by device (``sitp/_tensor/dispatch.py``) and calls it directly: no object stands
between an op and its kernels.

**Operands.** A tensor operand ``x`` is read only through five fields: ``x._storage`` (a
flat buffer: a 1-D numpy array on the CPU, a 1-D Numba device array on the GPU),
``x._shape``, ``x._strides`` (in elements), ``x._offset`` (where entry (0, ..., 0) sits)
and ``x.dtype`` (a ``sitp.dtypes.DType``). A backend calls no method of the operand but
one: the classmethod ``x._make(storage, shape, strides, offset, dtype)``, which wraps a
storage as a new tensor of ``x``'s class. Operands may have any strides (a transpose, a
slice with steps, a broadcast with stride 0) and any offset. Binary ops take operands of
one dtype (the tensor layer promotes first), already broadcastable to each other. The
CUDA backend also accepts a 0-d CPU tensor wherever a tensor operand is read (a Python
scalar in an op), and rejects any other CPU tensor with an error naming both devices.

**Results.** Unless said otherwise a result is a *new* tensor, made by the first tensor
operand's ``_make``, contiguous (row-major strides) at offset 0, on the backend's device,
recording nothing (autograd is the layer above). Some results are views of a new
contiguous tensor (``reduce`` with ``keepdim``, ``softmax`` along a dim that is not the
last): their strides are then a permutation of contiguous ones, as said below.
Functions with no tensor operand (``fill``, ``empty``, ``arange``) return a bare storage
of ``numel(shape)`` entries, which the caller wraps with contiguous strides.

**Errors.** Shape errors raise at once, with PyTorch's type and wording. An index out of
range raises at once on the CPU; on the GPU a kernel sets a flag and
:func:`check_errors` raises at the next copy to the host, like PyTorch's device-side
asserts.

Op names (``op``) are the keys of the op-code dicts in ``sitp/kernels/scalar.py``:
``UNARY``, ``BINARY``, ``COMPARE`` and ``REDUCE``.
"""

from __future__ import annotations

import math

#: The functions every backend defines, in the order they are documented below.
FUNCTIONS = (
    "unary",
    "binary",
    "grad_from_output",
    "binary_into",
    "compare",
    "where",
    "assign",
    "copy",
    "reduce",
    "argreduce",
    "topk",
    "softmax",
    "softmax_backward",
    "cumsum",
    "matmul",
    "take",
    "put",
    "gather",
    "scatter_add",
    "tri",
    "nonzero",
    "multinomial",
    "fill",
    "empty",
    "arange",
    "to_device",
    "to_host",
    "check_errors",
)


# ------------------------------------------------------------------ elementwise
def unary(op, x, p0=math.nan, p1=math.nan, out_dtype=None):
    """f(x) entry by entry, for the unary op named ``op`` (``scalar.UNARY``).

    ``p0`` and ``p1`` are the op's float parameters (the exponent of ``pow``, the bounds of
    ``clamp``: NaN means none). Returns a new contiguous tensor of ``x``'s shape, of dtype
    ``out_dtype`` (default ``x.dtype``): the kernel computes in the operands' type and the
    store casts.
    """


def binary(op, a, b, out_dtype=None):
    """f(a, b) entry by entry with broadcasting, for the op named ``op`` (``scalar.BINARY``).

    ``a`` and ``b`` share a dtype. Returns a new contiguous tensor of the broadcast shape,
    of dtype ``out_dtype`` (default ``a.dtype``).
    """


def grad_from_output(op, y, g):
    """The gradient of tanh (``op`` "tanh_backward") or sigmoid ("sigmoid_backward") from
    its output ``y`` and the incoming gradient ``g`` (y's shape and dtype, any strides):
    ``g * (1 - y * y)`` or ``g * y * (1 - y)`` in one pass, rounded after each step in
    y's dtype as those three ops would be. Returns a new contiguous tensor of y's shape.
    """


def binary_into(op, dst, b):
    """``dst <- f(dst, b)`` in place (``x.add_(y)``), for the op named ``op``.

    ``b`` shares ``dst``'s dtype and has its shape or none (a single entry); ``dst`` may
    be any strided view, and ``b`` may be ``dst`` itself. Returns None.
    """


def compare(op, a, b):
    """a <op> b with broadcasting (``scalar.COMPARE``: eq, ne, lt, ..., logical_and, ...).

    Returns a new contiguous bool tensor of the broadcast shape.
    """


def where(c, a, b):
    """``a`` where ``c`` is true, else ``b``, with broadcasting of all three.

    ``c`` is bool; ``a`` and ``b`` share a dtype. Returns a new contiguous tensor of the
    broadcast shape and ``a``'s dtype.
    """


def assign(dst, src):
    """Write ``src``, broadcast to ``dst``'s shape and cast to its dtype, into ``dst``.

    ``dst`` may be any strided view (a slice being assigned to); its storage is written in
    place, nothing else changes. Returns None.
    """


def copy(x, dtype=None):
    """A new contiguous copy of ``x``, cast to ``dtype`` (default ``x.dtype``)."""


# ------------------------------------------------------------------ along dims
def reduce(op, x, dims, keepdim=False, out_dtype=None):
    """Reduce ``x`` over ``dims`` with ``op`` (``scalar.REDUCE``: sum, prod, max, min, any, all).

    ``dims`` is a tuple of normalised dims (0 <= d < ndim, no repeats). The result has the
    kept dims in order, contiguous; with ``keepdim`` the reduced dims stay with size 1 (a
    reshaped view of the contiguous result). Its dtype is ``out_dtype`` if given, else bool
    for any/all, int64 for sum/prod of bool or int64, else ``x.dtype``. max/min over an
    empty dim raise IndexError; NaN propagates through max and min.
    """


def argreduce(x, dim, is_max, keepdim=False):
    """(values, indices) of the max (``is_max``) or min of ``x`` along ``dim``.

    Both are new contiguous tensors of the kept shape (size 1 at ``dim`` with
    ``keepdim``); values have ``x.dtype``, indices int64 (the first extreme; a NaN wins).
    """


def topk(x, k, largest):
    """A new contiguous int64 tensor of ``x``'s shape with the last dim ``k``: in each row
    along the last dim, the positions of its ``k`` largest (``largest``) or smallest
    entries, in that order. A NaN counts as larger than any number (as in torch); of
    equal entries the earlier comes first. ``0 <= k <= x.shape[-1]`` (checked by the
    caller).
    """


def softmax(x, dim, log=False):
    """Softmax (or log-softmax with ``log``) of ``x`` along ``dim``, stable for large inputs.

    Returns a new tensor of ``x``'s shape and dtype, computed in rows along ``dim``: it is
    contiguous when ``dim`` is the last dim, else a permuted view of a contiguous buffer
    whose last dim is ``dim``. A row of -inf gives NaN, as PyTorch.
    """


def softmax_backward(y, g, dim, log=False):
    """The gradient of (log-)softmax along ``dim``, from its output ``y`` and upstream ``g``.

    ``y`` and ``g`` have one shape and dtype. The result has the layout of :func:`softmax`'s.
    """


def cumsum(x, dim):
    """The running sum of ``x`` along ``dim``; the layout of :func:`softmax`'s result."""


def matmul(a, b):
    """(..., M, K) @ (..., K, N): both operands at least 2-D, batch dims broadcast.

    ``a`` and ``b`` share a dtype. Returns a new contiguous (..., M, N) tensor. A K that
    does not match raises RuntimeError naming both shapes, as PyTorch.
    """


# ------------------------------------------------------------------ indexing
def take(x, a, idx):
    """The entries of ``x`` picked by index tuples on dims ``a .. a+k-1`` (advanced indexing).

    ``idx`` is a (k, m) int64 array of m index tuples (negative entries count from the
    end): a numpy array, or on the GPU backend also a contiguous device tensor of that
    shape. Returns a bare flat storage (not a tensor) holding
    x[pre..., idx[:, n], post...] in row-major order of (dims before a, n, dims after);
    the caller shapes it. An index out of range raises IndexError (on the GPU: at
    :func:`check_errors` when the indices were on the device).
    """


def put(x, a, idx, values, accumulate):
    """The inverse of :func:`take`: write ``values`` into ``x`` in place (add with ``accumulate``).

    ``values`` is a tensor with the shape that :func:`take` would give. Repeated index
    tuples add up with ``accumulate`` (atomically on the GPU). Returns None.
    """


def gather(x, dim, index):
    """torch.gather: out[..., j, ...] = x[..., index[..., j, ...], ...] along ``dim``.

    ``index`` is an int64 tensor with ``x``'s number of dims. Returns a new contiguous
    tensor of ``index``'s shape and ``x``'s dtype; an index out of range raises
    RuntimeError (on the GPU: IndexError at :func:`check_errors`).
    """


def scatter_add(shape, dim, index, src, dtype):
    """zeros(shape, dtype).scatter_add_(dim, index, src): the backward of :func:`gather`.

    Returns a new contiguous tensor of ``shape`` and ``dtype`` (of ``src``'s class).
    """


def tri(x, diagonal, upper):
    """``x`` with the entries below (``upper``: triu) or above (tril) the ``diagonal``-th
    diagonal of its last two dims set to zero; a new contiguous tensor."""


def nonzero(x):
    """The row-major ordinals of the nonzero entries of ``x``.

    Returns a numpy int64 array *on the host* (the caller turns ordinals into
    multi-indices): the GPU backend counts and collects on the device and copies the
    result back, since its size depends on the data.
    """


def multinomial(p, num_samples, replacement, uniforms):
    """Draw ``num_samples`` category indices from each row of the weights ``p``.

    ``p`` is a floating tensor, 1-D or 2-D (rows along the last dim; its shape is
    validated by the caller); ``uniforms`` is a host numpy float64 array of rows *
    num_samples numbers in [0, 1), one per draw, so that both backends draw the same
    samples from the same generator. Without ``replacement`` a drawn category's weight is
    zeroed before the next draw. The weights are checked in the same pass (the caller
    raises torch's errors from the status). Returns ``(indices, status)``: a host numpy
    int64 array of rows * num_samples indices, row by row, and 0; or status 1 when an
    entry is negative, NaN or infinite, 2 when a row sums to 0 (the indices are then
    meaningless).
    """


# ------------------------------------------------------------------ memory
def fill(shape, value, dtype):
    """A new storage of ``numel(shape)`` entries of ``dtype``, all ``value``.

    Returns the bare storage (numpy array, device array); the caller wraps it with
    contiguous strides.
    """


def empty(shape, dtype):
    """A new uninitialised storage of ``numel(shape)`` entries of ``dtype`` (bare, as :func:`fill`)."""


def arange(start, end, step, dtype):
    """A new 1-D storage of ``dtype`` holding start, start + step, ... up to (not including) ``end``.

    ``step`` is nonzero and its sign agrees with ``end - start`` (checked by the caller).
    Returns the bare storage; its ``size`` is the number of values.
    """


def to_device(x):
    """A new contiguous copy of the *host* tensor ``x`` in this backend's memory.

    Made by ``x._make``; on the CPU backend (whose memory is the host's) it is :func:`copy`.
    """


def to_host(x):
    """A new contiguous copy of ``x`` (a tensor of this backend) in host memory.

    Made by ``x._make``, with a numpy storage; it first calls :func:`check_errors`. On the
    CPU backend it is :func:`copy`.
    """


def check_errors():
    """Raise IndexError if a kernel has met an out-of-range index since the last check
    (and clear the flag). A no-op on the CPU backend, whose kernels raise at once."""

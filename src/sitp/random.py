"""Random numbers: ``manual_seed``, ``Generator`` and the sampling functions.

sitp draws from numpy's PCG64 bit generator, seeded by ``manual_seed``. The
streams are reproducible run to run, but they are not PyTorch's: the same
seed gives different numbers in the two libraries. Tests that compare with
PyTorch copy weights across instead of relying on seeds.
"""

from __future__ import annotations

import numpy as np

from sitp._tensor import dispatch
from sitp._tensor.creation import _from_numpy_owned, _place
from sitp.dtypes import float32, int64, to_dtype


class Generator:
    """A source of random numbers with its own state (like ``torch.Generator``)."""

    def __init__(self, device="cpu"):
        self._seed = 0
        self._rng = np.random.Generator(np.random.PCG64(0))

    def manual_seed(self, seed: int) -> "Generator":
        if not isinstance(seed, (int, np.integer)):
            raise TypeError(f"manual_seed expected an int, got {type(seed).__name__}")
        self._seed = int(seed)
        self._rng = np.random.Generator(np.random.PCG64(self._seed))
        return self

    def initial_seed(self) -> int:
        return self._seed

    def get_state(self):
        """The generator's state as a plain dict (JSON-serialisable)."""
        return self._rng.bit_generator.state

    def set_state(self, state) -> None:
        self._rng.bit_generator.state = state


default_generator = Generator()


def manual_seed(seed: int) -> Generator:
    """Seed the default generator; returns it."""
    return default_generator.manual_seed(seed)


def seed() -> int:
    s = int(np.random.SeedSequence().entropy % (2**63))
    manual_seed(s)
    return s


def initial_seed() -> int:
    return default_generator.initial_seed()


def get_rng_state():
    return default_generator.get_state()


def set_rng_state(new_state) -> None:
    """Restore the default generator from a state that ``get_rng_state()`` returned."""
    default_generator.set_state(new_state)


def _rng(generator):
    return (generator or default_generator)._rng


def _wrap(arr, dtype, requires_grad=False, device=None):
    t = _place(_from_numpy_owned(np.ascontiguousarray(arr, dtype=dtype.np)), device)
    if requires_grad:
        t.requires_grad_(True)
    return t


def _shape(size):
    if len(size) == 1 and not isinstance(size[0], (int, np.integer)):
        size = tuple(size[0])
    for n in size:
        if not isinstance(n, (int, np.integer)) or n < 0:
            raise ValueError(f"sizes must be non-negative ints, got {tuple(size)}")
    return tuple(int(n) for n in size)


def _uniform(shape, a, b, dtype, generator=None, device=None):
    return _wrap(_rng(generator).uniform(a, b, size=shape), dtype, device=device)


def _normal(shape, mean, std, dtype, generator=None, device=None):
    return _wrap(_rng(generator).normal(mean, std, size=shape), dtype, device=device)


def rand(*size, generator=None, dtype=None, device=None, requires_grad=False):
    """Uniform samples in [0, 1)."""
    dtype = to_dtype(dtype) if dtype is not None else float32
    return _wrap(_rng(generator).random(_shape(size)), dtype, requires_grad, device)


def randn(*size, generator=None, dtype=None, device=None, requires_grad=False):
    """Standard normal samples."""
    dtype = to_dtype(dtype) if dtype is not None else float32
    return _wrap(_rng(generator).standard_normal(_shape(size)), dtype, requires_grad, device)


def randint(low, high=None, size=None, generator=None, dtype=None, device=None):
    """Integers uniform in [low, high) (``randint(high, size)`` also works)."""
    if size is None:  # randint(high, size)
        low, high, size = 0, low, high
    if high is None:
        low, high = 0, low
    if high <= low:
        raise RuntimeError(
            f"random_ expects 'from' to be less than 'to', but got from={low} >= to={high}"
        )
    dtype = to_dtype(dtype) if dtype is not None else int64
    return _wrap(_rng(generator).integers(low, high, size=_shape((size,))), dtype, device=device)


def randperm(n, generator=None, dtype=None, device=None):
    """A random permutation of 0..n-1."""
    return _wrap(
        _rng(generator).permutation(n),
        to_dtype(dtype) if dtype is not None else int64,
        device=device,
    )


def normal(mean, std, size=None, generator=None):
    """Normal samples with the given mean and std (floats and a size)."""
    return _normal(_shape((size,)) if size is not None else (), mean, std, float32, generator)


def rand_like(t, dtype=None):
    return rand(t.shape, dtype=dtype or t.dtype, device=t.device)


def randn_like(t, dtype=None):
    return randn(t.shape, dtype=dtype or t.dtype, device=t.device)


def randint_like(t, low, high=None):
    return randint(low, high, tuple(t.shape), dtype=t.dtype)


def bernoulli(p, generator=None):
    """1.0 with probability p (elementwise), else 0.0."""
    u = rand(p.shape, generator=generator, dtype=p.dtype, device=p.device)
    return (u < p).to(p.dtype)


def multinomial(input, num_samples: int, replacement: bool = False, generator=None):
    """Draw category indices from rows of non-negative weights (``torch.multinomial``)."""
    if input.ndim not in (1, 2):
        raise RuntimeError(f"prob_dist must be 1 or 2 dim, got shape {tuple(input.shape)}")
    n = input.shape[-1]
    if n == 0:
        raise RuntimeError(
            f"multinomial(): no categories to draw from (weights of shape {tuple(input.shape)})"
        )
    if not replacement and num_samples > n:
        raise RuntimeError(
            f"cannot sample n_sample > prob_dist.size(-1) samples without replacement "
            f"({num_samples} > {n})"
        )
    if not input.dtype.is_floating_point:
        raise RuntimeError(
            f"multinomial only supports floating-point dtypes for input, got: {input.dtype}"
        )
    rows = 1 if input.ndim == 1 else input.shape[0]
    u = _rng(generator).random(rows * num_samples)
    # the kernel checks the weights in the pass that draws (separate checks, four ops and
    # four reductions, took most of a one-token draw's time)
    out, status = dispatch.of(input).multinomial(input, num_samples, replacement, u)
    if status == 1:
        raise RuntimeError("probability tensor contains either `inf`, `nan` or element < 0")
    if status == 2:
        raise RuntimeError("invalid multinomial distribution (sum of probabilities <= 0)")
    shape = (num_samples,) if input.ndim == 1 else (rows, num_samples)
    return _wrap(out.reshape(shape), int64, device=input.device)

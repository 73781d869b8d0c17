"""``sitp.cuda``: the GPU device (chapter 4.3).

Tensors move to the GPU with ``x.to("cuda")`` / ``x.cuda()`` or are made there
with ``device="cuda"``; their ops then run sitp's Numba CUDA kernels
(``sitp/cuda_backend.py``). Without a GPU, numba's CUDA simulator
(``NUMBA_ENABLE_CUDASIM=1``, set before numba is imported) runs the same
kernels on the CPU, one Python thread per GPU thread — slowly, but enough for
the tests: there ``is_available()`` is False and ``is_simulated()`` True, and
device tensors still work.
"""

from __future__ import annotations


def is_simulated() -> bool:
    """Whether numba's CUDA simulator stands in for a GPU."""
    from numba import config

    return bool(config.ENABLE_CUDASIM)


def is_available() -> bool:
    """Whether a real CUDA GPU answers (False under the simulator)."""
    if is_simulated():
        return False
    try:
        from numba import cuda

        return bool(cuda.is_available())
    except Exception:  # a broken driver or no numba-cuda: no GPU
        return False


def _require() -> None:
    """Raise a clear error when neither a GPU nor the simulator is there."""
    if not (is_available() or is_simulated()):
        raise RuntimeError(
            "sitp was asked for a CUDA device, but none is available: no NVIDIA GPU answers "
            "(sitp.cuda.is_available() is False). Set NUMBA_ENABLE_CUDASIM=1 before importing "
            "sitp to run the GPU kernels in numba's simulator.")


def device_count() -> int:
    return 1 if (is_available() or is_simulated()) else 0


def synchronize() -> None:
    """Wait for every kernel launched so far to finish."""
    if is_available():
        from numba import cuda

        cuda.synchronize()


def manual_seed(seed: int) -> None:
    """Accepted for compatibility: random tensors are drawn by ``sitp.manual_seed``'s generator."""


def manual_seed_all(seed: int) -> None:
    """Accepted for compatibility."""

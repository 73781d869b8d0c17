"""Launching Numba CUDA kernels: grid sizes, host/device copies, is there a GPU (section 4.3).

A kernel launch names a grid of blocks and a block of threads. Sizes are rarely
multiples of the block, so the grid is rounded up (``ceil_div``) and every kernel
checks its indices against the array bounds.
"""

import importlib
import os

import numpy as np
from numba import config, cuda


def _check_numpy() -> None:
    """A clear error instead of numba-cuda's AttributeError at the first kernel compiled:
    numba-cuda up to 0.30.4 refers to ``np.row_stack``, which NumPy 2.5 removed
    (NVIDIA/numba-cuda#907). The simulator compiles nothing and is not affected."""
    if config.ENABLE_CUDASIM or hasattr(np, "row_stack"):
        return
    try:
        import numba_cuda  # late: optional (numba.cuda may be numba's own)
    except ImportError:
        return
    version = numba_cuda.__version__
    if tuple(int(p) for p in version.split(".")[:3] if p.isdigit()) <= (0, 30, 4):
        raise ImportError(
            f"numba-cuda {version} cannot compile kernels with NumPy {np.__version__}: it "
            "refers to np.row_stack, which NumPy 2.5 removed (NVIDIA/numba-cuda#907). "
            "Install NumPy below 2.5 (pip install 'numpy<2.5'), as sitp[gpu] does."
        )


_check_numpy()

# sitp launches small grids on purpose (a reduction over a few rows, a 0-d result), and
# numba-cuda warns at every launch of fewer than 128 blocks: 351 warnings in one run of
# the CUDA tests on an H200. Off, unless the user set NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS.
if "NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS" not in os.environ:
    for _name in ("numba.cuda.core.config", "numba.core.config"):
        try:
            importlib.import_module(_name).CUDA_LOW_OCCUPANCY_WARNINGS = 0
        except ImportError:
            pass


def simulated() -> bool:
    """True when kernels run in numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``).

    numba reads the variable once, when it is first imported.
    """
    return bool(config.ENABLE_CUDASIM)


def has_gpu() -> bool:
    """True when a real CUDA device answers (never under the simulator)."""
    if simulated():
        return False
    try:
        return cuda.is_available()
    except Exception:  # a broken driver is no GPU for our purposes
        return False


def no_gpu_reason() -> str:
    """One line that says why there is no GPU to measure."""
    if simulated():
        return (
            "no GPU: NUMBA_ENABLE_CUDASIM=1, kernels run in numba's CUDA simulator, "
            "whose timings mean nothing; run on a machine with an NVIDIA GPU"
        )
    if os.environ.get("CUDA_VISIBLE_DEVICES") == "":
        return "no GPU: CUDA_VISIBLE_DEVICES is empty"
    return "no GPU: numba.cuda finds no CUDA device (is the NVIDIA driver installed?)"


def jit_bounded(max_threads: int):
    """``cuda.jit`` that promises the compiler at most max_threads threads per block.

    CUDA C's ``__launch_bounds__``: the compiler then keeps registers per thread low
    enough for a block of that size to fit on one SM (65,536 registers / max_threads),
    instead of failing at launch with "too many resources requested". The simulator's
    ``jit`` has no such option and needs none.
    """
    if simulated():
        return cuda.jit
    return cuda.jit(launch_bounds=max_threads)


# --8<-- [start:grid]
def ceil_div(n: int, d: int) -> int:
    """Smallest number of d-sized pieces that cover n: ceil(n / d) in integers."""
    return (n + d - 1) // d


def grid_2d(rows: int, cols: int, block_rows: int, block_cols: int):
    """Grid (x, y) that covers a rows x cols output with block_rows x block_cols tiles.

    x runs over column tiles and y over row tiles, as in CUDA: blockIdx.x varies fastest.

    >>> grid_2d(33, 29, 8, 8)
    (4, 5)
    """
    return ceil_div(cols, block_cols), ceil_div(rows, block_rows)


# --8<-- [end:grid]


def is_device_array(x) -> bool:
    """Whether x lives on the device (a Numba device array, or the simulator's stand-in)."""
    return hasattr(x, "copy_to_host")


# --8<-- [start:copies]
def to_device(x, dtype=np.float32):
    """A device array: copy a host array to the GPU, or pass a device array through."""
    if is_device_array(x):
        return x
    return cuda.to_device(np.ascontiguousarray(x, dtype=dtype))


def to_host(d_x):
    """Copy a device array back into a new numpy array (waits for the GPU to finish)."""
    return d_x.copy_to_host()


# --8<-- [end:copies]


# --8<-- [start:pool]
class DevicePool:
    """Reuse device arrays by (shape, dtype) instead of asking the driver for new memory.

    ``cudaMalloc`` and ``cudaFree`` are slow and synchronise the device; a training step
    allocates the same activations every time, so a pool hands back what the previous
    step released. ``hits`` counts the requests served from the pool.
    """

    def __init__(self):
        self.free = {}
        self.hits = 0
        self.misses = 0

    @staticmethod
    def _key(shape, dtype):
        return tuple(shape), np.dtype(dtype).str

    def empty(self, shape, dtype=np.float32):
        """An uninitialised device array, recycled when one of that shape is free."""
        stack = self.free.get(self._key(shape, dtype))
        if stack:
            self.hits += 1
            return stack.pop()
        self.misses += 1
        return cuda.device_array(shape, dtype=dtype)

    def release(self, array):
        """Give an array back; its memory stays allocated, for the next ``empty``."""
        self.free.setdefault(self._key(array.shape, array.dtype), []).append(array)


# --8<-- [end:pool]

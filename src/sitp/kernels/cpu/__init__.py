"""The CPU backend (chapters 2.2, 2.3 and 4.2), compiled by numba.

* ``ops``      the backend's functions: from strided operands to kernel launches
* ``kernels``  maps, zips, reductions, gathers, one numba kernel per pattern (2.2)
* ``blas``     the GEMM ladder, packed and small GEMM, batched products (2.3)
* ``vecmath``  float32 exp and erf in vector-friendly form (4.2)
* ``fused``    the fused kernels of 4.2: linear, GELU, attention, layer norm,
  cross-entropy, GRU gates, the Adam step
* ``memory``   the memory allocator's settings (2.3)
"""

from sitp.kernels.cpu import memory

# Freed tensor memory stays in the process for the next tensor (see memory.py): set once,
# when the CPU backend is first imported (``import sitp`` imports it).
memory.tune()

"""sitp's GPU kernels, in Numba CUDA (sections 4.3 to 4.6).

The CUDA backend (layer 1 of docs/layout.md): it never imports the CPU backend, and
``ops`` implements the same functions as ``sitp/kernels/cpu/ops.py``.

* ``launch``    grids, blocks, host/device copies, whether a GPU is present
* ``gemm``      the GEMM ladder, from one thread per element to warp tiling
* ``layouts``   (shape, stride) layouts, tiles and swizzles as pure Python
* ``attention`` naive, fused-softmax and flash attention, forward and backward
* ``fused``     layer norm and cross-entropy, one thread block per row, forward and backward

Without a GPU, set ``NUMBA_ENABLE_CUDASIM=1`` before numba is first imported and the
kernels run, slowly and exactly, in numba's CUDA simulator.
"""

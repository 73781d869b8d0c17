"""The kernels and the backends (chapters 2.2, 2.3 and 4.2 to 4.6): the bottom layer.

A backend computes on strided arrays (a storage plus shape, strides and offset) and knows
nothing of autograd; ``interface.py`` writes down the functions every backend provides.

* ``cpu``   numba kernels: maps, zips, reductions, BLAS (2.2, 2.3), fused kernels (4.2)
* ``cuda``  Numba CUDA kernels (4.3 to 4.6)
"""

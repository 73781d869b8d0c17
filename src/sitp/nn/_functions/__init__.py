"""The autograd nodes of chapter 4.2's fused kernels: one module per op.

Each module holds the ``Function`` that calls the op's CPU kernels
(``sitp.kernels.cpu.fused``) and, where the GPU has its own, the ``Function`` that
calls the CUDA kernels (``sitp.kernels.cuda.fused``), next to it:

* ``linear`` -- :class:`Linear`, y = x W^T + b as one node;
* ``gelu`` -- :class:`GELU`;
* ``attention`` -- :class:`Attention`, flash-style attention as one node;
* ``softmax`` -- :class:`MaskedSoftmax`, attention's weights alone (with dropout);
* ``layer_norm`` -- :class:`LayerNorm` (CPU) and :class:`LayerNormGPU`;
* ``cross_entropy`` -- :class:`CrossEntropy` (CPU) and :class:`CrossEntropyGPU`;
* ``binary_cross_entropy`` -- the two binary losses, composed of tensor ops;
* ``gru`` -- :class:`GRUGates`, the GRU cell's gates as one node.

``sitp.nn.functional`` picks among them; ``_cuda`` is where the GPU nodes reach the
CUDA backend (one late import: it imports numba.cuda).
"""

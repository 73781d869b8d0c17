"""The fused CPU kernels of chapter 4.2, one module per op: numba kernels on flat buffers.

Composing a layer or a loss from small ops writes every intermediate to memory and
records an autograd node for each. The kernels here do each op in one pass (and its
backward in one more), on numpy arrays, with no Tensor and no autograd:

* ``linear`` -- the bias gradient's column sum (the GEMMs are ``sitp.kernels.cpu.blas``);
* ``gelu`` -- GELU and its derivative, vectorised with ``sitp.kernels.cpu.vecmath``;
* ``attention`` -- flash-style attention, forward and backward, on strided storages;
* ``layer_norm`` -- mean, rstd and the affine map per row, and the backward;
* ``rms_norm`` -- the root mean square and the gain per row, and the backward;
* ``cross_entropy`` -- log-softmax, NLL, label smoothing and class weights per row;
* ``softmax`` -- the masked softmax of attention's scores (used with dropout);
* ``gru`` -- the GRU cell's gates, forward and backward;
* ``adam`` -- one Adam(W) step over a parameter and its moments;
* ``norms`` -- the sum of squares of a gradient, for clipping.

Their autograd nodes (the ``Function`` classes) are in ``sitp.nn._functions``; the Adam
kernel is called by ``sitp.optim.adam``. The GPU versions of layer norm and
cross-entropy are ``sitp.kernels.cuda.fused``.
"""

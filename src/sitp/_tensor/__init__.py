"""The tensor (chapter 2.1): the layer above the backends, below autograd.

* ``tensor``    ``Tensor``, ``Size`` and ``device``: storage, shape, strides, offset
* ``dispatch``  the one place that picks a backend from the operands' device
* ``creation``  ``tensor``, ``zeros``, ``arange``, ...; Python scalars as operands
* ``printing``  the repr

``sitp.random`` (random tensors and generators) sits in this layer too.
"""

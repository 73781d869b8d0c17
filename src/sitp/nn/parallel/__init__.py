"""``sitp.nn.parallel``: ``DistributedDataParallel`` (chapter 7.2), at torch's dotted path
``torch.nn.parallel.DistributedDataParallel``; the implementation is in ``distributed.py``.
Part of the PyTorch mirror (layer 5 of docs/layout.md); the collectives it calls are
``sitp.distributed``'s.
"""

from sitp.nn.parallel import distributed  # noqa: F401
from sitp.nn.parallel.distributed import DistributedDataParallel

__all__ = ["DistributedDataParallel"]

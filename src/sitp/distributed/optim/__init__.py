"""``sitp.distributed.optim``: ``ZeroRedundancyOptimizer`` (ZeRO stage 1, chapter 7.3), at
torch's dotted path ``torch.distributed.optim``; the implementation is in
``zero_redundancy_optimizer.py``. It sits above ``sitp.optim``, whose optimizers it shards.
"""

from sitp.distributed.optim import zero_redundancy_optimizer  # noqa: F401
from sitp.distributed.optim.zero_redundancy_optimizer import ZeroRedundancyOptimizer

__all__ = ["ZeroRedundancyOptimizer"]

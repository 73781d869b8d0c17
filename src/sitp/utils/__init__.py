"""``sitp.utils``: data loading for PyTorch scripts, as ``torch.utils``.

Part of the PyTorch mirror (layer 5 of docs/layout.md).
"""

from sitp.utils import data  # noqa: F401

"""``sitp.utils``: data loading for PyTorch scripts, as ``torch.utils`` (chapter 3.1 feeds the
MLP through it; 3.5's GPT recipes use it too), and ``checkpoint``, activation
recomputation (chapter 7.4).

Part of the PyTorch mirror (layer 5 of docs/layout.md).
"""

from sitp.utils import checkpoint, data  # noqa: F401

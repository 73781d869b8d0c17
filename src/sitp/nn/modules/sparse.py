"""``Embedding``: a lookup table of vectors, indexed by integer tokens."""

from __future__ import annotations

from ...autograd import no_grad
from ...creation import empty
from .. import functional as F
from .. import init
from ..parameter import Parameter
from .module import Module


# --8<-- [start:embedding]
class Embedding(Module):
    """Row ``i`` of ``weight`` (num_embeddings, embedding_dim) is token i's vector.

    ``emb(idx_BT)`` has shape (B, T, embedding_dim); its backward adds each
    position's gradient into the row it read (scatter-add).
    """

    def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx=None, dtype=None, device=None):
        super().__init__()
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        self.padding_idx = padding_idx
        self.weight = Parameter(empty(num_embeddings, embedding_dim, dtype=dtype))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        init.normal_(self.weight)
        if self.padding_idx is not None:
            with no_grad():
                self.weight[self.padding_idx] = 0.0

    def forward(self, idx):
        return F.embedding(idx, self.weight)
# --8<-- [end:embedding]

    def extra_repr(self) -> str:
        return f"{self.num_embeddings}, {self.embedding_dim}"

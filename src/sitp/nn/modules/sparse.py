"""``Embedding``: a lookup table of vectors, indexed by integer tokens."""

from __future__ import annotations

from sitp._tensor.creation import empty
from sitp.autograd.grad_mode import no_grad
from sitp.nn import functional as F
from sitp.nn import init
from sitp.nn.modules.module import Module
from sitp.nn.parameter import Parameter


# --8<-- [start:embedding]
class Embedding(Module):
    """Row ``i`` of ``weight`` (num_embeddings, embedding_dim) is token i's vector.

    ``emb(idx_BT)`` has shape (B, T, embedding_dim); its backward adds each
    position's gradient into the row it read (scatter-add).
    """

    def __init__(
        self,
        num_embeddings: int,
        embedding_dim: int,
        padding_idx=None,
        max_norm=None,
        norm_type: float = 2.0,
        scale_grad_by_freq: bool = False,
        sparse: bool = False,
        _weight=None,
        _freeze: bool = False,
        device=None,
        dtype=None,
    ):
        super().__init__()
        _unsupported(max_norm=max_norm, scale_grad_by_freq=scale_grad_by_freq, sparse=sparse)
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        self.padding_idx = padding_idx
        self.max_norm, self.norm_type = max_norm, norm_type
        self.scale_grad_by_freq, self.sparse = scale_grad_by_freq, sparse
        if _weight is None:
            self.weight = Parameter(
                empty(num_embeddings, embedding_dim, dtype=dtype, device=device),
                requires_grad=not _freeze,
            )
            self.reset_parameters()
        else:  # torch's from_pretrained path: the given table, as it is
            if tuple(_weight.shape) != (num_embeddings, embedding_dim):
                raise RuntimeError(
                    f"Shape of weight {tuple(_weight.shape)} does not match num_embeddings "
                    f"and embedding_dim ({num_embeddings}, {embedding_dim})"
                )
            self.weight = Parameter(_weight, requires_grad=not _freeze)

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


def _unsupported(**options) -> None:
    """torch's Embedding options sitp does not implement: refused, never ignored."""
    defaults = {"max_norm": None, "scale_grad_by_freq": False, "sparse": False}
    for k, v in options.items():
        if v != defaults[k]:
            raise NotImplementedError(f"Embedding: {k}={v!r} is not implemented in sitp")

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
        if padding_idx is not None:  # torch's check and its message
            assert -num_embeddings <= padding_idx < num_embeddings, (
                "Padding_idx must be within num_embeddings"
            )
            padding_idx = padding_idx % num_embeddings
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
        return F.embedding(idx, self.weight, self.padding_idx)

    # --8<-- [end:embedding]

    @classmethod
    def from_pretrained(
        cls,
        embeddings,
        freeze: bool = True,
        padding_idx=None,
        max_norm=None,
        norm_type: float = 2.0,
        scale_grad_by_freq: bool = False,
        sparse: bool = False,
    ) -> "Embedding":
        """An Embedding whose table is ``embeddings`` (2-D), trained or not (``freeze``).

        The table is used as given (no copy; the row ``padding_idx`` is not zeroed),
        and ``padding_idx`` only stops that row's gradient.
        """
        assert embeddings.ndim == 2, "Embeddings parameter is expected to be 2-dimensional"
        rows, cols = embeddings.shape
        return cls(
            num_embeddings=rows,
            embedding_dim=cols,
            _weight=embeddings,
            _freeze=freeze,
            padding_idx=padding_idx,
            max_norm=max_norm,
            norm_type=norm_type,
            scale_grad_by_freq=scale_grad_by_freq,
            sparse=sparse,
        )

    def extra_repr(self) -> str:
        s = f"{self.num_embeddings}, {self.embedding_dim}"
        return s if self.padding_idx is None else s + f", padding_idx={self.padding_idx}"


def _unsupported(**options) -> None:
    """torch's Embedding options sitp does not implement: refused, never ignored."""
    defaults = {"max_norm": None, "scale_grad_by_freq": False, "sparse": False}
    for k, v in options.items():
        if v != defaults[k]:
            raise NotImplementedError(f"Embedding: {k}={v!r} is not implemented in sitp")

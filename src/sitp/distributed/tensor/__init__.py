"""``sitp.distributed.tensor``: torch.distributed.tensor's namespace (chapter 7.5).

sitp has no DTensor. Its ``parallel`` module shards ``Linear`` layers for tensor and
sequence parallelism, and takes torch's two placements where a style needs a layout:
:class:`Shard` (split along a dimension) and :class:`Replicate` (whole on every rank).
"""


class Shard:
    """A tensor split along ``dim`` across the ranks (torch's ``Shard(dim)``)."""

    def __init__(self, dim: int):
        self.dim = dim

    def __eq__(self, other):
        return isinstance(other, Shard) and other.dim == self.dim

    def __repr__(self):
        return f"Shard(dim={self.dim})"


class Replicate:
    """A tensor whole on every rank (torch's ``Replicate()``)."""

    def __eq__(self, other):
        return isinstance(other, Replicate)

    def __repr__(self):
        return "Replicate()"


__all__ = ["Replicate", "Shard"]

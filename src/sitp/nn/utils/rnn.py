"""``sitp.nn.utils.rnn``: batches of sequences of different lengths (chapter 3.4).

A batch of sequences of lengths 4, 3 and 2 can be padded to a (4, 3, *) tensor, which
makes a recurrent layer compute 3 wasted steps, or *packed*: sorted by length, step t
holds the ``batch_sizes[t]`` sequences that are still running, and ``data`` is the
concatenation of the steps, (4 + 3 + 2, *) rows in all. The recurrent modules
(``nn.RNN``, ``nn.LSTM``, ``nn.GRU``) take a :class:`PackedSequence` and return one.

>>> import sitp
>>> from sitp.nn.utils.rnn import pack_sequence, pad_packed_sequence
>>> p = pack_sequence([sitp.ones(2), sitp.ones(4), sitp.ones(3)], enforce_sorted=False)
>>> p.batch_sizes.tolist(), p.sorted_indices.tolist()
([3, 3, 2, 1], [1, 2, 0])
>>> padded, lengths = pad_packed_sequence(p)
>>> tuple(padded.shape), lengths.tolist()
((4, 3), [2, 4, 3])
"""

from __future__ import annotations

from typing import NamedTuple

from sitp._tensor.creation import full, tensor
from sitp._tensor.tensor import Tensor
from sitp.dtypes import int64
from sitp.functional import cat, stack

__all__ = [
    "PackedSequence",
    "invert_permutation",
    "pack_padded_sequence",
    "pack_sequence",
    "pad_packed_sequence",
    "pad_sequence",
    "unpack_sequence",
    "unpad_sequence",
]


class PackedSequence(NamedTuple):
    """A packed batch: ``data`` (sum of the lengths, *), ``batch_sizes`` (an int64 tensor,
    how many sequences run at each step), and, when the batch was sorted by length,
    ``sorted_indices`` (the batch's order in ``data``) and ``unsorted_indices`` (its
    inverse). Made by :func:`pack_padded_sequence` and :func:`pack_sequence`."""

    data: Tensor
    batch_sizes: Tensor = None
    sorted_indices: Tensor = None
    unsorted_indices: Tensor = None

    def to(self, *args, **kwargs) -> "PackedSequence":
        """``data`` moved or cast; the index tensors follow it to its device."""
        data = self.data.to(*args, **kwargs)
        if data is self.data:
            return self
        idx = [None if t is None else t.to(data.device) for t in self[2:]]
        return type(self)(data, self.batch_sizes, *idx)

    def cpu(self) -> "PackedSequence":
        return self.to("cpu")

    def double(self) -> "PackedSequence":
        return self._replace(data=self.data.double())

    def float(self) -> "PackedSequence":
        return self._replace(data=self.data.float())

    @property
    def is_cuda(self) -> bool:
        return self.data.is_cuda


def invert_permutation(permutation):
    """The inverse of a permutation (an int64 tensor), or None for None."""
    if permutation is None:
        return None
    order = permutation.tolist()
    inv = [0] * len(order)
    for position, index in enumerate(order):
        inv[index] = position
    return tensor(inv, dtype=int64, device=permutation.device)


def _lengths_list(lengths) -> list:
    return [int(n) for n in (lengths.tolist() if isinstance(lengths, Tensor) else lengths)]


def pack_padded_sequence(
    input: Tensor, lengths, batch_first: bool = False, enforce_sorted: bool = True
) -> PackedSequence:
    """Pack a padded batch ``input`` (T, B, *) (or (B, T, *) with ``batch_first``)
    whose sequence b has ``lengths[b]`` valid steps.

    With ``enforce_sorted`` the lengths must be in decreasing order; otherwise the batch
    is sorted here (stably, longest first) and the permutation kept in the result.
    """
    lengths = _lengths_list(lengths)
    b_dim = 0 if batch_first else 1
    if input.ndim < 2:
        raise ValueError(
            f"pack_padded_sequence(): input must be at least 2-D (T, B, *), got shape "
            f"{tuple(input.shape)}"
        )
    B, T = input.shape[b_dim], input.shape[1 - b_dim]
    if len(lengths) != B:
        raise RuntimeError(
            f"Expected `len(lengths)` to be equal to batch_size, but got {len(lengths)} "
            f"(batch_size={B})"
        )
    if any(n <= 0 for n in lengths):
        raise RuntimeError(
            "Length of all samples has to be greater than 0, but found an element in "
            "'lengths' that is <= 0"
        )
    if enforce_sorted:
        if any(a < b for a, b in zip(lengths, lengths[1:])):
            raise RuntimeError(
                "`lengths` array must be sorted in decreasing order when `enforce_sorted` is "
                "True. You can pass `enforce_sorted=False` to pack_padded_sequence and/or "
                "pack_sequence to sidestep this requirement if you do not need ONNX "
                "exportability."
            )
        sorted_indices = None
    else:
        order = sorted(range(B), key=lambda b: -lengths[b])
        sorted_indices = tensor(order, dtype=int64, device=input.device)
        input = input.index_select(b_dim, sorted_indices)
        lengths = [lengths[b] for b in order]
    if lengths[0] > T:
        raise RuntimeError(
            f"pack_padded_sequence(): a length of {lengths[0]} exceeds the input's {T} time "
            f"steps (input of shape {tuple(input.shape)})"
        )
    if batch_first:
        input = input.transpose(0, 1)  # (T, B, *)
    batch_sizes = [sum(1 for n in lengths if n > t) for t in range(lengths[0])]
    data = cat([input[t, :b] for t, b in enumerate(batch_sizes)], 0)
    return PackedSequence(
        data,
        tensor(batch_sizes, dtype=int64),
        sorted_indices,
        invert_permutation(sorted_indices),
    )


def pad_packed_sequence(
    sequence: PackedSequence,
    batch_first: bool = False,
    padding_value: float = 0.0,
    total_length=None,
):
    """The inverse of :func:`pack_padded_sequence`: returns the padded batch (T, B, *)
    (or (B, T, *)) in the original order, and the lengths (an int64 tensor)."""
    data, batch_sizes = sequence.data, sequence.batch_sizes.tolist()
    T, B = len(batch_sizes), batch_sizes[0]
    if total_length is not None:
        if total_length < T:
            raise ValueError(
                "Expected total_length to be at least the length of the longest sequence in "
                f"input, but got total_length={total_length} and max sequence length being {T}"
            )
    else:
        total_length = T
    rest = tuple(data.shape[1:])
    steps, start = [], 0
    for b in batch_sizes:
        piece = data[start : start + b]
        start += b
        if b < B:
            pad = full((B - b, *rest), padding_value, dtype=data.dtype, device=data.device)
            piece = cat([piece, pad], 0)
        steps.append(piece)
    if total_length > T:
        pad = full((B, *rest), padding_value, dtype=data.dtype, device=data.device)
        steps += [pad] * (total_length - T)
    padded = stack(steps, 0)  # (T, B, *)
    lengths = [sum(1 for n in batch_sizes if n > b) for b in range(B)]
    if sequence.unsorted_indices is not None:
        padded = padded.index_select(1, sequence.unsorted_indices)
        lengths = [lengths[b] for b in sequence.unsorted_indices.tolist()]
    if batch_first:
        padded = padded.transpose(0, 1)
    return padded, tensor(lengths, dtype=int64)


def pad_sequence(
    sequences, batch_first: bool = False, padding_value: float = 0.0, padding_side: str = "right"
) -> Tensor:
    """Stack sequences (L_i, *) into (max L, B, *) (or (B, max L, *)), padded with
    ``padding_value`` on the right (after each sequence) or on the left."""
    if padding_side not in ("left", "right"):
        raise ValueError(
            f"Expected padding_side to be one of left or right, but got {padding_side}."
        )
    if isinstance(sequences, Tensor):
        sequences = list(sequences.unbind(0))
    sequences = list(sequences)
    if not sequences:
        raise RuntimeError("received an empty list of sequences")
    rest = tuple(sequences[0].shape[1:])
    for s in sequences:
        if tuple(s.shape[1:]) != rest:
            raise RuntimeError(
                f"pad_sequence(): every sequence must have the trailing shape {rest}, got a "
                f"sequence of shape {tuple(s.shape)}"
            )
    T = max(s.shape[0] for s in sequences)
    rows = []
    for s in sequences:
        if s.shape[0] < T:
            pad = full((T - s.shape[0], *rest), padding_value, dtype=s.dtype, device=s.device)
            s = cat([s, pad] if padding_side == "right" else [pad, s], 0)
        rows.append(s)
    return stack(rows, 0 if batch_first else 1)


def unpad_sequence(padded_sequences: Tensor, lengths, batch_first: bool = False) -> list:
    """The sequences of a padded batch, each cut to its length."""
    if not batch_first:
        padded_sequences = padded_sequences.transpose(0, 1)
    return [padded_sequences[b, :n] for b, n in enumerate(_lengths_list(lengths))]


def pack_sequence(sequences, enforce_sorted: bool = True) -> PackedSequence:
    """Pack a list of sequences (L_i, *): :func:`pad_sequence`, then
    :func:`pack_padded_sequence`."""
    lengths = [s.shape[0] for s in sequences]
    return pack_padded_sequence(pad_sequence(sequences), lengths, enforce_sorted=enforce_sorted)


def unpack_sequence(packed_sequences: PackedSequence) -> list:
    """The list of sequences of a packed batch, in their original order."""
    padded, lengths = pad_packed_sequence(packed_sequences, batch_first=True)
    return unpad_sequence(padded, lengths, batch_first=True)

"""Layouts: the index arithmetic of tiles, threads and swizzles as data (section 4.5).

Chapter 2's strides map an index tuple to an offset: offset = sum(i_k * stride_k).
A *layout* is the same (shape, stride) pair with two generalisations, after NVIDIA's
CuTe: a mode may itself be a (shape, stride) pair (hierarchical shapes), and a layout
can be applied to a single integer, which it first splits into a coordinate.

Convention (CuTe's, and unlike numpy's): an integer is split *colexicographically*,
first mode fastest. ``Layout((4, 8), (8, 1))`` is a row-major 4 x 8 matrix, and its
integer order walks down the first column first: 0 -> 0, 1 -> 8, 2 -> 16, ...

Pure Python on purpose: the GPU kernels of section 4.4 compute these maps inline;
here they are values that can be printed, composed and tested.
"""

from dataclasses import dataclass
from math import prod


def _flatten(t):
    """Leaves of a nested tuple, left to right."""
    if isinstance(t, int):
        return (t,)
    return tuple(x for e in t for x in _flatten(e))


def _size(shape):
    return prod(_flatten(shape))


def _split(index, shape):
    """Integer index -> coordinate of the same nesting as shape (colexicographic)."""
    if isinstance(shape, int):
        return index
    coord = []
    for s in shape:
        n = _size(s)
        coord.append(_split(index % n, s))
        index //= n
    return tuple(coord)


def _dot(coord, shape, stride):
    """Offset of a coordinate: an int is split against the mode's shape first."""
    if isinstance(shape, int):
        return coord * stride
    if isinstance(coord, int):
        coord = _split(coord, shape)
    if len(coord) != len(shape):
        raise ValueError(f"coordinate {coord} does not match shape {shape}")
    return sum(_dot(c, s, d) for c, s, d in zip(coord, shape, stride))


# --8<-- [start:layout]
@dataclass(frozen=True)
class Layout:
    """A map from coordinates (or integers in [0, size)) to offsets.

    >>> L = Layout((4, 8), (8, 1))   # row-major 4 x 8
    >>> L(2, 3), L((2, 3)), L(2 + 3 * 4)
    (19, 19, 19)
    >>> [L(i) for i in range(5)]     # colexicographic: down the first column
    [0, 8, 16, 24, 1]
    """

    shape: object
    stride: object

    def __call__(self, *coord):
        c = coord[0] if len(coord) == 1 else coord
        return _dot(c, self.shape, self.stride)

    @property
    def size(self):
        """Number of coordinates: the product of the shape."""
        return _size(self.shape)

    def cosize(self):
        """One past the largest offset: how much memory the layout spans."""
        return self(self.size - 1) + 1

    def offsets(self):
        """All offsets, in the layout's integer order."""
        return [self(i) for i in range(self.size)]

    def __repr__(self):
        return f"{self.shape}:{self.stride}"


def row_major(*shape):
    """The layout of a C-contiguous array: last index fastest in memory."""
    stride, s = [], 1
    for n in reversed(shape):
        stride.append(s)
        s *= n
    return Layout(tuple(shape), tuple(reversed(stride)))


def col_major(*shape):
    """The layout of a Fortran-contiguous array: first index fastest in memory."""
    stride, s = [], 1
    for n in shape:
        stride.append(s)
        s *= n
    return Layout(tuple(shape), tuple(stride))


# --8<-- [end:layout]


# --8<-- [start:tile]
def tiled(layout, tile):
    """Split each mode n of a 2-D layout into (tile size, number of tiles).

    The result maps ((r, tile_r), (c, tile_c)) to the offset of element
    (tile_r * BM + r, tile_c * BN + c): the row0 + r and col0 + c of the GEMM kernels.
    Each tile size must divide its mode (the kernels pad the ragged edge instead).

    >>> T = tiled(row_major(6, 8), (2, 4))
    >>> T
    ((2, 3), (4, 2)):((8, 16), (1, 4))
    >>> T((1, 2), (3, 1)) == row_major(6, 8)(2 * 2 + 1, 1 * 4 + 3)
    True
    """
    (M, N), (sM, sN) = layout.shape, layout.stride
    BM, BN = tile
    if M % BM or N % BN:
        raise ValueError(f"tile {tile} does not divide shape {layout.shape}")
    return Layout(((BM, M // BM), (BN, N // BN)), ((sM, sM * BM), (sN, sN * BN)))


# --8<-- [end:tile]


# --8<-- [start:compose]
def _compose_mode(shape, stride, s, d):
    """Flat layout (shape, stride) composed with the one-mode layout s:d."""
    out_shape, out_stride = [], []
    for i, (n, st) in enumerate(zip(shape, stride)):
        last = i == len(shape) - 1
        if d >= n and not last:  # skip whole modes: the stride d steps over them
            if d % n:
                raise ValueError("stride does not divide the shape")
            d //= n
            continue
        if n % d and not last:
            raise ValueError("stride does not divide the shape")
        n, st, d = (n + d - 1) // d, st * d, 1  # what remains of this mode, d at a time
        if s <= n or last:
            out_shape.append(s)
            out_stride.append(st)
            s = 1
            break
        if s % n:
            raise ValueError("shape does not divide")
        out_shape.append(n)
        out_stride.append(st)
        s //= n
    if len(out_shape) == 1:
        return out_shape[0], out_stride[0]
    return tuple(out_shape), tuple(out_stride)


def compose(A, B):
    """The layout A o B: first B maps a coordinate to an index, then A maps it to an offset.

    Computed mode by mode of B (composition distributes over B's modes). A is used
    flattened. The result is a layout again, not a lookup table.

    >>> A = row_major(4, 8)                 # a 4 x 8 matrix, row-major
    >>> C = compose(A, col_major(8, 4))     # read it as an 8 x 4 column-major matrix
    >>> all(C(i) == A(i) for i in range(32))
    True
    >>> compose(A, Layout(4, 4))            # every 4th index: along the first row
    4:1
    """
    shape, stride = _flatten(A.shape), _flatten(A.stride)

    def go(s, d):
        if isinstance(s, int):
            return _compose_mode(shape, stride, s, d)
        parts = [go(si, di) for si, di in zip(s, d)]
        return tuple(p[0] for p in parts), tuple(p[1] for p in parts)

    return Layout(*go(B.shape, B.stride))


# --8<-- [end:compose]


# --8<-- [start:thread_layout]
def blocktile2d_layout(BM, BN, TM, TN):
    """(thread, value) -> offset in a row-major BM x BN tile, as rung 5 assigns them.

    Thread t = tx + (BN // TN) * ty owns the TM x TN patch at rows ty * TM, columns
    tx * TN; value v = c + TN * r is its element (r, c).
    """
    return Layout(((BN // TN, BM // TM), (TN, TM)), ((TN, TM * BN), (1, BN)))


# --8<-- [end:thread_layout]


# --8<-- [start:banks]
BANKS = 32  # shared memory: 32 banks, each 4 bytes wide, successive words in successive banks


def bank(word):
    """The bank that serves a 4-byte word at this word offset of shared memory."""
    return word % BANKS


def conflict_degree(words):
    """How many shared-memory wavefronts one warp access needs (1 = conflict-free).

    words: the 32 word offsets the threads of a warp access at once. Threads that read
    the same word share it (a broadcast); distinct words in one bank are served in turn.
    """
    per_bank = {}
    for w in set(words):
        per_bank[bank(w)] = per_bank.get(bank(w), 0) + 1
    return max(per_bank.values())


# --8<-- [end:banks]


# --8<-- [start:swizzle]
def swizzle(bits, base, shift):
    """CuTe's Swizzle<bits, base, shift>: XOR `bits` bits taken at `base + shift` into `base`.

    offset -> offset ^ ((offset >> shift) & mask), mask = (2^bits - 1) << base. A swizzle
    is a bijection on offsets (applied twice it is the identity), so it moves data
    around within a tile without ever making two elements collide.

    >>> sw = swizzle(3, 2, 5)
    >>> sw(1 * 128 + 0), sw(sw(200)) == 200
    (132, True)
    """
    mask = ((1 << bits) - 1) << base

    def f(offset):
        return offset ^ ((offset >> shift) & mask)

    return f


# --8<-- [end:swizzle]


# --8<-- [start:store_pattern]
def transposed_store_words(BM, BK, warp=0, pad=0, swz=None):
    """Word offsets of AsT[c, r] written by one warp in rungs 6 and 7 (at the first copy).

    Thread idx reads A[row0 + idx // BK, k0 + idx % BK] (coalesced) and stores it at
    AsT[idx % BK, idx // BK] of a BK x (BM + pad) array, optionally swizzled.
    """
    words = []
    for lane in range(32):
        idx = warp * 32 + lane
        r, c = idx // BK, idx % BK
        w = c * (BM + pad) + r
        words.append(swz(w) if swz else w)
    return words


# --8<-- [end:store_pattern]

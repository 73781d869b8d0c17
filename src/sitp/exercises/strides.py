"""Assignment for section 2.1: the arithmetic of strided tensors.

Fill in the five functions below, then run ``pytest --pyargs sitp.exercises.tests.test_strides``.
Shapes, strides and indices are tuples of ints; strides count elements, not bytes.
"""


def contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    """Row-major strides of ``shape``: the last dimension has stride 1."""
    raise NotImplementedError("contiguous_strides")


def index_to_position(index: tuple[int, ...], strides: tuple[int, ...], offset: int) -> int:
    """The storage position of the entry at ``index``."""
    raise NotImplementedError("index_to_position")


def ordinal_to_index(ordinal: int, shape: tuple[int, ...]) -> tuple[int, ...]:
    """The index of the ``ordinal``-th entry when ``shape`` is walked in row-major order."""
    raise NotImplementedError("ordinal_to_index")


def broadcast_shape(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    """The shape ``a`` and ``b`` broadcast to; ``ValueError`` when they do not."""
    raise NotImplementedError("broadcast_shape")


def broadcast_strides(
    shape: tuple[int, ...], strides: tuple[int, ...], target: tuple[int, ...]
) -> tuple[int, ...]:
    """Strides that read a tensor of ``shape`` and ``strides`` as a tensor of ``target``.

    New leading dimensions and dimensions of size 1 stretched to a larger size get stride 0.
    """
    raise NotImplementedError("broadcast_strides")

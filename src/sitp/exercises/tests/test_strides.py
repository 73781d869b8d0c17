"""Tests of the section 2.1 assignment: ``pytest --pyargs sitp.exercises.tests.test_strides``.

numpy is the reference: its strides are in bytes, so they are divided by the item size.
"""

import numpy as np
import pytest

SHAPES = [(), (1,), (5,), (2, 3), (3, 1, 4), (2, 3, 4, 5), (1, 1, 7), (4, 0, 2)]


def elements(a):
    return tuple(s // a.itemsize for s in a.strides)


def test_contiguous_strides(impl):
    for shape in SHAPES:
        if 0 in shape:
            continue  # numpy's strides of an empty array are arbitrary
        assert impl.contiguous_strides(shape) == elements(np.zeros(shape)), shape


def test_index_to_position_walks_a_permuted_view(impl):
    base = np.arange(2 * 3 * 4).reshape(2, 3, 4)
    for view in (base, base.transpose(2, 0, 1), base[:, ::2, 1:], base[1, ::-1]):
        offset = (
            view.__array_interface__["data"][0] - base.__array_interface__["data"][0]
        ) // base.itemsize
        for index in np.ndindex(view.shape):
            pos = impl.index_to_position(index, elements(view), offset)
            assert base.reshape(-1)[pos] == view[index], (view.shape, index)


def test_ordinal_to_index_inverts_row_major_order(impl):
    for shape in [(5,), (2, 3), (3, 1, 4), (2, 3, 4, 5)]:
        walked = [impl.ordinal_to_index(k, shape) for k in range(int(np.prod(shape)))]
        assert walked == list(np.ndindex(shape)), shape
        strides = impl.contiguous_strides(shape)
        for k, index in enumerate(walked):
            assert impl.index_to_position(index, strides, 0) == k


def test_broadcast_shape(impl):
    cases = [
        ((3, 1), (4,)),
        ((2, 1, 4), (3, 1)),
        ((), (2, 2)),
        ((5, 1), (1, 6)),
        ((1,), (1,)),
        ((8, 1, 6, 1), (7, 1, 5)),
    ]
    for a, b in cases:
        expected = np.broadcast_shapes(a, b)
        assert impl.broadcast_shape(a, b) == expected, (a, b)
        assert impl.broadcast_shape(b, a) == expected, (b, a)
    for a, b in [((2, 3), (3, 2)), ((4,), (5,)), ((2, 1), (8, 4, 3))]:
        with pytest.raises(ValueError):
            impl.broadcast_shape(a, b)


def test_broadcast_strides_read_the_right_entries(impl):
    rng = np.random.default_rng(0)
    for shape, target in [
        ((3, 1), (2, 3, 4)),
        ((4,), (3, 4)),
        ((1, 1), (5, 6)),
        ((2, 1, 3), (2, 4, 3)),
    ]:
        x = rng.normal(size=shape)
        strides = impl.broadcast_strides(shape, elements(x), target)
        assert len(strides) == len(target)
        expected = np.broadcast_to(x, target)
        assert strides == elements(expected), (shape, target)
        flat = x.reshape(-1)
        for index in np.ndindex(target):
            assert flat[impl.index_to_position(index, strides, 0)] == expected[index]

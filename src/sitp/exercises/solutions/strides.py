"""A solution of :mod:`sitp.exercises.strides`."""


# --8<-- [start:solution]
def contiguous_strides(shape):
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= max(n, 1)
    return tuple(reversed(strides))


def index_to_position(index, strides, offset):
    return offset + sum(i * s for i, s in zip(index, strides))


def ordinal_to_index(ordinal, shape):
    index = []
    for n in reversed(shape):
        ordinal, i = divmod(ordinal, n)
        index.append(i)
    return tuple(reversed(index))


def broadcast_shape(a, b):
    n = max(len(a), len(b))
    a = (1,) * (n - len(a)) + tuple(a)  # align on the right
    b = (1,) * (n - len(b)) + tuple(b)
    out = []
    for x, y in zip(a, b):
        if x != y and 1 not in (x, y):
            raise ValueError(f"cannot broadcast {a} and {b}")
        out.append(y if x == 1 else x)
    return tuple(out)


def broadcast_strides(shape, strides, target):
    lead = len(target) - len(shape)
    out = [0] * lead  # new dimensions: stride 0
    for n, s, t in zip(shape, strides, target[lead:]):
        out.append(s if n == t else 0)  # size 1 stretched: stride 0
    return tuple(out)


# --8<-- [end:solution]

"""Assignment for section 4.1: a scalar reverse-mode engine.

``Value`` records each operation's inputs (``parents``) and its name (``op``); its forward
arithmetic is written. Fill in the three functions below, then run
``pytest --pyargs sitp.exercises.tests.test_engine``.
"""

import math


class Value:
    """A scalar in a computation graph, with ``grad`` filled in by :func:`backward`."""

    def __init__(self, data, parents=(), op="", power=None):
        self.data = float(data)
        self.parents = tuple(parents)
        self.op = op
        self.power = power  # the exponent of a "pow" node
        self.grad = 0.0

    def __add__(self, other):
        other = other if isinstance(other, Value) else Value(other)
        return Value(self.data + other.data, (self, other), "add")

    def __mul__(self, other):
        other = other if isinstance(other, Value) else Value(other)
        return Value(self.data * other.data, (self, other), "mul")

    def __pow__(self, k):
        return Value(self.data**k, (self,), "pow", power=k)

    def tanh(self):
        return Value(math.tanh(self.data), (self,), "tanh")

    def exp(self):
        return Value(math.exp(self.data), (self,), "exp")

    def log(self):
        return Value(math.log(self.data), (self,), "log")

    __radd__ = __add__
    __rmul__ = __mul__

    def __neg__(self):
        return self * -1

    def __sub__(self, other):
        return self + (-other)

    def __truediv__(self, other):
        return self * other**-1

    def __repr__(self):
        return f"Value({self.data:.6g}, grad={self.grad:.6g})"


def local_grads(node: Value) -> tuple[float, ...]:
    """d node / d parent for each of ``node.parents``, from ``node.op`` (the chain rules' table)."""
    raise NotImplementedError("local_grads")


def topological_order(root: Value) -> list[Value]:
    """Every node ``root`` depends on, each after all of its parents, ``root`` last.

    Without recursion: a graph can be deeper than Python's recursion limit.
    """
    raise NotImplementedError("topological_order")


def backward(root: Value) -> None:
    """Sets ``grad`` of every node to d root / d node (zeroing stale values first)."""
    raise NotImplementedError("backward")

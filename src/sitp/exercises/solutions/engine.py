"""A solution of :mod:`sitp.exercises.engine`."""

from sitp.exercises.engine import Value  # noqa: F401  (the tests build graphs with it)


# --8<-- [start:solution]
def local_grads(node):
    if not node.parents:  # a leaf: nothing to pass back
        return ()
    a = node.parents[0].data
    if node.op == "add":
        return (1.0, 1.0)
    if node.op == "mul":
        return (node.parents[1].data, a)
    if node.op == "pow":
        return (node.power * a ** (node.power - 1),)
    if node.op == "tanh":
        return (1 - node.data**2,)  # from the output, as in 4.1's table
    if node.op == "exp":
        return (node.data,)
    if node.op == "log":
        return (1 / a,)
    raise ValueError(f"no chain rule for {node.op!r}")


def topological_order(root):
    order, seen, stack = [], set(), [(root, False)]
    while stack:
        node, parents_done = stack.pop()
        if parents_done:
            order.append(node)  # every parent is already in order
        elif id(node) not in seen:
            seen.add(id(node))
            stack.append((node, True))
            stack.extend((p, False) for p in node.parents if id(p) not in seen)
    return order


def backward(root):
    order = topological_order(root)
    for node in order:
        node.grad = 0.0
    root.grad = 1.0
    for node in reversed(order):  # children before parents
        for parent, d in zip(node.parents, local_grads(node)):
            parent.grad += d * node.grad  # accumulate: a node may have many uses


# --8<-- [end:solution]

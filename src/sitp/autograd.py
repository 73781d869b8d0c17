"""Reverse-mode automatic differentiation: the engine (chapter 4.1).

Every differentiable op is a :class:`Function` with a ``forward`` and a
``backward`` side by side (they live in ``sitp/ops.py``, the table of local
derivatives). Calling ``Op.apply(...)`` runs ``forward`` and, when gradients
are wanted, records a :class:`Node` in the output's ``grad_fn``: the op's
backward, what it saved, and the nodes of its inputs. ``backward()`` then
sorts those nodes topologically and walks them from the output to the leaves,
applying each local derivative once (the chain rule) and accumulating into
the leaves' ``.grad``.
"""

from __future__ import annotations

import functools
import threading

# --8<-- [start:grad_mode]
_state = threading.local()


def is_grad_enabled() -> bool:
    """Whether ops record the graph right now."""
    return getattr(_state, "enabled", True)


def set_grad_enabled(mode: bool) -> None:
    _state.enabled = bool(mode)


class _GradMode:
    """Base of :class:`no_grad` and :class:`enable_grad`: a context manager
    that is also a decorator."""

    mode = True

    def __new__(cls, orig_func=None):
        if orig_func is not None:  # a bare @no_grad (no parentheses), as torch allows
            return cls()(orig_func)
        return super().__new__(cls)

    def __enter__(self):
        self.prev = is_grad_enabled()
        set_grad_enabled(self.mode)

    def __exit__(self, *exc):
        set_grad_enabled(self.prev)
        return False

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with self.__class__():
                return fn(*args, **kwargs)

        return wrapper


class no_grad(_GradMode):
    """Turn off graph recording, like ``torch.no_grad`` (context or decorator).

    >>> import sitp
    >>> x = sitp.ones(2, requires_grad=True)
    >>> with sitp.no_grad():
    ...     y = x * 2
    >>> y.requires_grad
    False
    """

    mode = False


class enable_grad(_GradMode):
    """Turn graph recording back on inside a ``no_grad`` block."""

    mode = True
# --8<-- [end:grad_mode]


class set_grad_enabled(_GradMode):  # noqa: N801  (PyTorch's name; replaces the function above)
    """Set graph recording on or off, like ``torch.set_grad_enabled``.

    Calling it sets the mode at once (``sitp.set_grad_enabled(False)`` as a
    statement); used in a ``with`` block it restores the previous mode at the end;
    used as a decorator (``@set_grad_enabled(False)``) it runs the function in that
    mode and leaves the caller's mode alone.

    >>> import sitp
    >>> x = sitp.ones(2, requires_grad=True)
    >>> with sitp.set_grad_enabled(False):
    ...     y = x * 2
    >>> y.requires_grad, sitp.is_grad_enabled()
    (False, True)
    """

    def __new__(cls, mode: bool):
        return object.__new__(cls)

    def __init__(self, mode: bool) -> None:
        if not isinstance(mode, bool):
            raise TypeError(f"set_grad_enabled expects a bool, got {type(mode).__name__}")
        self.prev, self.mode = is_grad_enabled(), mode
        _state.enabled = mode

    def __enter__(self):
        pass  # set already, in __init__

    def __exit__(self, *exc):
        _state.enabled = self.prev
        return False

    def __call__(self, fn):
        _state.enabled = self.prev  # as a decorator it changes nothing until fn runs
        mode = self.mode

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with set_grad_enabled(mode):
                return fn(*args, **kwargs)

        return wrapper


class inference_mode(_GradMode):  # noqa: N801
    """``torch.inference_mode``: no graph recording, as a context or a decorator.

    sitp has no separate inference tensors, so ``inference_mode()`` is
    :class:`no_grad` (``inference_mode(False)`` changes nothing). Both
    ``@inference_mode()`` and a bare ``@inference_mode`` decorate a function.

    >>> import sitp
    >>> @sitp.inference_mode()
    ... def predict(x):
    ...     return x * 2
    >>> predict(sitp.ones(2, requires_grad=True)).requires_grad
    False
    """

    def __new__(cls, mode=True):
        if callable(mode) and not isinstance(mode, bool):  # bare @inference_mode
            return cls()(mode)
        return super().__new__(cls)

    def __init__(self, mode: bool = True) -> None:
        if not isinstance(mode, bool):
            raise TypeError(f"inference_mode expects a bool, got {type(mode).__name__}")
        self.inference = mode

    def __enter__(self):
        self.prev = is_grad_enabled(), is_inference_mode_enabled()
        _state.inference = self.inference
        if self.inference:
            _state.enabled = False

    def __exit__(self, *exc):
        _state.enabled, _state.inference = self.prev
        return False

    def __call__(self, fn):
        inference = self.inference

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with inference_mode(inference):
                return fn(*args, **kwargs)

        return wrapper


def is_inference_mode_enabled() -> bool:
    """Whether the code runs inside an :class:`inference_mode` block."""
    return getattr(_state, "inference", False)


# --8<-- [start:function]
class Context:
    """What a forward pass leaves for its backward pass.

    ``save_for_backward`` also notes each saved tensor's version (the count of
    in-place writes to its storage, see ``Tensor._version``); ``backward``
    refuses to use a saved tensor that was written to since, as PyTorch does,
    rather than compute a gradient from the new values.
    """

    __slots__ = ("saved_tensors", "needs_input_grad", "_versions", "__dict__")

    def __init__(self):
        self.saved_tensors = ()
        self._versions = None

    def save_for_backward(self, *tensors):
        self.saved_tensors = tensors
        self._versions = [None if t is None else t._vc[0] for t in tensors]

    def _unchecked(self, *positions):
        """Saved tensors at ``positions`` are not read by this backward (the gradient
        that would read them is not wanted): writing to them is allowed, as in torch."""
        v = self._versions
        for i in positions:
            v[i] = None


def _check_versions(node) -> None:
    """Raise, as torch does, if a tensor saved for ``node``'s backward was modified in place."""
    ctx = node.ctx
    for i, (t, v) in enumerate(zip(ctx.saved_tensors, ctx._versions)):
        if v is not None and t._vc[0] != v:
            made_by = (f", which is output {t._output_nr} of {t.grad_fn.name()},"
                       if t.grad_fn is not None else "")
            raise RuntimeError(
                "one of the variables needed for gradient computation has been modified by an "
                f"inplace operation: [{t.dtype} tensor of shape {list(t.shape)}]{made_by} saved "
                f"for {node.name()} (saved tensor {i}), is at version {t._vc[0]}; expected "
                f"version {v} instead. Hint: look for an in-place op (add_, mul_, copy_, x[...] = "
                "..., an optimizer step) on it or on a view of it between the forward pass and "
                "backward().")


class Node:
    """One op in the recorded graph (what PyTorch shows as ``grad_fn``)."""

    __slots__ = ("fn", "ctx", "inputs", "n_outputs", "freed", "retained")

    def __init__(self, fn, ctx, inputs):
        self.fn = fn          # the Function subclass
        self.ctx = ctx        # its Context
        self.inputs = inputs  # the input tensors that require grad (None otherwise)
        self.n_outputs = 1    # differentiable outputs; backward gets a tuple when > 1
        self.freed = False
        self.retained = None  # {output number: weak reference} for outputs that retain_grad()

    def name(self) -> str:
        op = getattr(self.ctx, "op", None) if self.ctx is not None else None
        base = op.title().replace("_", "") if isinstance(op, str) else self.fn.__name__
        return f"{base}Backward"

    def __repr__(self) -> str:
        return f"<{self.name()}>"


class _Edge:
    """A non-leaf input of a recorded op: the grad_fn and output number it had then."""

    __slots__ = ("grad_fn", "_output_nr")
    requires_grad = True

    def __init__(self, t):
        self.grad_fn, self._output_nr = t.grad_fn, t._output_nr


class Function:
    """Subclass with ``forward(ctx, *args)`` and ``backward(ctx, grad)``.

    ``backward`` returns one gradient per *tensor* argument of ``forward``
    (or ``None`` where none is needed), each with that argument's shape.
    """

    @staticmethod
    def forward(ctx, *args, **kwargs):
        raise NotImplementedError

    @staticmethod
    def backward(ctx, grad):
        raise NotImplementedError

    @classmethod
    def apply(cls, *args, **kwargs):
        ctx = Context()
        needs = tuple(getattr(a, "requires_grad", False) is True for a in args)
        ctx.needs_input_grad = needs
        prev = is_grad_enabled()
        record = prev and any(needs)
        # The forward pass never records: it may use other ops freely.
        _state.enabled = False
        try:
            out = cls.forward(ctx, *args, **kwargs)
        finally:
            _state.enabled = prev
        if record:
            # a leaf input itself (its .grad is accumulated); a non-leaf one as an _Edge,
            # its place in the graph now, so that a later in-place op on it (which gives
            # the tensor a new grad_fn) does not change what this op's backward reaches
            inputs = tuple((a if a.grad_fn is None else _Edge(a)) if n else None
                           for a, n in zip(args, needs))
            node = Node(cls, ctx, inputs)
            k = 0  # floating-point outputs are numbered: output k gets gradient k
            for o in out if isinstance(out, tuple) else (out,):
                if o.dtype.is_floating_point:
                    o.requires_grad = True
                    o.grad_fn = node
                    o._output_nr = k
                    k += 1
            node.n_outputs = max(k, 1)
        return out
# --8<-- [end:function]


# --8<-- [start:toposort]
def toposort(root: Node) -> list[Node]:
    """Nodes reachable from ``root``, each after every node that uses it.

    Depth-first search with an explicit stack (a GPT's graph is deep enough to
    overflow Python's recursion limit); a node is emitted once all of its
    inputs' nodes have been emitted, then the list is reversed.
    """
    order, seen = [], set()
    stack = [(root, False)]
    while stack:
        node, done = stack.pop()
        if done:
            order.append(node)
            continue
        if id(node) in seen:
            continue
        seen.add(id(node))
        stack.append((node, True))
        for t in node.inputs:
            if t is not None and t.grad_fn is not None and id(t.grad_fn) not in seen:
                stack.append((t.grad_fn, False))
    return order[::-1]
# --8<-- [end:toposort]


# --8<-- [start:backward]
def backward(tensor, gradient=None, retain_graph: bool = False) -> None:
    """Accumulate d(tensor)/d(leaf) into every leaf's ``.grad``."""
    from . import creation
    from .tensor import Tensor

    if not tensor.requires_grad:
        raise RuntimeError(
            "element 0 of tensors does not require grad and does not have a grad_fn"
        )
    if gradient is None:
        if tensor.numel() != 1:
            raise RuntimeError(
                f"grad can be implicitly created only for scalar outputs; "
                f"got a tensor of shape {tuple(tensor.shape)}: pass backward(gradient=...)"
            )
        gradient = creation.ones_like(tensor)
    elif not isinstance(gradient, Tensor):
        gradient = creation.tensor(gradient, dtype=tensor.dtype, device=tensor.device)
    if tuple(gradient.shape) != tuple(tensor.shape):
        raise RuntimeError(
            f"gradient has shape {tuple(gradient.shape)} but the tensor has shape {tuple(tensor.shape)}"
        )
    if tensor.grad_fn is None:  # a leaf: d(leaf)/d(leaf) = 1
        _accumulate(tensor, gradient)
        return

    grads = {}  # node -> d(output)/d(node's output); a list for a node with several outputs
    _add_grad(grads, tensor, gradient)
    with no_grad():
        for node in toposort(tensor.grad_fn):
            if node.freed:
                raise RuntimeError(
                    "Trying to backward through the graph a second time (or directly access "
                    "saved tensors after they have already been freed). Specify "
                    "retain_graph=True if you need to backward through the graph a second time."
                )
            g = grads.pop(id(node), None)
            if g is None:
                continue
            if node.n_outputs > 1:             # backward gets one gradient per output
                g = tuple(g)
            if node.retained is not None:      # retain_grad(): an interior tensor keeps its .grad
                _retain(node, g)
            vs = node.ctx._versions            # a saved tensor written to since: refuse
            if vs:
                for t, v in zip(node.ctx.saved_tensors, vs):
                    if v is not None and t._vc[0] != v:
                        _check_versions(node)
            in_grads = node.fn.backward(node.ctx, g)
            if not isinstance(in_grads, tuple):
                in_grads = (in_grads,)
            for t, gi in zip(node.inputs, in_grads):
                if t is None or gi is None:
                    continue
                if t.grad_fn is None:          # a leaf: accumulate into .grad
                    _accumulate(t, gi)
                else:                          # an interior node: sum its uses
                    _add_grad(grads, t, gi)
            if not retain_graph:
                node.ctx = None
                node.freed = True


def _add_grad(grads, t, g) -> None:
    """Add g to the gradient waiting for ``t.grad_fn`` (into slot ``t._output_nr``
    when that node has several outputs, e.g. the pieces of a ``split``)."""
    node, k = t.grad_fn, id(t.grad_fn)
    if node.n_outputs == 1:
        grads[k] = g if k not in grads else grads[k] + g
        return
    slots = grads.setdefault(k, [None] * node.n_outputs)
    i = t._output_nr
    slots[i] = g if slots[i] is None else slots[i] + g


def _retain(node, g) -> None:
    """Give each output of ``node`` that called retain_grad() its gradient."""
    for i, ref in node.retained.items():
        kept = ref()
        gi = g[i] if node.n_outputs > 1 else g
        if kept is not None and gi is not None:
            kept.grad = gi.clone() if kept.grad is None else kept.grad + gi


def _accumulate(leaf, g) -> None:
    if tuple(g.shape) != tuple(leaf.shape):
        raise RuntimeError(
            f"internal error: gradient of shape {tuple(g.shape)} for a leaf of shape {tuple(leaf.shape)}"
        )
    if g.dtype is not leaf.dtype:
        g = g.to(leaf.dtype)
    if leaf.grad is None:
        leaf.grad = g.contiguous() if g._storage is not leaf._storage else g.clone()
    else:
        leaf.grad.add_(g)
# --8<-- [end:backward]


_engine_backward = backward  # the engine above: one tensor and its gradient


class _Roots(Function):
    """Several tensors as one root of the graph: a scalar whose backward hands each
    tensor its own gradient, so that one pass of the engine serves them all (a node
    that two of them share is walked once, after both have added to its gradient)."""

    @staticmethod
    def forward(ctx, grads, *tensors):
        from .creation import zeros

        ctx.grads = grads
        return zeros(())

    @staticmethod
    def backward(ctx, g):
        return (None, *ctx.grads)


def backward(tensors, grad_tensors=None, retain_graph=None, create_graph: bool = False,
             grad_variables=None, inputs=None) -> None:  # noqa: F811  (torch's entry point)
    """``torch.autograd.backward``: accumulate the gradients of ``tensors`` (one tensor or
    a sequence), weighted by ``grad_tensors``, into the leaves' ``.grad``, or only into
    ``inputs`` (a tensor, a sequence or a dict of them) when given. ``retain_graph``
    defaults to ``create_graph``; sitp has no higher-order gradients, so
    ``create_graph=True`` raises NotImplementedError.
    """
    import warnings

    from . import creation
    from .tensor import Tensor

    if create_graph:
        raise NotImplementedError("backward(create_graph=True): sitp has no higher-order gradients")
    if grad_variables is not None:
        warnings.warn("`grad_variables` is deprecated. Use `grad_tensors` instead.",
                      FutureWarning, stacklevel=2)
        if grad_tensors is not None:
            raise RuntimeError("`grad_tensors` and `grad_variables` (deprecated) arguments both "
                               "passed to `backward()`. Please only use `grad_tensors`.")
        grad_tensors = grad_variables
    retain_graph = bool(create_graph if retain_graph is None else retain_graph)
    tensors = (tensors,) if isinstance(tensors, Tensor) else tuple(tensors)
    if grad_tensors is None:
        grad_tensors = (None,) * len(tensors)
    elif isinstance(grad_tensors, Tensor):
        grad_tensors = (grad_tensors,)
    else:
        grad_tensors = tuple(grad_tensors)
    if len(grad_tensors) != len(tensors):
        raise RuntimeError(f"backward(): got {len(tensors)} tensors and "
                           f"{len(grad_tensors)} gradients")
    if inputs is not None:
        inputs = (inputs,) if isinstance(inputs, Tensor) else tuple(
            inputs.values() if isinstance(inputs, dict) else inputs)
        if not inputs:
            raise RuntimeError("`inputs` argument to `backward()` cannot be empty.")
    if len(tensors) == 1 and inputs is None:
        return _engine_backward(tensors[0], grad_tensors[0], retain_graph)

    grads = []
    for i, (t, g) in enumerate(zip(tensors, grad_tensors)):
        if not t.requires_grad:
            raise RuntimeError(
                f"element {i} of tensors does not require grad and does not have a grad_fn")
        if g is None:
            if t.numel() != 1:
                raise RuntimeError("grad can be implicitly created only for scalar outputs")
            g = creation.ones_like(t)
        elif not isinstance(g, Tensor):
            g = creation.tensor(g, dtype=t.dtype, device=t.device)
        if tuple(g.shape) != tuple(t.shape):
            raise RuntimeError(f"Mismatch in shape: grad_output[{i}] has a shape of "
                               f"{tuple(g.shape)} and output[{i}] has a shape of {tuple(t.shape)}.")
        grads.append(g)
    with enable_grad():
        root = _Roots.apply(tuple(grads), *tensors)
    if inputs is None:
        return _engine_backward(root, None, retain_graph)
    found = grad(root, inputs, retain_graph=retain_graph, allow_unused=True)
    for t, g in zip(inputs, found):
        if g is None:
            continue
        if t.grad_fn is None:
            _accumulate(t, g)
        else:  # an interior input keeps its gradient, as with retain_grad()
            t.grad = g if t.grad is None else t.grad + g


def grad(outputs, inputs, grad_outputs=None, retain_graph=None, create_graph: bool = False,
         only_inputs: bool = True, allow_unused=None, is_grads_batched: bool = False,
         materialize_grads: bool = False):
    """Gradients of ``outputs`` with respect to ``inputs``, returned (not accumulated).

    A subset of ``torch.autograd.grad``: one output tensor; ``create_graph`` and
    ``is_grads_batched`` raise NotImplementedError. An input the output does not
    depend on raises, as in torch, unless ``allow_unused`` (its gradient is None) or
    ``materialize_grads`` (zeros). The inputs' ``.grad`` fields are left as they were.
    """
    from .tensor import Tensor

    if create_graph:
        raise NotImplementedError("grad(create_graph=True): sitp has no higher-order gradients")
    if is_grads_batched:
        raise NotImplementedError("grad(is_grads_batched=True) is not implemented in sitp")
    if allow_unused is None:
        allow_unused = materialize_grads
    if materialize_grads and not allow_unused:
        raise ValueError("Expected allow_unused to be True or not passed when "
                         "materialize_grads=True, but got: allow_unused=False.")
    if isinstance(outputs, (list, tuple)):
        if len(outputs) != 1:
            raise NotImplementedError("grad(): sitp takes one output tensor")
        outputs = outputs[0]
    if isinstance(grad_outputs, (list, tuple)) and len(grad_outputs) == 1:
        grad_outputs = grad_outputs[0]
    retain_graph = bool(retain_graph)

    import weakref

    single = isinstance(inputs, Tensor)
    inputs = (inputs,) if single else tuple(inputs)
    # as torch, write no .grad anywhere: remember every leaf's, put it back afterwards
    others = {}
    if getattr(outputs, "grad_fn", None) is not None:
        for node in toposort(outputs.grad_fn):
            for t in node.inputs:
                if t is not None and t.grad_fn is None:
                    others[id(t)] = t
    others.update((id(t), t) for t in inputs)
    saved = {k: t.grad for k, t in others.items()}
    retained = {}  # an interior input keeps its gradient the way retain_grad() does
    for t in inputs:
        if t.grad_fn is not None:
            node = t.grad_fn
            if id(node) not in retained:
                retained[id(node)] = (node, node.retained)
                node.retained = dict(node.retained or {})
            node.retained[t._output_nr] = weakref.ref(t)
    for t in others.values():
        t.grad = None
    try:
        _engine_backward(outputs, grad_outputs, retain_graph=retain_graph)
        result = tuple(t.grad for t in inputs)
        if not allow_unused and any(g is None for g in result):
            raise RuntimeError(
                "One of the differentiated Tensors appears to not have been used in the graph. "
                "Set allow_unused=True if this is the desired behavior.")
        if materialize_grads:
            from .creation import zeros_like

            result = tuple(zeros_like(t) if g is None else g for t, g in zip(inputs, result))
    finally:
        for node, r in retained.values():
            node.retained = r
        for k, t in others.items():
            t.grad = saved[k]
    return result[0] if single else result


def gradcheck(*args, **kwargs):
    """``sitp.gradcheck.gradcheck``: the engine's gradients against central differences."""
    from .gradcheck import gradcheck as _gradcheck

    return _gradcheck(*args, **kwargs)

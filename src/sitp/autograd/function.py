"""Function, Context and Node: how one differentiable op records itself (chapter 4.1).

Every differentiable op is a :class:`Function` with a ``forward`` and a ``backward`` side
by side (the table of local derivatives is ``sitp/autograd/derivatives.py``). Calling
``Op.apply(...)`` runs ``forward`` and, when gradients are wanted, records a :class:`Node`
in the output's ``grad_fn``: the op's backward, what it saved, and its inputs' nodes.
"""

from __future__ import annotations

import sys
from operator import itemgetter

from sitp._tensor.tensor import Tensor
from sitp.autograd.grad_mode import _state, is_grad_enabled


# --8<-- [start:function]
# --8<-- [start:context]
class Context:
    """What a forward pass leaves for its backward pass.

    ``save_for_backward`` also notes each saved tensor's version (the count of
    in-place writes to its storage, see ``Tensor._version``); ``backward``
    refuses to use a saved tensor that was written to since, as PyTorch does,
    rather than compute a gradient from the new values.
    """

    __slots__ = ("needs_input_grad", "__dict__")
    saved_tensors = ()  # until save_for_backward (class defaults: no __init__ to run per op)
    _versions = None

    def save_for_backward(self, *tensors):
        self.saved_tensors = tensors
        self._versions = [None if t is None else t._vc[0] for t in tensors]

    def _unchecked(self, *positions):
        """Saved tensors at ``positions`` are not read by this backward (the gradient
        that would read them is not wanted): writing to them is allowed, as in torch."""
        v = self._versions
        for i in positions:
            v[i] = None


# --8<-- [end:context]


def _check_versions(node) -> None:
    """Raise, as torch does, if a tensor saved for ``node``'s backward was modified in place."""
    ctx = node.ctx
    for i, (t, v) in enumerate(zip(ctx.saved_tensors, ctx._versions)):
        if v is not None and t._vc[0] != v:
            made_by = (
                f", which is output {t._output_nr} of {t.grad_fn.name()},"
                if t.grad_fn is not None
                else ""
            )
            raise RuntimeError(
                "one of the variables needed for gradient computation has been modified by an "
                f"inplace operation: [{t.dtype} tensor of shape {list(t.shape)}]{made_by} saved "
                f"for {node.name()} (saved tensor {i}), is at version {t._vc[0]}; expected "
                f"version {v} instead. Hint: look for an in-place op (add_, mul_, copy_, x[...] = "
                "..., an optimizer step) on it or on a view of it between the forward pass and "
                "backward()."
            )


# Argument types that never require grad (an op's name, its dims, a Python number):
# Function.apply answers them without looking for a requires_grad attribute.
_PLAIN = frozenset({str, int, float, bool, tuple, list, slice, type(None)})


# --8<-- [start:function_record]
class Node:
    """One op in the recorded graph (what PyTorch shows as ``grad_fn``)."""

    __slots__ = ("fn", "ctx", "inputs", "n_outputs", "freed", "retained")

    def __init__(self, fn, ctx, inputs):
        self.fn = fn  # the Function subclass
        self.ctx = ctx  # its Context
        self.inputs = inputs  # the input tensors that require grad (None otherwise)
        self.n_outputs = 1  # differentiable outputs; backward gets a tuple when > 1
        self.freed = False
        self.retained = None  # {output number: weak reference} for outputs that retain_grad()

    def name(self) -> str:
        op = getattr(self.ctx, "op", None) if self.ctx is not None else None
        base = op.title().replace("_", "") if isinstance(op, str) else self.fn.__name__
        return f"{base}Backward"

    def __repr__(self) -> str:
        return f"<{self.name()}>"


class _Edge(tuple):
    """A non-leaf input of a recorded op: the grad_fn and output number it had then.

    ``_Edge((grad_fn, output_nr))``: a pair made by ``tuple``'s own constructor (no
    ``__init__`` in Python to run per recorded input), read by name as a tensor is
    (``.grad_fn``, ``._output_nr``).
    """

    __slots__ = ()
    requires_grad = True
    grad_fn = property(itemgetter(0))
    _output_nr = property(itemgetter(1))


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
        # which arguments are tensors that require grad (a Python number, a string or a
        # tuple of dims cannot: they are answered without a failed attribute lookup)
        needs = ctx.needs_input_grad = tuple(
            [
                a.requires_grad is True
                if isinstance(a, Tensor)
                else a.__class__ not in _PLAIN and getattr(a, "requires_grad", False) is True
                for a in args
            ]
        )
        if not _state.enabled:  # recording is off: the forward cannot record
            return cls.forward(ctx, *args, **kwargs)
        # The forward pass never records: it may use other ops freely.
        _state.enabled = False
        try:
            out = cls.forward(ctx, *args, **kwargs)
        finally:
            _state.enabled = True
        if True not in needs:
            return out
        # a leaf input itself (its .grad is accumulated); a non-leaf one as an _Edge,
        # its place in the graph now, so that a later in-place op on it (which gives
        # the tensor a new grad_fn) does not change what this op's backward reaches
        node = Node(
            cls,
            ctx,
            tuple(
                [
                    (a if a.grad_fn is None else _Edge((a.grad_fn, a._output_nr))) if n else None
                    for a, n in zip(args, needs)
                ]
            ),
        )
        if isinstance(out, tuple):
            k = 0  # floating-point outputs are numbered: output k gets gradient k
            for o in out:
                if o.dtype.is_floating_point:
                    o.requires_grad = True
                    o.grad_fn = node
                    o._output_nr = k
                    k += 1
            node.n_outputs = max(k, 1)
        elif out.dtype.is_floating_point:  # one output: output 0 (n_outputs is 1)
            out.requires_grad = True
            out.grad_fn = node
            out._output_nr = 0
        return out


# --8<-- [end:function_record]
# --8<-- [end:function]


def check_inplace(t, *sources) -> bool:
    """Whether an in-place op on ``t`` must be recorded in the autograd graph, as torch
    records it: grad mode is on and ``t`` or a source requires grad. Refuses what torch
    refuses (a leaf that requires grad) and what sitp cannot record (see below)."""
    if not is_grad_enabled():
        return False
    if t.requires_grad:
        if t.grad_fn is None:
            raise RuntimeError(
                "a leaf Variable that requires grad is being used in an in-place operation."
            )
    elif not any(isinstance(v, Tensor) and v.requires_grad for v in sources):
        return False
    # t's version counter is held by t only, unless another live tensor views the same
    # storage (a view, its base, a detach()). torch rewrites the graphs of those views
    # after an in-place op; sitp does not, so it refuses rather than give them stale gradients.
    if sys.getrefcount(t._vc) > 2:
        raise RuntimeError(
            f"sitp records an in-place operation on a tensor in the autograd graph (shape "
            f"{tuple(t.shape)}) only when no other tensor views its storage, and this one is "
            "a view or has views; build the result out of place (sitp.cat, sitp.stack, "
            "sitp.where, x = x + y) or detach() it"
        )
    return True


def refuse_indexed_write(t) -> None:
    raise RuntimeError(
        f"sitp does not record an indexed in-place write (x[i] = v, index_put_) on a tensor in "
        f"the autograd graph (shape {tuple(t.shape)}); build the result out of place "
        "(sitp.where, sitp.cat, sitp.stack) or detach() it"
    )

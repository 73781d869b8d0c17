"""Activation recomputation: ``checkpoint`` and ``checkpoint_sequential``, as
``torch.utils.checkpoint`` (chapter 7.4).

Backward needs what forward computed on the way: the input of every matrix product, the
mask of every dropout, the normalised activations of every layer norm. Autograd keeps
them in the graph (each node's saved tensors) from the forward pass until backward has
used them, and for a deep model that is most of training's memory. ``checkpoint(f, x)``
runs ``f`` without recording it, keeping only its inputs; when backward reaches it, it
runs ``f`` again, this time recording, and backpropagates through that fresh graph. The
price is one more forward of ``f``; the saving is every tensor ``f`` would have saved.

The random draws repeat: the default generator's state is saved before the first run
and restored for the second (``preserve_rng_state=True``, torch's default), so a dropout
inside ``f`` draws the same mask both times, and the gradients are those of the forward
that produced the loss.

Both of torch's flavours (``use_reentrant=True`` and ``False``) run this one
implementation: a :class:`~sitp.autograd.function.Function` whose backward recomputes
and calls the engine again (torch's reentrant design). The parameters ``f`` uses receive
their gradients inside that inner backward, as in torch. Keyword arguments are passed to
``f``; tensors among them get no gradient (pass them positionally).

:func:`saved_tensor_bytes` measures what a graph keeps: sitp's instrument, torch has none.
"""

from __future__ import annotations

from sitp import random as _random
from sitp._tensor import creation
from sitp._tensor.tensor import Tensor
from sitp.autograd import engine
from sitp.autograd.function import Function
from sitp.autograd.grad_mode import enable_grad, no_grad

__all__ = ["checkpoint", "checkpoint_sequential", "saved_tensor_bytes"]


# --8<-- [start:checkpoint]
class _Recompute(Function):
    """Run ``run(*args)`` unrecorded; in backward, run it again recorded and backpropagate."""

    @staticmethod
    def forward(ctx, run, preserve_rng_state, _anchor, *args):
        ctx.run = run
        ctx.rng = _random.get_rng_state() if preserve_rng_state else None
        ctx.save_for_backward(*(a for a in args if isinstance(a, Tensor)))  # inputs only
        ctx.args = [None if isinstance(a, Tensor) else a for a in args]
        ctx.grads_of = [isinstance(a, Tensor) and a.requires_grad for a in args]
        out = run(*args)  # Function.apply runs forward with recording off
        ctx.several = isinstance(out, tuple)
        return out

    @staticmethod
    def backward(ctx, *grads):
        grads = grads[0] if len(grads) == 1 and isinstance(grads[0], tuple) else grads
        saved = iter(ctx.saved_tensors)
        args = []
        for a, needs in zip(ctx.args, ctx.grads_of):
            if a is None:  # a tensor input: a fresh leaf, detached from the outer graph
                a = next(saved).detach()
                a.requires_grad = needs
            args.append(a)
        now = _random.get_rng_state()
        if ctx.rng is not None:
            _random.set_rng_state(ctx.rng)  # the same dropout masks as the first run
        try:
            with enable_grad():
                out = ctx.run(*args)
        finally:
            _random.set_rng_state(now)
        outs = out if isinstance(out, tuple) else (out,)
        pairs = [
            (o, g)
            for o, g in zip(outs, grads)
            if isinstance(o, Tensor) and o.requires_grad and g is not None
        ]
        if pairs:  # the inner backward: parameters accumulate their .grad here
            engine.backward([o for o, _ in pairs], [g for _, g in pairs])
        with no_grad():
            in_grads = tuple(a.grad if n else None for a, n in zip(args, ctx.grads_of))
        return (None, None, None, *in_grads)


def checkpoint(
    function,
    *args,
    use_reentrant=None,
    context_fn=None,
    determinism_check: str = "default",
    debug: bool = False,
    early_stop: bool = True,
    preserve_rng_state: bool = True,
    **kwargs,
):
    """``function(*args, **kwargs)``, keeping only its inputs for backward and
    recomputing the rest when backward reaches it (``torch.utils.checkpoint.checkpoint``).

    Args:
        function: what to run; returns a tensor or a tuple of them.
        *args: its positional arguments; tensors among them receive gradients.
        use_reentrant: accepted (True, False or None); both run the same recomputation.
        preserve_rng_state: restore the random state for the recomputation, so that
            dropout draws the same masks (default True, as torch).
        context_fn, determinism_check, debug, early_stop: torch's options; only their
            defaults are implemented.
        **kwargs: passed to ``function``.

    Returns:
        What ``function`` returns.
    """
    for name, value, default in (
        ("context_fn", context_fn, None),
        ("determinism_check", determinism_check, "default"),
        ("debug", debug, False),
        ("early_stop", early_stop, True),
    ):
        if value != default:
            raise NotImplementedError(f"checkpoint({name}={value!r}) is not implemented in sitp")
    if use_reentrant not in (None, True, False):
        raise TypeError(f"use_reentrant must be a bool or None (got {use_reentrant!r})")
    if not callable(function):
        raise TypeError(f"checkpoint: function must be callable (got {type(function).__name__})")

    def run(*a):
        return function(*a, **kwargs)

    # an anchor that requires a gradient, so the node is recorded even when no input
    # needs one (the parameters inside `function` do)
    anchor = creation.empty(0).requires_grad_(True)
    return _Recompute.apply(run, preserve_rng_state, anchor, *args)


# --8<-- [end:checkpoint]


def checkpoint_sequential(functions, segments: int, input, use_reentrant=None, **kwargs):
    """Run a ``Sequential`` (or a list of modules) as ``segments`` checkpointed pieces; the
    last piece runs normally, as in torch (``torch.utils.checkpoint.checkpoint_sequential``).
    Only the pieces' inputs are kept for backward."""
    if hasattr(functions, "children") and callable(functions.children):
        functions = list(functions.children())
    functions = list(functions)
    if not isinstance(segments, int) or segments < 1:
        raise ValueError(f"segments must be a positive int (got {segments!r})")
    size = len(functions) // segments

    def piece(start, end):
        def forward(x):
            for f in functions[start : end + 1]:
                x = f(x)
            return x

        return forward

    end = -1
    for start in range(0, size * (segments - 1), size):
        end = start + size - 1
        input = checkpoint(piece(start, end), input, use_reentrant=use_reentrant, **kwargs)
    return piece(end + 1, len(functions) - 1)(input)


def saved_tensor_bytes(output) -> int:
    """The bytes of activations that backward from ``output`` would read: every distinct
    storage a node of its graph keeps (saved tensors and tensors held on the node's
    context), except the leaves' own (parameters and inputs)."""
    if output.grad_fn is None:
        return 0
    order = engine.toposort(output.grad_fn)
    leaves = {
        id(t._storage)
        for node in order
        for t in node.inputs
        if isinstance(t, Tensor) and t.grad_fn is None
    }
    kept = {}
    for node in order:
        ctx = node.ctx
        if ctx is None:
            continue
        held = list(ctx.saved_tensors)
        for v in vars(ctx).values():
            held.extend(v if isinstance(v, (tuple, list)) else (v,))
        for t in held:
            if isinstance(t, Tensor) and id(t._storage) not in leaves:
                kept[id(t._storage)] = t._storage.nbytes
    return sum(kept.values())

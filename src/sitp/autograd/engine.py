"""Reverse-mode automatic differentiation: the engine (chapter 4.1).

Each op recorded a :class:`~sitp.autograd.function.Node` in its output's ``grad_fn``
(``sitp/autograd/function.py``). ``backward()`` sorts those nodes topologically and walks
them from the output to the leaves, applying each local derivative once (the chain rule)
and accumulating into the leaves' ``.grad``.
"""

from __future__ import annotations

import warnings
import weakref

from sitp._tensor import creation
from sitp._tensor.tensor import Tensor
from sitp.autograd.function import Function, Node, _check_versions
from sitp.autograd.grad_mode import enable_grad, no_grad


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


# --8<-- [start:hooks]
_post_accumulate_hooks = {}  # id(leaf) -> (weak reference to the leaf, [hook, ...])
_callbacks = None  # during backward(): what queue_callback() asked to run at its end


class RemovableHandle:
    """What registering a hook returns: ``remove()`` unregisters it (as torch's)."""

    def __init__(self, hooks: list, hook) -> None:
        self._hooks, self._hook = hooks, hook

    def remove(self) -> None:
        if self._hook in self._hooks:
            self._hooks.remove(self._hook)


def register_post_accumulate_grad_hook(leaf: Tensor, hook) -> RemovableHandle:
    """Call ``hook(leaf)`` in every ``backward()`` once the leaf's ``.grad`` holds all of
    that pass's gradient (torch's ``Tensor.register_post_accumulate_grad_hook``).

    DistributedDataParallel (chapter 7) starts reducing a parameter's gradient here,
    while the rest of backward runs. ``grad()`` does not call these hooks, as in torch.
    """
    if leaf.grad_fn is not None:
        raise RuntimeError("post accumulate grad hooks cannot be registered on non-leaf tensors")
    if not leaf.requires_grad:
        raise RuntimeError("cannot register a hook on a tensor that doesn't require gradient")
    key = id(leaf)
    if key not in _post_accumulate_hooks:
        ref = weakref.ref(leaf, lambda _, key=key: _post_accumulate_hooks.pop(key, None))
        _post_accumulate_hooks[key] = (ref, [])
    hooks = _post_accumulate_hooks[key][1]
    hooks.append(hook)
    return RemovableHandle(hooks, hook)


def queue_callback(callback) -> None:
    """Run ``callback()`` when the current ``backward()`` ends, after every leaf's hooks
    (torch's ``Variable._execution_engine.queue_callback``)."""
    if _callbacks is None:
        raise RuntimeError("Final callbacks can only be installed during backward pass.")
    _callbacks.append(callback)


def _hooked_uses(order) -> dict:
    """For each leaf with post-accumulate hooks: how many edges of the graph reach it."""
    uses = {}
    for node in order:
        for t in node.inputs:
            if t is not None and t.grad_fn is None and id(t) in _post_accumulate_hooks:
                uses[id(t)] = uses.get(id(t), 0) + 1
    return uses


def _release(node, uses) -> None:
    """``node`` has passed its gradients on: a hooked leaf whose last edge this was is
    complete, and its hooks run."""
    for t in node.inputs:
        if t is not None and id(t) in uses:
            uses[id(t)] -= 1
            if uses[id(t)] == 0:
                del uses[id(t)]
                _run_hooks(t)


def _run_hooks(leaf) -> None:
    for hook in list(_post_accumulate_hooks[id(leaf)][1]):
        hook(leaf)


# --8<-- [end:hooks]


# --8<-- [start:backward]
def backward(tensor, gradient=None, retain_graph: bool = False, hooks: bool = True) -> None:
    """Accumulate d(tensor)/d(leaf) into every leaf's ``.grad``; with ``hooks``, run each
    leaf's post-accumulate hooks once its gradient is complete."""

    if not tensor.requires_grad:
        raise RuntimeError("element 0 of tensors does not require grad and does not have a grad_fn")
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
        _accumulate(tensor, gradient, _claim({}, gradient))
        if hooks and id(tensor) in _post_accumulate_hooks:
            with no_grad():
                _run_hooks(tensor)
        return

    # --8<-- [start:backward_loop]
    grads = {}  # node -> d(output)/d(node's output); a list for a node with several outputs
    _add_grad(grads, tensor, gradient)
    claimed = _claim({}, gradient)  # memory that a leaf may not take (_accumulate)
    order = toposort(tensor.grad_fn)
    uses = _hooked_uses(order) if hooks and _post_accumulate_hooks else None
    with no_grad():
        for node in order:
            if node.freed:
                raise RuntimeError(
                    "Trying to backward through the graph a second time (or directly access "
                    "saved tensors after they have already been freed). Specify "
                    "retain_graph=True if you need to backward through the graph a second time."
                )
            g = grads.pop(id(node), None)
            if g is None:
                if uses:
                    _release(node, uses)
                continue
            if node.n_outputs > 1:  # backward gets one gradient per output
                g = tuple(g)
            if node.retained is not None:  # retain_grad(): an interior tensor keeps its .grad
                _retain(node, g)
            vs = node.ctx._versions  # a saved tensor written to since: refuse
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
                fn = t.grad_fn
                if fn is None:  # a leaf: accumulate into .grad
                    _accumulate(t, gi, claimed)
                elif fn.n_outputs == 1:  # an interior node: sum its uses (_add_grad, inlined)
                    k = id(fn)
                    grads[k] = gi if k not in grads else grads[k] + gi
                else:
                    _add_grad(grads, t, gi)
            if uses:  # a hooked leaf whose last gradient this was runs its hooks
                _release(node, uses)
            if not retain_graph:
                node.ctx = None
                node.freed = True
    # --8<-- [end:backward_loop]


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


def _memory(t):
    """The array that owns ``t``'s memory (numpy's ``base`` names the owner of a view)."""
    s = t._storage
    base = getattr(s, "base", None)
    return s if base is None else base


def _claim(claimed: dict, t) -> dict:
    """Note ``t``'s memory in ``claimed`` (see :func:`_accumulate`)."""
    m = _memory(t)
    claimed[id(m)] = m
    return claimed


def _accumulate(leaf, g, claimed=None) -> None:
    """Add ``g`` into ``leaf.grad``; a leaf with none takes ``g`` itself when no one else
    holds its memory, as torch's AccumulateGrad steals a gradient nobody shares.

    ``claimed`` (one pass of the engine) maps ``id`` to the memory that this pass has
    handed to a leaf, or that its caller holds (the ``gradient`` passed to backward); it
    holds the arrays themselves, so that no id is reused for another array in the pass.
    A second leaf whose gradient is in that memory (``a + b`` gives both the same
    tensor; the pieces of a ``stack`` share one) gets a copy, and a leaf whose
    ``.grad`` is such memory adds out of place, since other nodes may still read it.
    Without ``claimed`` (a caller outside the engine) a new ``.grad`` is always a copy.
    """
    if g._shape != leaf._shape:
        raise RuntimeError(
            f"internal error: gradient of shape {tuple(g.shape)} for a leaf of shape {tuple(leaf.shape)}"
        )
    if g.dtype is not leaf.dtype:
        g = g.to(leaf.dtype)
    if leaf.grad is None:
        key = id(_memory(g))
        if claimed is None or key in claimed or g._storage is leaf._storage:
            leaf.grad = g.clone()
        else:
            leaf.grad = g.contiguous()
            if leaf.grad is g:
                _claim(claimed, g)
    elif claimed is not None and id(_memory(leaf.grad)) in claimed:
        leaf.grad = leaf.grad + g  # new memory, the leaf's own
    else:
        leaf.grad.add_(g)


# --8<-- [end:backward]


_walk = backward  # the engine above: one tensor and its gradient


def _engine_backward(tensor, gradient=None, retain_graph: bool = False) -> None:
    """The engine, then the callbacks that hooks queued during it (``queue_callback``):
    what ``Tensor.backward`` and ``torch.autograd.backward`` run."""
    global _callbacks
    outer, _callbacks = _callbacks, []
    try:
        _walk(tensor, gradient, retain_graph)
        while _callbacks:  # a callback may queue another
            _callbacks.pop(0)()
    finally:
        _callbacks = outer


class _Roots(Function):
    """Several tensors as one root of the graph: a scalar whose backward hands each
    tensor its own gradient, so that one pass of the engine serves them all (a node
    that two of them share is walked once, after both have added to its gradient)."""

    @staticmethod
    def forward(ctx, grads, *tensors):
        ctx.grads = grads
        return creation.zeros(())

    @staticmethod
    def backward(ctx, g):
        return (None, *ctx.grads)


def backward(
    tensors,
    grad_tensors=None,
    retain_graph=None,
    create_graph: bool = False,
    grad_variables=None,
    inputs=None,
) -> None:  # noqa: F811  (torch's entry point)
    """``torch.autograd.backward``: accumulate the gradients of ``tensors`` (one tensor or
    a sequence), weighted by ``grad_tensors``, into the leaves' ``.grad``, or only into
    ``inputs`` (a tensor, a sequence or a dict of them) when given. ``retain_graph``
    defaults to ``create_graph``; sitp has no higher-order gradients, so
    ``create_graph=True`` raises NotImplementedError.
    """

    if create_graph:
        raise NotImplementedError("backward(create_graph=True): sitp has no higher-order gradients")
    if grad_variables is not None:
        warnings.warn(
            "`grad_variables` is deprecated. Use `grad_tensors` instead.",
            FutureWarning,
            stacklevel=2,
        )
        if grad_tensors is not None:
            raise RuntimeError(
                "`grad_tensors` and `grad_variables` (deprecated) arguments both "
                "passed to `backward()`. Please only use `grad_tensors`."
            )
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
        raise RuntimeError(
            f"backward(): got {len(tensors)} tensors and {len(grad_tensors)} gradients"
        )
    if inputs is not None:
        inputs = (
            (inputs,)
            if isinstance(inputs, Tensor)
            else tuple(inputs.values() if isinstance(inputs, dict) else inputs)
        )
        if not inputs:
            raise RuntimeError("`inputs` argument to `backward()` cannot be empty.")
    if len(tensors) == 1 and inputs is None:
        return _engine_backward(tensors[0], grad_tensors[0], retain_graph)

    grads = []
    for i, (t, g) in enumerate(zip(tensors, grad_tensors)):
        if not t.requires_grad:
            raise RuntimeError(
                f"element {i} of tensors does not require grad and does not have a grad_fn"
            )
        if g is None:
            if t.numel() != 1:
                raise RuntimeError("grad can be implicitly created only for scalar outputs")
            g = creation.ones_like(t)
        elif not isinstance(g, Tensor):
            g = creation.tensor(g, dtype=t.dtype, device=t.device)
        if tuple(g.shape) != tuple(t.shape):
            raise RuntimeError(
                f"Mismatch in shape: grad_output[{i}] has a shape of "
                f"{tuple(g.shape)} and output[{i}] has a shape of {tuple(t.shape)}."
            )
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


def grad(
    outputs,
    inputs,
    grad_outputs=None,
    retain_graph=None,
    create_graph: bool = False,
    only_inputs: bool = True,
    allow_unused=None,
    is_grads_batched: bool = False,
    materialize_grads: bool = False,
):
    """Gradients of ``outputs`` with respect to ``inputs``, returned (not accumulated).

    A subset of ``torch.autograd.grad``: one output tensor; ``create_graph`` and
    ``is_grads_batched`` raise NotImplementedError. An input the output does not
    depend on raises, as in torch, unless ``allow_unused`` (its gradient is None) or
    ``materialize_grads`` (zeros). The inputs' ``.grad`` fields are left as they were.
    """

    if create_graph:
        raise NotImplementedError("grad(create_graph=True): sitp has no higher-order gradients")
    if is_grads_batched:
        raise NotImplementedError("grad(is_grads_batched=True) is not implemented in sitp")
    if allow_unused is None:
        allow_unused = materialize_grads
    if materialize_grads and not allow_unused:
        raise ValueError(
            "Expected allow_unused to be True or not passed when "
            "materialize_grads=True, but got: allow_unused=False."
        )
    if isinstance(outputs, (list, tuple)):
        if len(outputs) != 1:
            raise NotImplementedError("grad(): sitp takes one output tensor")
        outputs = outputs[0]
    if isinstance(grad_outputs, (list, tuple)) and len(grad_outputs) == 1:
        grad_outputs = grad_outputs[0]
    retain_graph = bool(retain_graph)

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
        _walk(outputs, grad_outputs, retain_graph=retain_graph, hooks=False)
        result = tuple(t.grad for t in inputs)
        if not allow_unused and any(g is None for g in result):
            raise RuntimeError(
                "One of the differentiated Tensors appears to not have been used in the graph. "
                "Set allow_unused=True if this is the desired behavior."
            )
        if materialize_grads:
            result = tuple(
                creation.zeros_like(t) if g is None else g for t, g in zip(inputs, result)
            )
    finally:
        for node, r in retained.values():
            node.retained = r
        for k, t in others.items():
            t.grad = saved[k]
    return result[0] if single else result

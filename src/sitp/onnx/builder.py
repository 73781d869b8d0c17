"""The ONNX graph under construction: names, initializers, sizes that vary, and views.

A captured graph (``sitp/compile/graph.py``) reads buffers through views: a :class:`Ref`
is a shape, strides and an offset into a flat buffer (a ``Value``). ONNX has tensors
and no strides, so every Value is kept here as one ONNX tensor of a *canonical shape*
(its producer's shape, laid out row-major), and a Ref becomes a short chain of ONNX
ops on it: Reshape to a shape whose axes match the view's strides, Slice, Transpose,
Unsqueeze, Expand (:meth:`Builder.view`). A write into a view (``assign``) is the
same chain run backwards: Transpose, Pad, and a Where that keeps the old entries
elsewhere (:meth:`Builder.write`).

Dynamic axes: the exporter captures the program once at the example sizes and once
more per dynamic axis with that axis one larger (``sitp/onnx/__init__.py``); the
graphs agree node for node, and each integer of a shape, a stride or an offset is a
tuple of its values in the traces. :meth:`Builder.dim` turns such a tuple into a
:class:`Dim`, a constant times a product of the dynamic sizes, and
:meth:`Builder.shape` builds the int64 tensor ONNX ops read their sizes from, out of
``Shape`` of the inputs. A size that is no such product (``T - 1`` when ``T`` varies)
is refused with an error.
"""

from __future__ import annotations

import math

import numpy as np

from sitp.compile.capture import view_of
from sitp.compile.graph import ArrRef, Ref, contiguous


class OnnxExporterError(RuntimeError):
    """A program that sitp.onnx cannot write as an ONNX model (as torch.onnx's error)."""


class Dim:
    """A size: ``coef`` times the product of the dynamic sizes named in ``syms``."""

    __slots__ = ("coef", "syms")

    def __init__(self, coef: int, syms=()):
        self.coef, self.syms = int(coef), tuple(sorted(syms))

    @property
    def static(self) -> bool:
        return not self.syms

    def __eq__(self, other):
        if isinstance(other, int):
            return self.static and self.coef == other
        return isinstance(other, Dim) and (self.coef, self.syms) == (other.coef, other.syms)

    def __hash__(self):
        return hash((self.coef, self.syms))

    def __repr__(self):
        return "*".join([str(self.coef)] * (self.coef != 1 or not self.syms) + list(self.syms))


class Builder:
    """Collects the nodes, initializers and value infos of one ONNX graph.

    Args:
        onnx: the ``onnx`` module (imported late by the caller).
        opset: the ONNX opset the graph targets.
        syms: the dynamic sizes as ``(name, base value, other value, input name, axis)``:
            trace 0 has every size at its base value, trace ``j + 1`` has size ``j`` at
            its other value.
    """

    def __init__(self, onnx, opset: int, syms=(), param_names=None):
        self.onnx, self.helper, self.opset = onnx, onnx.helper, opset
        self.syms = list(syms)
        self.param_names = dict(param_names or {})  # id(storage) -> the module's name for it
        self._used: set = set()
        self.nodes: list = []
        self.initializers: list = []
        self._n = 0
        self._consts: dict = {}  # cache key -> initializer name
        self._sym_tensors: dict = {}  # tuple of sym names -> 1-D int64 [1] tensor
        self.values: dict = {}  # Value id (trace 0) -> (ONNX name, canonical shapes per trace)
        self.views: dict = {}  # cache of views already built

    # ---------------------------------------------------------------- names and nodes
    def fresh(self, hint: str = "t") -> str:
        self._n += 1
        return f"{hint}_{self._n}"

    def _param_name(self, value):
        """The module's name of a parameter or buffer (``lm_head.weight``), once; None for
        other constants."""
        name = self.param_names.get(id(value.array))
        if name is None or name in self._used:
            return None
        self._used.add(name)
        return name

    def node(self, op_type: str, inputs, n_out: int = 1, name_hint=None, **attrs):
        """Adds one ONNX node; returns its output name (a list of them when ``n_out > 1``)."""
        outs = [self.fresh(name_hint or op_type.lower()) for _ in range(n_out)]
        self.nodes.append(
            self.helper.make_node(op_type, list(inputs), outs, name=f"n{len(self.nodes)}", **attrs)
        )
        return outs[0] if n_out == 1 else outs

    def const(self, array, hint: str = "c", name=None) -> str:
        """An initializer holding ``array`` (numpy), shared by equal small constants;
        ``name`` names it (a parameter's)."""
        a = np.asarray(array)
        if name is not None:
            self.initializers.append(self.onnx.numpy_helper.from_array(a, name))
            return name
        key = None
        if a.size <= 64:
            key = (a.dtype.str, a.shape, a.tobytes())
            if key in self._consts:
                return self._consts[key]
        name = self.fresh(hint)
        self.initializers.append(self.onnx.numpy_helper.from_array(a, name))
        if key is not None:
            self._consts[key] = name
        return name

    def ints(self, values) -> str:
        return self.const(np.asarray(list(values), np.int64))

    def elem_type(self, np_dtype) -> int:
        return self.helper.np_dtype_to_tensor_dtype(np.dtype(np_dtype))

    def cast(self, x: str, np_dtype) -> str:
        return self.node("Cast", [x], to=self.elem_type(np_dtype))

    def reduce(self, op_type: str, x: str, axes, keepdims: bool) -> str:
        """A Reduce* node over ``axes``: an input from opset 18 (13 for ReduceSum), an
        attribute before."""
        axes = [int(a) for a in axes]
        if op_type == "ReduceSum" or self.opset >= 18:
            return self.node(op_type, [x, self.ints(axes)], keepdims=int(keepdims))
        return self.node(op_type, [x], axes=axes, keepdims=int(keepdims))

    def prune(self, outputs) -> None:
        """Drops the nodes and initializers that no output depends on (a check the
        program made and did not read, a constant that a view replaced)."""
        need, kept = set(outputs), []
        for node in reversed(self.nodes):
            if any(o in need for o in node.output):
                kept.append(node)
                need.update(i for i in node.input if i)
        self.nodes = kept[::-1]
        self.initializers = [t for t in self.initializers if t.name in need]

    # ---------------------------------------------------------------- sizes
    def dim(self, values) -> Dim:
        """The :class:`Dim` whose value in trace ``i`` is ``values[i]``."""
        values = [int(v) for v in values]
        v0 = values[0]
        if all(v == v0 for v in values):
            return Dim(v0)
        syms, denom = [], 1
        for j, (name, base, other, _, _) in enumerate(self.syms):
            vj = values[j + 1]
            if vj == v0:
                continue
            if vj * base != v0 * other:
                raise OnnxExporterError(
                    f"sitp.onnx: a size ({v0} at {name}={base}, {vj} at {name}={other}) is "
                    f"not a multiple of the dynamic axis {name!r}; export it with static sizes"
                )
            syms.append(name)
            denom *= base
        if v0 % denom:
            raise OnnxExporterError(
                f"sitp.onnx: a size {v0} is not a whole multiple of the dynamic axes {syms}"
            )
        return Dim(v0 // denom, syms)

    def dims(self, per_trace) -> list:
        """Dims from one int sequence per trace (the sequences must have one length)."""
        n = {len(s) for s in per_trace}
        if len(n) != 1:
            raise OnnxExporterError("sitp.onnx: a tensor's rank changes with a dynamic axis")
        return [self.dim(vs) for vs in zip(*per_trace)]

    def _sym(self, names) -> str:
        key = tuple(names)
        if key not in self._sym_tensors:
            t = None
            for name in names:
                _, _, _, inp, axis = next(s for s in self.syms if s[0] == name)
                shape = self.node("Shape", [inp])
                d = self.node("Gather", [shape, self.ints([axis])], axis=0)
                t = d if t is None else self.node("Mul", [t, d])
            self._sym_tensors[key] = t
        return self._sym_tensors[key]

    def shape(self, dims) -> str:
        """A 1-D int64 tensor holding ``dims`` (an initializer when all are constants)."""
        if all(d.static for d in dims):
            return self.ints([d.coef for d in dims])
        parts, run = [], []
        for d in dims:
            if d.static:
                run.append(d.coef)
                continue
            if run:
                parts.append(self.ints(run))
                run = []
            t = self._sym(d.syms)
            parts.append(t if d.coef == 1 else self.node("Mul", [t, self.ints([d.coef])]))
        if run:
            parts.append(self.ints(run))
        return parts[0] if len(parts) == 1 else self.node("Concat", parts, axis=0)

    def scalar(self, value, np_dtype) -> str:
        return self.const(np.asarray(value, dtype=np_dtype))

    # ---------------------------------------------------------------- values
    def define(self, value, name: str, shapes) -> None:
        """Value ``value`` (of trace 0) is ONNX tensor ``name``, of ``shapes[i]`` in trace i."""
        self.values[value.id] = (name, [tuple(int(n) for n in s) for s in shapes])

    def bind(self, refs, name: str) -> None:
        """A node's result ``refs`` (one Ref per trace) is ONNX tensor ``name`` in the
        Ref's shape; its Value gets a canonical layout (a permuted result is transposed
        into the order of its strides)."""
        r0 = refs[0]
        if r0.value.id in self.values:  # the result is a Value the node read (a view)
            return
        plans = [_permuted_layout(r) for r in refs]
        if any(p is None for p in plans) or len({tuple(p) for p in plans}) != 1:
            raise OnnxExporterError(
                f"sitp.onnx: a result laid out as {r0.shape} with strides {r0.strides} "
                "has no ONNX layout"
            )
        perm = plans[0]
        if perm != list(range(len(perm))):
            name = self.node("Transpose", [name], perm=perm)
        self.define(r0.value, name, [tuple(r.shape[p] for p in perm) for r in refs])

    def value_tensor(self, value) -> tuple:
        """(ONNX name, canonical shapes) of ``value``; a constant becomes an initializer."""
        got = self.values.get(value.id)
        if got is not None:
            return got
        if value.kind in ("const", "literal", "scratch"):
            a = np.asarray(value.array).reshape(-1)
            if a.dtype == np.uint8 and value.np_dtype != np.uint8:
                a = a.view(value.np_dtype)
            name = self.const(a, "w", self._param_name(value))
            self.define(value, name, [(a.size,)] * (1 + len(self.syms)))
            return self.values[value.id]
        raise OnnxExporterError(f"sitp.onnx: the graph reads {value.name} before it is made")

    def ref(self, refs) -> str:
        """The ONNX tensor of view ``refs`` (one Ref per trace), in the Ref's shape."""
        r0 = refs[0]
        if isinstance(r0, ArrRef):
            return self._arr_ref(refs)
        key = tuple(r.key() for r in refs)
        if key in self.views:
            return self.views[key]
        v = r0.value
        if v.kind in ("const", "literal", "scratch"):
            self._same_constant(refs)
        if v.kind in ("const", "literal", "scratch") and v.id not in self.values:
            if r0.contiguous_whole() and math.prod(r0.shape) == v.size:
                if all(r.key()[1:] == r0.key()[1:] for r in refs):  # a parameter, as it is
                    a = np.asarray(v.array).reshape(r0.shape)
                    name = self.const(a, "w", self._param_name(v))
                    self.views[key] = name
                    return name
        name, canon = self.value_tensor(v)
        out = self.view(name, canon, refs)
        self.views[key] = out
        return out

    def _same_constant(self, refs) -> None:
        """A constant must be the same in every trace: a Python number that follows a
        dynamic size (``x * x.shape[0]``) would be baked in at the example's value."""
        a0 = refs[0].value.array
        for r in refs[1:]:
            a = r.value.array
            if a is not a0 and (a.shape != a0.shape or not np.array_equal(a, a0)):
                raise OnnxExporterError(
                    "sitp.onnx: a constant that changes with a dynamic axis (a Python number "
                    "computed from a size?); export with static sizes"
                )

    def _arr_ref(self, refs) -> str:
        """A raw array argument (an index array that Python built from constants): an
        initializer, or, when it changes with a dynamic axis, a Range (positions 0..T-1)."""
        if any(r.value.kind not in ("const", "literal", "scratch") for r in refs):
            raise OnnxExporterError("sitp.onnx: a raw array argument computed in the program")
        arrays = [np.ascontiguousarray(view_of(r.value.array, r)) for r in refs]
        if all(a.shape == arrays[0].shape and np.array_equal(a, arrays[0]) for a in arrays):
            return self.const(arrays[0])
        ranges = [_as_range(a) for a in arrays]
        if any(r is None for r in ranges) or len({r[:2] for r in ranges}) != 1:
            raise OnnxExporterError(
                "sitp.onnx: a constant index array that changes with a dynamic axis and is "
                "not a range of positions"
            )
        start, step, _ = ranges[0]
        n = self.dim([r[2] for r in ranges])
        count = self.node("Squeeze", [self.shape([n]), self.ints([0])])
        end = self.node(
            "Add",
            [self.node("Mul", [count, self.scalar(step, np.int64)]), self.scalar(start, np.int64)],
        )
        rng = self.node("Range", [self.scalar(start, np.int64), end, self.scalar(step, np.int64)])
        return self.node("Unsqueeze", [rng, self.ints([0])])  # one row of index tuples

    # ---------------------------------------------------------------- views
    def view(self, name: str, canon, refs) -> str:
        """ONNX ops that take tensor ``name`` (of canonical ``canon[i]`` per trace) to the
        view ``refs[i]``: Reshape, Slice, Squeeze, Transpose, Unsqueeze, Expand."""
        r0 = refs[0]
        if all(r.contiguous_whole() for r in refs):
            if all(tuple(r.shape) == tuple(c) for r, c in zip(refs, canon)):
                return name
            if all(math.prod(r.shape) == math.prod(c) for r, c in zip(refs, canon)):
                return self.node("Reshape", [name, self.shape(self.dims([r.shape for r in refs]))])
        plans = [_plan(math.prod(c), r.shape, r.strides, r.offset) for r, c in zip(refs, canon)]
        if any(p is None for p in plans):
            return self._gather_view(name, canon, refs)
        p0 = plans[0]
        for p in plans[1:]:
            if (p["perm"], p["kept"], p["tail"], len(p["R"])) != (
                p0["perm"],
                p0["kept"],
                p0["tail"],
                len(p0["R"]),
            ):
                raise OnnxExporterError(
                    f"sitp.onnx: the layout of a view {r0.shape} changes with a dynamic axis"
                )
        x = name
        R = [p["R"] for p in plans]
        if any(tuple(Ri) != tuple(c) for Ri, c in zip(R, canon)):
            x = self.node("Reshape", [x, self.shape(self.dims(R))])
        axes = [
            i
            for i in range(len(p0["R"]))
            if any((p["start"][i], p["end"][i]) != (0, p["R"][i]) for p in plans)
        ]
        if axes:
            starts = self.dims([[p["start"][i] for i in axes] for p in plans])
            ends = self.dims([[p["end"][i] for i in axes] for p in plans])
            x = self.node("Slice", [x, self.shape(starts), self.shape(ends), self.ints(axes)])
        if p0["tail"]:
            x = self.node("Squeeze", [x, self.ints([len(p0["R"]) - 1])])
        inv = list(np.argsort(p0["perm"]))
        if inv != list(range(len(inv))):
            x = self.node("Transpose", [x], perm=[int(i) for i in inv])
        missing = [i for i in range(len(r0.shape)) if i not in p0["kept"]]
        if missing:
            x = self.node("Unsqueeze", [x, self.ints(missing)])
            if any(r.shape[i] != 1 for r in refs for i in missing):
                x = self.node("Expand", [x, self.shape(self.dims([r.shape for r in refs]))])
        return x

    def _gather_view(self, name, canon, refs) -> str:
        """Any view of static sizes: a Gather of the flat tensor at the view's positions."""
        if len(refs) > 1 and any(r.key()[1:] != refs[0].key()[1:] for r in refs):
            raise OnnxExporterError(
                f"sitp.onnx: a view {refs[0].shape} with strides {refs[0].strides} changes "
                "with a dynamic axis and has no ONNX form"
            )
        r0 = refs[0]
        flat = self.node("Reshape", [name, self.ints([-1])])
        return self.node("Gather", [flat, self.const(_positions(r0))], axis=0)

    def write(self, old_name: str, canon, dst_refs, src: str) -> str:
        """The tensor ``old_name`` (canonical ``canon``) with view ``dst_refs`` replaced by
        ``src`` (already in the view's shape and dtype): Transpose, Pad, Where."""
        plans = [_plan(math.prod(c), r.shape, r.strides, r.offset) for r, c in zip(dst_refs, canon)]
        r0 = dst_refs[0]
        if any(p is None for p in plans) or any(
            r.shape[i] != 1 for r in dst_refs for i in range(len(r.shape)) if r.strides[i] == 0
        ):
            raise OnnxExporterError(
                f"sitp.onnx: an in-place write to a view {r0.shape} with strides "
                f"{r0.strides} has no ONNX form"
            )
        p0 = plans[0]
        missing = [i for i in range(len(r0.shape)) if i not in p0["kept"]]
        x = src
        if missing:
            x = self.node("Squeeze", [x, self.ints(missing)])
        if p0["perm"] != list(range(len(p0["perm"]))):
            x = self.node("Transpose", [x], perm=[int(i) for i in p0["perm"]])
        if p0["tail"]:
            x = self.node("Unsqueeze", [x, self.ints([len(p0["R"]) - 1])])
        before = self.dims([p["start"] for p in plans])
        after = self.dims([[Ri - e for Ri, e in zip(p["R"], p["end"])] for p in plans])
        pads = self.shape(before + after)
        ones = self.node("ConstantOfShape", [self.node("Shape", [x])])  # float 0.0 ...
        ones = self.node("Add", [ones, self.scalar(1.0, np.float32)])  # ... plus one
        mask = self.cast(self.node("Pad", [ones, pads]), np.bool_)
        placed = self.node("Pad", [x, pads])
        R = [p["R"] for p in plans]
        old = old_name
        if any(tuple(Ri) != tuple(c) for Ri, c in zip(R, canon)):
            old = self.node("Reshape", [old, self.shape(self.dims(R))])
        new = self.node("Where", [mask, placed, old])
        if any(tuple(Ri) != tuple(c) for Ri, c in zip(R, canon)):
            new = self.node("Reshape", [new, self.shape(self.dims(canon))])
        return new


def _permuted_layout(r: Ref):
    """The axis order in which a result's strides are row-major, or None."""
    if r.offset != 0:
        return None
    order = sorted(range(len(r.shape)), key=lambda i: (-r.strides[i], i))
    phys = [r.shape[i] for i in order]
    want = contiguous(phys)
    if all(r.shape[i] == 1 or r.strides[i] == w for i, w in zip(order, want)):
        return order
    return None


def _plan(N: int, shape, strides, offset):
    """How view (shape, strides, offset) of a flat buffer of N entries is cut out of it.

    Returns a dict, or None when the view does not have this form (overlapping axes,
    strides that do not divide each other, a slice that wraps around):

    * ``kept``: the view's axes of size > 1 and stride > 0 (the others are unsqueezed and
      expanded afterwards); ``perm[k]``: where the k-th of them in stride order (largest
      first) stands among them in axis order;
    * ``R``: the shape to reshape the buffer to, one axis per kept axis in stride order
      (``N // s0, s0 // s1, ...``), plus a *tail* axis of the smallest stride when it is
      not 1 (``tail``), from which the view takes one entry;
    * ``start``, ``end``: the slice of each axis of R (the offset's digits in R's radix).
    """
    kept = [i for i in range(len(shape)) if shape[i] > 1 and strides[i] != 0]
    if any(strides[i] < 0 for i in kept):
        return None
    order = sorted(kept, key=lambda i: -strides[i])
    s = [strides[i] for i in order]
    n = [shape[i] for i in order]
    if any(s[k] <= s[k + 1] or s[k] % s[k + 1] for k in range(len(s) - 1)):
        return None
    if s:
        if N % s[0]:
            return None
        R = [N // s[0]] + [s[k] // s[k + 1] for k in range(len(s) - 1)]
        tail = s[-1] != 1
        place = s + [1] * tail
    else:  # a single entry: one axis of N, from which it takes one
        R, tail, place = [], True, [1]
    if tail:
        R.append(s[-1] if s else N)
    start, o = [], offset
    for p in place:
        start.append(o // p)
        o %= p
    end = [d + m for d, m in zip(start, n + [1] * tail)]
    if any(e > Ri for e, Ri in zip(end, R)):
        return None
    perm = [kept.index(i) for i in order]
    return {"kept": kept, "perm": perm, "R": R, "start": start, "end": end, "tail": tail}


def _as_range(a: np.ndarray):
    """(start, step, length) when ``a`` is one row of an arithmetic sequence, else None."""
    if a.ndim != 2 or a.shape[0] != 1 or a.dtype.kind not in "iu" or a.shape[1] < 2:
        return None
    row = a[0].astype(np.int64)
    step = int(row[1] - row[0])
    if step == 0 or not np.array_equal(row, row[0] + step * np.arange(row.size)):
        return None
    return int(row[0]), step, row.size


def _positions(r: Ref) -> np.ndarray:
    """The flat positions of view ``r``'s entries, in row-major order of its shape."""
    pos = np.full(r.shape, r.offset, np.int64)
    for axis, (n, st) in enumerate(zip(r.shape, r.strides)):
        shape = [1] * len(r.shape)
        shape[axis] = n
        pos = pos + (np.arange(n, dtype=np.int64) * st).reshape(shape)
    return pos

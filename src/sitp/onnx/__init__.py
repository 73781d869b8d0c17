"""sitp.onnx: write a model as an ONNX file, from chapter 6's capture (torch.onnx's names).

``sitp.onnx.export(model, args, "model.onnx")`` runs the model once under the capture of
``sitp.compile`` (``sitp/compile/capture.py``), which records every backend call and
every fused layer as a node of a graph, and writes each node as ONNX nodes
(``sitp/onnx/ops.py``), each view of a buffer as Reshape, Slice, Transpose and Expand
(``sitp/onnx/builder.py``), and the parameters as initializers. A call with no ONNX
mapping is refused by name, and the model is checked with ``onnx.checker`` (shape
inference included) before the file is written.

``dynamic_axes`` works as torch's: the program is captured once more per dynamic axis,
with that axis one larger, and every size that follows the axis becomes a size read
from the input at run time.

The ``onnx`` package is optional: ``pip install onnx`` (or ``sitp[onnx]``).
"""

from __future__ import annotations

import enum
import inspect
import math

import numpy as np

from sitp._tensor.tensor import Tensor
from sitp.autograd.grad_mode import no_grad
from sitp.compile import capture
from sitp.compile.graph import contiguous
from sitp.nn.modules.module import Module
from sitp.onnx import ops
from sitp.onnx.builder import Builder, OnnxExporterError

#: The opset written when ``opset_version`` is None (torch.onnx's default since 2.9).
DEFAULT_OPSET = 18
#: The lowest opset: LayerNormalization arrived in 17.
MIN_OPSET = 17

producer_name = "sitp"


class TrainingMode(enum.IntEnum):
    """The mode the model is exported in (torch.onnx.TrainingMode's members)."""

    EVAL = 0
    PRESERVE = 1
    TRAINING = 2


class OperatorExportTypes(enum.IntEnum):
    """How ops are exported: sitp writes standard ONNX ops only (``ONNX``)."""

    ONNX = 0
    ONNX_ATEN = 1
    ONNX_ATEN_FALLBACK = 2
    ONNX_FALLTHROUGH = 3


_in_export = False


def is_in_onnx_export() -> bool:
    """Whether an :func:`export` is running (a model may branch on it, as in torch)."""
    return _in_export


def _onnx():
    try:
        import onnx  # late: optional dependency (pip install onnx), heavy to import
    except ImportError as e:
        raise ImportError(
            "sitp.onnx.export needs the onnx package: pip install onnx (or sitp[onnx])"
        ) from e
    return onnx


def _refuse_options(**given):
    """Options of torch.onnx.export that sitp does not implement, at other than their default."""
    defaults = dict(
        dynamic_shapes=None,
        custom_translation_table=None,
        report=False,
        profile=False,
        dump_exported_program=False,
        export_params=True,
        keep_initializers_as_inputs=False,
        custom_opsets=None,
        export_modules_as_functions=False,
    )
    for name, value in given.items():
        if (
            name in defaults
            and value != defaults[name]
            and not (name == "custom_opsets" and not value)
        ):
            raise NotImplementedError(
                f"sitp.onnx.export: {name}={value!r} is not supported (only {defaults[name]!r})"
            )


def _bound_names(model, args, kwargs) -> list:
    """The forward's parameter name of each positional argument (``input_{i}`` when the
    signature does not say)."""
    try:
        sig = inspect.signature(model.forward)
        bound = sig.bind(*args, **kwargs)
        names = []
        for name, value in bound.arguments.items():
            p = sig.parameters[name]
            if p.kind == p.VAR_POSITIONAL:
                names.extend(f"{name}_{i}" for i in range(len(value)))
            elif p.kind != p.VAR_KEYWORD:
                names.append(name)
            else:
                names.extend(value)
        return names
    except (TypeError, ValueError):
        return [f"input_{i}" for i in range(len(args))] + list(kwargs)


def _resized(t: Tensor, axis: int, size: int) -> Tensor:
    """``t`` with ``size`` entries along ``axis``: its entries repeated (or cut)."""
    a = t.numpy()
    a = np.take(a, np.arange(size) % a.shape[axis], axis=axis)
    return t._make(np.ascontiguousarray(a).reshape(-1), a.shape, contiguous(a.shape), 0, t.dtype)


def _fresh(t: Tensor) -> Tensor:
    """A contiguous tensor of ``t``'s values with a storage of its own (an input Value)."""
    a = np.ascontiguousarray(t.detach().numpy()).reshape(-1).copy()
    return t._make(a, tuple(t.shape), contiguous(tuple(t.shape)), 0, t.dtype)


def _flatten(o, out: list) -> None:
    if isinstance(o, Tensor):
        out.append(o)
    elif isinstance(o, (list, tuple)):
        for b in o:
            _flatten(b, out)
    elif isinstance(o, dict):
        for b in o.values():
            _flatten(b, out)


def _trace(model, args, kwargs, slots):
    """Capture ``model(*args, **kwargs)``; ``slots`` (arg position or kwarg name) say
    where the tensor inputs are. Returns (graph, output Refs, outputs, tracer)."""
    tracer = capture.Tracer()
    ins = [args[s] if isinstance(s, int) else kwargs[s] for s in slots]
    for i, t in enumerate(ins):
        tracer.add_input(t, i)
    with no_grad(), capture.tracing(tracer):
        out = model(*args, **kwargs)
    tracer.finish()
    if tracer.breaks:
        why = "; ".join(f"{b.where}: {b.reason}" for b in tracer.breaks)
        raise OnnxExporterError(f"sitp.onnx: the program has a graph break: {why}")
    outs: list = []
    _flatten(out, outs)
    if not outs:
        raise OnnxExporterError("sitp.onnx: the model returned no tensor")
    return tracer.graph, [tracer.ref(o) for o in outs], outs, tracer


def export(
    model,
    args=(),
    f=None,
    *,
    kwargs=None,
    verbose=None,
    input_names=None,
    output_names=None,
    opset_version=None,
    dynamo=True,
    external_data=True,
    dynamic_shapes=None,
    custom_translation_table=None,
    report=False,
    optimize=True,
    verify=False,
    profile=False,
    dump_exported_program=False,
    artifacts_dir=".",
    fallback=False,
    export_params=True,
    keep_initializers_as_inputs=False,
    dynamic_axes=None,
    training=TrainingMode.EVAL,
    operator_export_type=OperatorExportTypes.ONNX,
    do_constant_folding=True,
    custom_opsets=None,
    export_modules_as_functions=False,
    autograd_inlining=True,
):
    """Writes ``model`` run on ``args`` as an ONNX model to ``f`` (torch.onnx.export).

    The model is captured as ``sitp.compile`` captures it (chapter 6), in eval mode and
    without autograd, and each captured call becomes ONNX nodes; its parameters become
    initializers. Tensor arguments become the graph's inputs (named after the forward's
    parameters unless ``input_names`` says otherwise); other arguments are baked in.

    Args:
        model: an ``nn.Module``.
        args: the example positional arguments (a tuple; a lone tensor is taken as one).
        f: the file name (or a binary file object) to write.
        kwargs: example keyword arguments.
        verbose: print the ONNX graph.
        input_names, output_names: names of the graph's inputs and outputs, in order
            (outputs default to ``output_{i}``).
        opset_version: the ONNX opset (default 18; 17 or more: LayerNormalization).
        dynamic_axes: ``{name: {axis: "symbol"}}`` or ``{name: [axis, ...]}``: the input
            axes whose size may change (the outputs' follow).
        verify: run the written model with onnxruntime on ``args`` and compare its
            outputs with sitp's.
        training: ``TrainingMode.EVAL`` (default) or ``PRESERVE``.

    ``dynamo``, ``external_data``, ``optimize``, ``artifacts_dir``, ``fallback``,
    ``do_constant_folding`` and ``autograd_inlining`` are accepted for torch's signature
    and change nothing here (there is one exporter, and the weights are always inside the
    file). The other options of torch's signature are refused at any value but their
    default.

    Returns:
        None (torch's TorchScript exporter's return; the model is in ``f``).

    Example:
        >>> import io, onnx, sitp
        >>> f = io.BytesIO()
        >>> layer = sitp.nn.Linear(3, 2)
        >>> sitp.onnx.export(layer, (sitp.randn(4, 3),), f, input_names=["x"],
        ...                  dynamic_axes={"x": {0: "batch"}})
        >>> graph = onnx.load_from_string(f.getvalue()).graph
        >>> [n.op_type for n in graph.node], [t.name for t in graph.initializer]
        (['Gemm', 'Identity'], ['weight', 'bias'])
        >>> [d.dim_param or d.dim_value for d in graph.output[0].type.tensor_type.shape.dim]
        ['batch', 2]

    Raises:
        OnnxExporterError: a call with no ONNX mapping (``cannot export op 'scatter_add'``),
            or a program that is not one graph.
        ImportError: the ``onnx`` package is not installed.
    """
    global _in_export
    _refuse_options(
        dynamic_shapes=dynamic_shapes,
        custom_translation_table=custom_translation_table,
        report=report,
        profile=profile,
        dump_exported_program=dump_exported_program,
        export_params=export_params,
        keep_initializers_as_inputs=keep_initializers_as_inputs,
        custom_opsets=custom_opsets,
        export_modules_as_functions=export_modules_as_functions,
    )
    if operator_export_type != OperatorExportTypes.ONNX:
        raise NotImplementedError(
            f"sitp.onnx.export: operator_export_type={operator_export_type!r} is not "
            "supported (only OperatorExportTypes.ONNX)"
        )
    if training not in (TrainingMode.EVAL, TrainingMode.PRESERVE):
        raise NotImplementedError(
            f"sitp.onnx.export: training={training!r} is not supported (EVAL or PRESERVE)"
        )
    if not isinstance(model, Module):
        raise TypeError(f"sitp.onnx.export: model must be an nn.Module, got {type(model).__name__}")
    if f is None:
        raise TypeError("sitp.onnx.export: f, the file to write, is required")
    onnx = _onnx()
    opset = DEFAULT_OPSET if opset_version is None else int(opset_version)
    if not MIN_OPSET <= opset <= onnx.defs.onnx_opset_version():
        raise ValueError(
            f"sitp.onnx.export: opset_version must be in [{MIN_OPSET}, "
            f"{onnx.defs.onnx_opset_version()}], got {opset_version}"
        )
    args = (args,) if isinstance(args, Tensor) else tuple(args)
    kwargs = dict(kwargs or {})
    if args and isinstance(args[-1], dict) and not kwargs:  # torch's (x, {"y": ...}) form
        args, kwargs = args[:-1], dict(args[-1])
    names = _bound_names(model, args, kwargs)
    slots = [i for i, a in enumerate(args) if isinstance(a, Tensor)]
    slot_names = [names[i] for i in slots]
    slots += [k for k, v in kwargs.items() if isinstance(v, Tensor)]
    slot_names += [k for k, v in kwargs.items() if isinstance(v, Tensor)]
    if any(isinstance(a, (list, tuple, dict)) for a in list(args) + list(kwargs.values())):
        raise NotImplementedError(
            "sitp.onnx.export: nested inputs (a list, tuple or dict of tensors) are not "
            "supported; pass each tensor as an argument"
        )
    if input_names is not None:
        if len(input_names) > len(slots):
            raise ValueError(
                f"sitp.onnx.export: {len(input_names)} input_names for {len(slots)} tensor inputs"
            )
        slot_names[: len(input_names)] = list(input_names)

    def tensors(a, kw):
        return [a[s] if isinstance(s, int) else kw[s] for s in slots]

    def with_tensors(ts):
        a, kw = list(args), dict(kwargs)
        for s, t in zip(slots, ts):
            if isinstance(s, int):
                a[s] = t
            else:
                kw[s] = t
        return tuple(a), kw

    base_ts = [_fresh(t) for t in tensors(args, kwargs)]
    if any(t.is_cuda for t in base_ts) or any(p.is_cuda for p in model.parameters()):
        raise NotImplementedError(
            "sitp.onnx.export captures on the CPU backend: move the model and its inputs "
            "to the CPU first (model.cpu())"
        )
    syms = _symbols(dynamic_axes, slot_names, output_names, base_ts)

    modes = [(m, m.training) for m in model.modules()]
    if training == TrainingMode.EVAL:
        model.eval()
    _in_export = True
    try:
        traces = [_trace(model, *with_tensors(base_ts), slots)]
        for sym, size, other, uses in syms:
            ts = list(base_ts)
            for i, a in uses:
                ts[i] = _resized(ts[i], a, other)
            traces.append(_trace(model, *with_tensors(ts), slots))
        params = {id(t._storage): n for n, t in model.named_parameters()}
        params.update({id(t._storage): n for n, t in model.named_buffers() if t is not None})
        model_proto = _build(
            onnx, traces, base_ts, slot_names, output_names, opset, syms, dynamic_axes, params
        )
    finally:
        _in_export = False
        for m, mode in modes:
            m.training = mode
    onnx.checker.check_model(model_proto, full_check=True)
    if verbose:
        print(onnx.printer.to_text(model_proto.graph))
    if verify:
        _verify(model_proto, base_ts, traces[0][2], slot_names)
    onnx.save(model_proto, f)
    return None


def _symbols(dynamic_axes, in_names, out_names, ts) -> list:
    """The dynamic sizes as ``(symbol, base size, other size, [(input, axis), ...])``;
    inputs whose axis has size 1 in ``ts`` are resized to 2 in place (a size of 1 would
    hide which strides follow it)."""
    uses: dict = {}
    for name, axes in (dynamic_axes or {}).items():
        if name not in in_names and name not in (out_names or []):
            raise ValueError(
                f"sitp.onnx.export: dynamic_axes names {name!r}, which is not an input or "
                f"output name (inputs: {in_names})"
            )
        if name not in in_names:
            continue  # an output's axes follow from the inputs'
        if isinstance(axes, dict):
            pairs = [(int(a), str(sym)) for a, sym in axes.items()]
        else:
            pairs = [(int(a), f"{name}_dynamic_axes_{int(a) + 1}") for a in axes]
        i = in_names.index(name)
        for axis, sym in pairs:
            if not -ts[i].ndim <= axis < ts[i].ndim:
                raise IndexError(
                    f"sitp.onnx.export: dynamic axis {axis} of input {name!r} of {ts[i].ndim} dims"
                )
            uses.setdefault(sym, []).append((i, axis % ts[i].ndim))
    syms = []
    for sym, where in uses.items():
        sizes = {ts[i].shape[a] for i, a in where}
        if len(sizes) != 1:
            raise ValueError(
                f"sitp.onnx.export: dynamic axis {sym!r} has sizes {sorted(sizes)} in the inputs"
            )
        size = max(sizes.pop(), 2)
        for i, a in where:
            if ts[i].shape[a] != size:
                ts[i] = _resized(ts[i], a, size)
        syms.append((sym, size, size + 1, where))
    return syms


def _build(onnx, traces, base_ts, in_names, out_names, opset, syms, dynamic_axes, params):
    """The ModelProto of the captured traces (trace 0 at the base sizes)."""
    graphs = [t[0] for t in traces]
    g0 = graphs[0]
    for k, (g, sym) in enumerate(zip(graphs[1:], syms)):
        if [n.fn for n in g.nodes] != [n.fn for n in g0.nodes] or len(g.inputs) != len(g0.inputs):
            raise OnnxExporterError(
                f"sitp.onnx: the program runs other calls when dynamic axis {sym[0]!r} changes "
                "size (control flow on a size); export it with static sizes"
            )
    b = Builder(
        onnx,
        opset,
        [(s, base, other, in_names[u[0][0]], u[0][1]) for s, base, other, u in syms],
        params,
    )
    helper = onnx.helper
    inputs_vi = []
    for v in g0.inputs:
        i = v.index
        t = base_ts[i]
        shapes = [tuple(t.shape)]
        for s, base, other, uses in syms:
            shape = list(t.shape)
            for j, a in uses:
                if j == i:
                    shape[a] = other
            shapes.append(tuple(shape))
        b.define(v, in_names[i], shapes)
        dims = b.dims(shapes)
        inputs_vi.append(
            helper.make_tensor_value_info(in_names[i], b.elem_type(t.dtype.np), _dim_labels(dims))
        )
    node_lists = [g.nodes for g in graphs]
    for nodes in zip(*node_lists):
        ops.convert(b, list(nodes))
    out_refs = [t[1] for t in traces]
    n_out = len(out_refs[0])
    names = list(out_names or [])
    if len(names) > n_out:
        raise ValueError(f"sitp.onnx.export: {len(names)} output_names for {n_out} outputs")
    names += [f"output_{i}" for i in range(len(names), n_out)]
    outputs_vi = []
    for k in range(n_out):
        refs = [r[k] for r in out_refs]
        t = b.ref(refs)
        b.nodes.append(helper.make_node("Identity", [t], [names[k]], name=f"out{k}"))
        labels = _dim_labels(b.dims([r.shape for r in refs]))
        named = (dynamic_axes or {}).get(names[k])
        for axis, label in named.items() if isinstance(named, dict) else ():
            if isinstance(labels[axis], str):  # a size that follows a dynamic axis
                labels[axis] = label
        outputs_vi.append(
            helper.make_tensor_value_info(names[k], b.elem_type(refs[0].dtype.np), labels)
        )
    b.prune(names)
    graph = helper.make_graph(b.nodes, "sitp_model", inputs_vi, outputs_vi, b.initializers)
    opsets = [helper.make_opsetid("", opset)]
    model = helper.make_model(graph, opset_imports=opsets, producer_name=producer_name)
    model.ir_version = helper.find_min_ir_version_for(opsets)
    return model


def _dim_labels(dims) -> list:
    """Each dim as ONNX writes it: a number, a symbol's name, or a product of them."""
    return [d.coef if d.static else str(d) for d in dims]


def _verify(model_proto, ts, outs, names, rtol=1e-4, atol=1e-5):
    try:
        import onnxruntime  # late: optional dependency, used only by verify=True
    except ImportError as e:
        raise ImportError("sitp.onnx.export(verify=True) needs onnxruntime") from e
    sess = onnxruntime.InferenceSession(
        model_proto.SerializeToString(), providers=["CPUExecutionProvider"]
    )
    feed = {n: t.numpy() for n, t in zip(names, ts)}
    got = sess.run(None, feed)
    for k, (g, o) in enumerate(zip(got, outs)):
        want = o.detach().numpy()
        if g.shape != want.shape or not np.allclose(g, want, rtol=rtol, atol=atol):
            err = math.inf if g.shape != want.shape else float(np.max(np.abs(g - want)))
            raise OnnxExporterError(
                f"sitp.onnx: verify: output {k} differs from sitp's (max abs error {err:.3g})"
            )


__all__ = [
    "OnnxExporterError",
    "OperatorExportTypes",
    "TrainingMode",
    "export",
    "is_in_onnx_export",
    "producer_name",
]

"""sitp.onnx.export against onnxruntime: the ladder's models, a spread of ops, refusals.

Each model is exported with a dynamic batch axis, checked with ``onnx.checker`` (with
shape inference), run by onnxruntime on the example inputs and on a batch of another
size, and compared with sitp's own outputs on the same inputs. The package is used as
readers use it, ``import sitp as torch``.
"""

import io
import os
import sys

import numpy as np
import pytest

import sitp as torch
from sitp.models import build_model

try:
    import onnx
    import onnxruntime as ort
except ImportError as e:  # the book extra brings both; make test installs it
    if os.environ.get("CI", "").strip().lower() in ("true", "1"):
        raise  # under CI=true a missing package is a broken install, never a skip
    pytest.skip(f"needs onnx and onnxruntime: {e}", allow_module_level=True)

RTOL, ATOL = 1e-5, 1e-6  # float32, one kernel's rounding against another's

#: Each ladder model at a tiny size; the sequence models read T = 3 characters.
LADDER = {
    "bigram": dict(vocab_size=7),
    "mlp": dict(vocab_size=7, block_size=3, n_embd=4, n_hidden=8),
    "wavenet": dict(vocab_size=7, block_size=4, n_embd=4, n_hidden=8),
    "rnn": dict(vocab_size=7, n_embd=4, n_embd2=5),
    "gru": dict(vocab_size=7, n_embd=4, n_embd2=5),
    "gpt": dict(vocab_size=7, block_size=8, n_layer=1, n_head=2, n_embd=8),
}


def _session(data: bytes):
    return ort.InferenceSession(data, providers=["CPUExecutionProvider"])


def _export(model, args, **kw) -> bytes:
    buf = io.BytesIO()
    torch.onnx.export(model, args, buf, **kw)
    return buf.getvalue()


def _sitp_out(model, *args):
    with torch.no_grad():
        out = model(*args)
    out = out[0] if isinstance(out, tuple) else out
    return out.numpy()


@pytest.mark.parametrize("name", list(LADDER))
def test_ladder_model_matches_onnxruntime_at_two_batch_sizes(name, tmp_path):
    torch.manual_seed(0)
    model = build_model(name, **LADDER[name])
    if name == "wavenet":  # running statistics that are not the initial 0 and 1
        for level in model.levels:
            level.bn.running_mean.normal_()
            level.bn.running_var.uniform_(0.5, 2.0)
    model.eval()
    T = model.block_size if name in ("bigram", "mlp", "wavenet") else 3
    x = torch.randint(0, 7, (2, T))
    path = tmp_path / f"{name}.onnx"
    torch.onnx.export(
        model,
        (x,),
        path,
        input_names=["idx"],
        output_names=["logits"],
        dynamic_axes={"idx": {0: "batch"}, "logits": {0: "batch"}},
    )
    proto = onnx.load(path)
    onnx.checker.check_model(proto, full_check=True)
    assert [i.name for i in proto.graph.input] == ["idx"]
    assert proto.graph.output[0].type.tensor_type.shape.dim[0].dim_param == "batch"
    assert len(proto.graph.initializer) > 0  # the weights are inside the file
    sess = _session(path.read_bytes())
    for B in (2, 5):
        xb = torch.randint(0, 7, (B, T))
        (got,) = sess.run(None, {"idx": xb.numpy()})
        want = _sitp_out(model, xb)
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)


class Spread(torch.nn.Module):
    """Ops beyond the ladder's: views (transpose, slices with steps, expand), reductions,
    softmax along a dim that is not the last, comparisons, where, concatenation,
    an in-place write into a slice, and the fused layers (LayerNorm, GELU, attention)."""

    def __init__(self):
        super().__init__()
        self.ln = torch.nn.LayerNorm(6)
        self.lin = torch.nn.Linear(6, 6)
        self.gelu = torch.nn.GELU(approximate="tanh")

    def forward(self, x_BTC, scale):
        B, T, C = x_BTC.shape
        h = self.gelu(self.lin(self.ln(x_BTC)))  # (B, T, C)
        q = h.view(B, T, 2, 3).transpose(1, 2)  # (B, 2, T, 3)
        a = torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True)
        a = a.transpose(1, 2).reshape(B, T, C)
        s = torch.softmax(a, dim=1) + x_BTC[:, :, ::2].repeat(1, 1, 2)
        m = s.mean(-1, keepdim=True) - s.amax(dim=1, keepdim=True)
        w = torch.where(s > 0.1, s.exp(), (-s).sigmoid()).clamp(min=0.05, max=3.0)
        w[:, 0, :] = scale * w[:, -1, :]  # a write into a slice
        c = torch.cat([w, m.expand(B, T, C) * x_BTC.abs().sqrt()], dim=-1)  # (B, T, 2C)
        idx = c.argmax(-1)
        return c.cumsum(1).tanh() + torch.nn.functional.log_softmax(c, dim=0), idx


@pytest.mark.parametrize("opset", [17, 20])
def test_spread_of_ops_matches_onnxruntime(opset):
    torch.manual_seed(1)
    model = Spread().eval()
    x = torch.randn(2, 4, 6)
    scale = torch.tensor(0.5)
    data = _export(model, (x, scale), opset_version=opset, dynamic_axes={"x_BTC": {0: "batch"}})
    proto = onnx.load_from_string(data)
    assert proto.opset_import[0].version == opset
    kinds = {n.op_type for n in proto.graph.node}
    assert "LayerNormalization" in kinds and ("Gelu" in kinds) == (opset >= 20)
    sess = _session(data)
    for B in (2, 3):
        xb = torch.randn(B, 4, 6)
        got_y, got_i = sess.run(None, {"x_BTC": xb.numpy(), "scale": scale.numpy()})
        with torch.no_grad():
            want_y, want_i = model(xb, scale)
        np.testing.assert_allclose(got_y, want_y.numpy(), rtol=RTOL, atol=ATOL)
        np.testing.assert_array_equal(got_i, want_i.numpy())


def test_unsupported_op_is_refused_by_name_and_no_file_is_written(tmp_path):
    class Atan2(torch.nn.Module):
        def forward(self, x):
            return torch.atan2(x, x + 1)

    path = tmp_path / "never.onnx"
    with pytest.raises(torch.onnx.OnnxExporterError, match="cannot export op 'atan2'"):
        torch.onnx.export(Atan2(), (torch.randn(3),), path)
    assert not path.exists()

    class Put(torch.nn.Module):
        def forward(self, x, i):
            return torch.zeros(4).index_put_((i,), x, accumulate=True)

    with pytest.raises(torch.onnx.OnnxExporterError, match="cannot export op 'put'"):
        torch.onnx.export(Put(), (torch.randn(3), torch.tensor([0, 1, 1])), path)
    assert not path.exists()


def test_graph_break_is_refused():
    class Item(torch.nn.Module):
        def forward(self, x):
            return x * x.sum().item()

    with pytest.raises(torch.onnx.OnnxExporterError, match="graph break"):
        _export(Item(), (torch.randn(3),))


def test_is_in_onnx_export_is_true_only_inside_export():
    seen = []

    class Probe(torch.nn.Module):
        def forward(self, x):
            seen.append(torch.onnx.is_in_onnx_export())
            return x + 1

    Probe()(torch.randn(2))
    _export(Probe(), (torch.randn(2),))
    assert seen == [False, True] and not torch.onnx.is_in_onnx_export()


def test_export_restores_training_mode_and_refuses_unsupported_options():
    model = build_model("mlp", **LADDER["mlp"])
    x = torch.randint(0, 7, (2, 3))
    model.train()
    _export(model, (x,))
    assert model.training and model.hidden.training
    with pytest.raises(NotImplementedError, match="dynamic_shapes"):
        _export(model, (x,), dynamic_shapes={"X_BT": {0: "batch"}})
    with pytest.raises(NotImplementedError, match="export_params=False"):
        _export(model, (x,), export_params=False)
    with pytest.raises(NotImplementedError, match="training"):
        _export(model, (x,), training=torch.onnx.TrainingMode.TRAINING)
    with pytest.raises(ValueError, match="opset_version"):
        _export(model, (x,), opset_version=13)
    with pytest.raises(ValueError, match="not an input or output name"):
        _export(model, (x,), dynamic_axes={"nope": [0]})
    with pytest.raises(TypeError, match="nn.Module"):
        _export(lambda t: t, (x,))


def test_verify_runs_onnxruntime_on_the_example(tmp_path):
    model = build_model("bigram", **LADDER["bigram"]).eval()
    torch.onnx.export(model, (torch.randint(0, 7, (3, 1)),), tmp_path / "b.onnx", verify=True)


def test_missing_onnx_package_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "onnx", None)  # import onnx raises ImportError
    with pytest.raises(ImportError, match="pip install onnx"):
        _export(build_model("bigram", **LADDER["bigram"]), (torch.zeros(2, 1, dtype=torch.long),))


def test_gpt_with_dynamic_batch_and_length():
    torch.manual_seed(2)
    model = build_model("gpt", **LADDER["gpt"]).eval()
    data = _export(
        model,
        (torch.randint(0, 7, (2, 4)),),
        input_names=["idx"],
        dynamic_axes={"idx": {0: "batch", 1: "T"}},
    )
    sess = _session(data)
    for B, T in ((2, 4), (3, 7), (1, 1), (1, 8)):  # T up to block_size; causal mask follows T
        x = torch.randint(0, 7, (B, T))
        (got,) = sess.run(None, {"idx": x.numpy()})
        np.testing.assert_allclose(got, _sitp_out(model, x), rtol=RTOL, atol=ATOL)


class Indexing(torch.nn.Module):
    """Advanced indexing with two index tensors, gather, tril, a batched matmul, new
    tensors whose shape follows the batch, masked_fill, comparisons and casts."""

    def __init__(self):
        super().__init__()
        self.table = torch.nn.Parameter(torch.randn(5, 4, 3))

    def forward(self, i_B, j_B, x_BNN):
        B = x_BNN.shape[0]
        rows = self.table[i_B, j_B]  # (B, 3): one index tuple per row
        g = torch.gather(x_BNN, 1, (i_B % 3).view(B, 1, 1).expand(B, 1, 3))  # (B, 1, 3)
        t = torch.tril(x_BNN) @ x_BNN.transpose(1, 2)  # (B, 3, 3)
        z = torch.zeros(B, 3) + torch.arange(3).float()
        keep = (t != 0) & (t > -1.0)
        t = t.masked_fill(~keep, 0.5)
        return (rows + z + g[:, 0, :]).unsqueeze(1) * t.sum(-1, keepdim=True) + keep.long()


def test_indexing_ops_match_onnxruntime():
    torch.manual_seed(3)
    model = Indexing()
    i, j, x = torch.tensor([4, -1]), torch.tensor([0, 3]), torch.randn(2, 3, 3)
    dyn = {"i_B": {0: "batch"}, "j_B": {0: "batch"}, "x_BNN": {0: "batch"}}
    sess = _session(_export(model, (i, j, x), dynamic_axes=dyn))
    for B in (2, 4):
        i, j, x = torch.randint(-5, 5, (B,)), torch.randint(0, 4, (B,)), torch.randn(B, 3, 3)
        (got,) = sess.run(None, {"i_B": i.numpy(), "j_B": j.numpy(), "x_BNN": x.numpy()})
        with torch.no_grad():
            want = model(i, j, x).numpy()
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)


def test_a_number_computed_from_a_dynamic_size_is_refused():
    class Scale(torch.nn.Module):
        def forward(self, x):
            return x * x.shape[0]  # baked in at the example's batch size

    with pytest.raises(torch.onnx.OnnxExporterError, match="changes with a dynamic axis"):
        _export(Scale(), (torch.randn(2, 3),), dynamic_axes={"x": [0]})
    _export(Scale(), (torch.randn(2, 3),))  # static sizes: a constant, rightly


def test_a_float_argument_computed_from_a_dynamic_size_is_refused():
    class Pow(torch.nn.Module):
        def forward(self, x):
            return x.abs() ** (1.0 / x.shape[0])

    with pytest.raises(torch.onnx.OnnxExporterError, match="'pow' changes with a dynamic"):
        _export(Pow(), (torch.randn(2, 3),), dynamic_axes={"x": [0]})


def test_counting_bigram_table_with_a_keyword_input(capsys):
    """Chapter 1's counted bigram is a table, not a module: a module that looks its rows
    up exports, with a tensor passed by keyword as a second input."""
    from sitp.data import Vocab
    from sitp.models.bigram import BigramCounts

    words = ["emma", "ava", "anna"]
    counted = BigramCounts(Vocab(words)).fit(words)

    class Lookup(torch.nn.Module):
        def __init__(self, probs):
            super().__init__()
            self.register_buffer("probs", probs)

        def forward(self, ix, *, temperature):
            return (self.probs[ix].log() / temperature).softmax(-1)

    model = Lookup(counted.probs)
    ix, temp = torch.tensor([0, 1, 3]), torch.tensor(2.0)
    data = _export(
        model, (ix,), kwargs={"temperature": temp}, dynamic_axes={"ix": [0]}, verbose=True
    )
    assert "Softmax" in capsys.readouterr().out  # verbose prints the graph
    sess = _session(data)
    assert [i.name for i in sess.get_inputs()] == ["ix", "temperature"]
    ix = torch.tensor([5, 0, 2, 2, 4])
    (got,) = sess.run(None, {"ix": ix.numpy(), "temperature": temp.numpy()})
    np.testing.assert_allclose(got, model(ix, temperature=temp).numpy(), rtol=RTOL, atol=ATOL)


def test_initializers_carry_the_parameter_names():
    model = build_model("gpt", **LADDER["gpt"]).eval()
    proto = onnx.load_from_string(_export(model, (torch.randint(0, 7, (2, 3)),)))
    names = {t.name for t in proto.graph.initializer}
    params = dict(model.named_parameters())  # the tied wte / lm_head weight is listed once
    assert set(params) <= names
    for t in proto.graph.initializer:
        if t.name in params:
            np.testing.assert_array_equal(
                onnx.numpy_helper.to_array(t), params[t.name].detach().numpy()
            )

"""Every fused layer is an opaque node of sitp.compile's capture.

A fused layer (``sitp/nn/_functions``) calls its own kernels, not the backend functions
the capture records; a layer the capture does not know would run unseen while tracing,
and a replay of the graph would return the trace's values for any input.
"""

import importlib
import pkgutil

import numpy as np
import pytest

import sitp
from sitp import nn
from sitp.autograd.function import Function
from sitp.compile import capture
from sitp.nn import _functions


def test_every_fused_layer_module_is_captured():
    known = {m.__name__ for m in capture._LAYER_MODULES}
    for info in pkgutil.iter_modules(_functions.__path__):
        if info.name.startswith("_"):  # _cuda: the device twins, called by the layers
            continue
        mod = importlib.import_module(f"{_functions.__name__}.{info.name}")
        layers = [
            obj
            for obj in vars(mod).values()
            if isinstance(obj, type)
            and issubclass(obj, Function)
            and obj.__module__ == mod.__name__
        ]
        if layers:
            assert mod.__name__ in known, f"{mod.__name__} defines {layers} but capture misses it"


@pytest.mark.parametrize("make", [lambda: nn.LSTM(4, 5), lambda: nn.GRU(4, 5, num_layers=2)])
def test_compiled_recurrent_layer_follows_its_input(make):
    sitp.manual_seed(0)
    m = make().eval()
    f = sitp.compile(m)
    for seed in (1, 2, 3):  # the first call traces; the others replay the graph
        x = sitp.tensor(np.random.default_rng(seed).standard_normal((3, 2, 4)).astype(np.float32))
        with sitp.no_grad():
            np.testing.assert_array_equal(f(x)[0].numpy(), m(x)[0].numpy())


def test_onnx_refuses_the_lstm_by_name(tmp_path):
    pytest.importorskip("onnx")
    from sitp.models import build_model

    model = build_model("lstm", vocab_size=7, n_embd=4, n_embd2=5).eval()
    with pytest.raises(Exception, match="LSTMGates"):
        sitp.onnx.export(model, (sitp.tensor([[1, 2, 3]]),), str(tmp_path / "m.onnx"))
    assert not (tmp_path / "m.onnx").exists()

"""Whole objects through ``save``/``load``, against torch: a module, an optimizer, any
picklable container; weights-only loading by default, and the safe-globals allowlist
(``add_safe_globals``, ``safe_globals``, ``get_safe_globals``, ``clear_safe_globals``,
``get_unsafe_globals_in_checkpoint``)."""

import collections
import io
import pickle
import re

import numpy as np
import pytest
import torch

import sitp
import sitp.serialization


def net_class(lib):
    return SitpNet if lib is sitp else TorchNet


class TorchNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(7, 4)
        self.body = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Tanh())
        self.head = torch.nn.Linear(4, 7, bias=False)
        self.head.weight = self.emb.weight  # tied
        self.register_buffer("scale", torch.tensor([0.5, 2.0, 1.0, 1.0]))

    def forward(self, idx):
        return self.head(self.body(self.emb(idx)) * self.scale)


class SitpNet(sitp.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = sitp.nn.Embedding(7, 4)
        self.body = sitp.nn.Sequential(sitp.nn.Linear(4, 4), sitp.nn.Tanh())
        self.head = sitp.nn.Linear(4, 7, bias=False)
        self.head.weight = self.emb.weight
        self.register_buffer("scale", sitp.tensor([0.5, 2.0, 1.0, 1.0]))

    def forward(self, idx):
        return self.head(self.body(self.emb(idx)) * self.scale)


def pair():
    """The same net in both libraries (torch's weights copied into sitp's)."""
    torch.manual_seed(0)
    t = TorchNet().double()
    s = SitpNet().double()
    s.load_state_dict({k: sitp.tensor(v.detach().numpy()) for k, v in t.state_dict().items()})
    return {torch: t, sitp: s}


IDX = [[1, 2, 6], [0, 3, 3]]


def run(lib, model):
    return model(lib.tensor(IDX)).detach().numpy()


def saved(lib, obj):
    buf = io.BytesIO()
    lib.save(obj, buf)
    buf.seek(0)
    return buf


@pytest.mark.parametrize("lib", [torch, sitp], ids=["torch", "sitp"])
def test_whole_module_round_trips_with_weights_only_false(lib):
    model = pair()[lib]
    expected = run(lib, model)
    back = lib.load(saved(lib, model), weights_only=False)
    assert type(back) is net_class(lib) and back is not model
    np.testing.assert_array_equal(run(lib, back), expected)
    assert back.head.weight is back.emb.weight  # still tied
    assert isinstance(back.body[0].weight, lib.nn.Parameter) and back.body[0].weight.requires_grad
    assert not back.scale.requires_grad
    assert [n for n, _ in back.named_parameters()] == [n for n, _ in model.named_parameters()]
    assert back.training == model.training
    back(lib.tensor(IDX)).sum().backward()  # and it trains
    assert back.emb.weight.grad is not None


def test_both_round_trip_the_same_numbers():
    models = pair()
    outs = {lib: run(lib, lib.load(saved(lib, m), weights_only=False)) for lib, m in models.items()}
    np.testing.assert_allclose(outs[sitp], outs[torch], rtol=1e-12, atol=0)


def refused(lib, buf):
    with pytest.raises(pickle.UnpicklingError) as info:
        lib.load(buf)  # weights_only=True is the default in both
    return str(info.value)


def test_weights_only_default_refuses_the_class_naming_it():
    models = pair()
    messages = {lib: refused(lib, saved(lib, m)) for lib, m in models.items()}
    for lib, message in messages.items():
        name = f"{__name__}.{net_class(lib).__qualname__}"
        assert f"GLOBAL {name} " in message, message
        assert f"torch.serialization.add_safe_globals([{name}])" in message
        assert f"torch.serialization.safe_globals([{name}])" in message
        assert "weights_only" in message


def allowlist(lib):
    """What a weights-only load of the net needs allowed, in each library's names."""
    nn = lib.nn
    return [net_class(lib), nn.Embedding, nn.Sequential, nn.Linear, nn.Tanh]


@pytest.mark.parametrize("lib", [torch, sitp], ids=["torch", "sitp"])
def test_safe_globals_context_lets_a_weights_only_load_rebuild_the_module(lib):
    model = pair()[lib]
    buf = saved(lib, model)
    with lib.serialization.safe_globals(allowlist(lib)):
        assert set(allowlist(lib)) <= set(lib.serialization.get_safe_globals())
        back = lib.load(buf)
    np.testing.assert_array_equal(run(lib, back), run(lib, model))
    assert not set(allowlist(lib)) & set(lib.serialization.get_safe_globals())  # removed
    buf.seek(0)
    refused(lib, buf)
    # one class short: the missing one is named
    buf.seek(0)
    with lib.serialization.safe_globals(allowlist(lib)[:-1]):
        message = refused(lib, buf)
    tanh = allowlist(lib)[-1]
    assert f"GLOBAL {tanh.__module__}.{tanh.__qualname__} " in message


class Point:
    """A user's class, pickled by reference to this module."""

    def __init__(self, x, y):
        self.x, self.y = x, y

    def __eq__(self, other):
        return type(other) is Point and (self.x, self.y) == (other.x, other.y)


@pytest.fixture
def restore_safe_globals():
    """torch registers a few globals of its own; put them back after a test clears them."""
    before = {lib: lib.serialization.get_safe_globals() for lib in (torch, sitp)}
    yield
    for lib in (torch, sitp):
        lib.serialization.clear_safe_globals()
        lib.serialization.add_safe_globals(before[lib])


@pytest.mark.parametrize("lib", [torch, sitp], ids=["torch", "sitp"])
def test_add_get_clear_safe_globals(lib, restore_safe_globals):
    ser = lib.serialization
    obj = {"p": Point(1, [2.5])}
    buf = saved(lib, obj)
    assert f"GLOBAL {__name__}.Point " in refused(lib, buf)
    ser.add_safe_globals([Point])
    assert Point in ser.get_safe_globals()
    buf.seek(0)
    assert lib.load(buf) == obj
    ser.clear_safe_globals()
    assert ser.get_safe_globals() == []
    buf.seek(0)
    refused(lib, buf)
    # a tuple allows an object under the name the file gives it; a bad tuple fails at load
    ser.add_safe_globals([(Point, f"{__name__}.Point")])
    buf.seek(0)
    assert lib.load(buf) == obj
    ser.clear_safe_globals()
    ser.add_safe_globals([(Point, f"{__name__}.Point", 3)])
    buf.seek(0)
    with pytest.raises(ValueError, match="length"):
        lib.load(buf)


@pytest.mark.parametrize("lib", [torch, sitp], ids=["torch", "sitp"])
def test_unsafe_globals_in_checkpoint(lib):
    buf = saved(lib, pair()[lib])
    names = lib.serialization.get_unsafe_globals_in_checkpoint(buf)
    want = {f"{c.__module__}.{c.__qualname__}" for c in allowlist(lib)}
    assert set(names) == want


def test_containers_torch_allows_load_weights_only_and_others_do_not():
    obj = {"c": collections.Counter("abca"), "s": {1, 2}, "b": bytearray(b"xy"), "z": 1 + 2j}
    for lib in (torch, sitp):
        assert lib.load(saved(lib, obj)) == obj
    for lib in (torch, sitp):
        refused(lib, saved(lib, {"q": collections.deque([1])}))
        assert lib.load(saved(lib, {"q": collections.deque([1])}), weights_only=False) == {
            "q": collections.deque([1])
        }


def test_sitp_dtypes_devices_sizes_load_as_torchs_and_back():
    obj = {"dtype": sitp.float64, "dev": sitp.device("cpu"), "size": sitp.Size([2, 3])}
    back = torch.load(saved(sitp, obj))
    assert back == {"dtype": torch.float64, "dev": torch.device("cpu"), "size": torch.Size([2, 3])}
    assert type(back["size"]) is torch.Size
    obj_t = {"dtype": torch.int64, "dev": torch.device("cpu"), "size": torch.Size([4])}
    back_s = sitp.load(saved(torch, obj_t))
    assert back_s == {"dtype": sitp.int64, "dev": sitp.device("cpu"), "size": sitp.Size([4])}
    assert type(back_s["size"]) is sitp.Size and back_s["dtype"] is sitp.int64


def make_optimizer(lib, model):
    opt = lib.optim.AdamW(model.parameters(), lr=0.1, weight_decay=0.01)
    model(lib.tensor(IDX)).square().mean().backward()
    opt.step()
    return opt


def test_optimizer_object_round_trips_with_its_model():
    models = pair()
    states = {}
    for lib, model in models.items():
        opt = make_optimizer(lib, model)
        back = lib.load(saved(lib, {"model": model, "opt": opt}), weights_only=False)
        m2, o2 = back["model"], back["opt"]
        assert type(o2) is type(opt)
        # the optimizer's parameters are the loaded model's, and its state is keyed by them
        assert [id(p) for p in o2.param_groups[0]["params"]] == [id(p) for p in m2.parameters()]
        assert set(map(id, o2.state)) == set(map(id, m2.parameters()))
        assert o2.param_groups[0]["lr"] == 0.1 and o2.defaults == opt.defaults
        # a further step moves both copies alike
        for m, o in ((model, opt), (m2, o2)):
            o.zero_grad()
            m(lib.tensor(IDX)).square().mean().backward()
            o.step()
        np.testing.assert_array_equal(run(lib, m2), run(lib, model))
        states[lib] = [o2.state[p]["exp_avg_sq"].numpy() for p in m2.parameters()]
    for s, t in zip(states[sitp], states[torch]):
        np.testing.assert_allclose(s, t, rtol=1e-10, atol=1e-15)


def test_a_whole_module_is_saved_atomically(tmp_path, monkeypatch):
    path = tmp_path / "model.pt"
    model = pair()[sitp]
    sitp.save({"step": 1}, path)

    def half_then_fail(f, data):
        f.write(data[: len(data) // 2])
        raise OSError("disk full")

    monkeypatch.setattr(sitp.serialization, "_write", half_then_fail)
    with pytest.raises(OSError, match="disk full"):
        sitp.save(model, path)
    monkeypatch.undo()
    assert sitp.load(path) == {"step": 1}
    sitp.save(model, path)
    assert type(sitp.load(path, weights_only=False)) is SitpNet


def test_a_torch_module_file_is_a_clear_error_in_sitp():
    buf = saved(torch, pair()[torch])
    with pytest.raises(pickle.UnpicklingError, match=re.escape("state_dict()")):
        sitp.load(buf, weights_only=False)

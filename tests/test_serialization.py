"""``sitp.save`` / ``sitp.load`` against ``torch.save`` / ``torch.load``: files go both ways,
loading is weights-only by default, writes are atomic, damage is a clear error."""

import collections
import io
import pickle
import zipfile

import numpy as np
import pytest
import torch

import sitp
import sitp.train.checkpoint


def same(s, t):
    """A sitp object and a torch object hold the same nested values."""
    if isinstance(t, torch.Tensor):
        assert isinstance(s, sitp.Tensor), type(s)
        assert tuple(s.shape) == tuple(t.shape)
        np.testing.assert_array_equal(s.numpy(), t.detach().numpy())
    elif isinstance(t, dict):
        assert isinstance(s, dict) and list(s) == list(t), (s, t)
        for k in t:
            same(s[k], t[k])
    elif isinstance(t, (list, tuple)):
        assert type(s) is type(t) and len(s) == len(t)
        for a, b in zip(s, t):
            same(a, b)
    else:
        assert s == t and type(s) is type(t), (s, t)


def sitp_objects():
    model = sitp.nn.Sequential(sitp.nn.Embedding(5, 3), sitp.nn.Linear(3, 4))
    opt = sitp.optim.AdamW(model.parameters(), lr=0.01)
    model(sitp.tensor([[1, 2]])).sum().backward()
    opt.step()
    return model, opt


def test_sitp_file_loads_in_torch_weights_only(tmp_path):
    model, opt = sitp_objects()
    obj = {
        "model": model.state_dict(),
        "optim": opt.state_dict(),
        "step": 3,
        "lr": 0.5,
        "name": "run",
        "flags": [True, None, (1, 2**40)],
        "raw": b"\x00\xff",
        "ints": sitp.arange(4),
        "mask": sitp.tensor([True, False]),
        "f64": sitp.tensor([1.5], dtype=sitp.float64),
        "view": sitp.arange(6.0).reshape(2, 3).t(),
    }
    sitp.save(obj, tmp_path / "a.pt")
    back = torch.load(tmp_path / "a.pt")  # weights_only=True: torch's default
    assert isinstance(back["model"], collections.OrderedDict)
    same(obj["model"], back["model"])
    same(obj["optim"], back["optim"])
    assert back["ints"].dtype == torch.int64 and back["mask"].dtype == torch.bool
    assert back["f64"].dtype == torch.float64
    for k in ("step", "lr", "name", "flags", "raw", "view"):
        same(obj[k], back[k])
    # and the state goes straight into torch's modules
    tmodel = torch.nn.Sequential(torch.nn.Embedding(5, 3), torch.nn.Linear(3, 4))
    tmodel.load_state_dict(back["model"])
    torch.optim.AdamW(tmodel.parameters(), lr=0.01).load_state_dict(back["optim"])


def test_torch_file_loads_in_sitp_and_training_continues_identically(tmp_path):
    torch.manual_seed(0)
    tmodel = torch.nn.Linear(3, 2)
    topt = torch.optim.AdamW(tmodel.parameters(), lr=0.1)
    x = torch.randn(4, 3)
    tmodel(x).square().sum().backward()
    topt.step()
    torch.save(
        {
            "model": tmodel.state_dict(),
            "optim": topt.state_dict(),
            "half": torch.tensor([1.5, -2.0], dtype=torch.float16),
            "bf16": torch.tensor([1.5, -2.0], dtype=torch.bfloat16),
            "i32": torch.tensor([7, -3], dtype=torch.int32),
            "u8": torch.tensor([250], dtype=torch.uint8),
            "view": torch.arange(12.0).reshape(3, 4)[:, 1::2],
            "scalar": torch.tensor(2.5),
        },
        tmp_path / "t.pt",
    )
    back = sitp.load(tmp_path / "t.pt")
    for k in ("half", "bf16", "i32", "u8", "view", "scalar"):
        t = torch.load(tmp_path / "t.pt")[k]
        ref = t.float() if t.dtype in (torch.float16, torch.bfloat16) else t
        np.testing.assert_array_equal(back[k].numpy(), ref.numpy())
    assert back["i32"].dtype == sitp.int64 and back["bf16"].dtype == sitp.float32
    model = sitp.nn.Linear(3, 2)
    model.load_state_dict(back["model"])
    opt = sitp.optim.AdamW(model.parameters(), lr=0.1)
    opt.load_state_dict(back["optim"])
    for _ in range(2):  # the moments and step count came across: the next steps agree
        topt.zero_grad()
        tmodel(x).square().sum().backward()
        topt.step()
        opt.zero_grad()
        model(sitp.tensor(x.numpy())).square().sum().backward()
        opt.step()
    np.testing.assert_allclose(
        model.weight.detach().numpy(), tmodel.weight.detach().numpy(), rtol=1e-5, atol=1e-6
    )


def test_round_trip_keeps_containers_and_tied_tensors(tmp_path):
    w = sitp.randn(3, 2, requires_grad=True)
    obj = {
        "a": [w, (w, 1.0)],
        "od": collections.OrderedDict(b=sitp.zeros(0, 2)),
        "e": {},
        "size": sitp.zeros(2, 3).shape,
        "neg": -(2**70),
    }
    sitp.save(obj, tmp_path / "r.pt")
    back = sitp.load(tmp_path / "r.pt")
    assert back["a"][0] is back["a"][1][0]  # one tensor, stored once
    assert back["a"][0].requires_grad
    np.testing.assert_array_equal(back["a"][0].detach().numpy(), w.detach().numpy())
    assert type(back["od"]) is collections.OrderedDict and back["od"]["b"].shape == (0, 2)
    assert back["e"] == {} and back["size"] == (2, 3) and back["neg"] == -(2**70)
    with zipfile.ZipFile(tmp_path / "r.pt") as z:
        assert len([n for n in z.namelist() if "/data/" in n]) == 2
    t = torch.load(tmp_path / "r.pt")
    assert t["a"][0] is t["a"][1][0]


def test_save_refuses_what_python_cannot_pickle():
    # whole modules and sets are saved, as by torch (tests/test_serialization_modules.py)
    for lib in (sitp, torch):
        with pytest.raises((pickle.PicklingError, AttributeError), match="pickle.*lambda"):
            lib.save({"f": lambda x: x}, io.BytesIO())
    with pytest.raises(TypeError):
        sitp.save({}, io.BytesIO(), protocol=2)  # unknown keyword
    with pytest.raises(ValueError, match="protocol 2"):
        sitp.save({}, io.BytesIO(), pickle_protocol=4)


class Boom:
    def __reduce__(self):
        return (print, ("pwned",))


def torch_archive_with(obj) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("archive/data.pkl", pickle.dumps(obj, protocol=2))
        z.writestr("archive/version", b"3\n")
    return buf.getvalue()


def test_load_is_weights_only_by_default(tmp_path, capsys):
    path = tmp_path / "evil.pt"
    path.write_bytes(torch_archive_with({"x": Boom()}))
    with pytest.raises(
        pickle.UnpicklingError, match=r"evil.pt needs the global (__builtin__|builtins).print"
    ):
        sitp.load(path)
    with pytest.raises(pickle.UnpicklingError):
        torch.load(path)  # torch refuses it too
    assert "pwned" not in capsys.readouterr().out
    path.write_bytes(torch_archive_with({"c": collections.deque("aab")}))
    with pytest.raises(pickle.UnpicklingError):
        torch.load(path)
    with pytest.raises(pickle.UnpicklingError, match="weights_only=False"):
        sitp.load(path)
    assert sitp.load(path, weights_only=False) == {"c": collections.deque("aab")}


@pytest.mark.parametrize("damage", ["truncate", "garbage", "missing-record", "legacy"])
def test_damaged_files_are_clear_errors(tmp_path, damage):
    path = tmp_path / "ck.pt"
    sitp.save({"w": sitp.ones(100)}, path)
    data = path.read_bytes()
    if damage == "truncate":
        path.write_bytes(data[: len(data) // 2])
    elif damage == "garbage":
        path.write_bytes(b"not a checkpoint at all")
    elif damage == "missing-record":
        buf = io.BytesIO()
        with zipfile.ZipFile(io.BytesIO(data)) as src, zipfile.ZipFile(buf, "w") as dst:
            for n in src.namelist():
                if not n.endswith("data/0"):
                    dst.writestr(n, src.read(n))
        path.write_bytes(buf.getvalue())
    else:
        torch.save({"w": torch.ones(2)}, path, _use_new_zipfile_serialization=False)
    if damage == "legacy":
        assert torch.load(path)["w"].tolist() == [1.0, 1.0]  # torch still reads that format
    else:
        with pytest.raises((RuntimeError, pickle.UnpicklingError)):
            torch.load(path)  # torch fails too
    with pytest.raises(RuntimeError, match=str(path).replace("\\", "\\\\")) as info:
        sitp.load(path)
    assert "\n" not in str(info.value)
    assert ("legacy" in str(info.value)) == (damage == "legacy")
    with pytest.raises(FileNotFoundError):
        sitp.load(tmp_path / "nowhere.pt")


def test_save_is_atomic(tmp_path, monkeypatch):
    path = tmp_path / "ck.pt"
    sitp.save({"step": 1}, path)

    def half_then_fail(f, data):
        f.write(data[: len(data) // 2])
        raise OSError("disk on fire")

    monkeypatch.setattr(sitp.serialization, "_write", half_then_fail)
    with pytest.raises(OSError, match="disk on fire"):
        sitp.save({"step": 2, "w": sitp.ones(1000)}, path)
    monkeypatch.undo()
    assert sitp.load(path) == {"step": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["ck.pt"]  # no temporary file left


def test_load_arguments():
    buf = io.BytesIO()
    sitp.save({"w": sitp.ones(2)}, buf)
    for kwargs in [
        dict(map_location="cpu"),
        dict(map_location=sitp.device("cpu")),
        dict(map_location={"cuda:0": "cpu"}),
        dict(mmap=False),
        dict(pickle_module=pickle),
    ]:
        buf.seek(0)
        assert sitp.load(buf, **kwargs)["w"].tolist() == [1.0, 1.0]
    with pytest.raises(TypeError):
        sitp.load(buf, weights_onl=True)
    with pytest.raises(TypeError, match="map_location"):
        sitp.load(buf, map_location=lambda s, loc: s)

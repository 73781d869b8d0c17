"""torch's legacy tensor types (``LongTensor`` & co.) and ``torch.accelerator``, against
torch: the same call forms give the same values, dtypes and shapes, ``isinstance``
answers alike, and bad calls fail alike."""

import numpy as np
import pytest
import torch

import sitp

TYPES = ["LongTensor", "FloatTensor", "DoubleTensor", "BoolTensor"]
DATA = [
    [1, 0, 3],
    [[1.7, -2.2], [0.0, 3.5]],
    (2, 3),  # a tuple is data, not a size
    [[True, False]],
    np.array([[4, 5]]),
    [],
]


@pytest.mark.parametrize("name", TYPES)
@pytest.mark.parametrize("data", DATA, ids=[f"data{i}" for i in range(len(DATA))])
def test_from_data(name, data):
    t = getattr(torch, name)(data)
    s = getattr(sitp, name)(data)
    assert type(s) is sitp.Tensor and type(t) is torch.Tensor
    assert str(s.dtype).split(".")[-1] == str(t.dtype).split(".")[-1]
    assert tuple(s.shape) == tuple(t.shape)
    np.testing.assert_array_equal(s.numpy(), t.numpy())


@pytest.mark.parametrize("name", TYPES)
@pytest.mark.parametrize(
    "args", [(), (0,), (2, 3), (4,), "size"], ids=["none", "zero", "2x3", "4", "Size"]
)
def test_from_sizes(name, args):
    targs = (torch.Size([2, 1, 3]),) if args == "size" else args
    sargs = (sitp.Size([2, 1, 3]),) if args == "size" else args
    t = getattr(torch, name)(*targs)
    s = getattr(sitp, name)(*sargs)
    assert tuple(s.shape) == tuple(t.shape)
    assert s.dtype is getattr(sitp, name).dtype
    assert str(s.dtype).split(".")[-1] == str(getattr(torch, name).dtype).split(".")[-1]


def test_isinstance_asks_the_dtype_as_torch():
    made = {
        torch: [torch.ones(2, dtype=d) for d in (torch.int64, torch.float32, torch.float64)]
        + [torch.ones(2) > 0, torch.nn.Parameter(torch.ones(1)), torch.arange(3)],
        sitp: [sitp.ones(2, dtype=d) for d in (sitp.int64, sitp.float32, sitp.float64)]
        + [sitp.ones(2) > 0, sitp.nn.Parameter(sitp.ones(1)), sitp.arange(3)],
    }
    answers = {
        lib: [[isinstance(x, getattr(lib, n)) for n in TYPES] for x in xs]
        for lib, xs in made.items()
    }
    assert answers[sitp] == answers[torch]
    for lib in (torch, sitp):
        assert not isinstance([1], lib.LongTensor) and not isinstance(1, lib.FloatTensor)
        assert not issubclass(lib.LongTensor, lib.Tensor)
        assert lib.FloatTensor.dtype is lib.float32 and lib.LongTensor.dtype is lib.int64
        assert repr(lib.LongTensor) == f"<class '{lib.__name__}.LongTensor'>"


def test_a_tensor_of_the_same_dtype_is_seen_again():
    for lib in (torch, sitp):
        x = lib.arange(4)
        y = lib.LongTensor(x)
        assert y is not x and y.tolist() == x.tolist()
        y[0] = 7  # shares x's storage
        assert x[0].item() == 7


def fails_alike(call):
    """``call(lib)`` raises the same exception type in both; sitp's message."""
    errors = {}
    for lib in (torch, sitp):
        with pytest.raises(Exception) as info:
            call(lib)
        errors[lib] = info
    assert errors[sitp].type is errors[torch].type, (errors[sitp].value, errors[torch].value)
    return str(errors[sitp].value)


def test_bad_calls_fail_as_in_torch():
    assert "float32" in fails_alike(lambda lib: lib.LongTensor(lib.ones(2)))
    assert "got float" in fails_alike(lambda lib: lib.LongTensor(2.0))
    assert "got NoneType" in fails_alike(lambda lib: lib.FloatTensor(None))
    assert "str" in fails_alike(lambda lib: lib.FloatTensor("ab"))
    assert "negative dimension -1" in fails_alike(lambda lib: lib.FloatTensor(-1))
    fails_alike(lambda lib: lib.FloatTensor([[1, 2], [3]]))
    fails_alike(lambda lib: lib.FloatTensor([1], dtype=lib.float64))
    assert "cuda" in fails_alike(lambda lib: lib.FloatTensor([1], device="cuda"))
    assert sitp.FloatTensor([1], device="cpu").tolist() == [1.0]


@pytest.mark.parametrize("name", ["IntTensor", "ByteTensor", "HalfTensor", "ShortTensor"])
def test_types_of_dtypes_sitp_lacks_say_what_to_use(name):
    assert getattr(torch, name)([1]).tolist() == [1]  # torch has them ...
    with pytest.raises(TypeError, match=r"sitp\.(Long|Float|Bool)Tensor"):  # ... sitp does not
        getattr(sitp, name)([1])
    assert not any(isinstance(x, getattr(sitp, name)) for x in (sitp.ones(1), sitp.arange(2)))


# ---------------------------------------------------------------- accelerator
def test_accelerator_follows_cuda_is_available():
    acc = sitp.accelerator
    assert acc.is_available() == sitp.cuda.is_available()
    if acc.is_available():
        assert acc.current_accelerator() == sitp.device("cuda")
        assert acc.device_count() == 1 and acc.current_device_index() == 0
        acc.synchronize()
        return
    # no GPU (the simulator, if any, is not an accelerator): as torch's CPU build says
    assert not torch.accelerator.is_available()
    assert acc.current_accelerator() is None is torch.accelerator.current_accelerator()
    assert acc.current_accelerator(check_available=True) is None
    assert acc.device_count() == 0 == torch.accelerator.device_count()
    for name in ("current_device_index", "synchronize"):
        with pytest.raises(RuntimeError) as mine:
            getattr(acc, name)()
        with pytest.raises(RuntimeError) as theirs:
            getattr(torch.accelerator, name)()
        assert str(mine.value) == str(theirs.value)
    with pytest.raises(RuntimeError):
        acc.set_device_index(0)


def test_device_agnostic_code_picks_the_cpu_without_a_gpu():
    def pick(lib):
        acc = lib.accelerator.current_accelerator()
        return acc.type if acc is not None else "cpu"

    if not sitp.cuda.is_available():
        assert pick(sitp) == "cpu"
        x = sitp.ones(2, device=pick(sitp))
        assert x.device.type == "cpu"

"""``sitp.save`` and ``sitp.load``: tensors, state dicts and nested containers, in the
file format of ``torch.save``.

The format is PyTorch's zip format (the default of ``torch.save`` since 1.6): a zip
archive holding ``archive/data.pkl``, a protocol-2 pickle of the object in which each
tensor is a call of ``torch._utils._rebuild_tensor_v2`` on a storage, and one record
``archive/data/<key>`` of raw little-endian bytes per storage. So, measured against
torch 2.13 (``tests/test_serialization.py``):

* a file written by ``sitp.save`` loads with ``torch.load`` (``weights_only=True``, its
  default): the same values, dtypes, shapes and nested containers;
* a file written by ``torch.save`` of tensors, ``state_dict()`` s (with their
  ``_metadata``), optimizer ``state_dict()`` s, and dicts, lists, tuples, numbers,
  strings, bools and None loads with ``sitp.load``. Integer tensors of every width
  load as int64 and float16/bfloat16 ones as float32 (sitp's dtypes; the values are
  exact); complex tensors, quantized tensors and ``torch.save`` of whole modules or
  other Python objects do not load (a clear error names what is missing);
* non-contiguous tensors and tensors that share a storage load with their values,
  each as its own contiguous tensor: sitp does not rebuild the sharing;
* the legacy pre-1.6 format (``_use_new_zipfile_serialization=False``) is not read.

``sitp.save`` writes only what it knows how to rebuild safely: tensors, dicts (and
OrderedDicts), lists, tuples, ints, floats, bools, strings, bytes and None. Anything
else is a ``TypeError`` naming where in the object it sits (save a module's
``state_dict()``, not the module). A tensor used twice (a tied weight) is stored once
and loads as one tensor in both places.

Loading is safe by default, like ``torch.load(weights_only=True)``: the unpickler
accepts only the globals that rebuild tensors and ``collections.OrderedDict``; any
other global, which is how a pickle runs arbitrary code, is an
``pickle.UnpicklingError``. ``weights_only=False`` allows other globals, for files you
trust. A truncated or damaged file is a ``RuntimeError`` that names the file.

Writing to a path is atomic (:func:`write_atomically`, which the checkpoints of
:mod:`sitp.train.checkpoint` use too): a crash leaves the old file or the new one, never
half of one.
"""

from __future__ import annotations

import _codecs
import collections
import io
import os
import pickle
import struct
import tempfile
import zipfile
from pathlib import Path

import numpy as np

from sitp import dtypes
from sitp._tensor.creation import tensor
from sitp._tensor.tensor import Tensor
from sitp._tensor.tensor import device as Device
from sitp.nn.parameter import Parameter

_UMASK = os.umask(0)
os.umask(_UMASK)


# --8<-- [start:atomic]
def _write(f, data: bytes) -> None:
    """Writes ``data`` to the open temporary file (the tests make this crash halfway)."""
    f.write(data)


def write_atomically(path: str | os.PathLike, data: bytes) -> None:
    """Replaces ``path`` with ``data`` so that a reader sees the old file or the new one.

    1. write the bytes to a temporary file in the same directory (same file system);
    2. ``flush`` and ``fsync`` it, so the bytes are on disk before the name is;
    3. ``os.replace`` it onto ``path`` (atomic on POSIX and Windows);
    4. ``fsync`` the directory, so the rename itself survives a power cut.

    If anything fails, the temporary file is removed and ``path`` is untouched.
    """
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp makes it private; give it a normal file's mode
        with os.fdopen(fd, "wb") as f:
            _write(f, data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


# --8<-- [end:atomic]


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # e.g. Windows cannot open a directory
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


# torch storage class name -> numpy dtype of its bytes, and the sitp dtype it loads as
_STORAGES = {
    "FloatStorage": ("<f4", "float32"),
    "DoubleStorage": ("<f8", "float64"),
    "HalfStorage": ("<f2", "float32"),
    "BFloat16Storage": (None, "float32"),
    "LongStorage": ("<i8", "int64"),
    "IntStorage": ("<i4", "int64"),
    "ShortStorage": ("<i2", "int64"),
    "CharStorage": ("i1", "int64"),
    "ByteStorage": ("u1", "int64"),
    "BoolStorage": ("?", "bool"),
}
_WRITE = {
    "float32": ("FloatStorage", "<f4"),
    "float64": ("DoubleStorage", "<f8"),
    "int64": ("LongStorage", "<i8"),
    "bool": ("BoolStorage", "?"),
}


class _Writer:
    """Hand-written protocol-2 pickle opcodes for the containers ``save`` allows.

    The standard ``pickle.Pickler`` cannot name ``torch._utils._rebuild_tensor_v2``
    without importing torch, so the few opcodes needed are written directly.
    """

    def __init__(self):
        self.out = io.BytesIO()
        self.storages: list[bytes] = []
        self._memo: dict[int, tuple] = {}  # id(tensor) -> (memo index, tensor): tied weights

    def write(self, b: bytes) -> None:
        self.out.write(b)

    def global_(self, module: str, name: str) -> None:
        self.write(pickle.GLOBAL + f"{module}\n{name}\n".encode())

    def dump(self, obj, where: str) -> None:
        w = self.write
        if obj is None:
            w(pickle.NONE)
        elif obj is True or obj is False:
            w(pickle.NEWTRUE if obj else pickle.NEWFALSE)
        elif isinstance(obj, Tensor):
            self.tensor(obj)
        elif isinstance(obj, (int, np.integer)):
            n = int(obj)
            if -(2**31) <= n < 2**31:
                w(pickle.BININT + struct.pack("<i", n))
            else:
                data = n.to_bytes((n.bit_length() + 8) // 8, "little", signed=True)
                w(pickle.LONG1 + bytes([len(data)]) + data)
        elif isinstance(obj, (float, np.floating)):
            w(pickle.BINFLOAT + struct.pack(">d", float(obj)))
        elif isinstance(obj, str):
            data = obj.encode("utf-8", "surrogatepass")
            w(pickle.BINUNICODE + struct.pack("<I", len(data)) + data)
        elif isinstance(obj, bytes):
            # protocol 2 has no bytes opcode: _codecs.encode(latin1 text), as pickle does
            self.global_("_codecs", "encode")
            self.dump(obj.decode("latin1"), where)
            self.dump("latin1", where)
            w(pickle.TUPLE2 + pickle.REDUCE)
        elif isinstance(obj, (dict, collections.OrderedDict)):
            if type(obj) is collections.OrderedDict:
                self.global_("collections", "OrderedDict")
                w(pickle.EMPTY_TUPLE + pickle.REDUCE)
            elif type(obj) is dict:
                w(pickle.EMPTY_DICT)
            else:
                raise TypeError(
                    f"sitp.save cannot save a {type(obj).__name__} at {where}: "
                    f"only dict and OrderedDict mappings"
                )
            if obj:
                w(pickle.MARK)
                for k, v in obj.items():
                    self.dump(k, where)
                    self.dump(v, f"{where}[{k!r}]")
                w(pickle.SETITEMS)
            meta = getattr(obj, "_metadata", None)
            if meta is not None:  # a state_dict's per-module versions, as torch writes it
                w(pickle.EMPTY_DICT)
                self.dump("_metadata", where)
                self.dump(meta, f"{where}._metadata")
                w(pickle.SETITEM + pickle.BUILD)
        elif type(obj) is list:
            w(pickle.EMPTY_LIST)
            if obj:
                w(pickle.MARK)
                for i, v in enumerate(obj):
                    self.dump(v, f"{where}[{i}]")
                w(pickle.APPENDS)
        elif isinstance(obj, tuple) and (type(obj) is tuple or type(obj).__name__ == "Size"):
            w(pickle.MARK)
            for i, v in enumerate(obj):
                self.dump(v, f"{where}[{i}]")
            w(pickle.TUPLE)
        else:
            hint = " (save its state_dict() instead)" if hasattr(obj, "state_dict") else ""
            raise TypeError(
                f"sitp.save cannot save an object of type {type(obj).__name__} "
                f"at {where}{hint}: it saves tensors, dicts, lists, tuples, "
                f"numbers, strings, bytes and None"
            )

    def tensor(self, t: Tensor) -> None:
        if id(t) in self._memo:  # the same tensor again: a reference to the first one
            self.write(pickle.LONG_BINGET + struct.pack("<I", self._memo[id(t)][0]))
            return
        dtype = str(t.dtype).split(".")[-1]
        if dtype not in _WRITE:
            raise TypeError(f"sitp.save: no torch storage for dtype {t.dtype}")
        array = np.ascontiguousarray(t.detach().cpu().numpy()).astype(_WRITE[dtype][1])
        key = str(len(self.storages))
        self.storages.append(array.tobytes())
        storage_name = _WRITE[dtype][0]
        shape = tuple(t.shape)
        strides, acc = [], 1
        for n in reversed(shape):
            strides.append(acc)
            acc *= max(n, 1)
        w = self.write
        self.global_("torch._utils", "_rebuild_tensor_v2")
        w(pickle.MARK + pickle.MARK)
        self.dump("storage", "")
        self.global_("torch", storage_name)
        self.dump(key, "")
        self.dump("cpu", "")
        self.dump(int(np.prod(shape, dtype=np.int64)), "")
        w(pickle.TUPLE + pickle.BINPERSID)
        self.dump(0, "")
        self.dump(shape, "")
        self.dump(tuple(reversed(strides)), "")
        self.dump(bool(t.requires_grad), "")
        self.global_("collections", "OrderedDict")
        w(pickle.EMPTY_TUPLE + pickle.REDUCE + pickle.TUPLE + pickle.REDUCE)
        index = len(self._memo)
        w(pickle.LONG_BINPUT + struct.pack("<I", index))
        self._memo[id(t)] = (index, t)  # keeps t alive, so that its id stays unique


def _archive(obj) -> bytes:
    writer = _Writer()
    writer.write(pickle.PROTO + b"\x02")
    writer.dump(obj, "the object")
    writer.write(pickle.STOP)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as z:
        z.writestr("archive/data.pkl", writer.out.getvalue())
        z.writestr("archive/.format_version", b"1")
        z.writestr("archive/.storage_alignment", b"64")
        z.writestr("archive/byteorder", b"little")
        for key, data in enumerate(writer.storages):
            z.writestr(f"archive/data/{key}", data)
        z.writestr("archive/version", b"3\n")
    return buf.getvalue()


def save(
    obj,
    f,
    pickle_module=pickle,
    pickle_protocol: int = 2,
    _use_new_zipfile_serialization: bool = True,
    _disable_byteorder_record: bool = False,
) -> None:
    """Save ``obj`` to ``f`` (a path or a binary file object) in ``torch.save``'s format.

    Args:
        obj: tensors, dicts, lists, tuples, numbers, strings, bytes and None, nested.
        f: a path (written atomically) or an object with ``write``.
        pickle_module: only the standard ``pickle`` (sitp writes the opcodes itself).
        pickle_protocol: only 2, what ``torch.save`` writes.

    Raises:
        TypeError: for an object ``save`` does not store (the message says where).
        ValueError: for a pickle module, protocol or legacy format sitp does not write.

    >>> import io, sitp
    >>> buf = io.BytesIO()
    >>> sitp.save({"w": sitp.ones(2, 3), "step": 7}, buf)
    >>> _ = buf.seek(0)
    >>> back = sitp.load(buf)
    >>> back["w"].shape, back["step"]
    (sitp.Size([2, 3]), 7)
    """
    if pickle_module is not pickle:
        raise ValueError(
            "sitp.save writes its own pickle opcodes; pickle_module must be "
            "the standard pickle module"
        )
    if pickle_protocol != 2:
        raise ValueError(
            f"sitp.save writes pickle protocol 2, as torch.save does; "
            f"got pickle_protocol={pickle_protocol}"
        )
    if not _use_new_zipfile_serialization:
        raise ValueError(
            "sitp.save writes only torch's zip format (_use_new_zipfile_serialization=True)"
        )
    data = _archive(obj)
    if isinstance(f, (str, os.PathLike)):
        write_atomically(f, data)
    elif hasattr(f, "write"):
        f.write(data)
    else:
        raise TypeError(
            f"sitp.save: f must be a path or a binary file object, got {type(f).__name__}"
        )


# ------------------------------------------------------------------ loading
class _Storage:
    """A storage record read from the archive: raw bytes, their torch type, and the
    device its tensors load onto (None: the CPU)."""

    def __init__(self, name, data: bytes, device=None):
        np_dtype, self.sitp_dtype = _STORAGES[name]
        self.device = device
        if name == "BFloat16Storage":  # bfloat16 is the top half of a float32
            bits = np.frombuffer(data, "<u2").astype(np.uint32) << 16
            self.array = bits.view("<f4")
        else:
            self.array = np.frombuffer(data, np_dtype)


class _StorageType:
    def __init__(self, name):
        self.name = name


def _rebuild_tensor_v2(
    storage, offset, size, stride, requires_grad=False, hooks=None, metadata=None
):
    itemsize = storage.array.itemsize
    size, stride = tuple(size), tuple(stride)
    need = offset + sum((n - 1) * s for n, s in zip(size, stride)) + 1 if all(size) else 0
    if offset < 0 or need > storage.array.size:
        raise RuntimeError(
            f"tensor of size {size} at offset {offset} does not fit its "
            f"storage of {storage.array.size} items"
        )
    view = np.lib.stride_tricks.as_strided(
        storage.array[offset:], size, tuple(s * itemsize for s in stride)
    )
    t = tensor(
        np.array(view),
        dtype=getattr(dtypes, storage.sitp_dtype if storage.sitp_dtype != "bool" else "bool_"),
    )
    if storage.device is not None:
        t = t.to(storage.device)
    if requires_grad:
        t.requires_grad_(True)
    return t


def _rebuild_parameter(data, requires_grad, backward_hooks, *state):
    return Parameter(data, requires_grad=requires_grad)


_SAFE = {
    ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor_v2,
    ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
    ("collections", "OrderedDict"): collections.OrderedDict,
    ("torch", "Size"): tuple,
}


class _Unpickler(pickle.Unpickler):
    def __init__(self, file, archive, prefix, path, weights_only, map_location, **kwargs):
        super().__init__(file, **kwargs)
        self.archive, self.prefix, self.path = archive, prefix, path
        self.map_location = map_location
        self.weights_only = weights_only
        self.loaded: dict[str, _Storage] = {}

    def find_class(self, module, name):
        if (module, name) in _SAFE:
            return _SAFE[(module, name)]
        if module == "torch" and name in _STORAGES:
            return _StorageType(name)
        if module == "_codecs" and name == "encode":
            return _codecs.encode
        if module in ("torch", "torch._utils") and name.endswith("Storage"):
            raise pickle.UnpicklingError(
                f"sitp.load: {self.path} holds a torch.{name}, a dtype sitp does not have"
            )
        if not self.weights_only and not module.startswith("torch"):
            return super().find_class(module, name)
        raise pickle.UnpicklingError(
            f"sitp.load: {self.path} needs the global {module}.{name}, which a weights-only "
            f"load does not run"
            + ("" if self.weights_only else " (it is torch's)")
            + (". If you trust the file, pass weights_only=False." if self.weights_only else "")
        )

    def persistent_load(self, pid):
        if not (isinstance(pid, tuple) and len(pid) >= 3 and pid[0] == "storage"):
            raise pickle.UnpicklingError(
                f"sitp.load: {self.path}: unknown persistent id {pid!r:.80}"
            )
        storage_type, key = pid[1], str(pid[2])
        if not isinstance(storage_type, _StorageType):
            raise pickle.UnpicklingError(f"sitp.load: {self.path}: bad storage {pid!r:.80}")
        if key not in self.loaded:
            record = f"{self.prefix}data/{key}"
            try:
                data = self.archive.read(record)
            except KeyError:
                raise RuntimeError(
                    f"sitp.load: {self.path} is corrupt: the record {record} is missing"
                ) from None
            location = str(pid[3]) if len(pid) > 3 else "cpu"
            self.loaded[key] = _Storage(
                storage_type.name, data, _target(self.map_location, location)
            )
        return self.loaded[key]


def load(
    f,
    map_location=None,
    pickle_module=None,
    *,
    weights_only=None,
    mmap=None,
    encoding: str = "utf-8",
):
    """Load an object saved by ``sitp.save`` or ``torch.save`` (zip format).

    Args:
        f: a path or a binary file object.
        map_location: None or ``"cpu"`` (every tensor loads onto the CPU, also one
            torch saved from a GPU), a device or device string (tensors move there), or
            a dict from the saved location strings (``"cuda:0"``) to devices.
        pickle_module: None or the standard ``pickle`` module.
        weights_only: True (the default, as in torch 2.6+): only tensors, containers,
            numbers and strings are rebuilt. False: other globals too (trusted files).
        mmap: accepted; the file is read into memory either way, with the same result.
        encoding: for pickles written by Python 2, as in ``pickle.load``.

    Raises:
        RuntimeError: the file is truncated, not a zip archive, a legacy torch file, or
            missing a record (the message names the file).
        pickle.UnpicklingError: the file needs a global a weights-only load refuses.
        FileNotFoundError: there is no such file.
    """
    if pickle_module is not None and pickle_module is not pickle:
        raise ValueError(
            "sitp.load reads with its own unpickler; pickle_module must be None "
            "or the standard pickle module"
        )
    if weights_only is None:
        weights_only = True
    if not isinstance(weights_only, bool):
        raise TypeError(f"weights_only must be a bool, got {type(weights_only).__name__}")
    if mmap not in (None, False, True):
        raise TypeError(f"mmap must be a bool, got {type(mmap).__name__}")
    _check_location(map_location)
    if isinstance(f, (str, os.PathLike)):
        path = str(f)
        data = Path(f).read_bytes()
    elif hasattr(f, "read"):
        path = getattr(f, "name", None) or f"<{type(f).__name__}>"
        data = f.read()
    else:
        raise TypeError(
            f"sitp.load: f must be a path or a binary file object, got {type(f).__name__}"
        )
    if data[:2] == b"\x80\x02" or data[:1] == b"\x80":
        raise RuntimeError(
            f"sitp.load: {path} is in torch's legacy (pre-1.6) format, which "
            f"sitp does not read; re-save it with torch.save's default format"
        )
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
        names = archive.namelist()
        pkl = next((n for n in names if n.endswith("data.pkl") and n.count("/") == 1), None)
        if pkl is None:
            raise RuntimeError(
                f"sitp.load: {path} is not a torch.save archive (no data.pkl record)"
            )
        prefix = pkl[: -len("data.pkl")]
        unpickler = _Unpickler(
            io.BytesIO(archive.read(pkl)),
            archive,
            prefix,
            path,
            weights_only,
            map_location,
            encoding=encoding,
        )
        obj = unpickler.load()
    except (
        zipfile.BadZipFile,
        EOFError,
        zipfile.LargeZipFile,
        struct.error,
        ValueError,
        OSError,
        IndexError,
    ) as error:
        raise RuntimeError(
            f"sitp.load: {path} is truncated or corrupt "
            f"({type(error).__name__}: {' '.join(str(error).split())[:200]})"
        ) from None
    except pickle.UnpicklingError as error:
        if str(error).startswith("sitp.load"):
            raise
        raise RuntimeError(f"sitp.load: {path} is corrupt (its pickle: {error})") from None
    return obj


def _check_location(map_location) -> None:
    if map_location is None or isinstance(map_location, (str, Device)):
        return
    if isinstance(map_location, dict):
        for v in map_location.values():
            if not isinstance(v, (str, Device)):
                raise TypeError(f"sitp.load: map_location maps to devices, got {type(v).__name__}")
        return
    raise TypeError(
        f"sitp.load: map_location must be None, a device, a device string or a "
        f"dict of them; got {type(map_location).__name__}"
    )


def _target(map_location, location: str):
    """The device the tensors of a storage saved at ``location`` load onto (None: CPU).

    Without ``map_location`` everything loads onto the CPU, also what torch saved from
    a GPU (torch would put it back on the GPU).
    """
    if isinstance(map_location, dict):
        map_location = map_location.get(location, None)
    if map_location is None:
        return None
    d = Device(map_location)
    return None if d.type == "cpu" else d


__all__ = ["load", "save"]

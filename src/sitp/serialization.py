"""``sitp.save`` and ``sitp.load``: tensors, state dicts, whole modules and any picklable
object, in the file format of ``torch.save``.

The format is PyTorch's zip format (the default of ``torch.save`` since 1.6): a zip
archive holding ``archive/data.pkl``, a protocol-2 pickle of the object in which each
tensor is a call of ``torch._utils._rebuild_tensor_v2`` on a storage, and one record
``archive/data/<key>`` of raw little-endian bytes per storage. So, measured against
torch 2.13 (``tests/test_serialization.py``, ``tests/test_serialization_modules.py``):

* a file written by ``sitp.save`` loads with ``torch.load`` (``weights_only=True``, its
  default): the same values, dtypes, shapes and nested containers;
* a file written by ``torch.save`` of tensors, ``state_dict()`` s (with their
  ``_metadata``), optimizer ``state_dict()`` s, and dicts, lists, tuples, numbers,
  strings, bools and None loads with ``sitp.load``. Integer tensors of every width
  load as int64 and float16/bfloat16 ones as float32 (sitp's dtypes; the values are
  exact); complex tensors, quantized tensors and ``torch.save`` of whole torch modules
  do not load (a clear error names what is missing);
* non-contiguous tensors and tensors that share a storage load with their values,
  each as its own contiguous tensor: sitp does not rebuild the sharing;
* the legacy pre-1.6 format (``_use_new_zipfile_serialization=False``) is not read.

``sitp.save`` pickles anything Python pickles, as ``torch.save`` does: a whole module,
an optimizer, a user's class (by its dotted name), sets and any container. Tensors,
parameters, dtypes, devices and sizes are written under torch's names
(``torch._utils._rebuild_tensor_v2``, ``torch._utils._rebuild_parameter``,
``torch.float32``, ``torch.device``, ``torch.Size``), so that a file of tensors and
containers loads in torch. A tensor used twice (a tied weight) is stored once and loads
as one tensor in both places.

Loading is weights-only by default, like ``torch.load`` since 2.6: the unpickler
rebuilds tensors and the globals torch allows by default (``OrderedDict``, ``Counter``,
``set``, ``bytearray``, ``complex``, torch's dtypes, ``Size`` and ``device``); any
other global, which is how a pickle runs arbitrary code, is a ``pickle.UnpicklingError``
that names it and says how to allow it: :func:`add_safe_globals` or the
:class:`safe_globals` context manager for classes you trust (a whole module loads
weights-only once its classes are allowed), ``weights_only=False`` for a file you trust.
A whole module that torch saved does not load in sitp (its classes are torch's). A
truncated or damaged file is a ``RuntimeError`` that names the file.

Writing to a path is atomic (:func:`write_atomically`, which the checkpoints of
:mod:`sitp.train.checkpoint` use too): a crash leaves the old file or the new one, never
half of one.
"""

from __future__ import annotations

import _codecs
import _compat_pickle
import collections
import io
import os
import pickle
import pickletools
import struct
import tempfile
import zipfile
from pathlib import Path

import numpy as np

from sitp import dtypes
from sitp._tensor.creation import tensor
from sitp._tensor.tensor import Size, Tensor
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


class _AsTensor:
    """A parameter's data, pickled as a plain tensor inside ``_rebuild_parameter``."""

    def __init__(self, t: Tensor):
        self.t = t


class _Pickler(pickle._Pickler):
    """The standard pickler (protocol 2), with tensors written as ``torch.save`` writes them.

    A tensor becomes a call of ``torch._utils._rebuild_tensor_v2`` on a storage, whose
    bytes go into a record of their own (a persistent id); a parameter becomes
    ``torch._utils._rebuild_parameter`` of such a tensor; dtypes, devices and sizes become
    ``torch.float32``, ``torch.device``, ``torch.Size``. Everything else (a whole module,
    an optimizer, a user's class) is pickled as Python pickles it, by its class's
    dotted name. The Python implementation of the pickler is used because the names
    ``torch._utils...`` must be written without importing torch (``save_global``).
    """

    def __init__(self, file):
        super().__init__(file, protocol=2)
        self.storages: list[bytes] = []

    def save(self, obj, save_persistent_id=True):
        if isinstance(obj, (np.bool_, np.integer, np.floating)):
            obj = obj.item()  # numpy scalars as Python numbers, which any loader reads
        super().save(obj, save_persistent_id)

    def persistent_id(self, obj):
        if type(obj) is _StorageOut:
            return ("storage", _StorageType(obj.name), obj.key, "cpu", obj.numel)
        return None

    def reducer_override(self, obj):
        if id(obj) in _TORCH_NAME:  # a dtype, torch.Size, a rebuild function: a global
            return "global"  # save_global below writes torch's name
        if isinstance(obj, Parameter):
            return (
                _rebuild_parameter,
                (_AsTensor(obj), obj.requires_grad, collections.OrderedDict()),
            )
        if isinstance(obj, (Tensor, _AsTensor)):
            return self.tensor(obj.t if type(obj) is _AsTensor else obj)
        if isinstance(obj, Device):
            return (Device, (obj.type,) if obj.index is None else (obj.type, obj.index))
        if isinstance(obj, Size):
            return (Size, (tuple(obj),))
        if isinstance(obj, _StorageType):
            return obj.name  # a global: save_global below writes torch.<name>
        return NotImplemented

    def save_global(self, obj, name=None):
        where = _TORCH_NAME.get(id(obj))
        if isinstance(obj, _StorageType):
            where = ("torch", obj.name)
        if where is None:
            return super().save_global(obj, name)
        self.write(pickle.GLOBAL + f"{where[0]}\n{where[1]}\n".encode())
        self.memoize(obj)

    def tensor(self, t: Tensor):
        dtype = t.dtype.name
        if dtype not in _WRITE:
            raise TypeError(f"sitp.save: no torch storage for dtype {t.dtype}")
        array = np.ascontiguousarray(t.detach().cpu().numpy()).astype(_WRITE[dtype][1])
        storage = _StorageOut(_WRITE[dtype][0], str(len(self.storages)), array.size)
        self.storages.append(array.tobytes())
        shape = tuple(t.shape)
        strides, acc = [], 1
        for n in reversed(shape):
            strides.append(acc)
            acc *= max(n, 1)
        args = (storage, 0, shape, tuple(reversed(strides)), bool(t.requires_grad))
        return (_rebuild_tensor_v2, (*args, collections.OrderedDict()))


class _StorageOut:
    """One storage being written: its torch class name, record key and length."""

    def __init__(self, name: str, key: str, numel: int):
        self.name, self.key, self.numel = name, key, numel


def _archive(obj) -> bytes:
    out = io.BytesIO()
    writer = _Pickler(out)
    writer.dump(obj)  # what Python cannot pickle (a lambda, a lock) raises as in torch.save
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as z:
        z.writestr("archive/data.pkl", out.getvalue())
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
        obj: anything Python pickles: tensors and containers of them (a state dict),
            a whole module, an optimizer, a user's object (pickled by its class's name,
            so loading it needs that class importable, and allowed, see :func:`load`).
        f: a path (written atomically) or an object with ``write``.
        pickle_module: only the standard ``pickle`` (sitp writes torch's names itself).
        pickle_protocol: only 2, what ``torch.save`` writes.

    Raises:
        pickle.PicklingError, TypeError, AttributeError: for what Python cannot pickle
            (a lambda, a lock, a local class), as ``torch.save`` raises them.
        ValueError: for a pickle module, protocol or legacy format sitp does not write.

    >>> import io, sitp
    >>> buf = io.BytesIO()
    >>> sitp.save({"w": sitp.ones(2, 3), "step": 7}, buf)
    >>> _ = buf.seek(0)
    >>> back = sitp.load(buf)
    >>> back["w"].shape, back["step"]
    (sitp.Size([2, 3]), 7)
    >>> _ = buf.seek(0); _ = buf.truncate()
    >>> sitp.save(sitp.nn.Linear(3, 2), buf)  # a whole module
    >>> _ = buf.seek(0)
    >>> sitp.load(buf, weights_only=False)
    Linear(in_features=3, out_features=2, bias=True)
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


def _rebuild_parameter(data, requires_grad, backward_hooks=None, *state):
    return Parameter(data, requires_grad=requires_grad)


def _torch_dtype(name: str):
    return getattr(dtypes, "bool_" if name == "bool" else name)


# the globals every load allows, as (module, name) -> what rebuilds it here: torch's
# rebuild functions, torch.Size/device/dtypes, and the few builtins torch allows too
_SAFE = {
    ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor_v2,
    ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
    ("torch.nn.parameter", "Parameter"): Parameter,
    ("torch", "Tensor"): Tensor,
    ("torch", "Size"): Size,
    ("torch", "device"): Device,
    ("collections", "OrderedDict"): collections.OrderedDict,
    ("collections", "Counter"): collections.Counter,
    ("builtins", "set"): set,
    ("builtins", "bytearray"): bytearray,
    ("builtins", "complex"): complex,
    ("_codecs", "encode"): _codecs.encode,
}
_SAFE.update(
    {("torch", name): _torch_dtype(name) for name in ("float32", "float64", "int64", "bool")}
)
# what save writes for sitp's objects: id(object) -> torch's (module, name)
_TORCH_NAME = {id(v): k for k, v in _SAFE.items() if k[0].startswith("torch")}
_TORCH_DTYPES = (
    "float16 bfloat16 int32 int16 int8 uint8 complex64 complex128 uint16 uint32 uint64 "
    "float8_e4m3fn float8_e5m2 half cfloat cdouble"
).split()


# --------------------------------------------------------------- safe globals
_user_globals: set = set()  # what add_safe_globals / safe_globals allow a weights-only load


def add_safe_globals(safe_globals: list) -> None:
    """Allow weights-only loads to rebuild these classes and functions (as torch's does).

    Each entry is a class or function, allowed under its ``__module__.__qualname__``, or a
    tuple ``(obj, "module.name")`` for one pickled under another name. Only allow what
    you trust: a weights-only load calls it with arguments that come from the file.

    >>> import collections, sitp
    >>> sitp.serialization.add_safe_globals([collections.deque])
    >>> collections.deque in sitp.serialization.get_safe_globals()
    True
    >>> sitp.serialization.clear_safe_globals()
    """
    _user_globals.update(safe_globals)


def get_safe_globals() -> list:
    """The classes and functions that :func:`add_safe_globals` allowed, as a list."""
    return list(_user_globals)


def clear_safe_globals() -> None:
    """Forget every global that :func:`add_safe_globals` allowed."""
    _user_globals.clear()


class safe_globals:
    """A context manager: :func:`add_safe_globals` on entry; on exit those are removed.

    >>> import collections, io, sitp
    >>> buf = io.BytesIO()
    >>> sitp.save(collections.deque([1, 2]), buf)
    >>> _ = buf.seek(0)
    >>> with sitp.serialization.safe_globals([collections.deque]):
    ...     sitp.load(buf)
    deque([1, 2])
    """

    def __init__(self, safe_globals: list):
        self.safe_globals = safe_globals

    def __enter__(self):
        add_safe_globals(self.safe_globals)

    def __exit__(self, *exc):
        _user_globals.difference_update(self.safe_globals)


def _user_allowed() -> dict:
    allowed = {}
    for entry in _user_globals:
        if isinstance(entry, tuple):
            if len(entry) != 2:
                raise ValueError(
                    f"a safe global given as a tuple is (object, 'module.name'); "
                    f"got a tuple of length {len(entry)}"
                )
            if type(entry[1]) is not str:
                raise TypeError(
                    f"a safe global given as a tuple names its object with a str "
                    f"'module.name', got {type(entry[1]).__name__}"
                )
            allowed[entry[1]] = entry[0]
        else:
            allowed[f"{entry.__module__}.{entry.__qualname__}"] = entry
    return allowed


def _global_name(module: str, name: str) -> tuple[str, str]:
    """Python 2's names in a protocol-2 pickle (``__builtin__.set``) as Python 3's."""
    if (module, name) in _compat_pickle.NAME_MAPPING:
        return _compat_pickle.NAME_MAPPING[(module, name)]
    return _compat_pickle.IMPORT_MAPPING.get(module, module), name


def _refusal(path: str, full: str) -> str:
    shown = full[len("builtins.") :] if full.startswith("builtins.") else full
    return (
        f"sitp.load: {path} needs the global {full}; weights only load failed. "
        f"Unsupported global: GLOBAL {shown} is not one that a weights-only load allows by "
        f"default. If you trust this class or function, allow it with "
        f"`torch.serialization.add_safe_globals([{shown}])` or inside the "
        f"`torch.serialization.safe_globals([{shown}])` context manager (sitp.serialization's "
        f"under `import sitp as torch`); if you trust the whole file, pass weights_only=False."
    )


def get_unsafe_globals_in_checkpoint(f) -> list[str]:
    """The globals a file needs that a weights-only load would refuse now, without
    running its pickle: a checkpoint's list of what to allow (or not to trust)."""
    archive, pkl, path = _open_archive(f)
    found: list[str] = []
    allowed = _user_allowed()
    for op, arg, _ in pickletools.genops(archive.read(pkl)):
        if op.name == "GLOBAL":
            module, name = _global_name(*arg.split(" ", 1))
            full = f"{module}.{name}"
            if (module, name) in _SAFE or full in allowed or full in found:
                continue
            if module == "torch" and name in _STORAGES:
                continue
            found.append(full)
    return found


class _Unpickler(pickle.Unpickler):
    def __init__(self, file, archive, prefix, path, weights_only, map_location, allowed, **kwargs):
        super().__init__(file, **kwargs)
        self.archive, self.prefix, self.path = archive, prefix, path
        self.map_location = map_location
        self.weights_only = weights_only
        self.loaded: dict[str, _Storage] = {}
        self.allowed = allowed

    def find_class(self, module, name):
        module, name = _global_name(module, name)
        full = f"{module}.{name}"
        if (module, name) in _SAFE:
            return _SAFE[(module, name)]
        if module == "torch" and name in _STORAGES:
            return _StorageType(name)
        if module in ("torch", "torch._utils") and (
            name.endswith("Storage") or name in _TORCH_DTYPES
        ):
            raise pickle.UnpicklingError(
                f"sitp.load: {self.path} holds a torch.{name}, a dtype sitp does not have"
            )
        if full in self.allowed:
            return self.allowed[full]
        if self.weights_only:
            raise pickle.UnpicklingError(_refusal(self.path, full))
        if module == "torch" or module.startswith("torch."):
            raise pickle.UnpicklingError(
                f"sitp.load: {self.path} needs the global {full}, which is torch's: a "
                f"whole torch object (a module saved with torch.save(model)) does not load "
                f"in sitp; save and load its state_dict() instead"
            )
        return super().find_class(module, name)

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
            numbers, strings and the globals torch allows by default are rebuilt, plus
            what :func:`add_safe_globals` or :class:`safe_globals` allowed (the classes
            of a whole module, for one). False: any global (files you trust).
        mmap: accepted; the file is read into memory either way, with the same result.
        encoding: for pickles written by Python 2, as in ``pickle.load``.

    Raises:
        RuntimeError: the file is truncated, not a zip archive, a legacy torch file, or
            missing a record (the message names the file).
        pickle.UnpicklingError: the file needs a global a weights-only load refuses
            (the message names it and how to allow it), or a whole torch module.
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
    allowed = _user_allowed()
    archive, pkl, path = _open_archive(f)
    try:
        unpickler = _Unpickler(
            io.BytesIO(archive.read(pkl)),
            archive,
            pkl[: -len("data.pkl")],
            path,
            weights_only,
            map_location,
            allowed,
            encoding=encoding,
        )
        obj = unpickler.load()
    except _DAMAGE as error:
        raise _corrupt(path, error) from None
    except pickle.UnpicklingError as error:
        if str(error).startswith("sitp.load"):
            raise
        raise RuntimeError(f"sitp.load: {path} is corrupt (its pickle: {error})") from None
    return obj


_DAMAGE = (
    zipfile.BadZipFile,
    EOFError,
    zipfile.LargeZipFile,
    struct.error,
    ValueError,
    OSError,
    IndexError,
)


def _corrupt(path: str, error: BaseException) -> RuntimeError:
    return RuntimeError(
        f"sitp.load: {path} is truncated or corrupt "
        f"({type(error).__name__}: {' '.join(str(error).split())[:200]})"
    )


def _open_archive(f) -> tuple[zipfile.ZipFile, str, str]:
    """The archive in ``f`` (a path or a binary file), its pickle's record, and a name
    for ``f`` in messages."""
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
    except _DAMAGE as error:
        raise _corrupt(path, error) from None
    pkl = next((n for n in names if n.endswith("data.pkl") and n.count("/") == 1), None)
    if pkl is None:
        raise RuntimeError(f"sitp.load: {path} is not a torch.save archive (no data.pkl record)")
    return archive, pkl, path


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


__all__ = [
    "add_safe_globals",
    "clear_safe_globals",
    "get_safe_globals",
    "get_unsafe_globals_in_checkpoint",
    "load",
    "safe_globals",
    "save",
]

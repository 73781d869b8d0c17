"""Checkpoints that survive a crash: weights, optimizer state and a JSON record.

A checkpoint directory holds three files:

* ``model.safetensors`` — the model's ``state_dict()`` as numpy arrays, written with
  the ``safetensors`` library, so PyTorch loads it as it is::

      from safetensors.torch import load_file
      torch_model.load_state_dict(load_file("DIR/model.safetensors"))

  A tied weight (the GPT's ``lm_head.weight`` is ``transformer.wte.weight``) is stored
  under both names, as PyTorch's own ``state_dict()`` lists it; loading writes the same
  values into the one shared tensor twice.
* ``optimizer.safetensors`` — the optimizer's per-parameter tensors (Adam's moments and
  step counters), keyed ``state.<param id>.<name>``.
* ``record.json`` — everything else: the model's name and config, the training
  options, the step, the vocabulary, the random generators' states, the optimizer's
  parameter groups, the scheduler's state, the loss history, and the SHA-256 of the
  other files.

A run may add files of its own (``extra_files``): a text run keeps a copy of its BPE
tokenizer, ``tokenizer.json``, so that the directory alone is enough to sample from.
They are written the same way, before ``record.json``, and their digests are in it
(:func:`read_extra_file` checks them).

Every file is written atomically: the bytes go to a temporary file in the same
directory, are flushed to disk (``fsync``), and only then does :func:`os.replace`
rename the temporary file over the old one. A crash while writing leaves the old
file untouched. ``record.json`` is replaced last and names the digests of the
weights it belongs with, so a crash in the microseconds between two renames is
caught on load (a one-line :class:`CheckpointError`) instead of silently mixing two
steps.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

import sitp
from sitp.serialization import write_atomically

MODEL_FILE = "model.safetensors"
OPTIMIZER_FILE = "optimizer.safetensors"
RECORD_FILE = "record.json"
FORMAT = "sitp-checkpoint/1"


class CheckpointError(Exception):
    """A checkpoint is missing, damaged, or belongs to something else (one-line message)."""


def _safetensors():
    """The ``safetensors.numpy`` module, or a one-line error saying how to install it."""
    try:
        import safetensors.numpy  # late: safetensors only when a checkpoint is read or written
    except ImportError:
        raise CheckpointError(
            "checkpoints need the safetensors package: pip install safetensors"
        ) from None
    return safetensors.numpy


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _to_numpy(t) -> np.ndarray:
    array = t.detach().cpu().numpy()
    # not np.ascontiguousarray: it turns a 0-d array (a step count) into shape (1,)
    return array if array.flags.c_contiguous else array.copy(order="C")


def _pack_optimizer(state_dict: dict) -> tuple[dict[str, np.ndarray], dict]:
    """Splits an optimizer state_dict into tensors (for safetensors) and JSON."""
    arrays, scalars = {}, {}
    for pid, state in state_dict["state"].items():
        for key, value in state.items():
            if isinstance(value, sitp.Tensor):
                arrays[f"state.{pid}.{key}"] = _to_numpy(value)
            else:
                scalars.setdefault(str(pid), {})[key] = value
    meta = {"param_groups": state_dict["param_groups"], "scalars": scalars}
    return arrays, meta


def _unpack_optimizer(arrays: dict[str, np.ndarray], meta: dict) -> dict:
    state: dict[int, dict[str, Any]] = {}
    for name, array in arrays.items():
        _, pid, key = name.split(".", 2)
        state.setdefault(int(pid), {})[key] = sitp.tensor(array)
    for pid, values in meta["scalars"].items():
        state.setdefault(int(pid), {}).update(values)
    return {"state": state, "param_groups": meta["param_groups"]}


def save_checkpoint(
    out_dir: str | os.PathLike,
    model,
    optimizer,
    scheduler,
    record: dict,
    extra_files: dict[str, bytes] | None = None,
) -> dict:
    """Writes the model, the optimizer and ``record`` to ``out_dir``, each atomically.

    Args:
        out_dir: the checkpoint directory (created if needed).
        model: an ``nn.Module``; its ``state_dict()`` is saved.
        optimizer: its ``state_dict()`` is saved (tensors and JSON apart).
        scheduler: an LR scheduler or None; its ``state_dict()`` goes in the record.
        record: JSON-serialisable facts about the run (see :mod:`sitp.train.trainer`).
        extra_files: more files of the run, by name (e.g. ``{"tokenizer.json": ...}``),
            written before the record, which names their digests.

    Returns:
        The record as written, with ``format``, ``optimizer``, ``scheduler`` and
        ``files`` (the digests) added.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    st_save = _safetensors().save
    weights = {name: _to_numpy(t) for name, t in model.state_dict().items()}
    model_bytes = st_save(weights, metadata={"format": "pt"})
    opt_arrays, opt_meta = _pack_optimizer(optimizer.state_dict())
    opt_bytes = st_save(opt_arrays, metadata={"format": "pt"})
    extra_files = dict(extra_files or {})
    for name in extra_files:
        if name in (MODEL_FILE, OPTIMIZER_FILE, RECORD_FILE) or Path(name).name != name:
            raise ValueError(f"extra_files: {name!r} is not a free plain file name")
    files = {MODEL_FILE: _sha256(model_bytes), OPTIMIZER_FILE: _sha256(opt_bytes)}
    files.update({name: _sha256(data) for name, data in extra_files.items()})
    record = dict(
        record,
        format=FORMAT,
        optimizer=opt_meta,
        scheduler=scheduler.state_dict() if scheduler is not None else None,
        files=files,
    )
    record_bytes = json.dumps(record, indent=1).encode("utf-8")  # fails before any write
    write_atomically(out / MODEL_FILE, model_bytes)
    write_atomically(out / OPTIMIZER_FILE, opt_bytes)
    for name, data in extra_files.items():
        if not (out / name).is_file() or (out / name).read_bytes() != data:
            write_atomically(out / name, data)
    write_atomically(out / RECORD_FILE, record_bytes)  # last: it commits the checkpoint
    return record


@dataclass
class Checkpoint:
    """A checkpoint read back: the record, the weights and the optimizer's state."""

    record: dict
    model_state: dict[str, np.ndarray]
    optimizer_state: dict

    def load_model(self, model) -> None:
        """Copies the weights into ``model`` (strict: every name and shape must match)."""
        try:
            model.load_state_dict({k: sitp.tensor(v) for k, v in self.model_state.items()})
        except (RuntimeError, KeyError, ValueError) as error:
            first = " ".join(str(error).split())
            raise CheckpointError(f"the weights do not fit the model: {first[:300]}") from None


def has_checkpoint(out_dir: str | os.PathLike) -> bool:
    """Whether ``out_dir`` holds a record.json."""
    return (Path(out_dir) / RECORD_FILE).is_file()


def load_record(out_dir: str | os.PathLike) -> dict:
    """Reads and checks ``record.json`` of ``out_dir``."""
    path = Path(out_dir) / RECORD_FILE
    if not path.is_file():
        if not Path(out_dir).is_dir():
            raise CheckpointError(f"no checkpoint: {out_dir} is not a directory")
        raise CheckpointError(f"no checkpoint in {out_dir}: {RECORD_FILE} is missing")
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise CheckpointError(f"corrupt checkpoint: {path} is not valid JSON ({error})") from None
    if not isinstance(record, dict) or record.get("format") != FORMAT:
        raise CheckpointError(f"corrupt checkpoint: {path} is not a {FORMAT} record")
    return record


def _read_tensors(path: Path, digest: str | None) -> dict[str, np.ndarray]:
    st_load = _safetensors().load
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise CheckpointError(f"corrupt checkpoint: {path.name} is missing") from None
    if digest is not None and _sha256(data) != digest:
        raise CheckpointError(
            f"corrupt checkpoint: {path} does not match {RECORD_FILE} (SHA-256 differs)"
        )
    try:
        return st_load(data)
    except Exception as error:  # safetensors raises its own SafetensorError
        raise CheckpointError(f"corrupt checkpoint: cannot read {path}: {error}") from None


def read_extra_file(out_dir: str | os.PathLike, record: dict, name: str) -> bytes:
    """The bytes of a file saved through ``extra_files``, checked against the record's digest.

    Raises:
        CheckpointError: if the record names no such file, or it is missing or altered.
    """
    digest = record.get("files", {}).get(name)
    if digest is None:
        raise CheckpointError(f"corrupt checkpoint: {RECORD_FILE} names no {name}")
    path = Path(out_dir) / name
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise CheckpointError(f"corrupt checkpoint: {name} is missing from {out_dir}") from None
    if _sha256(data) != digest:
        raise CheckpointError(
            f"corrupt checkpoint: {path} does not match {RECORD_FILE} (SHA-256 differs)"
        )
    return data


def load_checkpoint(out_dir: str | os.PathLike) -> Checkpoint:
    """Reads a checkpoint written by :func:`save_checkpoint`, checking every digest.

    Raises:
        CheckpointError: if a file is missing, unreadable, or not the one the record names.
    """
    out = Path(out_dir)
    record = load_record(out)
    files = record.get("files", {})
    model_state = _read_tensors(out / MODEL_FILE, files.get(MODEL_FILE))
    opt_arrays = _read_tensors(out / OPTIMIZER_FILE, files.get(OPTIMIZER_FILE))
    try:
        optimizer_state = _unpack_optimizer(opt_arrays, record["optimizer"])
    except (KeyError, ValueError, TypeError) as error:
        raise CheckpointError(f"corrupt checkpoint: bad optimizer state ({error})") from None
    return Checkpoint(record, model_state, optimizer_state)


__all__ = [
    "Checkpoint",
    "CheckpointError",
    "has_checkpoint",
    "load_checkpoint",
    "load_record",
    "read_extra_file",
    "save_checkpoint",
    "write_atomically",
]

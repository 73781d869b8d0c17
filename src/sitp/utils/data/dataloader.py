"""``DataLoader``, ``default_collate`` and ``default_convert``, as in
``torch.utils.data.dataloader``."""

from __future__ import annotations

import collections.abc
import copy

import numpy as np

from sitp._tensor.creation import tensor
from sitp._tensor.tensor import Tensor
from sitp.autograd.grad_mode import is_grad_enabled
from sitp.dtypes import float64
from sitp.functional import stack
from sitp.strides import contiguous_strides
from sitp.utils.data.dataset import IterableDataset, TensorDataset
from sitp.utils.data.sampler import BatchSampler, RandomSampler, SequentialSampler

_COLLATE_ERROR = (
    "default_collate: batch must contain tensors, numpy arrays, numbers, dicts or lists; found {}"
)


def default_convert(data):
    """numpy arrays (and numpy numbers) to tensors, through dicts, tuples and lists."""
    if isinstance(data, np.ndarray) and data.dtype.kind in "biuf":
        return tensor(data)
    if isinstance(data, np.generic) and data.dtype.kind in "biuf":
        return tensor(data)
    if isinstance(data, collections.abc.Mapping):
        converted = {k: default_convert(v) for k, v in data.items()}
        try:
            return type(data)(converted)
        except TypeError:
            return converted
    if isinstance(data, tuple) and hasattr(data, "_fields"):  # namedtuple
        return type(data)(*(default_convert(d) for d in data))
    if isinstance(data, tuple):
        return [default_convert(d) for d in data]
    if isinstance(data, collections.abc.Sequence) and not isinstance(data, (str, bytes)):
        converted = [default_convert(d) for d in data]
        try:
            return type(data)(converted)
        except TypeError:
            return converted
    return data


def _stack_rows(batch):
    """``stack(batch, 0)`` for plain CPU tensors of one shape and dtype, each contiguous,
    with no graph to record: the samples' entries copied by numpy into one new storage,
    one C call for the whole batch (``stack`` makes a view and a Function call per
    sample before its one copy). None where the batch is anything else: ``stack`` then."""
    elem = batch[0]
    cls, shape, dtype, strides = Tensor, elem._shape, elem.dtype, elem._strides
    if strides != contiguous_strides(shape) or not isinstance(elem._storage, np.ndarray):
        return None
    n, grad = elem.numel(), is_grad_enabled()
    rows = []
    for t in batch:
        if (
            t.__class__ is not cls
            or t._shape != shape
            or t.dtype is not dtype
            or t._strides != strides
            or (t.requires_grad and grad)
            or t._storage.__class__ is not np.ndarray
        ):
            return None
        rows.append(t._storage[t._offset : t._offset + n])
    out = np.concatenate(rows)
    full = (len(batch),) + tuple(shape)
    return Tensor._make(out, full, contiguous_strides(full), 0, dtype)


# --8<-- [start:default_collate]
def default_collate(batch):
    """Turn a list of samples into a batch, as PyTorch's ``default_collate`` does.

    Tensors and numpy arrays are stacked along a new first dim; Python floats become a
    float64 tensor, ints (and bools) an int64 (bool) tensor; strings stay a list; a dict
    is collated key by key, a namedtuple field by field; a tuple or list of fields
    becomes a **list** of collated fields (PyTorch's rule, kept for compatibility).

    >>> import sitp
    >>> from sitp.utils.data import default_collate
    >>> x, y = default_collate([(sitp.tensor([1.0, 2.0]), 0), (sitp.tensor([3.0, 4.0]), 1)])
    >>> x.shape, y.tolist()
    (sitp.Size([2, 2]), [0, 1])

    Raises:
        RuntimeError: if the samples' sequences differ in length.
        TypeError: for a sample of another type (an object that is none of the above).
    """
    elem = batch[0]
    if isinstance(elem, Tensor):
        rows = _stack_rows(batch) if elem.__class__ is Tensor else None
        return rows if rows is not None else stack(list(batch), 0)
    if isinstance(elem, (np.ndarray, np.generic)) and not isinstance(elem, (np.str_, np.bytes_)):
        if elem.dtype.kind not in "biuf":
            raise TypeError(_COLLATE_ERROR.format(elem.dtype))
        return (
            stack([tensor(b) for b in batch], 0)
            if isinstance(elem, np.ndarray)
            else tensor(np.array(batch))
        )
    if isinstance(elem, float):
        return tensor(batch, dtype=float64)
    if isinstance(elem, int):  # bool is an int
        return tensor(batch)
    if isinstance(elem, (str, bytes)):
        return batch
    if isinstance(elem, collections.abc.Mapping):
        return {key: default_collate([d[key] for d in batch]) for key in elem}
    if isinstance(elem, tuple) and hasattr(elem, "_fields"):  # namedtuple
        return type(elem)(*(default_collate(list(s)) for s in zip(*batch)))
    if isinstance(elem, collections.abc.Sequence):
        size = len(elem)
        if any(len(e) != size for e in batch):
            raise RuntimeError("each element in list of batch should be of equal size")
        fields = [default_collate(list(s)) for s in zip(*batch)]
        if isinstance(elem, tuple):
            return fields
        if isinstance(elem, collections.abc.MutableSequence):
            clone = copy.copy(elem)
            for i, f in enumerate(fields):
                clone[i] = f
            return clone
        try:
            return type(elem)(fields)
        except TypeError:
            return fields
    raise TypeError(_COLLATE_ERROR.format(type(elem)))


# --8<-- [end:default_collate]


def get_worker_info():
    """None: sitp's loader reads every batch in the main process (see ``DataLoader``)."""
    return None


class DataLoader:
    """Batches of a dataset, in the order of a sampler, as ``torch.utils.data.DataLoader``.

    The arguments are PyTorch's, with its rules: ``shuffle=True`` draws a
    :class:`RandomSampler` (from ``generator``, or a fresh seed from the default
    generator each pass); ``sampler`` gives the order of indices instead and cannot be
    combined with ``shuffle``; ``batch_sampler`` gives whole batches and cannot be
    combined with ``batch_size``, ``shuffle``, ``sampler`` or ``drop_last``;
    ``batch_size=None`` turns batching off (each sample goes through
    :func:`default_convert`). A dataset's ``__getitems__``, when it has one, fetches a
    batch in one call. An :class:`IterableDataset` is read in its own order.

    What differs from PyTorch, and is accepted so that scripts run unchanged:

    * ``num_workers > 0`` starts no processes: every batch is read in the main process,
      so the batches are exactly those of ``num_workers=0`` (PyTorch's, for a map-style
      dataset, are the same; an iterable dataset that shards itself with
      ``get_worker_info()`` is read once, as with one worker). ``worker_init_fn(i)`` is
      called once for each worker id ``i`` at the start of every pass;
      ``get_worker_info()`` returns None. ``prefetch_factor``, ``persistent_workers``,
      ``timeout`` and ``multiprocessing_context`` are checked as PyTorch checks them and
      change nothing else.
    * ``pin_memory`` is accepted and does nothing: sitp's CPU tensors are ordinary
      memory, and ``.to("cuda")`` copies from them directly.

    Every other keyword is a ``TypeError``, as in any Python function.
    """

    def __init__(
        self,
        dataset,
        batch_size=1,
        shuffle=None,
        sampler=None,
        batch_sampler=None,
        num_workers: int = 0,
        collate_fn=None,
        pin_memory: bool = False,
        drop_last: bool = False,
        timeout: float = 0,
        worker_init_fn=None,
        multiprocessing_context=None,
        generator=None,
        *,
        prefetch_factor=None,
        persistent_workers: bool = False,
        pin_memory_device: str = "",
        in_order: bool = True,
    ):
        if not isinstance(num_workers, int) or isinstance(num_workers, bool) or num_workers < 0:
            raise ValueError(
                "num_workers option should be non-negative; "
                "use num_workers=0 to disable multiprocessing."
            )
        if timeout < 0:
            raise ValueError("timeout option should be non-negative")
        if num_workers == 0 and prefetch_factor is not None:
            raise ValueError(
                "prefetch_factor option could only be specified in "
                "multiprocessing.let num_workers > 0 to enable multiprocessing, "
                "otherwise set prefetch_factor to None."
            )
        if prefetch_factor is not None and prefetch_factor < 0:
            raise ValueError("prefetch_factor option should be non-negative")
        if persistent_workers and num_workers == 0:
            raise ValueError("persistent_workers option needs num_workers > 0")
        if multiprocessing_context is not None and num_workers == 0:
            raise ValueError(
                f"multiprocessing_context can only be used with multi-process "
                f"loading (num_workers > 0), but got num_workers={num_workers}"
            )
        if worker_init_fn is not None and not callable(worker_init_fn):
            raise TypeError(
                f"worker_init_fn should be callable, got {type(worker_init_fn).__name__}"
            )

        self.dataset, self.num_workers = dataset, num_workers
        self.pin_memory, self.pin_memory_device = pin_memory, pin_memory_device
        self.timeout, self.worker_init_fn = timeout, worker_init_fn
        self.multiprocessing_context = multiprocessing_context
        self.prefetch_factor = 2 if prefetch_factor is None and num_workers > 0 else prefetch_factor
        self.persistent_workers, self.in_order = persistent_workers, in_order
        self._iterable = isinstance(dataset, IterableDataset)

        if self._iterable:
            if shuffle not in (None, False):
                raise ValueError(
                    f"DataLoader with IterableDataset: expected unspecified "
                    f"shuffle option, but got shuffle={shuffle}"
                )
            if sampler is not None:
                raise ValueError(
                    f"DataLoader with IterableDataset: expected unspecified "
                    f"sampler option, but got sampler={sampler}"
                )
            if batch_sampler is not None:
                raise ValueError(
                    f"DataLoader with IterableDataset: expected unspecified "
                    f"batch_sampler option, but got batch_sampler={batch_sampler}"
                )
        else:
            shuffle = bool(shuffle)
        if sampler is not None and shuffle:
            raise ValueError("sampler option is mutually exclusive with shuffle")
        if batch_sampler is not None:
            if batch_size != 1 or shuffle or sampler is not None or drop_last:
                raise ValueError(
                    "batch_sampler option is mutually exclusive with batch_size, "
                    "shuffle, sampler, and drop_last"
                )
            batch_size, drop_last = None, False
        elif batch_size is None:
            if drop_last:
                raise ValueError(
                    "batch_size=None option disables auto-batching and is "
                    "mutually exclusive with drop_last"
                )
        if sampler is None and not self._iterable:
            sampler = (
                RandomSampler(dataset, generator=generator)
                if shuffle
                else SequentialSampler(dataset)
            )
        if batch_size is not None and batch_sampler is None and not self._iterable:
            batch_sampler = BatchSampler(sampler, batch_size, drop_last)
        if batch_size is not None and self._iterable:
            BatchSampler([], batch_size, drop_last)  # the same checks of the two values

        self.batch_size, self.drop_last = batch_size, drop_last
        self.sampler, self.batch_sampler, self.generator = sampler, batch_sampler, generator
        self._auto_collation = batch_sampler is not None or (
            self._iterable and batch_size is not None
        )
        if collate_fn is None:
            collate_fn = default_collate if self._auto_collation else default_convert
        elif not callable(collate_fn):
            raise TypeError(f"collate_fn should be callable, got {type(collate_fn).__name__}")
        self.collate_fn = collate_fn

    @property
    def _index_sampler(self):
        return self.batch_sampler if self._auto_collation else self.sampler

    def __len__(self) -> int:
        if self._iterable:
            n = len(self.dataset)
            if self.batch_size is not None:
                n = n // self.batch_size if self.drop_last else -(-n // self.batch_size)
            return n
        return len(self._index_sampler)

    def _fetch(self, indices):
        """One batch: the samples at ``indices``, collated."""
        dataset = self.dataset
        if type(dataset) is TensorDataset and self.collate_fn is default_collate:
            idx = tensor(indices)  # one gather per tensor instead of stacking rows
            return [t[idx] for t in dataset.tensors]
        getitems = getattr(dataset, "__getitems__", None)
        samples = getitems(indices) if callable(getitems) else [dataset[i] for i in indices]
        return self.collate_fn(samples)

    def __iter__(self):
        if self.worker_init_fn is not None:
            for worker_id in range(self.num_workers):
                self.worker_init_fn(worker_id)
        if self._iterable:
            yield from self._iter_stream()
        elif self._auto_collation:
            for indices in self.batch_sampler:
                yield self._fetch(list(indices))
        else:
            for index in self.sampler:
                yield self.collate_fn(self.dataset[index])

    def _iter_stream(self):
        if self.batch_size is None:
            for sample in self.dataset:
                yield self.collate_fn(sample)
            return
        batch = []
        for sample in self.dataset:
            batch.append(sample)
            if len(batch) == self.batch_size:
                yield self.collate_fn(batch)
                batch = []
        if batch and not self.drop_last:
            yield self.collate_fn(batch)


__all__ = ["DataLoader", "default_collate", "default_convert", "get_worker_info"]

"""The collectives of ``sitp.distributed`` (chapter 7.1), on MPI through mpi4py.

Names and semantics are torch.distributed's: one default process group made by
:func:`init_process_group`, collectives that change their tensors in place, and
``async_op=True`` returning a :class:`Work` to ``wait()`` on.

A tensor travels as its buffer: a contiguous CPU tensor hands MPI the slice of its numpy
storage that it covers (no copy, no pickling; mpi4py's upper-case methods ``Allreduce``,
``Bcast``, ... take such buffers). Anything else is *staged*: a non-contiguous tensor is
copied into a contiguous array, the collective runs on the copy, and the result is
written back; a GPU tensor is staged through host memory the same way, unless
``SITP_MPI_CUDA_AWARE=1`` says the MPI can read and write device memory, in which case
the device buffer itself is passed (mpi4py finds its pointer through
``__cuda_array_interface__``). Every write bumps the tensor's version counter, as an
in-place op does.

MPI has no average: ``ReduceOp.AVG`` is a sum followed by a division by the group's
size, on floating-point tensors only.

MPI is initialised by :func:`init_process_group`, which imports ``mpi4py.MPI`` (a process
started without ``mpirun`` becomes a world of one, an MPI "singleton"); importing sitp
does not touch it. Without mpi4py the module still imports; :func:`is_available` is then
False and :func:`init_process_group` says what to install.
"""

from __future__ import annotations

import enum
import importlib.util
import os

import numpy as np

from sitp import cuda as _cuda
from sitp._tensor import dispatch
from sitp._tensor.tensor import Tensor
from sitp.autograd.grad_mode import no_grad
from sitp.strides import contiguous_strides

#: mpi4py's MPI module, imported by init_process_group (importing it initialises MPI, which
#: ``import sitp`` should not do: it costs about 0.1 s and makes the process an MPI one).
MPI = None

_NOT_INIT = (
    "Default process group has not been initialized, please make sure to call init_process_group."
)
#: The backend names init_process_group accepts; all of them run on MPI (see its docstring).
BACKENDS = ("mpi", "gloo", "nccl")


class ReduceOp(enum.Enum):
    """How ``all_reduce``, ``reduce`` and ``reduce_scatter_tensor`` combine the ranks'
    values: torch's ``ReduceOp.SUM``, ``AVG``, ``PRODUCT``, ``MIN``, ``MAX`` and the
    bitwise ``BAND``, ``BOR``, ``BXOR`` (integer and bool tensors)."""

    SUM = 0
    AVG = 1
    PRODUCT = 2
    MIN = 3
    MAX = 4
    BAND = 5
    BOR = 6
    BXOR = 7


_OPS: dict = {}  # ReduceOp -> MPI.Op, and for bool tensors (filled by _load_mpi)
_BOOL_OPS: dict = {}


def _load_mpi() -> None:
    """Import mpi4py's MPI (initialising MPI) and fill the tables of operations."""
    global MPI
    if MPI is not None:
        return
    try:
        from mpi4py import MPI as mpi  # late: importing it initialises MPI (see MPI above)
    except (ImportError, RuntimeError) as e:  # mpi4py absent, or no MPI library under it
        raise RuntimeError(
            "sitp.distributed needs mpi4py and an MPI library (pip install "
            "'sitp[distributed]' installs mpi4py and the mpich wheel); importing them "
            f"failed: {type(e).__name__}: {e}"
        ) from None
    MPI = mpi
    _OPS.update(
        {
            ReduceOp.SUM: MPI.SUM,
            ReduceOp.AVG: MPI.SUM,
            ReduceOp.PRODUCT: MPI.PROD,
            ReduceOp.MIN: MPI.MIN,
            ReduceOp.MAX: MPI.MAX,
            ReduceOp.BAND: MPI.BAND,
            ReduceOp.BOR: MPI.BOR,
            ReduceOp.BXOR: MPI.BXOR,
        }
    )
    _BOOL_OPS.update(
        {
            ReduceOp.SUM: MPI.LOR,
            ReduceOp.MAX: MPI.LOR,
            ReduceOp.BOR: MPI.LOR,
            ReduceOp.MIN: MPI.LAND,
            ReduceOp.PRODUCT: MPI.LAND,
            ReduceOp.BAND: MPI.LAND,
            ReduceOp.BXOR: MPI.LXOR,
        }
    )


_BITWISE = (ReduceOp.BAND, ReduceOp.BOR, ReduceOp.BXOR)


def _mpi_op(op, dtype):
    """The MPI operation for ``op`` on tensors of ``dtype``. MPI reduces bools only with
    its logical operations, so SUM and MAX on a bool tensor are an OR, MIN and PRODUCT an
    AND (what they compute on 0 and 1 clipped to a bool)."""
    if dtype.is_floating_point:
        if op is ReduceOp.SUM or op is ReduceOp.AVG:
            return MPI.SUM
        if op in _BITWISE:
            raise ValueError(f"ReduceOp.{op.name} needs an integer or bool tensor (got {dtype})")
    if not isinstance(op, ReduceOp):
        raise TypeError(f"op must be a sitp.distributed.ReduceOp (got {op!r})")
    if op is ReduceOp.AVG and not dtype.is_floating_point:
        raise ValueError(
            f"ReduceOp.AVG needs a floating-point tensor (got {dtype}): MPI has no average, "
            "sitp sums and divides; use ReduceOp.SUM for integers"
        )
    return (_BOOL_OPS if dtype.name == "bool" else _OPS)[op]


# ---------------------------------------------------------------- process groups
class ProcessGroup:
    """A set of ranks that run collectives together: an MPI communicator, and the global
    ranks (ranks of the default group) of its members in group order."""

    def __init__(self, comm, ranks, backend: str = "mpi"):
        self.comm = comm
        self.ranks = list(ranks)
        self.backend = backend

    def rank(self) -> int:
        return self.comm.Get_rank()

    def size(self) -> int:
        return self.comm.Get_size()

    def group_rank(self, global_rank: int, what: str) -> int:
        """The rank within this group of ``global_rank``, checked (``what`` names the
        argument in the error)."""
        n = len(_world().ranks)
        if not isinstance(global_rank, (int, np.integer)) or isinstance(global_rank, bool):
            raise TypeError(f"{what} must be an int rank (got {global_rank!r})")
        if not 0 <= global_rank < n:
            raise ValueError(
                f"{what}={global_rank} is out of range: the world has {n} ranks (0..{n - 1})"
            )
        if global_rank not in self.ranks:
            raise ValueError(f"{what}={global_rank} is not a member of the group {self.ranks}")
        return self.ranks.index(global_rank)

    def __repr__(self):
        return f"ProcessGroup(backend={self.backend!r}, ranks={self.ranks})"


class _NonMember:
    """What :func:`new_group` returns on a rank outside the new group (torch's
    ``GroupMember.NON_GROUP_MEMBER``); collectives on it do nothing there."""

    def __repr__(self):
        return "NON_GROUP_MEMBER"


class GroupMember:
    """torch's ``GroupMember.NON_GROUP_MEMBER`` (the default group is ``group.WORLD``)."""

    NON_GROUP_MEMBER = _NonMember()


class _GroupNamespace:
    """``sitp.distributed.group.WORLD``: the default group (None before init), as torch."""

    @property
    def WORLD(self):
        return _WORLD


group = _GroupNamespace()

_WORLD: ProcessGroup | None = None
_GROUPS: list[ProcessGroup] = []


def _world() -> ProcessGroup:
    if _WORLD is None:
        raise ValueError(_NOT_INIT)
    return _WORLD


def _pg(g) -> ProcessGroup | None:
    """The group a collective runs on (None: this rank is not a member)."""
    w = _world()
    if g is None:
        return w
    if g is GroupMember.NON_GROUP_MEMBER:
        return None
    if not isinstance(g, ProcessGroup):
        raise TypeError(f"group must be a ProcessGroup made by new_group (got {g!r})")
    return g


def is_available() -> bool:
    """Whether sitp.distributed can run: mpi4py is installed (asked without importing it,
    which would initialise MPI)."""
    return MPI is not None or importlib.util.find_spec("mpi4py") is not None


def is_mpi_available() -> bool:
    return is_available()


def is_gloo_available() -> bool:
    """Whether "gloo" can be used: it is accepted by init_process_group and runs on MPI."""
    return is_available()


def is_nccl_available() -> bool:
    return False


def is_initialized() -> bool:
    return _WORLD is not None


def _env_int(name: str) -> int | None:
    v = os.environ.get(name)
    if v is None or v == "":
        return None
    try:
        return int(v)
    except ValueError:
        raise ValueError(f"the environment variable {name}={v!r} is not an integer") from None


def init_process_group(
    backend: str | None = None,
    init_method: str | None = None,
    timeout=None,
    world_size: int = -1,
    rank: int = -1,
    store=None,
    group_name: str = "",
    pg_options=None,
    device_id=None,
) -> None:
    """Make the default process group: every process of the MPI job, with MPI's ranks.

    The rank and the world size come from MPI (``MPI.COMM_WORLD``): the job started by
    ``mpirun -n N`` or by ``python -m sitp.distributed.run``. A process started alone
    (``python script.py``) is a world of one. ``world_size``, ``rank`` and torchrun's
    ``WORLD_SIZE`` and ``RANK`` variables, when given, must agree with MPI; a mismatch
    (for instance several processes started by torchrun, which MPI does not know are a
    job) raises a ValueError that says how to launch instead.

    Args:
        backend: ``"mpi"`` (the default). ``"gloo"`` and ``"nccl"`` (and torch's
            ``"cpu:gloo,cuda:nccl"``) are accepted so that scripts written for torchrun
            run unchanged; they too run on MPI, and :func:`get_backend` answers ``"mpi"``.
        init_method: accepted and not used: MPI's launcher has already connected the
            processes (no ``MASTER_ADDR`` rendezvous is needed).
        timeout: accepted and not used: MPI collectives have no timeout; bound a job
            with the launcher's ``--timeout``.
        world_size, rank: if not -1, checked against MPI's.
        store, group_name, pg_options, device_id: accepted for torch's signature; unused.

    Raises:
        RuntimeError: if called twice, or if mpi4py or MPI is missing.
        ValueError: for an unknown backend or sizes and ranks that disagree with MPI.
    """
    global _WORLD
    if _WORLD is not None:
        raise RuntimeError("trying to initialize the default process group twice!")
    if backend is not None:
        if not isinstance(backend, str):
            raise TypeError(f"backend must be a string (got {backend!r})")
        names = [part.split(":")[-1].strip().lower() for part in backend.split(",")]
        bad = [n for n in names if n not in BACKENDS]
        if bad:
            raise ValueError(
                f"unknown backend {backend!r}: sitp.distributed runs on MPI and accepts "
                f"{', '.join(map(repr, BACKENDS))} (all of them use MPI)"
            )
    _load_mpi()
    comm = MPI.COMM_WORLD
    size, me = comm.Get_size(), comm.Get_rank()
    launch = (
        "start the processes with MPI: python -m sitp.distributed.run --nproc-per-node N "
        "script.py, or mpirun -n N python script.py"
    )
    for name, given, mpi in (
        ("world_size", world_size, size),
        ("rank", rank, me),
        ("WORLD_SIZE", _env_int("WORLD_SIZE"), size),
        ("RANK", _env_int("RANK"), me),
    ):
        if given is not None and given != -1 and given != mpi:
            where = "argument" if name.islower() else "environment variable"
            raise ValueError(
                f"init_process_group: the {where} {name}={given} disagrees with MPI, "
                f"which started {size} process{'es' if size > 1 else ''} and gives this one "
                f"rank {me}; {launch}"
            )
    _WORLD = ProcessGroup(comm.Dup(), range(size))


def destroy_process_group(group=None) -> None:
    """Free a group's communicator; without an argument, the default group and every group
    made by new_group (after which init_process_group may be called again)."""
    global _WORLD
    if group is None:
        for g in [*_GROUPS, _world()]:
            g.comm.Free()
        _GROUPS.clear()
        _WORLD = None
    elif isinstance(group, ProcessGroup):
        if group in _GROUPS:
            _GROUPS.remove(group)
        if group is _WORLD:
            destroy_process_group()
        else:
            group.comm.Free()


def new_group(ranks=None, timeout=None, backend=None, pg_options=None, **kwargs):
    """A group of some of the world's ranks (all when ``ranks`` is None). Every rank of the
    world must call it, with the same ranks, as in torch; a rank outside the group gets
    ``GroupMember.NON_GROUP_MEMBER``."""
    w = _world()
    ranks = sorted(w.ranks if ranks is None else (int(r) for r in ranks))
    for r in ranks:
        w.group_rank(r, "new_group rank")
    if len(set(ranks)) != len(ranks):
        raise ValueError(f"new_group: ranks {ranks} are repeated")
    mgroup = w.comm.Get_group().Incl(ranks)
    comm = w.comm.Create(mgroup)
    mgroup.Free()
    if comm == MPI.COMM_NULL:
        return GroupMember.NON_GROUP_MEMBER
    g = ProcessGroup(comm, ranks)
    _GROUPS.append(g)
    return g


def get_rank(group=None) -> int:
    """This process's rank in ``group`` (the default group if None); -1 if not a member."""
    g = _pg(group)
    return -1 if g is None else g.rank()


def get_world_size(group=None) -> int:
    g = _pg(group)
    return -1 if g is None else g.size()


def get_backend(group=None) -> str:
    _pg(group)
    return "mpi"


def get_process_group_ranks(group) -> list[int]:
    g = _pg(group)
    return [] if g is None else list(g.ranks)


def get_global_rank(group, group_rank: int) -> int:
    g = _pg(group)
    if not 0 <= group_rank < len(g.ranks):
        raise ValueError(f"group_rank {group_rank} is out of range for the group {g.ranks}")
    return g.ranks[group_rank]


# ---------------------------------------------------------------- buffers
def cuda_aware() -> bool:
    """Whether GPU tensors are handed to MPI as device buffers (``SITP_MPI_CUDA_AWARE=1``)
    rather than staged through host memory. Set it only for an MPI built with CUDA support
    (MPICH configured ``--with-cuda``, Open MPI with UCX's CUDA transport, MVAPICH2-GDR):
    any other MPI reads a device pointer as host memory and crashes. Under numba's CUDA
    simulator device arrays live in host memory, so the path runs with any MPI."""
    return os.environ.get("SITP_MPI_CUDA_AWARE", "0") == "1"


class _Buf:
    """A tensor as a buffer MPI reads or writes: ``array`` is a contiguous 1-D array of its
    elements (numpy, or a device array on the CUDA-aware path). Direct when the tensor's
    storage can be handed over as it is, else a staged copy that :meth:`done` writes back."""

    __slots__ = ("tensor", "array", "staged")

    def __init__(self, t: Tensor, read: bool = True):
        self.tensor = t
        n = t.numel()
        direct = t.is_contiguous() and (not t.is_cuda or cuda_aware())
        self.staged = not direct
        if t.is_cuda:
            _cuda.synchronize()  # kernels that write t have finished before MPI reads it
        if direct:
            self.array = t._storage[t._offset : t._offset + n]
        elif not read:
            self.array = np.empty(n, t.dtype.np)
        elif t.is_cuda:
            self.array = dispatch.cuda().to_host(t)._storage
        else:
            self.array = np.ascontiguousarray(t._np()).reshape(-1)

    def done(self, divide: int | None = None) -> None:
        """The collective has written ``array``: divide it (AVG), copy it back if staged,
        and bump the tensor's version counter."""
        t = self.tensor
        on_host = isinstance(self.array, np.ndarray)
        if divide is not None and on_host:
            np.divide(self.array, divide, out=self.array)
        if self.staged:
            src = Tensor._make(
                self.array.reshape(-1) if on_host else self.array,
                tuple(t.shape),
                contiguous_strides(tuple(t.shape)),
                0,
                t.dtype,
            )
            if t.is_cuda and on_host:
                src = dispatch.cuda().to_device(src)
            dispatch.of(t).assign(t, src)
        if divide is not None and not on_host:
            with no_grad():
                t.div_(divide)
        t._vc[0] += 1


def _flat_host(shape_numel: int, dtype) -> np.ndarray:
    return np.empty(shape_numel, dtype.np)


def _write(t: Tensor, flat: np.ndarray) -> None:
    """Write the host array ``flat`` (t's elements in order) into tensor t."""
    b = _Buf(t, read=False)
    if isinstance(b.array, np.ndarray):
        b.array[...] = flat
        b.done()
    else:  # a device buffer (CUDA-aware path): copy through a host tensor
        src = Tensor._make(flat, tuple(t.shape), contiguous_strides(tuple(t.shape)), 0, t.dtype)
        dispatch.of(t).assign(t, dispatch.cuda().to_device(src))
        t._vc[0] += 1


def _check_tensor(t, fn: str, what: str = "tensor") -> None:
    if not isinstance(t, Tensor):
        raise TypeError(f"{fn}: {what} must be a sitp.Tensor (got {type(t).__name__})")


def _check_world_multiple(fn: str, whole, whole_name: str, part, part_name: str, n: int) -> None:
    """``whole`` must hold ``n`` (the world size) times ``part``'s elements."""
    if whole.numel() != n * part.numel():
        raise ValueError(
            f"{fn}: {whole_name} of shape {tuple(whole.shape)} must hold world_size ({n}) x "
            f"{part_name} of shape {tuple(part.shape)} = {n * part.numel()} elements; it has "
            f"{whole.numel()}"
        )


def _check_like(fn: str, a: Tensor, a_name: str, b: Tensor, b_name: str) -> None:
    if a.dtype is not b.dtype:
        raise TypeError(
            f"{fn}: {a_name} has dtype {a.dtype} and {b_name} has dtype {b.dtype}; "
            "they must be the same"
        )
    if a.device.type != b.device.type:
        raise ValueError(
            f"{fn}: {a_name} is on {a.device.type} and {b_name} on {b.device.type}; "
            "they must be on the same device"
        )


# ---------------------------------------------------------------- counting bytes
class CommCounter:
    """The bytes this rank sends, per collective and in all, while the counter is open
    (``with CommCounter() as comm: ...``; then ``comm.bytes_sent``, ``comm.by_op``,
    ``comm.calls``). Counters nest: each open one sees every call.

    A point-to-point call (``send``, ``isend``) counts the bytes it hands MPI. A
    collective counts what this rank sends under the ring schedule of chapter 7.2, the
    bandwidth-optimal one NCCL uses for large messages: for ``n`` bytes on ``p`` ranks,
    ``all_reduce`` sends ``2 (p - 1)`` chunks of about ``n/p`` (the chunks of
    ``sitp.distributed.ring``), ``reduce_scatter_tensor`` ``p - 1`` chunks of its input,
    ``all_gather`` and ``all_gather_into_tensor`` ``p - 1`` copies of their input,
    ``broadcast`` (a pipeline along the ring from the root) ``n`` on every rank but the
    last of the chain, ``reduce`` (the chain the other way) ``n`` on every rank but the
    root, ``gather`` ``n`` on every rank but the root and ``scatter`` ``(p - 1) n`` on the
    root. MPI may pick another algorithm by size and tell nobody; these are the counts
    of the schedule the page's formulas describe, from the sizes each call was given.
    Objects (``all_gather_object``, ...) are pickled and not counted.
    """

    def __init__(self):
        self.bytes_sent = 0
        self.by_op: dict[str, int] = {}
        self.calls: dict[str, int] = {}

    def add(self, op: str, nbytes: int) -> None:
        self.bytes_sent += nbytes
        self.by_op[op] = self.by_op.get(op, 0) + nbytes
        self.calls[op] = self.calls.get(op, 0) + 1

    def __enter__(self) -> CommCounter:
        _COUNTERS.append(self)
        return self

    def __exit__(self, *exc) -> None:
        _COUNTERS.remove(self)

    def __repr__(self):
        return f"CommCounter(bytes_sent={self.bytes_sent}, calls={self.calls})"


_COUNTERS: list[CommCounter] = []


def ring_chunk_bounds(n: int, p: int) -> list[int]:
    """Where the ring cuts ``n`` elements into ``p`` chunks: chunk k is
    ``[bounds[k], bounds[k + 1])`` (as ``sitp.distributed.ring`` cuts them)."""
    return [k * n // p for k in range(p + 1)]


def _tally(op: str, g: ProcessGroup, t: Tensor, root: int | None = None) -> None:
    """Add to every open counter the bytes this rank sends in ``op`` on ``t`` (see
    :class:`CommCounter`; ``root`` is the group rank of a rooted collective's root)."""
    if not _COUNTERS:
        return
    p, r, n, size = g.size(), g.rank(), t.numel(), t.element_size()
    if op == "all_reduce":
        b = ring_chunk_bounds(n, p)
        chunk = [b[k + 1] - b[k] for k in range(p)]
        # reduce-scatter: every chunk but r + 1; all-gather: every chunk but r + 2
        elems = 0 if p == 1 else 2 * n - chunk[(r + 1) % p] - chunk[(r + 2) % p]
    elif op in ("reduce_scatter_tensor",):
        elems = (p - 1) * (n // p)  # t is the input, p equal chunks
    elif op in ("all_gather", "all_gather_into_tensor", "scatter"):
        elems = (p - 1) * n if op != "scatter" or r == root else 0  # t is one rank's part
    elif op == "broadcast":
        elems = n if p > 1 and r != (root - 1) % p else 0
    elif op in ("reduce", "gather"):
        elems = n if r != root else 0
    else:  # send, isend
        elems = n
    for c in _COUNTERS:
        c.add(op, elems * size)


# ---------------------------------------------------------------- work handles
class Work:
    """The handle of an asynchronous operation (``async_op=True``): :meth:`wait` blocks
    until MPI has finished, then writes the results into the tensors (a staged copy back,
    AVG's division). Until then the tensors must not be read or written."""

    def __init__(self, requests, finish=None, outputs=()):
        self._requests = list(requests)
        self._finish = finish
        self._outputs = list(outputs)
        self._done = False
        self._source = None
        self._keep = None

    def _complete(self, statuses=None) -> None:
        self._done = True
        if self._finish is not None:
            self._finish(statuses)
            self._finish = None
        self._requests = []

    def wait(self, timeout=None) -> bool:
        """Block until the operation has finished; True (torch's answer)."""
        if not self._done:
            statuses = [MPI.Status() for _ in self._requests]
            MPI.Request.Waitall(self._requests, statuses)
            self._complete(statuses)
        return True

    def is_completed(self) -> bool:
        """Whether the operation has finished (asks MPI without blocking; completes the
        copy back when it has)."""
        if not self._done:
            statuses = [MPI.Status() for _ in self._requests]
            if MPI.Request.Testall(self._requests, statuses):
                self._complete(statuses)
        return self._done

    def is_success(self) -> bool:
        return self._done

    def result(self) -> list:
        """The output tensors."""
        self.wait()
        return self._outputs

    def source_rank(self) -> int:
        """For irecv: the rank the message came from."""
        self.wait()
        return self._source


def _run(async_op: bool, start, finish=None, outputs=()):
    """Run a collective: ``start(blocking)`` calls MPI, returning a request when not
    blocking; ``finish(statuses)`` writes the results. None when synchronous, as torch."""
    if async_op:
        req = start(False)
        return Work(req if isinstance(req, list) else [req], finish, outputs)
    start(True)
    if finish is not None:
        finish(None)
    return None


# ---------------------------------------------------------------- collectives
def all_reduce(tensor, op=ReduceOp.SUM, group=None, async_op: bool = False):
    """Reduce ``tensor`` over the group's ranks and leave the result in it, on every rank."""
    _check_tensor(tensor, "all_reduce")
    g = _pg(group)
    if g is None:
        return None
    mop = _mpi_op(op, tensor.dtype)
    b = _Buf(tensor)
    divide = g.size() if op is ReduceOp.AVG else None
    _tally("all_reduce", g, tensor)

    def start(blocking):
        if blocking:
            return g.comm.Allreduce(MPI.IN_PLACE, b.array, mop)
        return g.comm.Iallreduce(MPI.IN_PLACE, b.array, mop)

    return _run(async_op, start, lambda s: b.done(divide), [tensor])


def broadcast(tensor, src=None, group=None, async_op: bool = False, group_src=None):
    """Copy rank ``src``'s tensor into the tensor of every other rank of the group."""
    _check_tensor(tensor, "broadcast")
    g = _pg(group)
    if g is None:
        return None
    root = _root(g, src, group_src, "broadcast", "src")
    sender = g.rank() == root
    b = _Buf(tensor, read=sender)
    _tally("broadcast", g, tensor, root)

    def start(blocking):
        return (g.comm.Bcast if blocking else g.comm.Ibcast)(b.array, root=root)

    return _run(async_op, start, None if sender else (lambda s: b.done()), [tensor])


def _root(g: ProcessGroup, rank, group_rank, fn: str, what: str) -> int:
    """The group rank of a collective's root, from a global rank or a group rank."""
    if rank is not None and group_rank is not None:
        raise ValueError(f"{fn}: give {what} or group_{what}, not both")
    if group_rank is not None:
        if not 0 <= group_rank < g.size():
            raise ValueError(
                f"{fn}: group_{what}={group_rank} is out of range for a group of {g.size()}"
            )
        return group_rank
    return g.group_rank(0 if rank is None else rank, f"{fn}: {what}")


def all_gather(tensor_list, tensor, group=None, async_op: bool = False):
    """Fill ``tensor_list[i]`` with rank i's ``tensor``, on every rank."""
    _check_tensor(tensor, "all_gather")
    g = _pg(group)
    if g is None:
        return None
    n = g.size()
    if not isinstance(tensor_list, (list, tuple)) or len(tensor_list) != n:
        raise ValueError(
            f"all_gather: tensor_list must be a list of {n} tensors, one per rank "
            f"(got {type(tensor_list).__name__} of length {len(tensor_list)})"
        )
    for i, t in enumerate(tensor_list):
        _check_tensor(t, "all_gather", f"tensor_list[{i}]")
        _check_like("all_gather", t, f"tensor_list[{i}]", tensor, "tensor")
        if t.numel() != tensor.numel():
            raise ValueError(
                f"all_gather: tensor_list[{i}] has shape {tuple(t.shape)} and the input "
                f"tensor {tuple(tensor.shape)}; each output must hold the input's "
                f"{tensor.numel()} elements"
            )
    send = _Buf(tensor)
    recv = _flat_host(n * tensor.numel(), tensor.dtype)
    k = tensor.numel()
    _tally("all_gather", g, tensor)

    def start(blocking):
        return (g.comm.Allgather if blocking else g.comm.Iallgather)(send.array, recv)

    def finish(statuses):
        for i, t in enumerate(tensor_list):
            _write(t, recv[i * k : (i + 1) * k])

    return _run(async_op, start, finish, list(tensor_list))


def all_gather_into_tensor(output_tensor, input_tensor, group=None, async_op: bool = False):
    """Concatenate the ranks' ``input_tensor`` into ``output_tensor``, rank by rank, on
    every rank. The output holds world_size × the input's elements: shaped
    ``(world_size * d0, ...)`` or ``(world_size, d0, ...)``."""
    fn = "all_gather_into_tensor"
    _check_tensor(output_tensor, fn, "output_tensor")
    _check_tensor(input_tensor, fn, "input_tensor")
    g = _pg(group)
    if g is None:
        return None
    _check_like(fn, output_tensor, "output_tensor", input_tensor, "input_tensor")
    n = g.size()
    _check_world_multiple(fn, output_tensor, "output_tensor", input_tensor, "input_tensor", n)
    send, recv = _Buf(input_tensor), _Buf(output_tensor, read=False)
    _tally("all_gather_into_tensor", g, input_tensor)

    def start(blocking):
        return (g.comm.Allgather if blocking else g.comm.Iallgather)(send.array, recv.array)

    return _run(async_op, start, lambda s: recv.done(), [output_tensor])


def reduce_scatter_tensor(output, input, op=ReduceOp.SUM, group=None, async_op: bool = False):
    """Reduce ``input`` over the ranks and give rank i the i-th of world_size equal
    chunks of the result, in ``output``."""
    fn = "reduce_scatter_tensor"
    _check_tensor(output, fn, "output")
    _check_tensor(input, fn, "input")
    g = _pg(group)
    if g is None:
        return None
    _check_like(fn, output, "output", input, "input")
    n = g.size()
    _check_world_multiple(fn, input, "input", output, "output", n)
    mop = _mpi_op(op, input.dtype)
    send, recv = _Buf(input), _Buf(output, read=False)
    divide = n if op is ReduceOp.AVG else None
    _tally("reduce_scatter_tensor", g, input)

    def start(blocking):
        f = g.comm.Reduce_scatter_block if blocking else g.comm.Ireduce_scatter_block
        return f(send.array, recv.array, mop)

    return _run(async_op, start, lambda s: recv.done(divide), [output])


def reduce(tensor, dst=None, op=ReduceOp.SUM, group=None, async_op: bool = False, group_dst=None):
    """Reduce ``tensor`` over the ranks into rank ``dst``'s tensor (the others' tensors
    are left as they were)."""
    _check_tensor(tensor, "reduce")
    g = _pg(group)
    if g is None:
        return None
    root = _root(g, dst, group_dst, "reduce", "dst")
    mop = _mpi_op(op, tensor.dtype)
    b = _Buf(tensor)
    me = g.rank() == root
    divide = g.size() if op is ReduceOp.AVG else None
    _tally("reduce", g, tensor, root)

    def start(blocking):
        f = g.comm.Reduce if blocking else g.comm.Ireduce
        if me:
            return f(MPI.IN_PLACE, b.array, mop, root=root)
        return f(b.array, None, mop, root=root)

    return _run(async_op, start, (lambda s: b.done(divide)) if me else None, [tensor])


def gather(tensor, gather_list=None, dst=None, group=None, async_op: bool = False, group_dst=None):
    """Collect every rank's ``tensor`` into ``gather_list`` on rank ``dst`` (None elsewhere)."""
    _check_tensor(tensor, "gather")
    g = _pg(group)
    if g is None:
        return None
    root = _root(g, dst, group_dst, "gather", "dst")
    me = g.rank() == root
    n, k = g.size(), tensor.numel()
    if me:
        _check_list("gather", "gather_list", gather_list, tensor, n)
    send = tensor.detach().cpu().contiguous()._np().ravel()
    recv = _flat_host(n * k, tensor.dtype) if me else None
    _tally("gather", g, tensor, root)

    def start(blocking):
        return (g.comm.Gather if blocking else g.comm.Igather)(send, recv, root=root)

    def finish(statuses):
        for i, t in enumerate(gather_list):
            _write(t, recv[i * k : (i + 1) * k])

    return _run(async_op, start, finish if me else None, list(gather_list or []))


def scatter(
    tensor, scatter_list=None, src=None, group=None, async_op: bool = False, group_src=None
):
    """Give rank i ``scatter_list[i]`` of rank ``src``, in ``tensor``."""
    _check_tensor(tensor, "scatter")
    g = _pg(group)
    if g is None:
        return None
    root = _root(g, src, group_src, "scatter", "src")
    me = g.rank() == root
    n, k = g.size(), tensor.numel()
    send = None
    if me:
        _check_list("scatter", "scatter_list", scatter_list, tensor, n)
        send = np.concatenate([t.detach().cpu()._np().ravel() for t in scatter_list])
    recv = _flat_host(k, tensor.dtype)
    _tally("scatter", g, tensor, root)

    def start(blocking):
        return (g.comm.Scatter if blocking else g.comm.Iscatter)(send, recv, root=root)

    return _run(async_op, start, lambda s: _write(tensor, recv), [tensor])


def _check_list(fn, name, lst, tensor, n):
    if not isinstance(lst, (list, tuple)) or len(lst) != n:
        raise ValueError(f"{fn}: {name} must be a list of {n} tensors, one per rank (got {lst!r})")
    for i, t in enumerate(lst):
        _check_tensor(t, fn, f"{name}[{i}]")
        _check_like(fn, t, f"{name}[{i}]", tensor, "tensor")
        if t.numel() != tensor.numel():
            raise ValueError(
                f"{fn}: {name}[{i}] has shape {tuple(t.shape)} and tensor "
                f"{tuple(tensor.shape)}; they must hold the same number of elements"
            )


def barrier(group=None, async_op: bool = False, device_ids=None, timeout=None):
    """Wait until every rank of the group has reached the barrier."""
    g = _pg(group)
    if g is None:
        return None
    return _run(async_op, lambda blocking: g.comm.Barrier() if blocking else g.comm.Ibarrier())


# ---------------------------------------------------------------- point to point
def _peer(g: ProcessGroup, rank, group_rank, fn: str, what: str) -> int:
    if rank is None and group_rank is None:
        raise ValueError(f"{fn}: give the {what} rank")
    peer = _root(g, rank, group_rank, fn, what)
    if peer == g.rank():
        raise ValueError(
            f"{fn}: {what} rank {g.ranks[peer]} is this process's own rank; a process "
            "cannot send to or receive from itself"
        )
    return peer


def _check_tag(fn: str, tag) -> int:
    if not isinstance(tag, int) or tag < 0 or tag > MPI.COMM_WORLD.Get_attr(MPI.TAG_UB):
        raise ValueError(f"{fn}: tag must be an int from 0 to MPI's TAG_UB (got {tag!r})")
    return tag


def isend(tensor, dst=None, group=None, tag: int = 0, group_dst=None):
    """Start sending ``tensor`` to rank ``dst``; returns a Work. The tensor must not be
    written until ``wait()`` returns."""
    _check_tensor(tensor, "isend")
    g = _pg(group)
    if g is None:
        return None
    peer, tag = _peer(g, dst, group_dst, "isend", "dst"), _check_tag("isend", tag)
    b = _Buf(tensor)
    _tally("isend", g, tensor)
    work = Work([g.comm.Isend(b.array, dest=peer, tag=tag)], None, [tensor])
    work._keep = b  # a staged copy lives until the send has finished
    return work


def irecv(tensor, src=None, group=None, tag: int = 0, group_src=None):
    """Start receiving into ``tensor`` from rank ``src`` (any rank when None); returns a
    Work whose ``wait()`` writes the tensor and whose ``source_rank()`` names the sender."""
    _check_tensor(tensor, "irecv")
    g = _pg(group)
    if g is None:
        return None
    tag = _check_tag("irecv", tag)
    peer = MPI.ANY_SOURCE if src is None and group_src is None else None
    if peer is None:
        peer = _peer(g, src, group_src, "irecv", "src")
    b = _Buf(tensor, read=False)
    work = Work([g.comm.Irecv(b.array, source=peer, tag=tag)], None, [tensor])

    def finish(statuses):
        b.done()
        work._source = g.ranks[statuses[0].Get_source()]

    work._finish = finish
    return work


def send(tensor, dst=None, group=None, tag: int = 0, group_dst=None) -> None:
    """Send ``tensor`` to rank ``dst`` (which calls :func:`recv`)."""
    isend(tensor, dst, group, tag, group_dst).wait()


def recv(tensor, src=None, group=None, tag: int = 0, group_src=None) -> int:
    """Receive into ``tensor`` from rank ``src`` (any rank when None); returns the
    sender's rank."""
    work = irecv(tensor, src, group, tag, group_src)
    return -1 if work is None else work.source_rank()


# ---------------------------------------------------------------- Python objects
def all_gather_object(object_list, obj, group=None) -> None:
    """Fill ``object_list[i]`` with rank i's ``obj`` (pickled: for small objects, never
    tensors on the hot path)."""
    g = _pg(group)
    if g is None:
        return
    if len(object_list) != g.size():
        raise ValueError(f"all_gather_object: object_list must have {g.size()} entries")
    object_list[:] = g.comm.allgather(obj)


def broadcast_object_list(object_list, src=None, group=None, device=None, group_src=None) -> None:
    """Replace ``object_list``'s entries on every rank with rank ``src``'s (pickled)."""
    g = _pg(group)
    if g is None:
        return
    root = _root(g, src, group_src, "broadcast_object_list", "src")
    object_list[:] = g.comm.bcast(list(object_list) if g.rank() == root else None, root=root)

"""``sitp.distributed``: torch.distributed's collectives on MPI (chapter 7).

``import sitp.distributed as dist`` gives torch's names: :func:`init_process_group`,
:func:`get_rank`, :func:`get_world_size`, :func:`all_reduce` and the other collectives,
:class:`ReduceOp`, ``async_op=True`` handles (:class:`Work`). The processes are started
by MPI: ``python -m sitp.distributed.run --nproc-per-node N script.py`` (torchrun's
options and environment variables) or ``mpirun -n N python script.py``. The
implementation is in ``_c10d.py``; the launcher in ``run.py``. :class:`CommCounter`
counts the bytes a rank sends; :class:`ZeroOptimizer` (``zero.py``) is ZeRO stages 1 and
2 as the ZeRO paper defines them (torch has no such class); ZeRO-3 is
``sitp.distributed.fsdp.fully_shard`` and tensor parallelism
``sitp.distributed.tensor.parallel``, at torch's paths. :func:`spawn` (``spawn.py``) runs
a plain function on N ranks from a script, a page or a notebook, as
``torch.multiprocessing.spawn`` does.
"""

from sitp.distributed._c10d import (
    BACKENDS,
    CommCounter,
    GroupMember,
    ProcessGroup,
    ReduceOp,
    Work,
    all_gather,
    all_gather_into_tensor,
    all_gather_object,
    all_reduce,
    barrier,
    broadcast,
    broadcast_object_list,
    cuda_aware,
    destroy_process_group,
    gather,
    get_backend,
    get_global_rank,
    get_process_group_ranks,
    get_rank,
    get_world_size,
    group,
    init_process_group,
    irecv,
    is_available,
    is_gloo_available,
    is_initialized,
    is_mpi_available,
    is_nccl_available,
    isend,
    new_group,
    recv,
    reduce,
    reduce_scatter_tensor,
    scatter,
    send,
)

__all__ = [
    "BACKENDS",
    "CommCounter",
    "GroupMember",
    "ProcessGroup",
    "ReduceOp",
    "Work",
    "all_gather",
    "all_gather_into_tensor",
    "all_gather_object",
    "all_reduce",
    "barrier",
    "broadcast",
    "broadcast_object_list",
    "cuda_aware",
    "destroy_process_group",
    "gather",
    "get_backend",
    "get_global_rank",
    "get_process_group_ranks",
    "get_rank",
    "get_world_size",
    "group",
    "init_process_group",
    "irecv",
    "is_available",
    "is_gloo_available",
    "is_initialized",
    "is_mpi_available",
    "is_nccl_available",
    "isend",
    "new_group",
    "recv",
    "reduce",
    "reduce_scatter_tensor",
    "scatter",
    "send",
    "ZeroOptimizer",
    "spawn",
    "DeviceMesh",
    "init_device_mesh",
]

from sitp.distributed.device_mesh import DeviceMesh, init_device_mesh  # noqa: E402
from sitp.distributed.spawn import spawn  # noqa: E402
from sitp.distributed.zero import ZeroOptimizer  # noqa: E402  (it uses the names above)

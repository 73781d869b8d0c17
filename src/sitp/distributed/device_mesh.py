"""``init_device_mesh`` and ``DeviceMesh``: the ranks laid out as an n-dimensional grid,
one process group along each dimension (torch.distributed.device_mesh; chapter 7.5).

Two ways of splitting training are combined by giving each its own dimension of the
grid. With 4 ranks as a (2, 2) mesh named ("dp", "tp"), the ranks are

    [[0, 1],
     [2, 3]]

and each rank belongs to two groups: along "tp" the ranks of its row ({0, 1} or
{2, 3}), which split each layer's weights between them (tensor parallelism); along
"dp" those of its column ({0, 2} or {1, 3}), which hold the same slices of the weights
and see different samples (data parallelism). ``mesh["tp"]`` is this rank's row as a
1-D mesh, which ``parallelize_module`` takes; ``mesh["dp"]`` its column, which
``DistributedDataParallel(device_mesh=...)`` takes. Ranks are laid out row-major, so the
last dimension's groups are ranks next to each other: on a cluster, those of one machine,
where the tensor-parallel all-reduces of every layer are cheapest.

sitp's mesh is its groups: there is no DTensor to place on it. Every rank must create a
mesh together with the others (each group is made by all the world's ranks, as
``new_group``).
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from sitp import distributed as dist
from sitp._tensor import creation
from sitp.dtypes import int64

__all__ = ["DeviceMesh", "group_of", "init_device_mesh"]


class DeviceMesh:
    """The world's ranks as a grid, with this rank's process group along each dimension.

    Built by :func:`init_device_mesh` (or by indexing a mesh by a dimension's name).
    """

    def __init__(self, device_type, ranks, groups, mesh_dim_names=None, _coordinate=None):
        self.device_type = device_type
        self._ranks = np.asarray(ranks, dtype=np.int64)
        self._groups = list(groups)  # this rank's group along each dimension
        self.mesh_dim_names = tuple(mesh_dim_names) if mesh_dim_names is not None else None
        self._coordinate = _coordinate

    @property
    def mesh(self):
        """The global ranks of the grid, an int64 tensor of the mesh's shape."""
        return creation.tensor(self._ranks.tolist(), dtype=int64)

    @property
    def ndim(self) -> int:
        return self._ranks.ndim

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self._ranks.shape)

    def _dim(self, mesh_dim) -> int:
        if mesh_dim is None:
            if self.ndim != 1:
                raise RuntimeError(
                    f"this DeviceMesh has {self.ndim} dimensions {self._names()}: "
                    "name the one you mean (mesh_dim=)"
                )
            return 0
        if isinstance(mesh_dim, str):
            if not self.mesh_dim_names or mesh_dim not in self.mesh_dim_names:
                raise KeyError(f"mesh has no dimension named {mesh_dim!r} {self._names()}")
            return self.mesh_dim_names.index(mesh_dim)
        if not isinstance(mesh_dim, int) or not -self.ndim <= mesh_dim < self.ndim:
            raise IndexError(f"mesh_dim {mesh_dim!r} is out of range for a {self.ndim}-D mesh")
        return mesh_dim % self.ndim

    def _names(self) -> str:
        return f"(names {self.mesh_dim_names})" if self.mesh_dim_names else "(no names)"

    def get_group(self, mesh_dim=None):
        """This rank's process group along ``mesh_dim`` (an index or a name; None for a
        1-D mesh)."""
        return self._groups[self._dim(mesh_dim)]

    def get_all_groups(self) -> list:
        return list(self._groups)

    def size(self, mesh_dim=None) -> int:
        """Ranks along ``mesh_dim``; all of the mesh's when None."""
        return self._ranks.size if mesh_dim is None else self.shape[self._dim(mesh_dim)]

    def get_rank(self) -> int:
        """This process's global rank."""
        return dist.get_rank()

    def get_local_rank(self, mesh_dim=None) -> int:
        """This rank's place along ``mesh_dim``: its rank in that dimension's group."""
        return self.get_coordinate()[self._dim(mesh_dim)]

    def get_coordinate(self) -> list[int]:
        """This rank's index in the grid."""
        if self._coordinate is None:
            where = np.argwhere(self._ranks == dist.get_rank())
            self._coordinate = [int(i) for i in where[0]] if len(where) else None
        return self._coordinate

    def __getitem__(self, names):
        """The sub-mesh of the named dimensions (a name, or a tuple of names) that holds
        this rank: ``mesh["tp"]`` is this rank's row of a ("dp", "tp") mesh."""
        names = (names,) if isinstance(names, str) else tuple(names)
        if not self.mesh_dim_names:
            raise RuntimeError("cannot slice a DeviceMesh without mesh_dim_names")
        dims = [self._dim(n) for n in names]
        if len(set(dims)) != len(dims):
            raise ValueError(f"a mesh dimension is named twice in {names}")
        coord = self.get_coordinate()
        index = tuple(slice(None) if d in dims else coord[d] for d in range(self.ndim))
        sub = self._ranks[index]
        kept = [d for d in range(self.ndim) if d in dims]  # in the mesh's order
        sub = np.transpose(sub, [kept.index(d) for d in dims]) if sub.ndim > 1 else sub
        return DeviceMesh(
            self.device_type,
            sub,
            [self._groups[d] for d in dims],
            names,
            [coord[d] for d in dims],
        )

    def __repr__(self):
        names = f", mesh_dim_names={self.mesh_dim_names}" if self.mesh_dim_names else ""
        return f"DeviceMesh('{self.device_type}', {self._ranks.tolist()}{names})"


def group_of(mesh, who: str, what: str):
    """The process group a 1-D mesh stands for; a process group or None is returned as
    it is. ``who`` and ``what`` name the caller and the dimension it wants (for the error
    a larger mesh gets: "DistributedDataParallel", "data-parallel", "dp")."""
    if not isinstance(mesh, DeviceMesh):
        return mesh
    if mesh.ndim != 1:
        raise ValueError(
            f"{who} takes a 1-D mesh (got {mesh!r}): pass its {what[0]} dimension, "
            f'mesh["{what[1]}"]'
        )
    return mesh.get_group()


def init_device_mesh(device_type, mesh_shape, *, mesh_dim_names=None):
    """The world's ranks as a grid of ``mesh_shape`` (row-major), with a process group
    along each dimension (torch's ``init_device_mesh``). Every rank must call it.

    Args:
        device_type: "cpu" or "cuda" (each rank's tensors live there; kept for torch's
            signature and the repr).
        mesh_shape: the grid's shape; its product must be the world size.
        mesh_dim_names: a name per dimension (needed to slice the mesh, ``mesh["tp"]``).
    """
    if not dist.is_initialized():
        raise ValueError(
            "init_device_mesh needs the default process group: call "
            "sitp.distributed.init_process_group() first"
        )
    shape = tuple(int(n) for n in mesh_shape)
    world = dist.get_world_size()
    if not shape or any(n < 1 for n in shape) or math.prod(shape) != world:
        raise ValueError(
            f"init_device_mesh: mesh_shape {tuple(mesh_shape)} holds {math.prod(shape)} "
            f"ranks, but the world has {world}"
        )
    if mesh_dim_names is not None:
        mesh_dim_names = tuple(mesh_dim_names)
        if len(mesh_dim_names) != len(shape):
            raise ValueError(
                f"init_device_mesh: {len(mesh_dim_names)} names {mesh_dim_names} for a "
                f"{len(shape)}-D mesh_shape {shape}"
            )
        if len(set(mesh_dim_names)) != len(mesh_dim_names):
            raise ValueError(f"init_device_mesh: mesh_dim_names {mesh_dim_names} repeat a name")
    ranks = np.arange(world, dtype=np.int64).reshape(shape)
    me = dist.get_rank()
    groups = []
    for d in range(len(shape)):
        mine = None
        # every group along d, in the same order on every rank (each is made by all)
        others = [range(n) for k, n in enumerate(shape) if k != d]
        for rest in itertools.product(*others):
            index = list(rest)
            index.insert(d, slice(None))
            members = ranks[tuple(index)].tolist()
            g = dist.new_group(members)
            if me in members:
                mine = g
        groups.append(mine)
    return DeviceMesh(device_type, ranks, groups, mesh_dim_names)

"""``sitp.utils.data``: datasets, samplers and the ``DataLoader``, with
``torch.utils.data``'s names and dotted submodules (``.dataset``, ``.sampler``,
``.dataloader``), so ``from torch.utils.data.dataloader import DataLoader`` runs as it is.

No chapter builds them: they serve PyTorch scripts run with ``import sitp as torch``;
the API page "data" shows them beside chapter 3.1's datasets. Part of the PyTorch
mirror (layer 5 of docs/layout.md).
"""

from sitp.utils.data import dataloader, dataset, distributed, sampler  # noqa: F401
from sitp.utils.data.dataloader import DataLoader, default_collate, default_convert, get_worker_info
from sitp.utils.data.dataset import (
    ConcatDataset,
    Dataset,
    IterableDataset,
    Subset,
    TensorDataset,
    random_split,
)
from sitp.utils.data.distributed import DistributedSampler
from sitp.utils.data.sampler import (
    BatchSampler,
    RandomSampler,
    Sampler,
    SequentialSampler,
    SubsetRandomSampler,
    WeightedRandomSampler,
)

__all__ = [
    "BatchSampler",
    "ConcatDataset",
    "DataLoader",
    "Dataset",
    "DistributedSampler",
    "IterableDataset",
    "RandomSampler",
    "Sampler",
    "SequentialSampler",
    "Subset",
    "SubsetRandomSampler",
    "TensorDataset",
    "WeightedRandomSampler",
    "default_collate",
    "default_convert",
    "get_worker_info",
    "random_split",
]

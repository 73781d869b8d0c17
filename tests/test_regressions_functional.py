"""Regressions found while writing sitp.nn.functional (each against PyTorch's behaviour)."""

import pytest
import torch

import sitp


def test_gather_rejects_negative_indices_like_torch():
    # gather_positions wrapped -1 to the last entry; torch.gather raises instead.
    x = [[1.0, 2.0]]
    with pytest.raises(RuntimeError, match="out of bounds"):
        torch.tensor(x).gather(1, torch.tensor([[-1]]))
    with pytest.raises(RuntimeError, match="index -1 is out of bounds for dimension 1 with size 2"):
        sitp.tensor(x).gather(1, sitp.tensor([[-1]]))

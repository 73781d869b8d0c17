"""A 2-D mesh (sitp.distributed.device_mesh) on 4 MPI ranks: its groups, and data
parallelism over one dimension with tensor parallelism over the other, trained against
one process on the whole batch.

As tests/test_tensor_parallel.py, this file is also the script the ranks run (4 ranks:
on a 2-core machine, oversubscribed).
"""

from __future__ import annotations

import sys

import numpy as np
import pytest

import dist_util
import sitp
import sitp.distributed as dist
from sitp.distributed.device_mesh import init_device_mesh
from sitp.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
from sitp.models.gpt import MLP, GPTConfig

CFG = GPTConfig(block_size=8, vocab_size=11, n_layer=1, n_head=2, n_embd=8)
DP, TP = 2, 2
B, T = 4, 3  # the whole batch: each data-parallel rank takes B / DP samples


def check_groups():
    """Ranks row-major: "tp" groups are rows ({0, 1}, {2, 3}), "dp" groups columns."""
    r = dist.get_rank()
    mesh = init_device_mesh("cpu", (DP, TP), mesh_dim_names=("dp", "tp"))
    assert mesh.shape == (DP, TP) and mesh.ndim == 2 and mesh.size() == 4
    assert mesh.mesh.tolist() == [[0, 1], [2, 3]]
    assert mesh.get_coordinate() == [r // TP, r % TP]
    assert mesh["tp"].mesh.tolist() == [r - r % TP, r - r % TP + 1]
    assert mesh["dp"].mesh.tolist() == [r % TP, r % TP + TP]
    assert mesh.get_group("tp").ranks == mesh["tp"].mesh.tolist()
    assert mesh.get_group(0).ranks == mesh["dp"].mesh.tolist()
    assert mesh.get_local_rank("tp") == dist.get_rank(mesh["tp"].get_group()) == r % TP
    assert mesh.get_local_rank("dp") == r // TP
    assert mesh[("tp", "dp")].mesh.tolist() == [[0, 2], [1, 3]]  # the transposed grid
    x = sitp.tensor([float(r)])
    dist.all_reduce(x, group=mesh["tp"].get_group())
    assert x.item() == 2 * (r - r % TP) + 1  # the sum over this rank's row
    for bad, match in (
        (lambda: init_device_mesh("cpu", (3, 2)), "holds 6 ranks, but the world has 4"),
        (lambda: init_device_mesh("cpu", (2, 2), mesh_dim_names=("a",)), "1 names"),
        (lambda: mesh.get_group(), "name the one you mean"),
        (lambda: mesh["pp"], "no dimension named 'pp'"),
    ):
        with pytest.raises((ValueError, RuntimeError, KeyError), match=match):
            bad()


def _batches(steps):
    rng = np.random.default_rng(0)
    return [
        (rng.standard_normal((B, T, CFG.n_embd)), rng.standard_normal((B, T, CFG.n_embd)))
        for _ in range(steps)
    ]


def check_dp_times_tp():
    """The GPT's MLP split over "tp" (ColwiseParallel c_fc, RowwiseParallel c_proj),
    wrapped in DDP over "dp", each "dp" rank on its half of every batch: after 3 SGD steps
    every rank's weight slices are one process's, trained on the whole batch (float64)."""
    mesh = init_device_mesh("cpu", (DP, TP), mesh_dim_names=("dp", "tp"))
    dp, tp = mesh.get_local_rank("dp"), mesh.get_local_rank("tp")
    sitp.manual_seed(0)
    ref = MLP(CFG).double()
    sitp.manual_seed(0)
    model = MLP(CFG).double()
    parallelize_module(model, mesh["tp"], {"c_fc": ColwiseParallel(), "c_proj": RowwiseParallel()})
    ddp = sitp.nn.parallel.DistributedDataParallel(model, device_mesh=mesh["dp"])
    assert ddp.world_size == DP
    opt_ref = sitp.optim.SGD(ref.parameters(), lr=0.1)
    opt = sitp.optim.SGD(ddp.parameters(), lr=0.1)
    half = B // DP
    for x, w in _batches(3):
        x, w = sitp.tensor(x), sitp.tensor(w)
        opt_ref.zero_grad()
        ((ref(x) * w).sum() / B).backward()
        opt_ref.step()
        opt.zero_grad()
        mine = slice(dp * half, (dp + 1) * half)
        ((ddp(x[mine]) * w[mine]).sum() / half).backward()  # DDP averages over "dp"
        opt.step()
    n = 4 * CFG.n_embd // TP
    want = {
        "c_fc.weight": ref.c_fc.weight[tp * n : (tp + 1) * n],
        "c_fc.bias": ref.c_fc.bias[tp * n : (tp + 1) * n],
        "c_proj.weight": ref.c_proj.weight[:, tp * n : (tp + 1) * n],
        "c_proj.bias": ref.c_proj.bias,
    }
    for name, q in model.named_parameters():
        diff = float(np.abs(q.detach().numpy() - want[name].detach().numpy()).max())
        assert diff < 1e-12, (name, diff)


def main() -> None:
    dist.init_process_group()
    for name, check in (("groups", check_groups), ("dp_times_tp", check_dp_times_tp)):
        check()
        if dist.get_rank() == 0:
            print(f"ok {name}", flush=True)
    dist.destroy_process_group()


# ------------------------------------------------------------------ the pytest side
CHECKS = ["groups", "dp_times_tp"]


@pytest.fixture(scope="module")
def ranks_output():
    return dist_util.ranks_output(__file__, nproc=4)


@pytest.mark.parametrize("check", CHECKS)
def test_four_ranks(ranks_output, check):
    assert check in dist_util.checks_passed(ranks_output), ranks_output


def test_refusals():
    with pytest.raises(ValueError, match="init_process_group"):
        init_device_mesh("cpu", (1,))


if __name__ == "__main__":
    sys.exit(main())

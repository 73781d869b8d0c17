"""A rank killed by SIGKILL while the other waits in a collective: the job ends within a
few seconds, the launcher names the rank, the last checkpoint is intact, and training
resumes from it on another number of ranks (ZeRO-2's optimizer state re-sharded) to the
weights of an uninterrupted run at that number of ranks. The same two jobs carry a ZeRO-3
checkpoint across: written whole on 2 ranks (``get_state_dict``), re-sharded on 3
(``set_state_dict``), it takes the step one process takes from it.

As tests/test_zero_stages.py, this file is also the script the ranks run: ``python
test_dist_faults.py kill CKPT`` trains on 2 ranks, checkpointing after every step, and
rank 1 kills itself at step KILL_AT, just before its backward, while rank 0 goes on into
the backward's reduce-scatter and waits there; ``resume CKPT`` resumes and compares.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import sitp
import sitp.distributed as dist
from dist_util import IN_CI, mpi_missing, output, run_ranks
from sitp.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from sitp.distributed.fsdp import full_state_dict, fully_shard
from sitp.models.gpt import GPT, GPTConfig

STEPS, KILL_AT, ROWS = 5, 3, 12  # 12 rows a step: an equal share on 1, 2, 3 or 4 ranks
KW = {"lr": 1e-2, "weight_decay": 0.1}


def _model():
    sitp.manual_seed(0)
    return sitp.nn.Sequential(sitp.nn.Linear(5, 16), sitp.nn.Tanh(), sitp.nn.Linear(16, 3)).double()


def _batch(step):
    rng = np.random.default_rng(100 + step)
    return sitp.tensor(rng.standard_normal((ROWS, 5))), sitp.tensor(rng.standard_normal((ROWS, 3)))


def train(ckpt=None, resume=False, kill_at=None):
    """Train to STEPS on this job's ranks, from a checkpoint if ``resume``; rank 0
    checkpoints after every step, atomically (write, then rename)."""
    r, p = dist.get_rank(), dist.get_world_size()
    model, start, saved = _model(), 0, None
    if resume:
        saved = sitp.load(ckpt, weights_only=False)
        model.load_state_dict(saved["model"])  # before the optimizer copies its shard
        start = saved["step"]
    zero = dist.ZeroOptimizer(
        model.parameters(), sitp.optim.AdamW, stage=2, bucket_cap_mb=0.001, **KW
    )
    if saved is not None:
        zero.load_state_dict(saved["optim"])  # each rank keeps its chunk, for this p
    for step in range(start, STEPS):
        if step == kill_at and r == 1:
            print(f"killing rank 1 at {time.time():.3f}", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        X, Y = _batch(step)
        mine = slice(r * ROWS // p, (r + 1) * ROWS // p)
        sitp.nn.functional.mse_loss(model(X[mine]), Y[mine]).backward()
        zero.step()
        zero.zero_grad()
        state = zero.state_dict()  # a collective: every rank calls it
        if ckpt is not None and r == 0:
            tmp = f"{ckpt}.tmp"
            sitp.save({"model": model.state_dict(), "optim": state, "step": step + 1}, tmp)
            os.replace(tmp, ckpt)
        dist.barrier()  # the checkpoint is on disk before any rank goes on
    zero.remove_hooks()
    return model


def _gpt():
    sitp.manual_seed(0)
    cfg = GPTConfig(block_size=8, vocab_size=11, n_layer=2, n_head=2, n_embd=16)
    return GPT(cfg).double()


def _tokens(step):
    idx = np.random.default_rng(200 + step).integers(0, 11, (6, 8))  # 6 rows: 2 or 3 ranks
    return sitp.tensor(idx), sitp.tensor(np.roll(idx, -1, axis=1))


def fsdp_train(path):
    """ZeRO-3 on this job's ranks, 2 AdamW steps; rank 0 writes the full state."""
    r, p = dist.get_rank(), dist.get_world_size()
    model = _gpt()
    for block in model.transformer.h:
        fully_shard(block)
    fully_shard(model)
    opt = sitp.optim.AdamW(model.parameters(), **KW)
    for step in range(2):
        X, Y = _tokens(step)
        mine = slice(r * 6 // p, (r + 1) * 6 // p)
        model(X[mine], Y[mine])[1].backward()
        opt.step()
        opt.zero_grad()
    msd, osd = get_state_dict(model, opt)
    if r == 0:
        sitp.save({"model": msd, "optim": osd}, f"{path}.tmp")
        os.replace(f"{path}.tmp", path)
    dist.barrier()


def fsdp_resume(path):
    """The full state, re-sharded for this job's ranks, takes the step one process takes
    from it."""
    r, p = dist.get_rank(), dist.get_world_size()
    saved = sitp.load(path, weights_only=False)
    sitp.manual_seed(3)
    model = GPT(_gpt().config).double()  # other weights, replaced by the checkpoint's
    for block in model.transformer.h:
        fully_shard(block)
    fully_shard(model)
    opt = sitp.optim.AdamW(model.parameters(), **KW)
    set_state_dict(model, opt, model_state_dict=saved["model"], optim_state_dict=saved["optim"])
    plain = _gpt()
    plain.load_state_dict(saved["model"], strict=False)  # the tied head shares wte's tensor
    order = [n for n, _ in plain.named_parameters()]
    plain_opt = sitp.optim.AdamW(plain.parameters(), **KW)
    group = {k: v for k, v in saved["optim"]["param_groups"][0].items() if k != "params"}
    state = {i: saved["optim"]["state"][n] for i, n in enumerate(order)}
    plain_opt.load_state_dict(
        {"state": state, "param_groups": [{**group, "params": list(range(len(order)))}]}
    )
    X, Y = _tokens(2)
    mine = slice(r * 6 // p, (r + 1) * 6 // p)
    model(X[mine], Y[mine])[1].backward()
    opt.step()
    plain(X, Y)[1].backward()
    plain_opt.step()
    want = dict(plain.named_parameters())
    for name, v in full_state_dict(model).items():
        diff = np.abs(v.numpy() - want[name].detach().numpy()).max()
        assert diff < 1e-12, (name, diff)


def main(mode: str, ckpt: str) -> None:
    dist.init_process_group()
    if mode == "kill":
        fsdp_train(f"{ckpt}.fsdp")
        train(ckpt, kill_at=KILL_AT)
    else:
        resumed = train(ckpt, resume=True)
        whole = train()  # uninterrupted, on this number of ranks
        diff = max(
            float(np.abs(a.detach().numpy() - b.detach().numpy()).max())
            for a, b in zip(resumed.parameters(), whole.parameters())
        )
        assert diff < 1e-12, diff
        if dist.get_rank() == 0:
            print(f"ok resume on {dist.get_world_size()} ranks", flush=True)
        fsdp_resume(f"{ckpt}.fsdp")
        if dist.get_rank() == 0:
            print(f"ok fsdp resume on {dist.get_world_size()} ranks", flush=True)
    dist.destroy_process_group()


# ------------------------------------------------------------------ the pytest side
@pytest.fixture(scope="module")
def mpi():
    if mpi_missing():
        if IN_CI:
            pytest.fail(f"CI=true: {mpi_missing()}")
        pytest.skip(mpi_missing())


def test_sigkill_then_resume_on_three_ranks(mpi, tmp_path):
    ckpt = tmp_path / "ckpt.pt"
    done = run_ranks(Path(__file__), nproc=2, timeout=60, args=("kill", ckpt), check=False)
    ended = time.time()
    assert done.returncode != 0, output(done)
    killed = float(done.stdout.split("killing rank 1 at ")[1].split()[0])
    assert ended - killed < 10, f"the job took {ended - killed:.1f} s to end\n{output(done)}"
    assert "rank 1" in done.stderr and "signal" in done.stderr.lower(), output(done)
    saved = sitp.load(ckpt, weights_only=False)  # the last complete checkpoint, whole
    assert saved["step"] == KILL_AT and not Path(f"{ckpt}.tmp").exists()
    resumed = run_ranks(Path(__file__), nproc=3, timeout=60, args=("resume", ckpt))
    assert "ok resume on 3 ranks" in resumed.stdout, output(resumed)
    assert "ok fsdp resume on 3 ranks" in resumed.stdout, output(resumed)


if __name__ == "__main__":
    main(*sys.argv[1:3])

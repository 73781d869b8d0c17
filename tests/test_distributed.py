"""sitp.distributed (chapter 7.1): every collective against numpy on 2 ranks, the launcher,
and the failures (a rank that raises, a job that hangs, calls before init).

Each launch costs about a second (two Pythons import sitp and numba), so one launch runs
many checks: every rank builds every rank's inputs from its rank number, computes the
expected result with numpy, and compares. A rank that finds a difference raises, which
ends the job with that rank's traceback (see test_a_raising_rank_ends_the_job).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

import pytest

from dist_util import mpirun, output, requires_mpi, run_ranks

pytestmark = requires_mpi

# The checks every collective passes, run on each rank. `check` counts what was compared.
COLLECTIVES = r"""
import os
import numpy as np
import pytest
import sitp
import sitp.distributed as dist

dist.init_process_group(backend="gloo")  # an alias: it runs on MPI
r, n = dist.get_rank(), dist.get_world_size()
assert (r, n) == (int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])) and n == 2
assert dist.is_initialized() and dist.get_backend() == "mpi"
DEVICE = os.environ.get("DEVICE", "cpu")
if DEVICE == "cuda":
    assert sitp.cuda.is_available() or sitp.cuda.is_simulated()
DTYPES = [getattr(np, d) for d in os.environ.get("DTYPES", "float32 float64 int64").split()]
checked = 0


def check(got, want, what):
    global checked
    got = got.cpu().numpy() if isinstance(got, sitp.Tensor) else np.asarray(got)
    want = np.asarray(want)
    assert got.dtype == want.dtype, (what, got.dtype, want.dtype)
    if got.dtype.kind == "f":
        np.testing.assert_allclose(got, want, rtol=1e-6 if got.dtype == np.float32 else 1e-14, err_msg=what)
    else:
        np.testing.assert_array_equal(got, want, err_msg=what)
    checked += 1


def data(rank, shape, dtype, salt=0):
    # rank's input, the same on every rank that builds it
    rng = np.random.default_rng(1000 * rank + salt)
    if dtype == np.int64:
        return rng.integers(-50, 50, shape).astype(np.int64)
    if dtype == np.bool_:
        return rng.random(shape) < 0.5
    return rng.standard_normal(shape).astype(dtype)


def T(a, noncontig=False):
    t = sitp.tensor(a.T.copy()).T if noncontig else sitp.tensor(a)  # a transposed view
    assert t.is_contiguous() is not (noncontig and a.ndim == 2 and min(a.shape) > 1)
    return t.to(DEVICE)


def numpy_reduce(op, arrays):
    stack = np.stack(arrays)
    if op is dist.ReduceOp.SUM:
        return stack.sum(0) if stack.dtype != np.bool_ else stack.any(0)
    if op is dist.ReduceOp.AVG:
        return (stack.sum(0) / len(arrays)).astype(stack.dtype)
    if op is dist.ReduceOp.PRODUCT:
        return stack.prod(0) if stack.dtype != np.bool_ else stack.all(0)
    if op is dist.ReduceOp.MAX:
        return stack.max(0)
    if op is dist.ReduceOp.MIN:
        return stack.min(0)
    raise AssertionError(op)


OPS = [dist.ReduceOp.SUM, dist.ReduceOp.AVG, dist.ReduceOp.PRODUCT, dist.ReduceOp.MAX, dist.ReduceOp.MIN]
for dt in DTYPES:
    for nc in (False, True):
        for op in OPS:
            if op is dist.ReduceOp.AVG and dt == np.int64:
                with pytest.raises(ValueError, match="AVG needs a floating-point"):
                    dist.all_reduce(T(data(r, (3, 4), dt)), op=op)
                continue
            for async_op in (False, True):
                x = T(data(r, (3, 4), dt), nc)
                v = x._version
                w = dist.all_reduce(x, op=op, async_op=async_op)
                if async_op:
                    assert w.wait() and w.is_completed()
                else:
                    assert w is None
                check(x, numpy_reduce(op, [data(q, (3, 4), dt) for q in range(n)]), f"all_reduce {op} {dt} nc={nc}")
                assert x._version > v, "all_reduce writes in place: the version counter moves"

        # broadcast from each root
        for src in range(n):
            x = T(data(r, (3, 4), dt, 1), nc)
            w = dist.broadcast(x, src=src, async_op=nc)
            if w is not None:
                w.wait()
            check(x, data(src, (3, 4), dt, 1), f"broadcast src={src} {dt}")

        # all_gather into a list, all_gather_into_tensor in both layouts
        x = T(data(r, (3, 4), dt, 2), nc)
        outs = [T(np.zeros((3, 4), dt), nc) for _ in range(n)]
        w = dist.all_gather(outs, x, async_op=nc)
        if w is not None:
            w.wait()
        for q in range(n):
            check(outs[q], data(q, (3, 4), dt, 2), f"all_gather [{q}] {dt}")
        for shape in ((n * 3, 4), (n, 3, 4)):
            out = sitp.zeros(shape, dtype=sitp.tensor(np.zeros(1, dt)).dtype).to(DEVICE)
            dist.all_gather_into_tensor(out, x)
            check(out, np.stack([data(q, (3, 4), dt, 2) for q in range(n)]).reshape(shape), "all_gather_into_tensor")

        # reduce_scatter_tensor: rank r gets chunk r of the reduction
        for op in (dist.ReduceOp.SUM, dist.ReduceOp.MAX) + ((dist.ReduceOp.AVG,) if dt != np.int64 else ()):
            out = T(np.zeros((2, 3), dt), nc)
            w = dist.reduce_scatter_tensor(out, T(data(r, (n * 2, 3), dt, 3)), op=op, async_op=True)
            w.wait()
            full = numpy_reduce(op, [data(q, (n * 2, 3), dt, 3) for q in range(n)])
            check(out, full[2 * r : 2 * r + 2], f"reduce_scatter_tensor {op} {dt}")

        # reduce, gather, scatter to and from rank 1
        x = T(data(r, (3, 4), dt, 4), nc)
        dist.reduce(x, dst=1, op=dist.ReduceOp.SUM)
        total = numpy_reduce(dist.ReduceOp.SUM, [data(q, (3, 4), dt, 4) for q in range(n)])
        check(x, total if r == 1 else data(r, (3, 4), dt, 4), "reduce")
        glist = [T(np.zeros((3, 4), dt)) for _ in range(n)] if r == 1 else None
        dist.gather(T(data(r, (3, 4), dt, 5), nc), glist, dst=1)
        if r == 1:
            for q in range(n):
                check(glist[q], data(q, (3, 4), dt, 5), "gather")
        y = T(np.zeros((3, 4), dt), nc)
        slist = [T(data(q, (3, 4), dt, 6)) for q in range(n)] if r == 0 else None
        dist.scatter(y, slist, src=0)
        check(y, data(r, (3, 4), dt, 6), "scatter")

        # send/recv and isend/irecv, both ways
        peer = 1 - r
        y = T(np.zeros((3, 4), dt), nc)
        if r == 0:
            dist.send(T(data(0, (3, 4), dt, 7), nc), dst=1, tag=3)
            assert dist.recv(y, src=1) == 1
        else:
            assert dist.recv(y, tag=3) == 0  # from any source
            dist.send(T(data(1, (3, 4), dt, 7), nc), dst=0)
        check(y, data(peer, (3, 4), dt, 7), "send/recv")
        y = T(np.zeros((3, 4), dt), nc)
        reqs = [dist.isend(T(data(r, (3, 4), dt, 8), nc), dst=peer), dist.irecv(y, src=peer)]
        for q in reqs:
            q.wait()
        assert reqs[1].source_rank() == peer
        check(y, data(peer, (3, 4), dt, 8), "isend/irecv")

# bool: SUM and MAX are an OR, MIN and PRODUCT an AND
for op in (dist.ReduceOp.SUM, dist.ReduceOp.MIN):
    x = T(data(r, (5,), np.bool_))
    dist.all_reduce(x, op=op)
    check(x, numpy_reduce(op, [data(q, (5,), np.bool_) for q in range(n)]), f"bool {op}")

# errors: mismatched shapes and dtypes are named; ranks out of range; self-sends
f32 = sitp.zeros(3, 4).to(DEVICE)
with pytest.raises(ValueError, match=(
    r"output_tensor of shape \(5, 4\) must hold world_size \(2\) x input_tensor of shape "
    r"\(3, 4\) = 24 elements; it has 20"
)):
    dist.all_gather_into_tensor(sitp.zeros(5, 4).to(DEVICE), f32)
with pytest.raises(TypeError, match="output_tensor has dtype sitp.float64 and input_tensor has dtype sitp.float32"):
    dist.all_gather_into_tensor(sitp.zeros(6, 4, dtype=sitp.float64).to(DEVICE), f32)
with pytest.raises(ValueError, match=(
    r"input of shape \(3, 5\) must hold world_size \(2\) x output of shape \(2, 3\) = 12 "
    r"elements; it has 15"
)):
    dist.reduce_scatter_tensor(sitp.zeros(2, 3).to(DEVICE), sitp.zeros(3, 5).to(DEVICE))
with pytest.raises(ValueError, match="tensor_list must be a list of 2 tensors"):
    dist.all_gather([f32], f32)
with pytest.raises(ValueError, match=r"broadcast: src=2 is out of range: the world has 2 ranks \(0..1\)"):
    dist.broadcast(f32, src=2)
with pytest.raises(ValueError, match=r"send: dst=-1 is out of range"):
    dist.send(f32, dst=-1)
with pytest.raises(ValueError, match="own rank"):
    dist.recv(f32, src=r)
with pytest.raises(TypeError, match="must be a sitp.Tensor"):
    dist.all_reduce([1.0, 2.0])
with pytest.raises(RuntimeError, match="twice"):
    dist.init_process_group()

# a subgroup of rank 1 alone, and Python objects
g = dist.new_group([1])
x = T(np.full(3, r + 1.0))
dist.all_reduce(x, group=g)
check(x, np.full(3, r + 1.0), "a group of one")
assert dist.get_world_size(g) == (1 if r == 1 else -1)
objs = [None, None]
dist.all_gather_object(objs, {"rank": r})
assert objs == [{"rank": 0}, {"rank": 1}]
dist.barrier()
dist.destroy_process_group()
assert not dist.is_initialized()
print(f"rank {r} {DEVICE} cuda_aware={dist.cuda_aware()} checked {checked}", flush=True)
"""


def _checked(stdout: str, device: str) -> list[int]:
    """The number of checks each rank reports (the ranks' lines may interleave)."""
    found = re.findall(rf"rank \d {device} cuda_aware=\w+ checked (\d+)", stdout)
    return sorted(int(c) for c in found)


def test_every_collective_against_numpy_on_cpu():
    """float32, float64, int64 (and bool), contiguous and not, blocking and async."""
    out = run_ranks(COLLECTIVES, timeout=90)
    counts = _checked(out.stdout, "cpu")
    assert len(counts) == 2 and counts[0] >= 100, output(out)


def test_gpu_tensors_staged_and_cuda_aware_under_the_simulator():
    """GPU tensors, staged through the host and (SITP_MPI_CUDA_AWARE=1) passed as device
    buffers, which under numba's simulator live in host memory."""
    body = repr(COLLECTIVES)
    code = (
        "import os\n"
        "for mode in ('0', '1'):\n"
        "    os.environ['SITP_MPI_CUDA_AWARE'] = mode\n"
        f"    exec(compile({body}, 'checks', 'exec'), {{'__name__': 'checks'}})\n"
    )
    out = run_ranks(code, env={"NUMBA_ENABLE_CUDASIM": "1", "DEVICE": "cuda", "DTYPES": "float32"})
    assert "cuda_aware=False" in out.stdout and "cuda_aware=True" in out.stdout, output(out)
    counts = _checked(out.stdout, "cuda")
    assert len(counts) == 4 and counts[0] >= 40, output(out)


BEFORE_INIT = """
import pytest
import sitp
import sitp.distributed as dist

assert not dist.is_initialized()
msg = "Default process group has not been initialized, please make sure to call"
for call in (
    dist.get_rank,
    dist.get_world_size,
    dist.barrier,
    lambda: dist.all_reduce(sitp.ones(2)),
    lambda: dist.send(sitp.ones(2), dst=1),
):
    with pytest.raises(ValueError, match=msg):
        call()
with pytest.raises(ValueError, match="unknown backend 'ucc'"):
    dist.init_process_group("ucc")
assert dist.is_available() and not dist.is_initialized()
print("ok before init")
"""


def test_calls_before_init_raise_torchs_message():
    """In a fresh process, which no other test or fence can have left a default group in."""
    out = subprocess.run(
        [sys.executable, "-c", BEFORE_INIT], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0 and out.stdout == "ok before init\n", output(out)


def test_a_raising_rank_ends_the_job_with_its_traceback():
    """Rank 1 raises while rank 0 waits in a collective it will never finish: MPI_Abort
    ends both at once, and the job's stderr shows rank 1's error."""
    code = """
        import time
        import sitp, sitp.distributed as dist
        dist.init_process_group()
        if dist.get_rank() == 1:
            raise ValueError("rank 1 fails here")
        dist.all_reduce(sitp.ones(3))
        time.sleep(60)
    """
    start = time.perf_counter()
    out = run_ranks(code, timeout=60, check=False)
    took = time.perf_counter() - start
    assert out.returncode != 0, output(out)
    assert took < 30, f"the job took {took:.1f} s to end\n{output(out)}"
    assert "[rank 1]: ValueError: rank 1 fails here" in out.stderr, output(out)
    assert "[rank 0]:" not in out.stderr, output(out)


def test_a_rank_that_exits_nonzero_fails_the_job():
    out = run_ranks("import os, sys\nsys.exit(3 if os.environ['RANK'] == '0' else 0)", check=False)
    assert out.returncode == 3 and "[rank 0]: exited with status 3" in out.stderr, output(out)


def test_a_hanging_job_is_killed_at_the_timeout():
    code = """
        import os, time
        print("rank", os.environ["RANK"], "waits", flush=True)
        time.sleep(120)
    """
    start = time.perf_counter()
    out = run_ranks(code, timeout=4, check=False)  # 4 s: the ranks start on a loaded machine
    took = time.perf_counter() - start
    assert out.returncode == 124 and took < 25, f"{took:.1f} s\n{output(out)}"
    assert "ran past --timeout 4 s" in out.stderr and "rank 1 waits" in out.stdout, output(out)


def test_the_launcher_sets_torchruns_variables_and_runs_a_module(tmp_path):
    """``-m module args`` as torchrun: argv, sys.path[0] and the variables of each rank."""
    (tmp_path / "show_env.py").write_text(
        "import json, os, sys\n"
        "keys = 'RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE MASTER_ADDR MASTER_PORT'.split()\n"
        "with open(f'rank{os.environ[\"RANK\"]}.json', 'w') as f:\n"
        "    json.dump({'env': {k: os.environ[k] for k in keys}, 'argv': sys.argv[1:],\n"
        "               'path0': sys.path[0], 'name': __name__}, f)\n"
    )
    out = run_ranks(
        "show_env",
        module=True,
        args=["--lr", "3e-4"],
        cwd=tmp_path,
        launcher_args=["--master-port", "29777"],
    )
    # each rank writes a file: the ranks' printed lines may interleave
    seen = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert len(seen) == 2, output(out)
    for rank, d in enumerate(seen):
        assert d["env"] == {
            "RANK": str(rank),
            "WORLD_SIZE": "2",
            "LOCAL_RANK": str(rank),
            "LOCAL_WORLD_SIZE": "2",
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": "29777",
        }
        assert d["argv"] == ["--lr", "3e-4"] and d["name"] == "__main__"
        assert os.path.samefile(d["path0"], tmp_path)


SUM_TWO = """
import sitp, sitp.distributed as dist
dist.init_process_group("mpi")
r = dist.get_rank()
x = sitp.tensor([1.0, 2.0]) * (r + 1)
dist.all_reduce(x)
print(f"rank {r} of {dist.get_world_size()}: {x.tolist()}", flush=True)
"""


def test_plain_mpirun_runs_a_script(tmp_path):
    script = tmp_path / "sum_two.py"
    script.write_text(SUM_TWO)
    out = subprocess.run(
        [mpirun(), "-n", "2", sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, output(out)
    for r in (0, 1):
        assert f"rank {r} of 2: [3.0, 6.0]" in out.stdout, output(out)


def test_a_world_of_one_without_mpirun(tmp_path):
    """``python script.py``, or one process under torchrun's variables: a world of one,
    in which every collective leaves its tensor as it was; a WORLD_SIZE that MPI does not
    see is refused."""
    script = tmp_path / "one.py"
    script.write_text(
        "import os, pytest, sitp, sitp.distributed as dist\n"
        "os.environ['WORLD_SIZE'] = '2'\n"
        "with pytest.raises(ValueError, match='WORLD_SIZE=2 disagrees with MPI, which started "
        "1 process'):\n"
        "    dist.init_process_group('gloo')\n"
        "os.environ['WORLD_SIZE'] = '1'\n"
        "dist.init_process_group('gloo')\n"
        "x = sitp.tensor([1.0, 2.0])\n"
        "dist.all_reduce(x, op=dist.ReduceOp.AVG)\n"
        "out = [sitp.zeros(2)]\n"
        "dist.all_gather(out, x)\n"
        "dist.broadcast(x, src=0)\n"
        "dist.barrier()\n"
        "print(dist.get_rank(), dist.get_world_size(), x.tolist(), out[0].tolist())\n"
    )
    env = {**os.environ, "RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1"}
    out = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=60, env=env
    )
    assert out.returncode == 0, output(out)
    assert out.stdout.strip() == "0 1 [1.0, 2.0] [1.0, 2.0]", output(out)


def test_the_mpirun_command_for_a_hostfile(tmp_path):
    """Multi-node use cannot run here; the command line the launcher builds can be read:
    --nproc-per-node ranks on each host of the file, MASTER_ADDR its first host."""
    from sitp.distributed import run

    hostfile = tmp_path / "hosts"
    hostfile.write_text("# two nodes\nnode-a:8\nnode-b:8\n")
    a = run.parse(["--nproc-per-node", "4", "--hostfile", str(hostfile), "-m", "sitp", "train"])
    cmd, env = run.command(a, "mpirun", "mpich")
    tail = [sys.executable, str(run.BOOTSTRAP), "-m", "sitp", "train"]
    assert cmd == ["mpirun", "-n", "8", "-f", str(hostfile), "-ppn", "4", *tail]
    assert (env["MASTER_ADDR"], env["MASTER_PORT"]) == ("node-a", "29500")
    cmd, _ = run.command(a, "mpirun", "openmpi")
    assert cmd[:3] == ["mpirun", "-n", "8"] and "ppr:4:node" in cmd and "-x" in cmd
    one = run.parse(["--nproc-per-node", "3", str(hostfile)])
    assert run.command(one, "mpirun", "mpich")[0][:3] == ["mpirun", "-n", "3"]
    with pytest.raises(SystemExit):
        run.parse(["--nproc-per-node", "0", str(hostfile)])

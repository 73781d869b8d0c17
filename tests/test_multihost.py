"""The launcher's multi-node command, run: two "hosts" made on this machine.

Each host is a Linux network namespace with an address of its own on a bridge, entered
with a UTS namespace of its own, so that it has its own host name. The bridge, and the
launcher's mpirun with it, live in one more namespace, the "machine" the launcher runs
on: the host's own interfaces never change, which other programs notice (a browser
fails the requests it has in flight, as tests/test_site_browser.py's did). MPI then sees two
machines: it places ranks by host name, so ranks on different hosts talk over TCP
through the bridge, not through shared memory. MPI starts the ranks of another host over
ssh; here Hydra's ``HYDRA_LAUNCHER_EXEC`` names a stand-in for ssh that enters the host's
namespaces instead of logging in, and ``HYDRA_IFACE`` tells the remote side the bridge's
address to call back. The command itself is chapter 7.1's, unchanged:
``python -m sitp.distributed.run --hostfile hosts --nproc-per-node N script``.

Making namespaces needs root and iproute2's ``ip`` (``.ci/run`` installs it); the tests
are skipped without them, and under CI=true a root machine without ``ip`` fails them.
MPICH's Hydra only: Open MPI starts remote ranks its own way.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from dist_util import IN_CI, mpi_missing, mpirun, run_ranks
from sitp.distributed import run as launcher
from sitp.train.checkpoint import load_record
from sitp.train.cli import main
from test_cli_ddp import TEXT, argv, assert_close, weights


def _why_not() -> str | None:
    if mpi_missing():
        return mpi_missing()
    if os.geteuid() != 0:
        return "making network namespaces needs root"
    for tool in ("ip", "unshare"):
        if shutil.which(tool) is None:
            return f"no `{tool}` (apt-get install iproute2 util-linux)"
    if launcher.flavour(mpirun()) != "mpich":
        return "the stand-in for ssh is given to MPICH's Hydra; this mpirun is Open MPI's"
    return None


# The stand-in for ssh: Hydra runs ``STANDIN [ssh options] HOST COMMAND`` to start its
# proxy on HOST, which starts that host's ranks.
STANDIN = """#!/bin/sh
while [ "${1#-}" != "$1" ]; do shift; done
host=$1; shift
case "$host" in
%s
*) echo "no such host: $host" >&2; exit 255 ;;
esac
exec ip netns exec "$ns" unshare --uts --ipc --mount sh -c "hostname $ns && mount -t tmpfs shm /dev/shm && exec $*"
"""


def _ip(*args):
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


# The launcher's mpirun, run in the machine's namespace (SITP_MPIRUN names this script).
MPIRUN_THERE = """#!/bin/sh
exec ip netns exec %s %s "$@"
"""


@pytest.fixture(scope="module")
def hosts(tmp_path_factory):
    """Two hosts (network namespaces on a bridge, in a machine's namespace that the
    launcher's mpirun runs in): yields (hostfile path, env, addresses, host namespaces,
    the bridge's side of each host's link, the machine's namespace)."""
    why = _why_not()
    if why is not None:
        if IN_CI and os.geteuid() == 0 and not mpi_missing():
            pytest.fail(f"CI=true: {why}")
        pytest.skip(why)
    tag = os.getpid() % 100000  # names of this session's links and namespaces
    net = f"198.18.{os.getpid() % 256}"  # RFC 2544's benchmarking range: not routed
    machine, bridge = f"sitp{tag}m", f"sb{tag}"
    names = [f"sitp{tag}h{h}" for h in (1, 2)]
    addrs = [f"{net}.{11 + h}" for h in range(2)]
    links = [f"sv{tag}h{h}" for h in (1, 2)]
    tmp = tmp_path_factory.mktemp("hosts")
    before = os.environ.get("SITP_MPIRUN")
    try:
        _ip("netns", "add", machine)
        _ip("-n", machine, "link", "set", "lo", "up")
        _ip("-n", machine, "link", "add", bridge, "type", "bridge")
        _ip("-n", machine, "addr", "add", f"{net}.1/24", "dev", bridge)
        _ip("-n", machine, "link", "set", bridge, "up")
        for ns, addr, link in zip(names, addrs, links, strict=True):
            _ip("netns", "add", ns)
            _ip("-n", machine, "link", "add", link, "type", "veth", "peer", "name", "eth0",
                "netns", ns)  # fmt: skip
            _ip("-n", machine, "link", "set", link, "master", bridge, "up")
            _ip("-n", ns, "addr", "add", f"{addr}/24", "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")
            _ip("-n", ns, "link", "set", "lo", "up")
        standin = tmp / "ssh-into-namespace"
        cases = "\n".join(f"{a}) ns={n} ;;" for a, n in zip(addrs, names, strict=True))
        standin.write_text(STANDIN % cases)
        standin.chmod(0o755)
        there = tmp / "mpirun-in-the-machine"
        there.write_text(MPIRUN_THERE % (machine, mpirun()))
        there.chmod(0o755)
        os.environ["SITP_MPIRUN"] = str(there)  # (the launcher reads it from os.environ)
        hostfile = tmp / "hosts"
        hostfile.write_text("".join(f"{a}:2\n" for a in addrs))
        env = {"HYDRA_LAUNCHER": "ssh", "HYDRA_LAUNCHER_EXEC": str(standin), "HYDRA_IFACE": bridge}
        yield hostfile, env, addrs, names, links, machine
    finally:
        if before is None:
            os.environ.pop("SITP_MPIRUN", None)
        else:
            os.environ["SITP_MPIRUN"] = before
        for ns in (*names, machine):  # (the machine's goes with its bridge and links)
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def test_the_hosts_network_is_not_this_hosts(hosts):
    """While the two hosts exist, their bridge and links live in the namespaces, none of
    them beside this process's interfaces (whose changes a browser in another test
    notices), and the launcher's mpirun runs in the machine's namespace."""
    *_, links, machine = hosts
    ours = set(os.listdir("/sys/class/net"))
    assert not ours & {*links, f"sb{machine[4:-1]}"}, ours
    there = subprocess.run(["ip", "-n", machine, "-o", "link"], capture_output=True, text=True)
    assert all(link in there.stdout for link in links), there.stdout
    assert machine in Path(os.environ["SITP_MPIRUN"]).read_text()


def _tx_bytes(machine: str, link: str) -> int:
    """What the bridge's side of ``link`` has sent, read in the machine's namespace."""
    proc = subprocess.run(
        ["ip", "netns", "exec", machine, "cat", f"/sys/class/net/{link}/statistics/tx_bytes"],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    return int(proc.stdout)


RANKS = """
import os, socket
import sitp
import sitp.distributed as dist

dist.init_process_group()
x = sitp.full((1 << 20,), float(dist.get_rank() + 1))  # 4 MiB from each rank
dist.all_reduce(x)
print("rank", os.environ["RANK"], "local", os.environ["LOCAL_RANK"],
      "node", os.environ["GROUP_RANK"], "host", socket.gethostname(),
      "master", os.environ["MASTER_ADDR"], "sum", float(x[0]), float(x[-1]), flush=True)
dist.destroy_process_group()
"""


def test_two_hosts_are_two_machines_to_mpi(hosts):
    """2 hosts x 2 ranks: each host runs its two, with local ranks 0 and 1 and its own
    host name; MASTER_ADDR is the first host; the all-reduce is right, and its bytes
    crossed the links between the hosts (TCP), not shared memory."""
    hostfile, env, addrs, names, links, machine = hosts
    sent = [_tx_bytes(machine, link) for link in links]
    proc = run_ranks(RANKS, nproc=2, timeout=90, env=env, launcher_args=["--hostfile", hostfile])
    rows = sorted(line.split() for line in proc.stdout.splitlines() if line.startswith("rank "))
    assert len(rows) == 4, proc.stdout + proc.stderr
    for rank, row in enumerate(rows):
        field = dict(zip(row[::2], row[1::2]))
        assert int(field["rank"]) == rank
        assert int(field["node"]) == rank // 2 and int(field["local"]) == rank % 2
        assert field["host"] == names[rank // 2]
        assert field["master"] == addrs[0]
        assert float(row[-2]) == float(row[-1]) == 1 + 2 + 3 + 4
    # what each bridge port sent on to its host: at least one 4 MiB buffer's worth each
    # (a ring all-reduce moves about the buffer's size into every host)
    received = [_tx_bytes(machine, link) - s for link, s in zip(links, sent, strict=True)]
    assert min(received) > 2 << 20, received


def test_training_on_two_hosts_takes_the_steps_of_one_process(hosts, tmp_path):
    """`sitp train` through the launcher on two hosts (one rank each) ends with the
    weights and losses of one process on the whole batch, as on one machine."""
    hostfile, env, *_ = hosts
    (tmp_path / "text.txt").write_text(TEXT)
    common = ["--batch-size", "8", "--eval-every", "3", "--save-every", "0"]
    common += ["--tokenizer", "char", "--set", "block_size=16", "--eval-batches", "2"]
    common += ["--data", str(tmp_path / "text.txt")]
    run_ranks(
        "sitp",
        nproc=1,
        timeout=120,
        env=env,
        args=[*argv(tmp_path / "two", 6), *common],
        launcher_args=["--hostfile", hostfile],
        module=True,
    )
    assert main([*argv(tmp_path / "one", 6), *common, "--quiet"]) == 0
    assert_close(weights(tmp_path / "two"), weights(tmp_path / "one"), rtol=1e-4, atol=1e-5)
    r2, r1 = load_record(tmp_path / "two"), load_record(tmp_path / "one")
    assert r2["step"] == r1["step"] == 6
    np.testing.assert_allclose(r2["history"]["train"], r1["history"]["train"], rtol=1e-5)

"""Several machines (issue 25): two "nodes" on localhost give the run one process gives, only rank 0 writes, and
Lightning's start-up banners print once, from rank 0.

The nodes are started as docs/multinode.md tells a user to: with torchrun on each node, or as Slurm's srun
starts tasks (its environment variables, set by hand: no Slurm here). Each node runs in a folder of its own,
as on two machines without a shared disk: node 1 learns the run folder from rank 0 and writes nothing.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from unittest import mock

import pytest
from lightning.fabric import Fabric
from lightning.fabric.utilities import rank_zero

import fedclust
from fedclust.errors import ConfigError, FedclustError
from fedclust.federation.distributed import check_launcher, quiet_start_up, rank_zero_before_launch
from tests.federation.test_distributed import CCFC, fit, single_machine_env, write_config

BANNERS = ("Initializing distributed", "distributed_backend=gloo")
SLURM_JOB = {"SLURM_NTASKS": "2", "SLURM_NTASKS_PER_NODE": "1", "SLURM_NNODES": "2", "SLURM_LOCALID": "0",
             "SLURM_JOB_NAME": "fedclust"}  # what srun sets for `sbatch --nodes 2 --ntasks-per-node 1`
TORCHRUN_RANK_1 = {"TORCHELASTIC_RUN_ID": "x", "RANK": "1", "GROUP_RANK": "1", "LOCAL_RANK": "0",
                   "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "1"}


@pytest.mark.parametrize("env,rank", [
    ({}, 0),
    ({"NODE_RANK": "1"}, 1),  # Lightning's own multi-node launch, node 1
    ({"GROUP_RANK": "1"}, 1),
    ({"LOCAL_RANK": "1"}, 1),  # a process Fabric's launcher started
    (TORCHRUN_RANK_1, 1),
    ({**TORCHRUN_RANK_1, **SLURM_JOB, "SLURM_PROCID": "0", "SLURM_NODEID": "0"}, 1),  # torchrun inside Slurm
    ({**SLURM_JOB, "SLURM_PROCID": "1", "SLURM_NODEID": "1"}, 1),
    ({**SLURM_JOB, "SLURM_PROCID": "0", "SLURM_NODEID": "0", "NODE_RANK": "1"}, 0),
    ({**SLURM_JOB, "SLURM_JOB_NAME": "interactive", "SLURM_PROCID": "1", "SLURM_NODEID": "1"}, 0),
])
def test_rank_zero_is_known_before_launch_as_lightning_decides_it(env, rank):
    """Before the fix a Slurm task of rank 1 took itself for rank 0 and claimed the run folder (refused, since
    rank 0 held it: rank 0 then waited for it forever). Lightning's own choice is the reference: Fabric's
    constructor numbers the ranks (no process group yet)."""
    saved_rank = rank_zero.rank_zero_only.rank  # Fabric sets this global; other tests need it back
    clean = single_machine_env()
    try:
        with mock.patch.dict(os.environ, {**clean, **env}, clear=True):  # restores every variable Fabric sets
            assert rank_zero_before_launch() == (rank == 0)
            fab = Fabric(accelerator="cpu", devices=1, num_nodes=2, strategy="ddp")
            assert fab.global_rank == rank
    finally:
        rank_zero.rank_zero_only.rank = saved_rank


TORCHRUN_2X2 = {**TORCHRUN_RANK_1, "WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "2"}  # --nnodes 2 --nproc_per_node 2
SLURM_2X2 = {**SLURM_JOB, "SLURM_NTASKS": "4", "SLURM_NTASKS_PER_NODE": "2", "SLURM_PROCID": "0"}


@pytest.mark.parametrize("env,devices,num_nodes,refusal", [
    (TORCHRUN_2X2, 2, 2, None),
    (TORCHRUN_2X2, "auto", 2, None),  # Lightning's to judge
    (TORCHRUN_2X2, 1, 2, "fabric.devices = 1 is not valid: 2 (the processes per node of torchrun's --nproc_per_node"),
    (TORCHRUN_2X2, 2, 1, "fabric.num_nodes = 1 is not valid: 2 (torchrun's --nnodes"),
    (SLURM_2X2, 2, 2, None),
    (SLURM_2X2, 4, 2, "fabric.devices = 4 is not valid: 2 (the processes per node of Slurm's --ntasks-per-node"),
    (SLURM_2X2, 2, 4, "fabric.num_nodes = 4 is not valid: 2 (Slurm's --nodes"),
    ({**SLURM_2X2, "SLURM_NTASKS_PER_NODE": ""}, 2, 2, "the Slurm job asks for --ntasks=4"),
    ({**SLURM_2X2, "SLURM_JOB_NAME": "interactive"}, 1, 1, None),  # Lightning ignores Slurm there
    ({}, 3, 1, None),  # Fabric's own launcher starts what it is told
])
def test_launcher_and_fabric_settings_must_agree(env, devices, num_nodes, refusal):
    """A mismatch was Lightning's ValueError traceback from inside fab.launch() (after the run folder was
    claimed), or, for a single-process strategy under a several-process torchrun, ranks that each ran alone."""
    env = {key: value for key, value in env.items() if value}
    with mock.patch.dict(os.environ, {**single_machine_env(), **env}, clear=True):
        if refusal is None:
            check_launcher(devices, num_nodes)
        else:
            with pytest.raises(FedclustError) as error:
                check_launcher(devices, num_nodes)
            assert str(error.value).startswith(refusal)
            assert isinstance(error.value, ConfigError) == refusal.startswith("fabric.")


class Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@pytest.mark.parametrize("rank_zero_here", [True, False])
def test_start_up_banners_print_once_on_rank_zero_and_warnings_everywhere(monkeypatch, rank_zero_here):
    """As under `fedclust fit`: the command line's root handler (logging.basicConfig) and Lightning's own
    "lightning" handler both receive Lightning's records; without quiet_start_up every line printed twice."""
    own, root = Lines(), Lines()
    monkeypatch.setattr(logging.getLogger("lightning"), "handlers", [own])
    monkeypatch.setattr(logging.getLogger(), "handlers", [root])
    for name in ("lightning.fabric", "lightning.pytorch"):  # basicConfig ran before Lightning was imported
        monkeypatch.setattr(logging.getLogger(name), "handlers", [])
        monkeypatch.setattr(logging.getLogger(name), "propagate", True)
    per_rank = logging.getLogger("lightning.fabric.utilities.distributed")
    with quiet_start_up(rank_zero_here):
        per_rank.info("Initializing distributed: GLOBAL_RANK: 0, MEMBER: 1/2")
        if rank_zero_here:  # Lightning's rank_zero_info: rank 0 only
            logging.getLogger("lightning.pytorch.utilities.rank_zero").info("distributed_backend=gloo")
        per_rank.warning("a real problem")
    printed = own.lines + root.lines
    assert printed.count("a real problem") == 1
    assert printed.count("Initializing distributed: GLOBAL_RANK: 0, MEMBER: 1/2") == int(rank_zero_here)
    assert printed.count("distributed_backend=gloo") == int(rank_zero_here)
    assert logging.getLogger("lightning").propagate and per_rank.level == logging.NOTSET  # as it was


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def descendants(pid: int) -> list[tuple[int, str]]:
    """The live processes below `pid` with their start times (read from /proc: psutil is no dependency).
    torchrun starts its workers in sessions of their own, so signalling torchrun's group would miss them."""
    children: dict[int, list[tuple[int, str]]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append((int(stat.parent.name), fields[19]))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child[0])
    return found


def stop(procs: list[subprocess.Popen]) -> None:
    """End the nodes still running and every process they started: a failed test leaves no rank waiting."""
    running = [p for p in procs if p.poll() is None]
    below = [child for p in running for child in descendants(p.pid)]
    for p in running:
        p.terminate()  # torchrun stops its workers on SIGTERM
    for p in running:
        try:
            p.wait(timeout=15)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    for pid, started in below:  # whatever outlived its parent; the start time guards against a reused pid
        with contextlib.suppress(OSError, IndexError):
            if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19] == started:
                os.kill(pid, signal.SIGKILL)


@contextlib.contextmanager
def nodes(commands: list[tuple[list[str], Path, dict[str, str]]]) -> Iterator[list[subprocess.Popen]]:
    procs: list[subprocess.Popen] = []
    try:
        for cmd, cwd, env in commands:
            with (cwd.parent / f"{cwd.name}.log").open("w") as log:
                procs.append(subprocess.Popen(cmd, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT))
        yield procs
    finally:
        stop(procs)


def wait_all(procs: list[subprocess.Popen], timeout: float) -> None:
    """Until every node is done; a node that fails (the other would wait for it) or the time limit ends it."""
    deadline = time.monotonic() + timeout
    while any(p.poll() is None for p in procs):
        if any(p.returncode not in (None, 0) for p in procs) or time.monotonic() > deadline:
            return
        time.sleep(0.2)


@pytest.fixture(scope="module")
def one_process(tmp_path_factory) -> tuple[dict, str]:
    tmp = tmp_path_factory.mktemp("one")
    final, _ = fit(tmp, CCFC, "ccfc", 1)
    return final, (tmp / "ccfc_1" / "assignments.csv").read_text()


@pytest.mark.slow  # three runs, each importing torch: ~30 s on 2 cores; CI runs -m slow
@pytest.mark.parametrize("launcher", ["torchrun", "slurm"])
def test_two_nodes_equal_one_process(tmp_path, one_process, launcher):
    config = write_config(tmp_path, CCFC, "ccfc")
    fit_args = ["-m", "fedclust", "fit", "--config", str(config), "--progress", "false", "--fabric.accelerator",
                "cpu", "--fabric.num_nodes", "2", "--fabric.strategy", "ddp"]
    port = free_port()
    root = str(Path(fedclust.__file__).parents[1])  # the nodes run the fedclust under test, from any folder
    env = single_machine_env() | {"PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
    commands = []
    for rank in (0, 1):
        folder = tmp_path / f"node{rank}"
        folder.mkdir()
        if launcher == "torchrun":  # `python -m torch.distributed.run` is `torchrun`, for this interpreter
            cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc_per_node", "1",
                   "--node_rank", str(rank), "--master_addr", "127.0.0.1", "--master_port", str(port), *fit_args]
            commands.append((cmd, folder, env))
        else:  # srun's variables for task `rank`; Lightning reads the rendezvous from SLURM_NODELIST, MASTER_PORT
            slurm = {**SLURM_JOB, "SLURM_PROCID": str(rank), "SLURM_NODEID": str(rank),
                     "SLURM_NODELIST": "127.0.0.1", "MASTER_PORT": str(port)}
            commands.append(([sys.executable, *fit_args], folder, env | slurm))
    with nodes(commands) as procs:
        wait_all(procs, timeout=180)  # ~25 s; a failed node can keep torchrun in its exit barrier (5 min)
        logs = [(tmp_path / f"node{rank}.log").read_text() for rank in (0, 1)]
        assert [p.returncode for p in procs] == [0, 0], "\n\n".join(log[-3000:] for log in logs)

    final_one, assignments_one = one_process
    [run] = (tmp_path / "node0" / "runs").iterdir()
    final = json.loads((run / "final.json").read_text())
    assert final["world_size"] == 2
    # all-reduced float64 sums differ from one process's only by rounding (test_distributed.py)
    assert final["metrics"] == pytest.approx(final_one["metrics"], abs=1e-6)
    assert (run / "assignments.csv").read_text() == assignments_one
    assert list((tmp_path / "node1").iterdir()) == []  # node 1 wrote nothing, not even a run folder
    for banner in BANNERS:
        assert [log.count(banner) for log in logs] == [1, 0], banner

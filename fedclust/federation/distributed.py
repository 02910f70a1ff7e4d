"""Spreading a round's clients over processes (Fabric DDP): who trains which client, and the collectives.

Every rank holds the data, the global model and every client's state; rank r trains clients
``alive[r::world]`` of a round. The round's FedAvg running sums are all-reduced (one flat float64 buffer),
the small per-client payloads (local centroids, losses) are gathered, the server step (k-means, ...) and
evaluation run once on rank 0 and their result is broadcast, and the states of the clients trained this
round are shared so that any rank can take any client next round and rank 0 can checkpoint them all.

No gradient is synchronised: ranks train different clients, so the model is never wrapped in DDP; Fabric
gives the process group, the device and the launcher. docs/multinode.md gives the commands for several
machines (torchrun, Slurm).
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from lightning.fabric import Fabric
from torch import Tensor

from fedclust.errors import ConfigError, FedclustError
from fedclust.federation.aggregate import WeightedSum
from fedclust.federation.client import to_cpu
from fedclust.run_checks import launcher, rank_zero_before_launch  # noqa: F401  (torch-free; fit reads them here)


def check_launcher(devices: int | str, num_nodes: int) -> None:
    """fabric.devices and fabric.num_nodes agree with the processes torchrun or Slurm started: one sentence
    before anything is written, not Lightning's ValueError traceback from inside ``fab.launch()`` (or, for a
    single-process strategy under a several-process torchrun, ranks that each run alone)."""
    env, which = os.environ, launcher()
    if which == "torchrun":
        per_node, world = int(env.get("LOCAL_WORLD_SIZE", "1")), int(env.get("WORLD_SIZE", "1"))
        per_node_flag, nodes_flag, nodes = "torchrun's --nproc_per_node", "torchrun's --nnodes", world // per_node
    elif which == "slurm":
        if "SLURM_NTASKS_PER_NODE" not in env and int(env["SLURM_NTASKS"]) > 1:
            raise FedclustError(f"the Slurm job asks for --ntasks={env['SLURM_NTASKS']}, which Lightning cannot "
                                "split over nodes: ask for --ntasks-per-node=fabric.devices and --nodes="
                                "fabric.num_nodes instead (docs/multinode.md)")
        per_node, nodes = int(env.get("SLURM_NTASKS_PER_NODE", "1")), int(env.get("SLURM_NNODES", "1"))
        per_node_flag, nodes_flag = "Slurm's --ntasks-per-node", "Slurm's --nodes"
    else:
        return
    if isinstance(devices, int) and devices != per_node:
        raise ConfigError("fabric.devices", devices, f"{per_node} (the processes per node of {per_node_flag}; "
                          "see docs/multinode.md)")
    if num_nodes != nodes:
        raise ConfigError("fabric.num_nodes", num_nodes, f"{nodes} ({nodes_flag}; see docs/multinode.md)")


@contextlib.contextmanager
def quiet_start_up(rank_zero: bool) -> Iterator[None]:
    """Lightning's process-group banners ("Initializing distributed: GLOBAL_RANK ...", "distributed_backend=
    ...") once, on rank 0 only, while ``fab.launch()`` runs.

    They came twice per rank: Lightning's "lightning" logger has its own stderr handler and also propagates
    to the root handler the command line installs (logging.basicConfig), so its own handler alone prints
    them here. Other ranks drop the per-rank "Initializing distributed" line (INFO); warnings and errors of
    every rank still print."""
    top = logging.getLogger("lightning")
    per_rank = logging.getLogger("lightning.fabric.utilities.distributed")  # logs the per-rank line
    propagate, level = top.propagate, per_rank.level
    if top.handlers:
        top.propagate = False
    if not rank_zero:
        per_rank.setLevel(logging.WARNING)
    try:
        yield
    finally:
        top.propagate = propagate
        per_rank.setLevel(level)


def has_process_group() -> bool:
    return dist.is_available() and dist.is_initialized()


def end_process_group(started_here: bool, finished: bool) -> None:
    """Drop the process group this run started: a process that exits with it still alive can abort in gloo's
    threads while the interpreter shuts down ("terminate called without an active exception", exit -6, seen on a
    node of the two-node test), which would also turn a failed run's exit 2 into -6. A finished run first waits for
    every rank (a failed one does not: the others may never arrive). A group the caller made before the run is
    theirs and stays."""
    if started_here and has_process_group():
        if finished:
            dist.barrier()
        dist.destroy_process_group()


@dataclass
class ProcessGroup:
    """Whether a run started the process group (known when Fabric launches) and finished."""

    started_here: bool = False
    finished: bool = False


@contextlib.contextmanager
def process_group() -> Iterator[ProcessGroup]:
    """A run's hold on the process group: `end_process_group` with what the run recorded in it, however it ends."""
    pg = ProcessGroup()
    try:
        yield pg
    finally:
        end_process_group(pg.started_here, pg.finished)


def world_size(fabric: Fabric) -> int:
    return fabric.world_size if has_process_group() else 1


def my_clients(clients: list[int], fabric: Fabric) -> list[int]:
    """This rank's share of the round's clients (round-robin, so the shares differ by at most one)."""
    return clients[fabric.global_rank::world_size(fabric)]


def gather_objects(fabric: Fabric, obj: Any) -> list[Any]:
    """Every rank's ``obj``, in rank order, on every rank (small objects: payloads, losses, states)."""
    if world_size(fabric) == 1:
        return [obj]
    out: list[Any] = [None] * world_size(fabric)
    dist.all_gather_object(out, to_cpu(obj))
    return out


def broadcast_object(fabric: Fabric, obj: Any) -> Any:
    """Rank 0's ``obj`` on every rank."""
    if world_size(fabric) == 1:
        return obj
    return fabric.broadcast(to_cpu(obj) if fabric.is_global_zero else None, src=0)


def all_reduce_sum(fabric: Fabric, total: WeightedSum, template: dict[str, Tensor]) -> WeightedSum:
    """The WeightedSum of all ranks' clients, on every rank.

    ``template`` (the global state) fixes the key order, shapes and dtypes, so a rank whose clients sent
    nothing for a key (or that trained no client) contributes zeros. Sums and per-key weights travel in one
    flat float64 buffer: one collective per round."""
    if world_size(fabric) == 1:
        return total
    keys = list(template)
    flat = fabric.all_reduce(_flatten(total, template, fabric.device), reduce_op="sum")
    out = WeightedSum()
    offset = 0
    key_weights = flat[-len(keys) - 1:-1].tolist()
    for key, weight in zip(keys, key_weights):
        n = template[key].numel()
        if weight > 0:
            out.sums[key] = flat[offset:offset + n].view(template[key].shape).clone()
            out.totals[key] = weight
            out.dtypes[key] = template[key].dtype
        offset += n
    out.count = int(flat[-1].item())
    return out


def _flatten(total: WeightedSum, template: dict[str, Tensor], device: torch.device) -> Tensor:
    """[sum of key 1, sum of key 2, ..., weight of key 1, ..., weight of key n, client count], float64."""
    keys = list(template)
    parts = [total.sums[k].to(device).flatten() if k in total.sums
             else torch.zeros(template[k].numel(), dtype=torch.float64, device=device) for k in keys]
    weights = torch.tensor([total.totals.get(k, 0.0) for k in keys] + [float(total.count)],
                           dtype=torch.float64, device=device)
    return torch.cat([*parts, weights])

"""Two CPU processes (gloo) give the same global model and metrics as one (issue 5).

The runs go through the command line, as a user starts them: Fabric's launcher re-runs the command for
rank 1. Both layouts use one thread per process (OMP_NUM_THREADS=1; Lightning gives each CPU DDP process
cores / processes threads otherwise), so each client's computation is identical; the all-reduced float64
sums then differ from one process's sums only by rounding.
"""

import json
import os
import subprocess
import sys

import pytest
import torch
import yaml

from fedclust.callbacks.checkpoint import load_checkpoint

CCFC = {"method": {"class_path": "CCFC", "init_args": {
    "backbone": "mlp", "latent_dim": 16, "projector_hidden": 32, "pretrain_rounds": 1, "cluster_rounds": 1,
    "batch_size": 64, "kmeans_niter": 10, "kmeans_redo": 1}},
    "data": {"name": "digits", "num_clients": 3, "partition": "iid"}, "seed": 3}
KFED = {"method": {"class_path": "KFED", "init_args": {"k_local": 4}},
        "data": {"name": "digits", "num_clients": 5, "partition": "dirichlet", "alpha": 0.5},
        "federation": {"disconnect_rate": 0.4}, "seed": 5}


LAUNCHER_VARIABLES = ("FEDCLUST_RUN_DIR", "RANK", "LOCAL_RANK", "NODE_RANK", "GROUP_RANK", "WORLD_SIZE",
                      "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def single_machine_env() -> dict[str, str]:
    """This environment with one thread per process and without the variables by which a launcher (torchrun,
    Slurm, Fabric) hands out ranks: the test starts its own, even when it runs inside a Slurm job."""
    return {key: value for key, value in os.environ.items()
            if key not in LAUNCHER_VARIABLES and not key.startswith(("SLURM_", "TORCHELASTIC_"))} | {
        "OMP_NUM_THREADS": "1"}


def write_config(tmp_path, config: dict, name: str):
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def fit(tmp_path, config: dict, name: str, devices: int) -> tuple[dict, dict]:
    path = write_config(tmp_path, config, name)
    run = tmp_path / f"{name}_{devices}"
    env = single_machine_env()
    cmd = [sys.executable, "-m", "fedclust", "fit", "--config", str(path), "--run_dir", str(run),
           "--progress", "false", "--fabric.accelerator", "cpu", "--fabric.devices", str(devices),
           "--fabric.strategy", "ddp" if devices > 1 else "auto"]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    final = json.loads((run / "final.json").read_text())
    assert final["world_size"] == devices
    return final, load_checkpoint(run / "checkpoints" / "last.ckpt")


@pytest.mark.slow  # several processes, each importing torch: 35-100 s here; CI runs -m slow
@pytest.mark.parametrize("config,name", [(CCFC, "ccfc"), (KFED, "kfed")])
def test_two_processes_equal_one(tmp_path, config, name):
    one, ckpt_one = fit(tmp_path, config, name, 1)
    two, ckpt_two = fit(tmp_path, config, name, 2)
    assert two["metrics"] == pytest.approx(one["metrics"], abs=1e-6)
    for key, value in ckpt_one["model"].items():
        torch.testing.assert_close(ckpt_two["model"][key], value, rtol=1e-5, atol=1e-6)
    for key, value in ckpt_one["server"].items():
        if isinstance(value, torch.Tensor):
            torch.testing.assert_close(ckpt_two["server"][key], value, rtol=1e-5, atol=1e-6)
    # rank 0 checkpoints every client's state, including those rank 1 trained
    assert ckpt_two["clients"].keys() == ckpt_one["clients"].keys()
    for cid, state in ckpt_one["clients"].items():
        assert state.keys() == ckpt_two["clients"][cid].keys()
    assert [h["clients"] for h in ckpt_two["history"]] == [h["clients"] for h in ckpt_one["history"]]


class TwoRankFabric:
    """Stands in for a 2-rank Fabric: all_reduce adds the other rank's buffer, built the same way."""

    world_size, global_rank, device = 2, 0, torch.device("cpu")

    def __init__(self, other_total, template):
        self.other_total, self.template = other_total, template

    def all_reduce(self, flat, reduce_op):
        from fedclust.federation.distributed import _flatten

        return flat + _flatten(self.other_total, self.template, self.device)


def test_all_reduce_sum_merges_ranks_and_tolerates_an_idle_one(monkeypatch):
    from fedclust.federation import distributed
    from fedclust.federation.aggregate import WeightedSum

    monkeypatch.setattr(distributed, "world_size", lambda fabric: 2)
    template = {"w": torch.zeros(2, 2), "steps": torch.zeros((), dtype=torch.long), "other": torch.zeros(3)}
    a = {"w": torch.ones(2, 2), "steps": torch.tensor(4), "other": torch.ones(3)}
    b = {"w": 3 * torch.ones(2, 2), "steps": torch.tensor(8), "other": 5 * torch.ones(3)}
    mine, theirs, reference = WeightedSum(), WeightedSum(), WeightedSum()
    mine.add(a, 1.0, {"other": 0.0})  # this rank weighs "other" 0: only the other rank's value counts
    theirs.add(b, 3.0)
    reference.add(a, 1.0, {"other": 0.0})
    reference.add(b, 3.0)
    merged = distributed.all_reduce_sum(TwoRankFabric(theirs, template), mine, template).average()
    expected = reference.average()
    assert merged.keys() == expected.keys()
    for key in expected:
        torch.testing.assert_close(merged[key], expected[key])
    assert merged["steps"].dtype == torch.long
    # an idle rank (no client this round) contributes zeros and no weight
    idle = distributed.all_reduce_sum(TwoRankFabric(theirs, template), WeightedSum(), template)
    torch.testing.assert_close(idle.average()["w"], 3 * torch.ones(2, 2))
    assert idle.count == 1


def test_gathered_updates_move_whole_including_their_payloads():
    from fedclust.contract import ClientUpdate
    from fedclust.federation.client import to_cpu, to_device

    update = ClientUpdate(3, 10, {"centroids": torch.ones(2, 4)}, {"head.": 0.5})
    moved = to_device(to_cpu([update]), torch.device("meta"))[0]
    assert isinstance(moved, ClientUpdate) and moved.client_id == 3 and moved.key_weights == {"head.": 0.5}
    assert moved.payload["centroids"].device.type == "meta"  # the payload moved, not just the container
    copy = to_cpu(update)
    copy.payload["centroids"].add_(1)
    assert update.payload["centroids"].sum() == 8  # a copy, not a view


def test_a_run_ends_only_the_process_group_it_started(tmp_path):
    """fit drops the group its Fabric started (a node that exits with gloo's group alive can abort, -6), never
    one the caller made before the run."""
    import torch.distributed as dist

    from fedclust.federation.distributed import end_process_group, has_process_group

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        end_process_group(started_here=False, finished=True)
        assert has_process_group()
        end_process_group(started_here=True, finished=False)  # a failed run: no barrier, the group still goes
        assert not has_process_group()
    finally:
        if has_process_group():
            dist.destroy_process_group()

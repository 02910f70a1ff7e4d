"""`fedclust evaluate`: re-score a saved run, or assign clusters to another split with the saved model."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal, NamedTuple

import torch
from rich.console import Console
from rich.table import Table

from fedclust.callbacks.checkpoint import load_checkpoint
from fedclust.clustering.metrics import cluster_metrics
from fedclust.data.client_data import FederatedData
from fedclust.data.config import DataConfig, build_federated_data
from fedclust.data.datasets import load_dataset
from fedclust.errors import ConfigError
from fedclust.fit import CHECKPOINT, setup_method, write_assignments
from fedclust.methods.base import FederatedMethod


class SavedRun(NamedTuple):
    """A run folder brought back: its method with the saved global state, and what it ran on."""

    method: FederatedMethod
    data_cfg: DataConfig
    seed: int
    state: dict  # the checkpoint: model, server, clients, done, history
    data: FederatedData  # the run's data and client partition


def load_run(folder: Path, device: torch.device) -> SavedRun:
    """The saved global model of a run folder, with the data and partition it ran on."""
    from fedclust.__main__ import load_run_config  # the parser lives with the CLI

    if not (Path(folder) / CHECKPOINT).exists():
        raise ConfigError("run", str(folder), f"a run folder holding config.yaml and {CHECKPOINT}")
    cfg = load_run_config(Path(folder) / "config.yaml")
    method, data_cfg, seed = cfg["method"], cfg["data"], cfg["seed"]
    data = build_federated_data(data_cfg, device, seed)
    setup_method(method, data, seed)
    state = load_checkpoint(Path(folder) / CHECKPOINT)
    method.load_state_dict(state["model"])
    method.load_server_state(state["server"])
    return SavedRun(method, data_cfg, seed, state, data)


def evaluate(run: str, split: Literal["same", "all", "train", "test"] = "same", data_name: str | None = None,
             data_root: str | None = None, output: str | None = None) -> dict[str, float]:
    """Score the saved global model of a run folder.

    Args:
        run: The run folder (holds config.yaml and checkpoints/last.ckpt).
        split: "same" re-scores the run's own data with its own client partition (so methods that label
            through a client, like k-FED, are scored as in the run); "all", "train" or "test" assigns every
            sample of that split with the saved global model.
        data_name: Assign another data set of the same shape (default: the run's).
        data_root: Folder of that data set.
        output: CSV of assignments to write (default RUN/assignments_<split>.csv).
    """
    folder = Path(run)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    method, data_cfg, _, state, base = load_run(folder, device)
    if split == "same" and data_name is None:
        data, clusters = base, method.predict(base, state["clients"]).cpu()
    else:
        dataset = load_dataset(data_name or data_cfg.name, root=data_root or data_cfg.root,
                               split="all" if split == "same" else split, **data_cfg.options)
        if dataset.x[0].shape != base.x[0].shape:
            raise ConfigError("data_name", data_name, f"a data set of samples shaped {tuple(base.x[0].shape)}")
        dataset.x = dataset.x.to(device)
        data = FederatedData(dataset, [torch.arange(len(dataset.y))], device, normalize=data_cfg.normalize,
                             eval_batch_size=data_cfg.eval_batch_size)
        method.eval()
        with torch.no_grad():
            clusters = torch.cat([method.assign(x).cpu() for x in data.iter_all()])
    metrics = cluster_metrics(clusters, data.labels.cpu())
    write_assignments(Path(output) if output else folder / f"assignments_{split}.csv", clusters, data)
    (folder / f"evaluate_{split}.json").write_text(json.dumps(metrics, indent=2))
    table = Table(title=f"{folder.name}: {split} ({len(clusters)} samples)")
    for key in metrics:
        table.add_column(key.upper() if key != "kappa" else "Kappa", justify="right")
    table.add_row(*(f"{v:.4f}" for v in metrics.values()))
    Console().print(table)
    return metrics

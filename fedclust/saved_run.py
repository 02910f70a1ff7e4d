"""A run folder brought back from what it saved: the global model with its server state, and the data and
client partition it ran on. `fedclust evaluate`, SDA-FC's re-clustering and the representations data set read
runs through it.

It knows no command: the caller hands it the parser that reads config.yaml (fit's, `fedclust.run.load_run`),
so this module sits below the run level and fit's module can hand the loader down to the data layer without
an import circle.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import torch
from jsonargparse import ArgumentError, ArgumentParser

from fedclust.callbacks.checkpoint import load_checkpoint
from fedclust.cli_errors import one_sentence
from fedclust.config_files import check_config_file
from fedclust.contract import FederatedMethod
from fedclust.data.client_data import FederatedData
from fedclust.data.config import DataConfig, build_federated_data
from fedclust.errors import ConfigError
from fedclust.federation.setup import setup_method
from fedclust.parsers import read_config
from fedclust.run_checks import check_saved_run
from fedclust.run_folder import CHECKPOINT


class SavedRun(NamedTuple):
    """A run folder brought back: its method with the saved global state, and what it ran on."""

    method: FederatedMethod
    data_cfg: DataConfig
    seed: int
    state: dict  # the checkpoint: model, server, clients, done, history
    data: FederatedData  # the run's data and client partition


def read_saved_run(folder: Path, device: torch.device, parser: ArgumentParser) -> SavedRun:
    """The saved global model of a run folder, with the data and partition it ran on: its config.yaml read with
    `parser` (fit's), the pieces built as fit builds them, the checkpoint read with the safe loader."""
    check_saved_run(folder)  # also in fedclust.precheck
    check_config_file(Path(folder) / "config.yaml", "run")  # untrusted: the check `fit --resume` makes, first
    state = load_checkpoint(Path(folder) / CHECKPOINT)  # untrusted: judged as soon as it is read, before any work
    try:
        cfg = read_config(parser, Path(folder) / "config.yaml")
    except ArgumentError as error:
        raise ConfigError("run", str(folder), "a run folder whose config.yaml `fedclust fit` can read "
                          f"({one_sentence(str(error)).rstrip('.')})") from None
    method, data_cfg, seed = cfg["method"], cfg["data"], cfg["seed"]
    data = build_federated_data(data_cfg, device, seed)
    setup_method(method, data, seed)
    method.load_state_dict(state["model"])
    method.load_server_state(state["server"])
    return SavedRun(method, data_cfg, seed, state, data)

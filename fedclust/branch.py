"""A run that starts from another run's saved global model (`fedclust fit --init_from RUN`): a branch.

The new run takes the finished run's global weights (every key of the model, strictly: the same method and network)
and nothing else: its own data, partition, schedule and seed, fresh client states, a fresh server state. It is how a
stage is studied apart from the stages before it, e.g. FedMCC's cluster head trained on one frozen encoder under two
partitions (`representation_rounds: 0`). A resumed run goes on from its own checkpoint, so init_from is read only when
a run starts. The folder is untrusted: its checkpoint is judged before it is read (the same checks as --resume).
"""

from __future__ import annotations

from pathlib import Path

import torch
import yaml

from fedclust.callbacks.checkpoint import load_checkpoint
from fedclust.contract import FederatedMethod
from fedclust.errors import ConfigError
from fedclust.run_checks import CHECKPOINT, check_start_folder


def read_start_model(init_from: str, method: FederatedMethod) -> dict:
    """The finished run's global weights, once its folder and its method are judged (before any data is loaded)."""
    check_start_folder(init_from)
    try:
        config = yaml.safe_load((Path(init_from) / "config.yaml").read_text(encoding="utf-8"))
        ran = str(config["method"]["class_path"]).rsplit(".", 1)[-1]
    except (OSError, UnicodeDecodeError, yaml.YAMLError, KeyError, TypeError):
        raise ConfigError("init_from", init_from, "a run folder whose config.yaml names its method") from None
    if ran != type(method).__name__:
        raise ConfigError("init_from", init_from, f"a run of {type(method).__name__} (that run was {ran})")
    weights = load_checkpoint(Path(init_from) / CHECKPOINT)["model"]
    if not isinstance(weights, dict) or not all(isinstance(v, torch.Tensor) for v in weights.values()):
        raise ConfigError("init_from", init_from, "a run folder whose checkpoint holds a model's weights")
    return weights


def start_from(method: FederatedMethod, weights: dict, init_from: str) -> None:
    """Load the weights into the built method: every key, every shape, or one sentence naming the first miss."""
    own = method.state_dict()
    missing = sorted(set(own) - set(weights))
    unexpected = sorted(set(weights) - set(own))
    shapes = [k for k in own if k in weights and tuple(own[k].shape) != tuple(weights[k].shape)]
    if missing or unexpected or shapes:
        what = (f"{missing[0]} is missing" if missing else f"{unexpected[0]} is not this network's" if unexpected
                else f"{shapes[0]} is {tuple(weights[shapes[0]].shape)}, not {tuple(own[shapes[0]].shape)}")
        raise ConfigError("init_from", init_from, f"a run of the same network ({what}: the method's settings "
                          "that shape the network must match)")
    method.load_state_dict(weights)

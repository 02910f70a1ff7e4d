"""W&B and TensorBoard through Fabric loggers (CSV is always written by CSVMetrics).

Both receive the resolved config as nested hyperparameters (method.init_args.lam, data.p, seed, ...), so
runs can be filtered and grouped by any setting. Both are optional extras: asking for one that is not
installed is one sentence naming the extra. W&B without an API key, or without a route to its server,
runs offline (`wandb sync` uploads later) and says so, instead of blocking or failing mid-run.
"""

from __future__ import annotations

import logging
import netrc
import os
import socket
from pathlib import Path

from fedclust.errors import ConfigError
from fedclust.run_checks import require_logger  # torch-free: the command line's first pass calls it too

from .base import Callback

log = logging.getLogger("fedclust")
WANDB_HOST = "api.wandb.ai"


def build_logger(kind: str, run_dir: Path, project: str, group: str | None, name: str | None, config: dict):
    """A Fabric-compatible logger for `kind` ("wandb" or "tensorboard"); None for "csv"."""
    if kind == "csv":
        return None
    if kind == "tensorboard":
        require_logger(kind)
        from lightning.fabric.loggers import TensorBoardLogger

        logger = TensorBoardLogger(root_dir=str(run_dir), name="tensorboard", version="")
        logger.log_hyperparams(config)  # flattened to data/p, method/init_args/lam, ... in the HPARAMS tab
        return logger
    if kind == "wandb":
        require_logger(kind)
        offline_reason = wandb_offline_reason()
        if offline_reason:
            os.environ["WANDB_MODE"] = "offline"
            log.warning("W&B runs offline: %s; upload later with `wandb sync %s/wandb`", offline_reason, run_dir)
        from lightning.pytorch.loggers import WandbLogger  # a Fabric logger too; honours WANDB_MODE=offline

        logger = WandbLogger(project=project, group=group, name=name or run_dir.name, save_dir=str(run_dir))
        logger.log_hyperparams(config)
        return logger
    raise ConfigError("logger", kind, "one of csv, wandb, tensorboard")


def wandb_offline_reason() -> str | None:
    """Why W&B cannot run online here (None: it can, or the user chose a mode with WANDB_MODE)."""
    if os.environ.get("WANDB_MODE"):
        return None
    if not os.environ.get("WANDB_API_KEY") and not _netrc_has(WANDB_HOST):
        return "no W&B API key (WANDB_API_KEY or `wandb login`)"
    try:
        socket.create_connection((WANDB_HOST, 443), timeout=3).close()
    except OSError:
        return f"{WANDB_HOST} cannot be reached"
    return None


def _netrc_has(host: str) -> bool:
    try:
        return netrc.netrc().authenticators(host) is not None
    except (FileNotFoundError, netrc.NetrcParseError, OSError):
        return False


class FabricLogging(Callback):
    """Sends every round's record to the Fabric loggers (rank 0 only, Fabric decides)."""

    def on_round_end(self, orch, record) -> None:
        orch.fabric.log_dict({k: v for k, v in record.items() if v == v}, step=int(record["round"]))

    def on_fit_end(self, orch) -> None:
        for logger in orch.fabric.loggers:
            logger.finalize("success")
            finish = getattr(getattr(logger, "_experiment", None), "finish", None)
            if finish:  # a W&B run: close it here, so its files are complete and a next run is a new one
                finish()

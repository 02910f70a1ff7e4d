"""The resumable checkpoint: global model, server state, every client's state and the history.

Randomness needs no saved RNG state: every draw is seeded by (seed, stage, round, client)."""

from __future__ import annotations

import os
import pickle
import re
from pathlib import Path

import torch

from fedclust.errors import ConfigError
from fedclust.run_checks import check_checkpoint_file

from .base import Callback


class Checkpoint(Callback):
    def __init__(self, path: Path, every: int):
        self.path, self.every = Path(path), every

    def on_round_end(self, orch, record) -> None:
        if orch.progress.done % self.every == 0 or orch.progress.done == orch.total_rounds:
            save_checkpoint(self.path, orch)


def save_checkpoint(path: Path, orch) -> None:
    """Write atomically (temp file + rename) so an interruption never leaves a broken checkpoint."""
    if not orch.fabric.is_global_zero:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    torch.save(orch.state_dict(), tmp)
    os.replace(tmp, path)


def load_checkpoint(path: Path) -> dict:
    """A checkpoint is untrusted input: it is read with torch's safe loader (tensors, numbers, strings and
    containers only), so a crafted pickle is refused instead of run; a damaged file is one sentence. A file
    that is not a whole archive is refused first, by the rule the command line's first pass applies too."""
    path = Path(path)
    check_checkpoint_file(path)
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as error:
        found = re.search(r"GLOBAL ([\w.]+)", str(error))  # torch names the first class it would have to import
        what = found.group(1) if found else "other objects"
        raise ConfigError("checkpoint", str(path), "a checkpoint holding only tensors, numbers, strings and "
                          f"containers; this file asks to load {what} and is refused") from None
    except Exception as error:  # noqa: BLE001 - arbitrary bytes make torch.load fail in many ways; all mean damaged
        first = str(error).strip().split(". ")[0].splitlines()[0][:160] if str(error).strip() else "damaged"
        raise ConfigError("checkpoint", str(path), "a complete checkpoint written by fedclust; torch cannot read "
                          f"this one ({type(error).__name__}: {first.rstrip('.')})") from None
    if not isinstance(state, dict) or not {"model", "server", "clients", "done"} <= set(state):
        raise ConfigError("checkpoint", str(path), "a checkpoint written by fedclust (model, server, clients, done)")
    return state

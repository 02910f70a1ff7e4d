"""The resumable checkpoint: global model, server state, every client's state and the history.

Randomness needs no saved RNG state: every draw is seeded by (seed, stage, round, client)."""

from __future__ import annotations

import os
import pickle
import re
from pathlib import Path

import torch

from fedclust.errors import ConfigError, FedclustError
from fedclust.run_checks import check_checkpoint_file, code_refusal

from .base import Callback


class Checkpoint(Callback):
    def __init__(self, path: Path, every: int):
        self.path, self.every = Path(path), every
        self.saved_round: int | None = None  # the round the checkpoint on disk holds, when known

    def on_fit_start(self, orch) -> None:
        self.saved_round = orch.progress.done if self.path.exists() else None  # resumed from it

    def on_round_end(self, orch, record) -> None:
        if orch.progress.done % self.every == 0 or orch.progress.done == orch.total_rounds:
            save_checkpoint(self.path, orch, self.saved_round)
            self.saved_round = orch.progress.done


def save_checkpoint(path: Path, orch, saved_round: int | None = None) -> None:
    """Write atomically (temp file + rename) so an interruption never leaves a broken checkpoint. A write that
    fails (disk full, ...) removes its temporary file, keeps the previous checkpoint and is one sentence."""
    if not orch.fabric.is_global_zero:
        return
    state = orch.state_dict()
    tmp = path.with_suffix(".tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        # through a Python file, so that a failed write's OSError (errno, strerror) is on the exception torch
        # raises (written to a path, torch's C++ writer says only "unexpected pos")
        with tmp.open("wb") as file:
            torch.save(state, file)
        os.replace(tmp, path)
    except BaseException as error:  # an interruption too: never leave a half-written last.tmp taking the space
        tmp.unlink(missing_ok=True)
        if not isinstance(error, (OSError, RuntimeError)):  # torch's writer fails with RuntimeError
            raise
        run = path.parent.parent
        kept = (f"the previous checkpoint {path}{'' if saved_round is None else f' (after round {saved_round})'} "
                f"is intact: free space and continue with `fedclust fit --resume {run}`"
                if path.exists() else "no checkpoint had been written yet")
        raise FedclustError(f"the checkpoint after round {orch.progress.done} could not be written in {path.parent} "
                            f"({_reason(error)}); {kept}.") from None


def _reason(error: BaseException) -> str:
    """The OS's words for a failed write (torch wraps the file's OSError in a RuntimeError)."""
    seen = error
    while seen is not None:
        if isinstance(seen, OSError) and seen.strerror:
            return seen.strerror
        seen = seen.__cause__ or seen.__context__
    return str(error).strip().splitlines()[0][:160] if str(error).strip() else type(error).__name__


def load_checkpoint(path: Path) -> dict:
    """A checkpoint is untrusted input: it is read with torch's safe loader (tensors, numbers, strings and
    containers only), so a crafted pickle is refused instead of run; a damaged file is one sentence. A file that
    is not a whole checkpoint, or asks to load code, is refused first, torch-free, by the rule the command line's
    first pass applies too (run_checks.check_checkpoint_file); an intact old-style (pre-1.6) file loads."""
    path = Path(path)
    check_checkpoint_file(path)
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as error:
        found = re.search(r"GLOBAL ([\w.]+)", str(error))  # torch names the first class it would have to import
        raise code_refusal(path, found.group(1) if found else "other objects") from None
    except Exception as error:  # noqa: BLE001 - arbitrary bytes make torch.load fail in many ways; all mean damaged
        first = str(error).strip().split(". ")[0].splitlines()[0][:160] if str(error).strip() else "damaged"
        raise ConfigError("checkpoint", str(path), "a complete checkpoint written by fedclust; torch cannot read "
                          f"this one ({type(error).__name__}: {first.rstrip('.')})") from None
    if not isinstance(state, dict) or not {"model", "server", "clients", "done"} <= set(state):
        raise ConfigError("checkpoint", str(path), "a checkpoint written by fedclust (model, server, clients, done)")
    return state

"""Run an experiment's points through `fedclust sweep`'s queue, and tell each point's state.

The runs are plain `fedclust fit` run folders, RUNS/NAME/<point>, made by fedclust.sweep.run_points: a done
point is skipped, a checkpointed one resumed, one whose config or overrides changed since is set aside, and
running the same command again after an interruption finishes the experiment. The commit of the tree and
the command are kept when a point starts afresh (RUNS/NAME/.points/<point>.json), since runs span sessions.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Container
from pathlib import Path

from fedclust.errors import ConfigError
from fedclust.sweep import check, made_with, run_points, start_record

from .common import git_commit, machine, now
from .experiment import Experiment, Run

PENDING = ("pending", "checkpointed", "stale", "incomplete")  # what `run` (re)starts


def state(root: Path, run: Run, kept: Container[str] = ()) -> str:
    """done, archived (no folder here, but its row in the committed results is this point's run: `kept`, from
    archive.archived), running, checkpointed, stale (made with other settings: run sets it aside), incomplete
    (died before its first checkpoint) or pending (never started)."""
    folder = root / run.point.name
    if not folder.is_dir():
        return "archived" if run.point.name in kept else "pending"
    if not made_with(start_record(root, run.point), run.point):
        return "stale"
    if (folder / "final.json").is_file():
        return "done"
    if _locked(folder / ".lock"):
        return "running"
    return "checkpointed" if (folder / "checkpoints" / "last.ckpt").is_file() else "incomplete"


def _locked(path: Path) -> bool:
    """Whether a live `fedclust fit` holds the run folder's lock (fedclust/run_folder.py)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


def select(exp: Experiment, only: list[str] | None) -> list[Run]:
    for label in only or []:
        if label not in exp.labels:
            raise ConfigError("--only", label, f"a label of {exp.name} ({', '.join(exp.labels)})")
    return [run for run in exp.runs if not only or run.label in only]


def run(exp: Experiment, root: Path, command: str, slots: int = 1, only: list[str] | None = None,
        devices: list[int] | None = None, nice: int = 10, threads: int | None = None,
        kept: Container[str] = ()) -> list[dict]:
    """Start or resume the selected points (`slots` at a time on the CPU, OMP_NUM_THREADS = cores / slots, or
    one per GPU of `devices`); every fit runs at niceness `nice` (inherited from this process). Points in
    `kept` (archived: done elsewhere, their rows committed) are not run again."""
    runs = [r for r in select(exp, only) if state(root, r, kept) != "archived"]
    for item in runs:  # a typo in an override stops everything before the first run
        check(item.point)
    if nice:
        os.nice(nice)
    record = {"commit": git_commit(), "command": command, "machine": machine(date=False), "started": now()}
    return run_points(root, [r.point for r in runs], slots, devices, threads=threads, group=f"benchmarks-{exp.name}",
                      record=record)

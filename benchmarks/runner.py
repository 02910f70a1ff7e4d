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


def select(exp: Experiment, only: list[str] | None, where: list[str] | None = None) -> list[Run]:
    """The runs of the labels ``only`` (all when None) whose grid values match every ``where`` condition,
    "KEY=V1,V2" with KEY a grid key (dotted, its last part or its CSV column) and a value written as the grid
    writes it (numbers compare as numbers: p=1 is p=1.0)."""
    for label in only or []:
        if label not in exp.labels:
            raise ConfigError("--only", label, f"a label of {exp.name} ({', '.join(exp.labels)})")
    conditions = {}
    for condition in where or []:
        name, _, values = condition.partition("=")
        key = exp.key(name)
        if key is None or not values:
            raise ConfigError("--where", condition, f"KEY=VALUE[,VALUE...] with KEY a grid key of {exp.name} "
                              f"({', '.join(exp.grid_keys) or 'none'})")
        conditions[key] = [_comparable(v) for v in values.split(",")]
    return [run for run in exp.runs if (not only or run.label in only)
            and all(_comparable(run.values.get(key)) in wanted for key, wanted in conditions.items())]


def _comparable(value: object) -> object:
    """A grid value or a --where one, so that 1, 1.0 and "1.0" agree."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return str(value)


def run(exp: Experiment, root: Path, command: str, slots: int = 1, only: list[str] | None = None,
        devices: list[int] | None = None, nice: int = 10, threads: int | None = None,
        kept: Container[str] = (), where: list[str] | None = None) -> list[dict]:
    """Start or resume the selected points (`slots` at a time on the CPU, OMP_NUM_THREADS = cores / slots, or
    one per GPU of `devices`); every fit runs at niceness `nice` (inherited from this process). Points in
    `kept` (archived: done elsewhere, their rows committed) are not run again; `where`: see select."""
    runs = [r for r in select(exp, only, where) if state(root, r, kept) != "archived"]
    for item in runs:  # a typo in an override stops everything before the first run
        check(item.point)
    if nice:
        os.nice(nice)
    return run_points(root, [r.point for r in runs], slots, devices, threads=threads, group=f"benchmarks-{exp.name}",
                      record=lambda: {"commit": git_commit(), "command": command, "machine": machine(date=False),
                                      "started": now()})  # made as each point starts: its commit and time

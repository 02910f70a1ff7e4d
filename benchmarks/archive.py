"""Finished runs whose folders are not on this machine: their rows in the committed results CSV.

Run folders (benchmarks/runs) are git-ignored and do not travel with a clone, but the table a report wrote
(RESULTS/NAME.csv) is committed. Without this, a report in a fresh checkout would show every finished run as
pending and `run` would spend hours re-running them. A committed row stands for its run ("archived") only
when it is done and was made with the point's present settings: its `fingerprint` column equals the point's
fingerprint, or, for a row written before the column existed, the config file as the row's commit held it,
with the point's overrides, gives the point's present fingerprint. Anything else is not this point's run.
The CSV is read as untrusted text: a damaged file or row is simply not an archive.
"""

from __future__ import annotations

import csv
import functools
import subprocess
from pathlib import Path

from fedclust.sweep import Point, fingerprint, fingerprint_of

from .common import ROOT
from .experiment import Experiment


def archived(exp: Experiment, results: Path) -> dict[str, dict[str, str]]:
    """point name -> its committed row, for every done row that is the point's run at its present settings."""
    try:
        with (results / f"{exp.name}.csv").open(newline="") as f:
            rows = {row.get("run"): row for row in csv.DictReader(f)}
    except (OSError, UnicodeDecodeError, csv.Error):
        return {}
    kept = {}
    for run in exp.runs:
        row = rows.get(run.point.name)
        if row and row.get("state") == "done" and _made_with(row, run.point):
            kept[run.point.name] = row
    return kept


def _made_with(row: dict[str, str], point: Point) -> bool:
    present = fingerprint(point)
    if row.get("fingerprint"):
        return row["fingerprint"] == present
    # a run from a dirty tree (-dirty) can be checked only against its commit's config: the best record there is
    commit = (row.get("commit") or "").removesuffix("-dirty")
    text = _config_at(commit, point.config) if commit.isalnum() else None
    return text is not None and fingerprint_of(text, point.overrides) == present


@functools.cache
def _config_at(commit: str, config: str) -> str | None:
    """The config file's text at that commit (None outside the repository or when git does not know either)."""
    path = Path(config).resolve()
    if not path.is_relative_to(ROOT):
        return None
    done = subprocess.run(["git", "show", f"{commit}:{path.relative_to(ROOT).as_posix()}"], cwd=ROOT,
                          capture_output=True, text=True)
    return done.stdout if done.returncode == 0 else None

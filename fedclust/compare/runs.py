"""Read what `fedclust fit` wrote into a run folder, without building any model (fast, works offline): every
file as untrusted input (fedclust/compare/untrusted.py), so a damaged one is a note, never a crash."""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from fedclust.compare.diagnostics import RunDiagnostics, read_diagnostics
from fedclust.compare.paper_numbers import method_label
from fedclust.compare.untrusted import number, read, read_table
from fedclust.errors import ConfigError

METRICS = ("nmi", "acc", "ari", "kappa", "purity")


@dataclass
class RunRecord:
    name: str
    folder: Path
    history: list[dict[str, float]] = field(default_factory=list)  # metrics.csv rows (missing values are nan)
    final: dict[str, float] = field(default_factory=dict)  # final.json, else the last scored round
    finished: bool = True  # False when the folder has no final.json: a run still going, or stopped part-way
    # what config.yaml says ("?", None, 0 where it could not be read)
    method: str = "?"  # the paper's label for the configured method (KM, k-FED, CCFC, ...)
    data: str = "?"
    partition: str = "?"
    p: float | None = None
    alpha: float | None = None
    disconnect_rate: float = 0.0
    seed: int = 0
    counts: list[list[int]] = field(default_factory=list)  # partition.csv: client x class
    diagnostics: RunDiagnostics = field(default_factory=RunDiagnostics)  # diagnostics.csv, diagnostics_*.json
    notes: list[str] = field(default_factory=list)  # one line per other file that could not be read whole
    settings: dict[str, object] = field(default_factory=dict)  # config.yaml's settings, dotted (data.p: 0.5)
    privacy: dict[str, float] | None = None  # privacy.json (federation.dp_epsilon set): epsilon, delta, ...

    @property
    def heterogeneity(self) -> tuple[str, float] | None:
        """The partition's heterogeneity knob and value (p for pshift, alpha for dirichlet)."""
        if self.partition == "pshift" and self.p is not None:
            return "p", self.p
        if self.partition == "dirichlet" and self.alpha is not None:
            return "alpha", self.alpha
        return None

    @property
    def seconds_per_round(self) -> float:
        values = [r["seconds"] for r in self.history if not math.isnan(r.get("seconds", math.nan))]
        return sum(values) / len(values) if values else math.nan


class Unreadable(Exception):
    """A run folder none of whose files could be read; the message says why, file by file."""


def load_runs(folders: list[str], skipped: list[str] | None = None) -> list[RunRecord]:
    """One record per run folder; a folder of run folders (a sweep) stands for the runs in it; a folder that
    is neither is refused by name. A run folder none of whose files can be read is left out, with the reason
    added to `skipped`; when every folder is left out the request is refused (ConfigError)."""
    skipped = [] if skipped is None else skipped
    runs = []
    for folder in (run for f in folders for run in _expand(Path(f))):
        try:
            runs.append(load_run_record(folder))
        except Unreadable as error:
            skipped.append(f"{folder.name}: skipped, nothing in it could be read: {error}")
    if not runs and skipped:  # refused rather than a page of nothing written over the last good one
        raise ConfigError("runs", folders, "run folders with at least one readable file; every one was skipped ("
                          + "; ".join(skipped) + ")")
    if not runs:
        raise ConfigError("runs", folders, "one or more run folders written by `fedclust fit`")
    return runs


def _expand(folder: Path) -> list[Path]:
    if (folder / "config.yaml").is_file() or not folder.is_dir():
        return [folder]
    try:
        inner = sorted(f for f in folder.iterdir() if (f / "config.yaml").is_file() and ".incomplete-" not in f.name)
    except OSError:  # a folder that cannot be listed: refused by load_run_record as not a run folder
        return [folder]
    return inner or [folder]


def load_run_record(folder: Path) -> RunRecord:
    """What a run folder holds, each file read as untrusted input (fedclust/compare/untrusted.py): a damaged
    file is a note and the record goes on without it; Unreadable when nothing could be read."""
    config_path = folder / "config.yaml"
    if not config_path.is_file():
        raise ConfigError("runs", str(folder), "a run folder holding config.yaml (written by `fedclust fit`)")
    notes: list[str] = []
    settings = read(config_path, notes, "a run's config", _settings)
    history = read_table(folder / "metrics.csv", notes, "a metrics table")
    final = read(folder / "final.json", notes, "a run's final scores", _final)
    if final is None:  # a run still going (or a damaged final.json): its last scored round
        scored = [r for r in history if not math.isnan(r.get("nmi", math.nan))]
        final = {k: scored[-1][k] for k in METRICS if k in scored[-1]} if scored else {}
    counts = read(folder / "partition.csv", notes, "a table of samples per client and class", _counts) or []
    privacy = read(folder / "privacy.json", notes, "a run's privacy budget", _privacy)
    diagnostics = read_diagnostics(folder)
    if settings is None and not (history or final or counts or diagnostics.rounds or diagnostics.finals):
        raise Unreadable("; ".join(notes + diagnostics.notes) or "config.yaml could not be read")
    return RunRecord(name=folder.name, folder=folder, history=history, final=final, counts=counts,
                     finished=(folder / "final.json").exists(), diagnostics=diagnostics, notes=notes,
                     privacy=privacy, **(settings or {}))


def _settings(text: str) -> dict:
    """The RunRecord fields config.yaml gives; ValueError where a value is not of its kind."""
    cfg = yaml.safe_load(text)
    if not isinstance(cfg, dict):
        raise ValueError("it is not a mapping of settings")
    method, data, federation = (_mapping(cfg, key) for key in ("method", "data", "federation"))
    seed = cfg.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"seed {seed!r} is not a whole number")
    return {"method": method_label(str(method.get("class_path", "?")).rsplit(".", 1)[-1],
                                   _mapping(method, "init_args")),
            "data": str(data.get("name", "?")), "partition": str(data.get("partition", "?")),
            "p": _setting(data, "p"), "alpha": _setting(data, "alpha"),
            "disconnect_rate": _setting(federation, "disconnect_rate") or 0.0, "seed": seed,
            "settings": _flat(cfg)}


def _flat(tree, prefix: str = "") -> dict[str, object]:
    """{"method": {"init_args": {"lam": 1}}} -> {"method.lam": 1}: every setting by its dotted name (a method's
    init_args without that word); lists and other values are leaves."""
    if not isinstance(tree, dict):
        return {prefix: tree} if prefix else {}
    flat: dict[str, object] = {}
    for key, value in tree.items():
        name = prefix if key == "init_args" and prefix == "method" else f"{prefix}.{key}" if prefix else str(key)
        flat.update(_flat(value, name))
    return flat


def differing_settings(records: list[RunRecord], shown: Collection[str] = ()) -> list[str]:
    """The settings whose values differ between the runs that have them (a key only some runs' methods take is
    compared among those), less the ones in `shown` and those that say only where or how a run was written or
    watched (its folder, name, logger, progress): the columns that tell otherwise alike runs apart."""
    keys = dict.fromkeys(key for r in records for key in r.settings)
    differ = []
    for key in keys:
        if key in shown or key.split(".", 1)[0] in _WHERE_AND_HOW or key.startswith("__"):
            continue
        values = [json.dumps(r.settings[key], sort_keys=True, default=str) for r in records if key in r.settings]
        if len(set(values)) > 1:
            differ.append(key)
    return differ


# fit's settings that change nothing a run computes, only where it is written and how it is watched
_WHERE_AND_HOW = {"run_dir", "runs_dir", "resume", "name", "project", "group", "logger", "progress", "config"}


def _privacy(text: str) -> dict[str, float]:
    """privacy.json: the (epsilon, delta) budget the run's noised summaries spend, and how it was accounted."""
    record = json.loads(text)
    epsilon = number(record.get("epsilon")) if isinstance(record, dict) else math.nan
    if math.isnan(epsilon):
        raise ValueError("it needs a number under \"epsilon\"")
    return {key: number(value) for key, value in record.items()
            if key in ("epsilon", "delta", "noise_multiplier", "releases", "clip")}


def _mapping(cfg: dict, key: str) -> dict:
    value = cfg.get(key) or {}
    if isinstance(value, str) and key == "method":  # `method: KFED`, a class named alone
        return {"class_path": value}
    if not isinstance(value, dict):
        raise ValueError(f"{key} {value!r} is not a mapping")
    return value


def _setting(section: dict, key: str) -> float | None:
    value = number(section.get(key))
    return None if math.isnan(value) else value


def _final(text: str) -> dict[str, float]:
    """final.json's metrics (null, a score that could not be computed, is nan)."""
    record = json.loads(text)
    metrics = record.get("metrics") if isinstance(record, dict) else None
    if not isinstance(metrics, dict):
        raise ValueError("it needs an object of metrics under \"metrics\"")
    return {str(key): number(value) for key, value in metrics.items()}


def _counts(text: str) -> list[list[int]]:
    """partition.csv's samples per client (rows) and class (columns after the client's)."""
    rows = [row for row in csv.reader(io.StringIO(text)) if row]
    if not rows or len(rows[0]) < 2:
        raise ValueError("it needs a header of client and class columns")
    counts = []
    for row in rows[1:]:
        if len(row) != len(rows[0]):
            raise ValueError(f"a row of {len(row)} cells under a header of {len(rows[0])}")
        counts.append([int(cell) for cell in row[1:]])
        if min(counts[-1]) < 0:
            raise ValueError(f"a negative count in {row}")
    return counts

"""Read what `fedclust fit` wrote into a run folder, without building any model (fast, works offline)."""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from fedclust.compare.diagnostics import RunDiagnostics, read_diagnostics
from fedclust.compare.paper_numbers import method_label
from fedclust.errors import ConfigError
from fedclust.run_folder import read_final_metrics

METRICS = ("nmi", "acc", "ari", "kappa", "purity")


@dataclass
class RunRecord:
    name: str
    folder: Path
    method: str  # the paper's label for the configured method (KM, k-FED, CCFC, ...)
    data: str
    partition: str
    p: float | None
    alpha: float | None
    disconnect_rate: float
    seed: int
    history: list[dict[str, float]]  # metrics.csv rows (missing values are nan)
    final: dict[str, float]
    counts: list[list[int]] = field(default_factory=list)  # partition.csv: client x class
    diagnostics: RunDiagnostics = field(default_factory=RunDiagnostics)  # diagnostics.csv, diagnostics_*.json

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


def load_runs(folders: list[str]) -> list[RunRecord]:
    """One record per run folder; a folder of run folders (a sweep) stands for the runs in it; a folder that
    is neither is refused by name."""
    runs = [load_run_record(run) for f in folders for run in _expand(Path(f))]
    if not runs:
        raise ConfigError("runs", folders, "one or more run folders written by `fedclust fit`")
    return runs


def _expand(folder: Path) -> list[Path]:
    if (folder / "config.yaml").is_file() or not folder.is_dir():
        return [folder]
    inner = sorted(f for f in folder.iterdir() if (f / "config.yaml").is_file() and ".incomplete-" not in f.name)
    return inner or [folder]


def load_run_record(folder: Path) -> RunRecord:
    config_path = folder / "config.yaml"
    if not config_path.is_file():
        raise ConfigError("runs", str(folder), "a run folder holding config.yaml (written by `fedclust fit`)")
    cfg = yaml.safe_load(config_path.read_text()) or {}
    method = cfg.get("method") or {}
    class_name = str(method.get("class_path", "?")).rsplit(".", 1)[-1]
    data = cfg.get("data") or {}
    federation = cfg.get("federation") or {}
    history = _read_metrics(folder / "metrics.csv")
    final_path = folder / "final.json"
    if final_path.exists():
        final = read_final_metrics(final_path)
    else:  # a run still going: its last scored round
        scored = [r for r in history if not math.isnan(r.get("nmi", math.nan))]
        final = {k: scored[-1][k] for k in METRICS if k in scored[-1]} if scored else {}
    return RunRecord(
        name=folder.name, folder=folder, method=method_label(class_name, method.get("init_args") or {}),
        data=str(data.get("name", "?")), partition=str(data.get("partition", "?")),
        p=_float(data.get("p")), alpha=_float(data.get("alpha")),
        disconnect_rate=_float(federation.get("disconnect_rate")) or 0.0, seed=int(cfg.get("seed", 0)),
        history=history, final=final, counts=_read_counts(folder / "partition.csv"),
        diagnostics=read_diagnostics(folder))


def _float(value) -> float | None:
    return None if value is None else float(value)


def _read_metrics(path: Path) -> list[dict[str, float]]:
    if not path.exists():
        return []
    with path.open() as f:
        return [{k: float(v) if v not in ("", None) else math.nan for k, v in row.items()} for row in csv.DictReader(f)]


def _read_counts(path: Path) -> list[list[int]]:
    if not path.exists():
        return []
    with path.open() as f:
        rows = list(csv.reader(f))
    return [[int(v) for v in row[1:]] for row in rows[1:]]

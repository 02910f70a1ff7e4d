"""An experiment declared as data (benchmarks/experiments/NAME.yaml), read and checked strictly: its schema, with an
example, is benchmarks/README.md's "Declaring one" (title, data, notes, overrides, grid of lists or named axes,
configs with label / config / overrides / grid, metrics, settings, paper cells, table, plot, curve).

Metrics: final.json's (nmi, acc, ari, kappa, purity; the last scored round while a run goes on), the last row
of diagnostics.csv (runs with `diagnose: true`: embed_kmeans_nmi, effective_rank, ...), and from the run
folder: rounds, seconds_per_round (median of metrics.csv `seconds`), peak_memory_mb (max of metrics.csv),
samples (partition.csv's total), commit (the git commit of the tree the run was started from). Settings
({column: dotted key}) are read back from each run's own config.yaml. Table columns name `method` (the label), a
grid key (dotted or its last part), a setting or a metric. Every mistake is one sentence naming the field.
"""

from __future__ import annotations

import itertools
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from fedclust import cli_schema
from fedclust.config_files import resolve_config
from fedclust.errors import ConfigError, FedclustError
from fedclust.probes.diagnose import DIAGNOSTIC_KEYS as DIAGNOSTICS
from fedclust.sweep import Point

from .common import ROOT, as_number

FINAL = ("nmi", "acc", "ari", "kappa", "purity")  # clustering/metrics.py's cluster_metrics
# seconds: the rounds' sum; server/client/eval_seconds: the median round's server step, client step, evaluation
FOLDER = ("rounds", "seconds", "seconds_per_round", "peak_memory_mb", "server_seconds", "client_seconds",
          "eval_seconds", "summaries", "min_summary", "dp_epsilon", "commit", "stage2_mean", "stage2_std", "samples")
KEYS = {"title": str, "data": str, "notes": str, "overrides": dict, "grid": dict, "configs": list,
        "metrics": list, "settings": dict, "paper": list, "table": dict, "plot": dict, "curve": dict}
REQUIRED = ("title", "data", "configs", "metrics", "table")
ENTRY = {"label": str, "config": str, "overrides": dict, "grid": dict}
PAPER = {"metric": str, "source": str, "by": str, "cells": dict}
TABLE = {"columns": list, "group_by": list}
PLOT = {"x": str, "y": str}
CURVE = {"metric": str, "rounds": list, "stage2": list}  # a column of metrics.csv or diagnostics.csv at those rounds;
# stage2: [first, last], the rounds (a second stage) whose mean and standard deviation are the stage2_* metrics
LABEL_COLUMNS = ("method", "label")


@dataclass
class Run:
    """One point of the experiment: a `fedclust fit` (sweep's Point) and where it sits in the tables."""

    label: str
    point: Point
    values: dict[str, object]  # grid key -> value (a named axis: the case's name)


@dataclass
class Experiment:
    name: str
    path: Path
    title: str
    data: str
    notes: str
    metrics: list[str]
    columns: list[str]
    group_by: list[str]
    paper: list[dict]
    plot: dict | None
    entries: list[dict]
    curve: dict | None = None
    settings: dict[str, str] = field(default_factory=dict)  # column -> dotted key, read from each run's config.yaml
    common: dict[str, object] = field(default_factory=dict)  # the overrides of every run
    grid: dict = field(default_factory=dict)  # the grid of the entries without their own, as declared
    runs: list[Run] = field(default_factory=list)

    @property
    def note_paragraphs(self) -> list[str]:
        """The notes' paragraphs, each on one line (a folded YAML scalar keeps a blank line as a line break)."""
        return [" ".join(par.split()) for par in self.notes.split("\n") if par.strip()]

    @property
    def grid_keys(self) -> list[str]:
        return list(dict.fromkeys(k for run in self.runs for k in run.values))

    @property
    def labels(self) -> list[str]:
        return list(dict.fromkeys(run.label for run in self.runs))

    def key(self, column: str) -> str | None:
        """The grid key a column names (dotted, its last part, or its CSV column), or None."""
        keys = self.grid_keys
        return column if column in keys else next(
            (k for k in keys if column in (k.rsplit(".", 1)[-1], self.csv_columns[k])), None)

    @property
    def csv_columns(self) -> dict[str, str]:
        """The results CSV's setting columns, in order: data.name as "data", each grid key by its last part
        ("data.p" -> "p"; dotted where two keys share one), and seed."""
        keys = list(dict.fromkeys(["data.name", *self.grid_keys, "seed"]))
        short = {k: "data" if k == "data.name" else k.rsplit(".", 1)[-1] for k in keys}
        shared = Counter(short.values())
        return {k: name if shared[name] == 1 else k for k, name in short.items()}


def experiment_path(name: str, folder: Path) -> Path:
    """NAME (a file of `folder`) or a YAML path."""
    path = Path(name)
    if path.suffix in (".yaml", ".yml") and path.is_file():
        return path
    path = folder / f"{name}.yaml"
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in folder.glob("*.yaml")))
        raise ConfigError("experiment", name, f"one of {known} (benchmarks/experiments/NAME.yaml) or a YAML path")
    return path


def load(name: str, folder: Path) -> Experiment:
    path = experiment_path(name, folder)
    where = path.name
    try:
        spec = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as error:
        raise ConfigError(where, str(path), f"a readable YAML file ({str(error).splitlines()[0]})") from None
    _fields(where, spec, KEYS, REQUIRED)
    exp = Experiment(path.stem, path, spec["title"], spec["data"], spec.get("notes", ""), spec["metrics"],
                     [], [], spec.get("paper", []), spec.get("plot"), spec["configs"], spec.get("curve"))
    for metric in exp.metrics:
        if metric not in (*FINAL, *DIAGNOSTICS, *FOLDER):
            raise ConfigError(f"{where}: metrics", metric, f"one of {', '.join((*FINAL, *DIAGNOSTICS, *FOLDER))}")
    exp.settings = {name: _fit_key(f"{where}: settings: {name}", key) for name, key in spec.get("settings", {}).items()}
    common = exp.common = _overrides(f"{where}: overrides", spec.get("overrides", {}))
    if "grid" in spec:
        _grid(f"{where}: grid", spec["grid"])
        exp.grid = spec["grid"]
    if not exp.entries:
        raise ConfigError(f"{where}: configs", [], "a list of one or more {label, config} entries")
    for i, entry in enumerate(exp.entries):
        at = f"{where}: configs[{i}]"
        _fields(at, entry, ENTRY, ("label", "config"))
        try:
            value = entry["config"]  # a path is read from the repository's root; ROOT / an absolute path is that path
            config = str(resolve_config(str(ROOT / value) if "/" in value else value))
        except FedclustError:
            raise ConfigError(f"{at}.config", entry["config"], "a packaged config's name (`fedclust configs` "
                              "lists them) or a YAML config's path from the repository's root") from None
        grid = entry.get("grid", spec.get("grid"))
        axes = _grid(f"{at}.grid" if "grid" in entry else f"{where}: grid", grid) if grid is not None else {}
        overrides = {**common, **_overrides(f"{at}.overrides", entry.get("overrides", {}))}
        for combo in itertools.product(*axes.values()):
            values = {key: name for key, (name, _) in zip(axes, combo)}
            chosen = dict(overrides)
            for _, case in combo:
                chosen.update(case)
            name = "_".join([entry["label"], *(f"{k.rsplit('.', 1)[-1]}={v}" for k, v in values.items())])
            point = Point(name=re.sub(r"[^\w.=,+-]", "-", name), config=config, overrides=chosen)
            if any(run.point.name == point.name for run in exp.runs):
                raise ConfigError(at, entry["label"], f"an entry whose runs differ from the others' (its point "
                                  f"{point.name} is declared twice: give it another label or a grid key)")
            exp.runs.append(Run(entry["label"], point, values))
    _outputs(exp, where, spec["table"])
    return exp


def _fields(at: str, node: object, allowed: dict[str, type], required: tuple[str, ...]) -> None:
    if not isinstance(node, dict):
        raise ConfigError(at, node, f"a mapping with the keys {', '.join(allowed)}")
    for key, value in node.items():
        if key not in allowed:
            raise ConfigError(f"{at}: {key}", value, f"a known key ({', '.join(allowed)})")
        if not isinstance(value, allowed[key]):
            raise ConfigError(f"{at}: {key}", value, f"a {allowed[key].__name__}")
    for key in required:
        if key not in node:
            raise ConfigError(f"{at}: {key}", None, "present (it is required)")


def fit_keys() -> list[str]:
    """The top-level settings `fedclust fit` takes, as the CLI schema records them (method, data, seed, ...)."""
    options = (cli_schema.load() or {}).get("commands", {}).get("fit", {}).get("options", {})
    found = {key.lstrip("-").split(".")[0] for key in options}
    return sorted(found - {"config", "h", "help", "print_config"})


def _fit_key(at: str, key: object) -> str:
    keys = fit_keys()
    if not isinstance(key, str) or key.split(".")[0] not in keys or key.endswith("."):
        raise ConfigError(at, key, f"a `fedclust fit` setting, dotted (data.p) or one of {', '.join(keys)}")
    return key


def _overrides(at: str, node: dict) -> dict[str, object]:
    return {_fit_key(f"{at}: {key}", key): value for key, value in node.items()}


def _grid(at: str, grid: dict) -> dict[str, list[tuple[object, dict]]]:
    """key -> [(value or case name, overrides)]: a list axis sets its own key, a named axis the case's overrides."""
    if not grid:
        raise ConfigError(at, grid, "one or more keys with their values (leave grid out for one run per config)")
    axes = {}
    for key, values in grid.items():
        if isinstance(values, list) and values:
            axes[key] = [(v, {_fit_key(f"{at}: {key}", key): v}) for v in values]
        elif isinstance(values, dict) and values and all(isinstance(c, dict) and c for c in values.values()):
            axes[key] = [(case, _overrides(f"{at}: {key}.{case}", c)) for case, c in values.items()]
        else:
            raise ConfigError(f"{at}: {key}", values, "a non-empty list of values, or a mapping of case names to "
                              "non-empty mappings of overrides")
    return axes


def _outputs(exp: Experiment, where: str, table: dict) -> None:
    _fields(f"{where}: table", table, TABLE, ("columns",))
    exp.columns, exp.group_by = table["columns"], table.get("group_by", [])
    for column in [*exp.columns, *exp.group_by]:
        if column not in (*LABEL_COLUMNS, *exp.metrics, *exp.settings) and exp.key(column) is None:
            raise ConfigError(f"{where}: table", column, "method, a grid key (" + ", ".join(exp.grid_keys)
                              + "), a setting or a declared metric (" + ", ".join(exp.metrics) + ")")
    for i, ref in enumerate(exp.paper):
        at = f"{where}: paper[{i}]"
        _fields(at, ref, PAPER, ("metric", "source", "cells"))
        if ref["metric"] not in exp.metrics:
            raise ConfigError(f"{at}.metric", ref["metric"], f"a declared metric ({', '.join(exp.metrics)})")
        if "by" in ref and exp.key(ref["by"]) is None:
            raise ConfigError(f"{at}.by", ref["by"], f"a grid key ({', '.join(exp.grid_keys)})")
        for label, cells in ref["cells"].items():
            if label not in exp.labels:
                raise ConfigError(f"{at}.cells", label, f"a label of the configs ({', '.join(exp.labels)})")
            if isinstance(cells, dict) and "by" not in ref:
                raise ConfigError(f"{at}.by", None, "the grid key the cells of a mapping are keyed by")
            numbers = cells.values() if isinstance(cells, dict) else [cells]
            if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in numbers):
                raise ConfigError(f"{at}.cells.{label}", cells, "a number, or a mapping of grid values to numbers")
    if exp.curve is not None:
        _fields(f"{where}: curve", exp.curve, CURVE, ("metric", "rounds"))
        if exp.curve["metric"] not in (*FINAL, *DIAGNOSTICS, "loss"):
            raise ConfigError(f"{where}: curve.metric", exp.curve["metric"],
                              f"a per-round column ({', '.join((*FINAL, *DIAGNOSTICS, 'loss'))})")
        if not exp.curve["rounds"] or not all(isinstance(r, int) and r >= 1 for r in exp.curve["rounds"]):
            raise ConfigError(f"{where}: curve.rounds", exp.curve["rounds"], "a list of round numbers from 1")
    stage = (exp.curve or {}).get("stage2")
    valid = stage is not None and len(stage) == 2 and all(type(r) is int for r in stage) and 1 <= stage[0] < stage[1]
    if not valid and (stage is not None or {"stage2_mean", "stage2_std"} & {*exp.metrics}):
        raise ConfigError(f"{where}: curve.stage2", stage, "[first, last], 1 <= first < last (stage2_* need it)")
    if exp.plot is not None:
        _fields(f"{where}: plot", exp.plot, PLOT, ("x", "y"))
        if exp.key(exp.plot["x"]) is None:
            raise ConfigError(f"{where}: plot.x", exp.plot["x"], f"a grid key ({', '.join(exp.grid_keys)})")
        if exp.plot["y"] not in exp.metrics or exp.plot["y"] == "commit":
            raise ConfigError(f"{where}: plot.y", exp.plot["y"], f"a declared metric ({', '.join(exp.metrics)})")


def paper_cell(exp: Experiment, ref: dict, run: Run) -> float | None:
    """The published value beside `run` for a paper block: by label, and by the run's value of `by`."""
    cells = ref["cells"].get(run.label)
    if not isinstance(cells, dict):
        return cells
    value = run.values.get(exp.key(ref["by"])) if "by" in ref else None
    for key, number in cells.items():
        if key == value or (as_number(key) is not None and as_number(key) == as_number(value)):
            return number
    return None

"""An experiment's results from its run folders: RESULTS/NAME.csv (one row per point, machine-readable),
NAME.md (the table with the papers' cells beside fedclust's, and the machine, date, settings, data scale and
commands in its header) and NAME.png (the declared plot). Works on partial results: a point not done shows
its state, a running one the metrics of its last scored round."""

from __future__ import annotations

import csv
import functools
import json
import statistics
import textwrap
from pathlib import Path

import yaml

from fedclust.errors import ConfigError
from fedclust.run_folder import metric_by_round, rounds_level
from fedclust.sweep import Point, fingerprint, start_record

from .archive import archived
from .common import ROOT, as_number, machine, now
from .experiment import FINAL, Experiment, paper_cell
from .runner import state

MARK = "<!-- written by `python -m benchmarks report`; edit the experiment's YAML, not this file -->"
DIGITS = {"seconds_per_round": 1, "peak_memory_mb": 0, "rounds": 0, "server_seconds": 2, "client_seconds": 3,
          "eval_seconds": 2, "summaries": 0, "samples": 0}


def _csv(path: Path) -> list[dict[str, str]]:
    try:
        with path.open(newline="") as f:
            return list(csv.DictReader(f))
    except (OSError, UnicodeDecodeError, csv.Error):
        return []


def measure(folder: Path) -> dict[str, object]:
    """Every metric the folder gives (run folders are untrusted: an unreadable file gives nothing)."""
    rows = _csv(folder / "metrics.csv")
    try:
        final = json.loads((folder / "final.json").read_text())["metrics"]
    except (OSError, ValueError, KeyError, TypeError):
        final = None
    if not isinstance(final, dict):  # still going (or final.json is damaged): its last scored round
        final = next(({k: r[k] for k in FINAL if k in r} for r in reversed(rows) if as_number(r.get("nmi"))), {})
    out = {k: as_number(v) for k, v in {**(_csv(folder / "diagnostics.csv") or [{}])[-1], **final}.items()}
    seconds = [s for s in (as_number(r.get("seconds")) for r in rows) if s is not None]
    memory = [m for m in (as_number(r.get("peak_memory_mb")) for r in rows) if m is not None]
    rounds = as_number(rows[-1].get("round")) if rows else None
    out.update(rounds=int(rounds) if rounds is not None else None, seconds=sum(seconds) if seconds else None,
               seconds_per_round=statistics.median(seconds) if seconds else None,
               peak_memory_mb=max(memory) if memory else None, samples=_samples(folder),
               min_summary=config_value(folder, "federation.min_summary_size"),
               dp_epsilon=_epsilon(folder), **_steps(rows))
    return out


def config_value(folder: Path, key: str) -> object:
    """A dotted key's scalar value in the run's config.yaml (what fit resolved); None if unreadable or absent."""
    node = _dig(_yaml(str(folder / "config.yaml")), key)
    return node if isinstance(node, (int, float, str)) else None


def _samples(folder: Path) -> int | None:  # the samples the run clustered: partition.csv's counts summed
    counts = [as_number(v) for row in _csv(folder / "partition.csv") for k, v in row.items() if k != "client"]
    return int(sum(counts)) if counts and None not in counts else None


def _epsilon(folder: Path) -> float | None:
    """The (epsilon at the run's delta) its summaries spent, from privacy.json; None for a run without noise."""
    try:
        return as_number(json.loads((folder / "privacy.json").read_text())["epsilon"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _steps(rows: list[dict]) -> dict[str, float | None]:
    """The median round's server step, evaluation (a round evaluated; FedSpectral's walk labels there) and one
    client's step (the clients' seconds over their number), and the summaries sent in the last round."""
    def median(values) -> float | None:
        return statistics.median(found) if (found := [v for v in values if v]) else None
    client = [(as_number(r.get("train_seconds")) or 0) / c for r in rows if (c := as_number(r.get("clients")))]
    return dict(server_seconds=median(as_number(r.get("server_seconds")) for r in rows), client_seconds=median(client),
                eval_seconds=median(as_number(r.get("eval_seconds")) for r in rows),
                summaries=as_number(rows[-1].get("summaries")) if rows else None)


def curve_table(exp: Experiment, root: Path, rows: list[dict]) -> list[str]:
    """The declared metric of every run at the declared rounds, a row per run."""
    metric, rounds = exp.curve["metric"], exp.curve["rounds"]
    keys = [k.rsplit(".", 1)[-1] for k in exp.grid_keys]  # none without a grid: no empty column then
    lines = [f"## {metric} per round", "", _line(["method", *keys, *map(str, rounds)]),
             "|---" * (1 + len(keys) + len(rounds)) + "|"]
    for row in rows:  # an archived row's per-round record stayed in its folder, on another machine
        values = {} if row.get("archived") else metric_by_round(root / row["run"], metric)
        cells = ["(not here)" if row.get("archived") else _cell(metric, values.get(r)) for r in rounds]
        lines.append(_line([row["label"], *(str(row.get(k, "")) for k in exp.grid_keys), *cells]))
    return [*lines, ""]


def _line(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def collect(exp: Experiment, root: Path, kept: dict[str, dict[str, str]] | None = None) -> list[dict[str, object]]:
    """One row per point, in the experiment's order; a point whose folder is not here but whose committed row is
    its run (`kept`: archive.archived) keeps that row's numbers and record, marked `archived`."""
    rows, kept = [], kept or {}
    for run in exp.runs:
        status = state(root, run, kept)
        if status == "archived":
            found, started = _from_row(kept[run.point.name]), kept[run.point.name]
        else:
            found = measure(root / run.point.name) if status != "stale" else {}
            found.update({n: config_value(root / run.point.name, k) for n, k in exp.settings.items() if found})
            if found and (exp.curve or {}).get("stage2"):  # the stage's level (None until all its rounds are in)
                level = rounds_level(metric_by_round(root / run.point.name, exp.curve["metric"]), *exp.curve["stage2"])
                found.update(zip(("stage2_mean", "stage2_std"), level or (None, None)))
            started = start_record(root, run.point) if status not in ("stale", "pending") else {}  # no run here
        row = {"label": run.label, **{k: setting(run.point, k) for k in ("data.name", "seed")}, **run.values,
               "state": "done" if status == "archived" else status, "archived": status == "archived",
               "run": run.point.name, "fingerprint": fingerprint(run.point) if status in ("done", "archived") else "",
               **{m: found.get(m) for m in [*exp.settings, *exp.metrics] if m != "commit"},
               **{k: started.get(k, "") for k in ("commit", "command", "machine", "started")}}
        row.update({f"paper_{ref['metric']}": paper_cell(exp, ref, run) for ref in exp.paper})
        rows.append(row)
    return rows


def _from_row(row: dict[str, str]) -> dict[str, object]:
    """A committed row's metrics as numbers (rounds a whole number), as measure gives them from a folder."""
    found = {k: as_number(v) for k, v in row.items()}
    if found.get("rounds") is not None:
        found["rounds"] = int(found["rounds"])
    return found


def _cell(name: str, value: object) -> str:
    """A metric or paper cell: 4 decimals (seconds 1, rounds and MB none); anything else as it is."""
    if isinstance(value, float):
        return f"{value:.{DIGITS.get(name.removeprefix('paper_'), 4)}f}"
    return "" if value is None else str(value)


def setting(point: Point, key: str) -> object:
    """A run's value of a dotted config key: its override, else its config file's (None when neither sets it)."""
    if key in point.overrides:
        return point.overrides[key]
    return _dig(_config(point.config), key)


def _dig(node: object, key: str) -> object:
    for part in key.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node


def _yaml(path: str) -> object:
    try:
        return yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return None


_config = functools.cache(_yaml)  # a packaged config, read once per process (the runs of an entry share one)


def write_csv(exp: Experiment, rows: list[dict], path: Path) -> None:
    """One row per run: method, the settings by their CSV names (data, p, schedule, seed...), state, the metrics,
    the papers' cells, commit and run folder."""
    columns = exp.csv_columns
    names = ["method", *columns.values(), *exp.settings, "state", *[m for m in exp.metrics if m != "commit"],
             *[f"paper_{ref['metric']}" for ref in exp.paper], "commit", "run",
             "fingerprint", "started", "machine", "command"]  # the run's record: what archive.archived checks
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, names, extrasaction="ignore")
        writer.writeheader()
        for row in rows:
            named = {"method": row["label"], **{columns[k]: row.get(k) for k in columns},
                     **{k: v for k, v in row.items() if k not in columns and k not in ("label", "archived")}}
            writer.writerow({k: "" if v is None else v for k, v in named.items()})


def markdown(exp: Experiment, rows: list[dict], command: str) -> str:
    columns = [c for c in exp.columns if c not in exp.group_by]
    if any(row["state"] != "done" for row in rows):  # partial results say so on every row
        columns.insert(next((i + 1 for i, c in enumerate(columns) if c in ("method", "label")), 0), "state")
    shown = []  # (header, row key): each paper cell right after its metric
    for column in columns:
        key = "label" if column in ("method", "label") else exp.key(column) or column
        shown.append((column, key))
        shown += [(f"paper {column}", f"paper_{column}") for ref in exp.paper if ref["metric"] == column]
    made = [row for row in rows if row["started"]]
    commands = sorted({row["command"] for row in made}) or [f"python -m benchmarks run {exp.name}"]
    machines = sorted({row["machine"] for row in made}) or ["none yet"]
    dates = f"{min(r['started'] for r in made)} to {max(r['started'] for r in made)}" if made else "none yet"
    carried = sum(bool(row.get("archived")) for row in rows)
    unrecorded = sum(bool(row.get("archived")) and not row["started"] for row in rows)
    lines = [MARK, f"# {exp.title}", "",  # the table first, with the command that wrote it; how it was made below
             f"Command: {', '.join(f'`{c}`' for c in commands)}, then `{command}` ({_shown(exp.path)}; "
             f"{sum(r['state'] == 'done' for r in rows)} of {len(rows)} runs done"
             + (f"; {carried} of them read back from the committed {exp.name}.csv, their run folders not on the "
                "machine that wrote this file (benchmarks/archive.py)" if carried else "") + ").", "",
             f"Data: {exp.data}", ""]
    lines += [f"Paper cells (paper {ref['metric']}): {ref['source']}." for ref in exp.paper] + [""] * bool(exp.paper)
    groups: dict[tuple, list[dict]] = {}
    for row in rows:
        groups.setdefault(tuple(row.get(exp.key(g) or "label") for g in exp.group_by), []).append(row)
    for values, members in groups.items():
        if values:
            lines += [f"## {', '.join(f'{g} {v}' for g, v in zip(exp.group_by, values))}", ""]
        lines += ["| " + " | ".join(h for h, _ in shown) + " |", "|---" * len(shown) + "|"]
        keys = exp.grid_keys
        lines += ["| " + " | ".join(str(row.get(k, "")) if k in keys else _cell(k, row.get(k)) for _, k in shown)
                  + " |" for row in members] + [""]
    lines += ["## How the runs were made", "", f"Machine: {'; '.join(machines)}. The runs' commands started {dates}"
              + (f" ({unrecorded} runs read back from a table written before the CSV kept machine and date: their "
                 "commit column says what they ran, the history of this file when)" if unrecorded else "")
              + f"; this file written {now()} on {machine(False)}.", ""]
    for paragraph in exp.note_paragraphs:
        lines += [paragraph, ""]
    lines += ["Settings:", ""] + [f"- {entry['label']}: `{entry['config']}`" + "".join(
        f"; {part} {_describe(entry[part])}" for part in ("overrides", "grid") if part in entry)
        for entry in exp.entries]
    lines += [f"- grid of the others: {_describe(exp.grid) or 'none'}; every run: "
              f"{_describe(exp.common) or 'no override'}", ""]
    return "\n".join(lines)


def _shown(path: Path) -> str:
    return str(path.resolve().relative_to(ROOT)) if path.resolve().is_relative_to(ROOT) else str(path)


def _describe(settings: dict, axes: bool = True) -> str:
    """key value, ...; a named axis (a mapping of cases) as key: case (key value, ...) | case (...). Inside a case a
    mapping is a value (data.options: {num_clusters: 3})."""
    return ", ".join(f"{k}: " + " | ".join(f"{case} ({_describe(c, False)})" for case, c in v.items())
                     if axes and isinstance(v, dict) else f"{k} {v}" for k, v in settings.items())


def plot(exp: Experiment, rows: list[dict], path: Path) -> bool:
    """y against x, one line per label (and per value of the other grid keys but seed): the mean over the
    other runs with their range shaded; a label without x is a flat dashed line; papers' cells as crosses."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x_key, y = exp.key(exp.plot["x"]), exp.plot["y"]
    others = [k for k in exp.grid_keys if k not in (x_key, "seed")]
    lines: dict[tuple[str, str], dict[float | None, list[float]]] = {}
    for row in rows:
        if row["state"] == "done" and row.get(y) is not None:
            name = " ".join([row["label"], *(f"{k.rsplit('.', 1)[-1]}={row[k]}" for k in others if k in row)])
            lines.setdefault((row["label"], name), {}).setdefault(as_number(row.get(x_key)), []).append(row[y])
    if not lines:
        return False
    fig, ax = plt.subplots(figsize=(7, 4.5))
    every_x = sorted({x for points in lines.values() for x in points if x is not None}) or [0.0, 1.0]
    colour = {}
    for (label, name), points in lines.items():
        xs = sorted(x for x in points if x is not None)
        if not xs:  # no x (centralized k-means): its value holds for every x
            (line,) = ax.plot(every_x, [statistics.fmean(points[None])] * len(every_x), "--", label=name)
        else:
            (line,) = ax.plot(xs, [statistics.fmean(points[x]) for x in xs], "o-", label=name)
            ax.fill_between(xs, [min(points[x]) for x in xs], [max(points[x]) for x in xs], alpha=0.2,
                            color=line.get_color())
        colour.setdefault(label, line.get_color())
    cells = {(row["label"], as_number(row.get(x_key))): row[f"paper_{y}"] for row in rows
             if row.get(f"paper_{y}") is not None and row["label"] in colour}
    for label in dict.fromkeys(label for label, _ in cells):
        xy = sorted((x, v) for (lab, x), v in cells.items() if lab == label and x is not None)
        if xy:
            ax.plot(*zip(*xy), "x:", color=colour[label], label=f"{label}, paper")
    source = "; ".join(ref["source"] for ref in exp.paper if ref["metric"] == y)
    title = [exp.title] + ([f"paper: {source}"] if source else [])  # wrapped: a long title ran off the figure
    ax.set(xlabel=exp.plot["x"], ylabel=y)
    ax.set_title("\n".join(textwrap.fill(t, 80) for t in title), fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def report(exp: Experiment, root: Path, results: Path, command: str, replace: bool = False) -> list[Path]:
    md = results / f"{exp.name}.md"
    if md.exists() and not replace and not md.read_text(errors="replace").startswith(MARK):
        raise ConfigError("report", str(md), "a file this command wrote; this one holds numbers measured by a "
                          "former script (pass --replace to overwrite it; git keeps the old one)")
    rows = collect(exp, root, archived(exp, results))  # before the CSV it reads is written again
    results.mkdir(parents=True, exist_ok=True)
    write_csv(exp, rows, results / f"{exp.name}.csv")
    text = markdown(exp, rows, command)
    if exp.curve:
        text += "\n" + "\n".join(curve_table(exp, root, rows))
    md.write_text(text + "\n")
    written = [results / f"{exp.name}.csv", md]
    if exp.plot and plot(exp, rows, results / f"{exp.name}.png"):
        written.append(results / f"{exp.name}.png")
    return written

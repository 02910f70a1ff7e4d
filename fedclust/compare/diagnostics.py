"""The dashboard's diagnostics (docs/diagnostics.md): a run folder's diagnostics.csv (`fedclust fit --diagnose
true`, one row per evaluated round) and diagnostics_<split>.json (`fedclust evaluate --diagnose true`, the final
model on one split), their per-round curves and a table of the final values.

A run folder is untrusted input (copied from elsewhere, cut short by a full disk, edited by hand): a file that
cannot be read as diagnostics becomes a one-line note on the page, never a crash, and its readable rows stay.
Runs without diagnostics add nothing to the page.
"""

from __future__ import annotations

import csv
import html
import io
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import plotly.graph_objects as go

# the columns of fedclust/probes/diagnose.py's DIAGNOSTIC_KEYS, as the page names them (tests keep them in step;
# importing the probes would load Lightning into a command that builds no model)
LABELS = {"effective_rank": "effective rank", "top1_share": "top-1 share", "top3_share": "top-3 share",
          "directions_90": "directions for 90 %", "pc1_brightness_r": "|r| PC1, brightness",
          "cluster_min": "smallest cluster", "cluster_max": "largest cluster", "cluster_balance": "size balance",
          "empty_clusters": "empty clusters", "embed_kmeans_nmi": "k-means NMI on z"}
COUNTS = ("directions_90", "cluster_min", "cluster_max", "empty_clusters")  # shown as whole numbers
CURVES = {"effective_rank": "Effective rank of z per round",
          "top3_share": "Top-3 variance share of z per round",
          "pc1_brightness_r": "|r| of z's first direction with brightness per round"}


@dataclass
class RunDiagnostics:
    rounds: list[dict[str, float]] = field(default_factory=list)  # diagnostics.csv's rows (nan: not computed)
    finals: list[tuple[str, dict[str, float]]] = field(default_factory=list)  # (where from, the final values)
    notes: list[str] = field(default_factory=list)  # one line per file that could not be read whole


def read_diagnostics(folder: Path) -> RunDiagnostics:
    """Every diagnostics file of a run folder: the rounds of diagnostics.csv (its last row is a final value),
    and each diagnostics_<split>.json."""
    out = RunDiagnostics()
    out.rounds = _read_rounds(folder / "diagnostics.csv", out.notes)
    if out.rounds:
        last = out.rounds[-1]
        out.finals.append((f"fit, round {last['round']:g}", last))
    for path in sorted(folder.glob("diagnostics_*.json")):
        record = _read_record(path, out.notes)
        if record is not None:
            split = path.stem.removeprefix("diagnostics_")
            when = record.get("round", math.nan)
            out.finals.append((f"evaluate {split}" + ("" if math.isnan(when) else f", round {when:g}"), record))
    return out


def _number(value) -> float:
    """A CSV cell or JSON value as a float: empty or null is nan (not computed), anything else not a number
    raises ValueError; infinities are nan (no diagnostic is infinite)."""
    if value is None or value == "":
        return math.nan
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ValueError(f"{value!r} is not a number")
    try:
        number = float(value)
    except ValueError:
        raise ValueError(f"{value!r} is not a number") from None
    return number if math.isfinite(number) else math.nan


def _read_rounds(path: Path, notes: list[str]) -> list[dict[str, float]]:
    if not path.exists():
        return []
    try:
        text = path.read_text(encoding="utf-8")
        reader = csv.DictReader(io.StringIO(text))
        columns = [name for name in reader.fieldnames or [] if name in LABELS]
        if "round" not in (reader.fieldnames or []) or not columns:
            notes.append(f"{path.name} is not a diagnostics table (it needs a round column and diagnostics "
                         "columns): left out")
            return []
        rows, bad = [], 0
        for row in reader:
            try:
                if None in row or None in row.values():  # a row cut short, or one with extra cells
                    raise ValueError(row)
                parsed = {"round": _number(row["round"]), **{key: _number(row[key]) for key in columns}}
                if math.isnan(parsed["round"]):
                    raise ValueError(row["round"])
                rows.append(parsed)
            except ValueError:
                bad += 1
    except (OSError, UnicodeDecodeError, csv.Error) as error:
        notes.append(f"{path.name} cannot be read ({_reason(error)}): left out")
        return []
    if bad:
        notes.append(f"{path.name}: {bad} of {bad + len(rows)} rows are not rows of numbers and were left out")
    return rows


def _read_record(path: Path, notes: list[str]) -> dict[str, float] | None:
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(record, dict) or not any(key in LABELS for key in record):
            raise ValueError("not a diagnostics record")
        return {key: _number(record[key]) for key in ("round", *LABELS) if key in record}
    except (OSError, UnicodeDecodeError, ValueError) as error:  # (json's decode error is a ValueError)
        notes.append(f"{path.name} is not a diagnostics record ({_reason(error)}): left out")
        return None


def _reason(error: Exception) -> str:
    return " ".join(str(error).split())[:120] or type(error).__name__


def curves(runs, layout: dict) -> list[go.Figure]:
    """Effective rank, top-3 share and brightness |r| against the round, one line per run with diagnostics.csv;
    a figure only where some run has that diagnostic."""
    figs = []
    for key, title in CURVES.items():
        fig = go.Figure()
        for run in runs:
            rows = [r for r in run.diagnostics.rounds if not math.isnan(r.get(key, math.nan))]
            if rows:
                fig.add_trace(go.Scatter(x=[r["round"] for r in rows], y=[r[key] for r in rows],
                                         mode="lines+markers", name=run.name))
        if fig.data:
            fig.update_layout(title=title, xaxis_title="round", yaxis_title=LABELS[key], **layout)
            figs.append(fig)
    return figs


def section(runs) -> str:
    """The final diagnostics of every run that has some (one row per source: the run's last diagnosed round,
    each evaluated split), under the notes on files left out; "" when no run has diagnostics."""
    notes = [f"{run.name}: {note}" for run in runs for note in run.diagnostics.notes]
    rows = []
    for run in runs:
        for source, values in run.diagnostics.finals:
            cells = [run.name, run.method, source,
                     *("" if math.isnan(v := values.get(key, math.nan)) else f"{v:.0f}" if key in COUNTS
                       else f"{v:.4f}" for key in LABELS)]
            rows.append("<tr>" + "".join(f'<td class="{"l" if i < 3 else ""}">{html.escape(c)}</td>'
                                         for i, c in enumerate(cells)) + "</tr>")
    if not rows and not notes:
        return ""
    head = ["run", "method", "from", *LABELS.values()]
    header = "<tr>" + "".join(f'<th class="{"l" if i < 3 else ""}">{html.escape(h)}</th>'
                              for i, h in enumerate(head)) + "</tr>"
    parts = ["<h2>Diagnostics</h2>", *(f'<p class="note">{html.escape(n)}</p>' for n in notes)]
    if rows:
        parts += ['<p>How to read them: docs/diagnostics.md (a top-3 share near 1 with a large brightness |r| is '
                  "a representation that tracks brightness).</p>", f"<table>{header}{''.join(rows)}</table>"]
    return "\n".join(parts)

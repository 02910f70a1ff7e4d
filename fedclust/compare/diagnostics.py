"""The dashboard's diagnostics (docs/diagnostics.md): a run folder's diagnostics.csv (`fedclust fit --diagnose
true`, one row per evaluated round) and diagnostics_<split>.json (`fedclust evaluate --diagnose true`, the final
model on one split), their per-round curves and a table of the final values.

A run folder is untrusted input (fedclust/compare/untrusted.py): a file that cannot be read as diagnostics
becomes a one-line note on the page, never a crash, and its readable rows stay.
Runs without diagnostics add nothing to the page.
"""

from __future__ import annotations

import html
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import plotly.graph_objects as go

from fedclust.compare.untrusted import number, read, read_table

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
    out.rounds = read_table(folder / "diagnostics.csv", out.notes, "a diagnostics table", LABELS)
    if out.rounds:
        last = out.rounds[-1]
        out.finals.append((f"fit, round {last['round']:g}", last))
    for path in sorted(folder.glob("diagnostics_*.json")):
        record = read(path, out.notes, "a diagnostics record", _record)
        if record is not None:
            split = path.stem.removeprefix("diagnostics_")
            when = record.get("round", math.nan)
            out.finals.append((f"evaluate {split}" + ("" if math.isnan(when) else f", round {when:g}"), record))
    return out


def _record(text: str) -> dict[str, float]:
    record = json.loads(text)
    if not isinstance(record, dict) or not any(key in LABELS for key in record):
        raise ValueError("an object holding one or more diagnostics is needed")
    return {key: number(record[key]) for key in ("round", *LABELS) if key in record}


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

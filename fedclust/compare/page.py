"""`fedclust compare RUN_DIR...`: one self-contained HTML page comparing runs (plotly.js inlined once, no
network needed to open it). A file of a run folder that cannot be read is a note line on the page and on
stderr (fedclust/compare/untrusted.py); a run folder with nothing readable is listed as skipped."""

from __future__ import annotations

import html
import math
import sys
import time
from pathlib import Path

import plotly.io as pio
from jsonargparse import ArgumentParser

from fedclust.compare import diagnostics, figures
from fedclust.compare.runs import METRICS, RunRecord, differing_settings, load_runs
from fedclust.errors import ConfigError
from fedclust.parsers import command_parser
from fedclust.run_folder import write_output

UNFINISHED = ("<p>An unfinished run (no final.json: still going, or stopped part-way) shows its last scored round in "
              "the table and is left out of the plots against heterogeneity and failures.</p>")
STYLE = """body{font-family:system-ui,sans-serif;margin:24px;color:#222}table{border-collapse:collapse;font-size:13px}
td,th{border:1px solid #ddd;padding:4px 8px;text-align:right}th{background:#f4f4f4}td.l,th.l{text-align:left}
.grid{display:grid;grid-template-columns:repeat(auto-fill,minmax(560px,1fr));gap:12px}h2{margin-top:32px}
p.note{color:#8a5a00;margin:4px 0}"""


def compare(runs: list[str], output: str = "compare.html", title: str = "fedclust runs") -> str:
    """Write one HTML page comparing run folders.

    Args:
        runs: Run folders written by `fedclust fit` (finished or still running).
        output: The HTML file to write.
        title: The page's title.
    """
    skipped: list[str] = []
    records = sorted(load_runs(runs, skipped), key=lambda r: (r.method, r.data, r.heterogeneity or ("", 0), r.seed))
    out = Path(output)
    if out.is_dir():
        raise ConfigError("output", output, "a file path for the HTML page, not a folder")
    # a file that could not be read: one line here, above the table (diagnostics files: above theirs)
    notes = [*skipped, *(f"{run.name}: {note}" for run in records for note in run.notes)]
    unfinished = sum(not r.finished for r in records)
    counted = (f"{len(records)} runs" + (f", {len(skipped)} skipped" if skipped else "")
               + (f", {unfinished} unfinished" if unfinished else ""))
    sections = [f"<h1>{html.escape(title)}</h1><p>{counted}, written {time.strftime('%Y-%m-%d %H:%M')}</p>",
                *([UNFINISHED] if unfinished else []),
                "<h2>Final metrics</h2>", *(f'<p class="note">{html.escape(note)}</p>' for note in notes),
                final_table(records)]
    if diagnosed := diagnostics.section(records):  # runs diagnosed by fit or evaluate (--diagnose true)
        sections.append(diagnosed)
    plots = figures.heterogeneity(records)
    if (failures := figures.failures(records)) is not None:
        plots.append(failures)
    if plots:
        sections += ["<h2>Against heterogeneity and failures</h2>", _grid(plots)]
    sections += ["<h2>Curves</h2>", _grid([figures.curves(records, m) for m in ("nmi", "acc", "ari", "loss")]
                                          + diagnostics.curves(records, figures.LAYOUT))]
    heatmaps = [f for f in (figures.partition_heatmap(r) for r in records) if f is not None]
    if heatmaps:
        sections += ["<h2>Partitions</h2>", _grid(heatmaps)]
    write_output(out, _page(title, "\n".join(sections)), "output")
    for note in [*notes, *(f"{run.name}: {note}" for run in records for note in run.diagnostics.notes)]:
        print(f"fedclust: note: {note}", file=sys.stderr)  # (each also on the page)
    print(f"wrote {out} ({counted})")
    return str(out)


def compare_parser() -> ArgumentParser:
    """`fedclust compare`'s parser: the run folders as positional arguments, then compare's other arguments."""
    parser = command_parser(compare)
    parser.add_function_arguments(compare, fail_untyped=True, skip={"runs"})
    parser.add_argument("runs", nargs="+", metavar="RUN_OR_SWEEP_DIR",
                        help="Run folders written by `fedclust fit`, or folders of them (a sweep folder: every run "
                             "in it).")
    return parser


def _grid(figs) -> str:
    return '<div class="grid">' + "".join(_figure_html(f) for f in figs) + "</div>"


def _figure_html(fig) -> str:
    # plotly.js goes inline once (in the page head), every figure refers to it
    return pio.to_html(fig, include_plotlyjs=False, full_html=False, config={"displaylogo": False})


def _page(title: str, body: str) -> str:
    from plotly.offline import get_plotlyjs

    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<script type='text/javascript'>{get_plotlyjs()}</script><style>{STYLE}</style></head>"
            f"<body>{body}</body></html>")


# settings the table's own columns show (method, data, partition, p / alpha, failures, seed)
SHOWN = ("method", "method.class_path", "data.name", "data.partition", "data.p", "data.alpha",
         "federation.disconnect_rate", "seed")


def final_table(records: list[RunRecord]) -> str:
    """One row per run: what it ran, the settings that differ between these runs (one column each), its privacy
    budget (epsilon, where a run noised its summaries: privacy.json), rounds and final scores."""
    private = any(r.privacy for r in records)
    settings = differing_settings(records, (*SHOWN, *(("federation.dp_epsilon",) if private else ())))
    head = ["run", "method", "data", "partition", "p / alpha", "failures", "seed", *settings,
            *(["epsilon"] if private else []), "rounds", *(m.upper() for m in METRICS), "s / round"]
    rows = []
    for r in records:
        het = f"{r.heterogeneity[0]} = {r.heterogeneity[1]:g}" if r.heterogeneity else ""
        epsilon = [_budget(r.privacy)] if private else []
        cells = [r.name, r.method, r.data, r.partition, het, f"{r.disconnect_rate:g}", str(r.seed),
                 *(_value(r.settings[key]) if key in r.settings else "" for key in settings), *epsilon,
                 str(len(r.history)) + ("" if r.finished else ", unfinished"),
                 *(f"{r.final[m]:.4f}" if m in r.final else "" for m in METRICS),
                 "" if math.isnan(r.seconds_per_round) else f"{r.seconds_per_round:.1f}"]
        rows.append("<tr>" + "".join(f'<td class="{"l" if i < 4 else ""}">{html.escape(c)}</td>'
                                     for i, c in enumerate(cells)) + "</tr>")
    header = "<tr>" + "".join(f'<th class="{"l" if i < 4 else ""}">{html.escape(h)}</th>'
                              for i, h in enumerate(head)) + "</tr>"
    return f"<table>{header}{''.join(rows)}</table>"


def _value(value) -> str:
    """A setting as a cell: YAML's words for null and booleans, numbers as written, lists in brackets."""
    if value is None or isinstance(value, bool):
        return {None: "null", True: "true", False: "false"}[value]
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, list):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    return str(value)


def _budget(privacy: dict[str, float] | None) -> str:
    """A run's (epsilon, delta) as a cell: epsilon; blank for a run without noise."""
    if not privacy:
        return ""
    return f"{privacy['epsilon']:.3g}"

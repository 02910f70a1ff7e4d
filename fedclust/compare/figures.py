"""The dashboard's figures (plotly): curves per run, metric vs heterogeneity with the papers' numbers,
metric vs device-failure rate, and each run's partition as a heatmap."""

from __future__ import annotations

import math
import statistics
from collections import Counter, defaultdict

import plotly.graph_objects as go

from fedclust.compare.paper_numbers import reference
from fedclust.compare.runs import RunRecord

LAYOUT = dict(template="plotly_white", height=360, margin=dict(l=50, r=20, t=50, b=40))


def curves(runs: list[RunRecord], metric: str) -> go.Figure:
    """``metric`` against the round, one line per run (only the scored rounds)."""
    fig = go.Figure()
    for run in runs:
        rows = [r for r in run.history if not math.isnan(r.get(metric, math.nan))]
        if rows:
            fig.add_trace(go.Scatter(x=[r["round"] for r in rows], y=[r[metric] for r in rows],
                                     mode="lines+markers", name=run.name))
    fig.update_layout(title=f"{metric.upper()} per round", xaxis_title="round", yaxis_title=metric.upper(),
                      **LAYOUT)
    return fig


def _groups(runs: list[RunRecord], key, x_of) -> dict[tuple, dict[float, list[float]]]:
    """Final NMI of runs grouped by ``key(run)``, then by ``x_of(run)`` (several seeds -> several values); a run
    without its final scores (still going, or stopped) is left out: its last round is not its result."""
    out: dict[tuple, dict[float, list[float]]] = defaultdict(lambda: defaultdict(list))
    for run in runs:
        x = x_of(run)
        if x is not None and run.finished and "nmi" in run.final:
            out[key(run)][x].append(run.final["nmi"])
    return out


def _mean_trace(name: str, by_x: dict[float, list[float]], dash: str | None = None) -> go.Scatter:
    xs = sorted(by_x)
    ys = [statistics.fmean(by_x[x]) for x in xs]
    err = [statistics.pstdev(by_x[x]) if len(by_x[x]) > 1 else 0.0 for x in xs]
    return go.Scatter(x=xs, y=ys, error_y=dict(type="data", array=err, visible=any(err)), mode="lines+markers",
                      name=name, line=dict(dash=dash) if dash else None)


def heterogeneity(runs: list[RunRecord]) -> list[go.Figure]:
    """Final NMI against p (one figure) and against alpha (another), one line per method / data / failure
    rate / number of rounds (mean and spread over seeds; a method run at two schedules is two lines, named by
    their rounds), with the paper's numbers as dashed lines where the setting is one of CCFC Table 1's. Only
    knobs that some line varies get a figure."""
    groups = _groups(runs, key=lambda r: (r.heterogeneity[0], r.method, r.data, r.partition, r.disconnect_rate,
                                          len(r.history)),
                     x_of=lambda r: r.heterogeneity[1] if r.heterogeneity else None)
    out = []
    for knob in sorted({key[0] for key in groups}):
        mine = {key: by_x for key, by_x in groups.items() if key[0] == knob}
        if not any(len(v) > 1 for v in mine.values()):
            continue
        schedules = Counter(key[:5] for key in mine)  # a setting run at several numbers of rounds
        fig, papers = go.Figure(), set()
        for (_, method, data, partition, rate, rounds), by_x in sorted(mine.items()):
            suffix = (f", failures {rate:g}" if rate else "") + (
                f", {rounds} rounds" if schedules[(knob, method, data, partition, rate)] > 1 else "")
            fig.add_trace(_mean_trace(f"{method} on {data}{suffix}", by_x))
            paper = reference(method, data, partition)
            if paper is not None and not rate and (method, data, partition) not in papers:
                papers.add((method, data, partition))
                fig.add_trace(go.Scatter(x=paper[0], y=paper[1], mode="lines", line=dict(dash="dash"),
                                         name=f"{method} on {data}, paper (CCFC Table 1)"))
        title = "p (pshift)" if knob == "p" else "Dirichlet alpha"
        fig.update_layout(title=f"Final NMI vs {title} (dashed: published)", xaxis_title=knob, yaxis_title="NMI",
                          **LAYOUT)
        if knob == "alpha":
            fig.update_xaxes(type="log")
        out.append(fig)
    return out


def failures(runs: list[RunRecord]) -> go.Figure | None:
    """Final NMI against the device-failure rate (CCFC Fig. 6), when some setting was run at several."""
    groups = _groups(runs, key=lambda r: (r.method, r.data, r.heterogeneity),
                     x_of=lambda r: r.disconnect_rate)
    if not any(len(v) > 1 for v in groups.values()):
        return None
    fig = go.Figure()
    for (method, data, het), by_x in sorted(groups.items(), key=str):
        label = f"{method} on {data}" + (f", {het[0]} = {het[1]:g}" if het else "")
        fig.add_trace(_mean_trace(label, by_x))
    fig.update_layout(title="Final NMI vs device-failure rate", xaxis_title="disconnect rate", yaxis_title="NMI",
                      **LAYOUT)
    return fig


def partition_heatmap(run: RunRecord) -> go.Figure | None:
    """Samples per client and class."""
    if not run.counts:
        return None
    fig = go.Figure(go.Heatmap(z=run.counts, x=[f"class {c}" for c in range(len(run.counts[0]))],
                               y=[f"client {c}" for c in range(len(run.counts))], colorscale="Blues"))
    fig.update_layout(title=f"{run.name}: samples per client and class", **{**LAYOUT, "height": 300})
    return fig

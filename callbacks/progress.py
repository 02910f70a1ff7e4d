"""A rich progress bar over each round's clients, one summary line per round, and a final metrics table."""

from __future__ import annotations

import math

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from fedclust.clustering.metrics import LABEL_FREE_METRICS

from .base import Callback

METRICS = ("nmi", "acc", "ari", "kappa", *LABEL_FREE_METRICS)  # whichever the run scores (labels or none)
COUNTS = ("cluster_size_min", "cluster_size_max", "clusters_found")  # shown as whole numbers


def _shown(metric: str, value: float) -> str:
    return f"{value:.0f}" if metric in COUNTS and value == value else f"{value:.4f}"


class ProgressCallback(Callback):
    def __init__(self, console: Console | None = None):
        self.console = console or Console()
        self.progress: Progress | None = None
        self.task = None

    def on_fit_start(self, orch) -> None:
        self.progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TimeElapsedColumn(), console=self.console, transient=True)
        self.progress.start()

    def on_round_start(self, orch, ctx, clients) -> None:
        done = orch.progress.done + 1
        # escaped: rich would read "[pretrain 1/15]" as markup and drop it
        self.task = self.progress.add_task(
            escape(f"round {done}/{orch.total_rounds} [{ctx.stage.name} {ctx.round + 1}/{ctx.stage.rounds}]"),
            total=len(clients))

    def on_client_end(self, orch, client_id) -> None:
        self.progress.advance(self.task)

    def on_round_end(self, orch, record) -> None:
        self.progress.remove_task(self.task)
        scores = "  ".join(f"{m} {_shown(m, record[m])}" for m in METRICS if m in record)
        loss = "" if math.isnan(record["loss"]) else f"loss {record['loss']:.4f}  "
        stage = orch.stages[int(record["stage"])]
        seconds = (f"{record['seconds']:.1f}s (train {record['train_seconds']:.1f}, server "
                   f"{record['server_seconds']:.1f}, eval {record['eval_seconds']:.1f})")
        self.console.print(f"round {record['round']:>4}/{orch.total_rounds} {stage.name} "
                           f"{int(record['stage_round']) + 1}/{stage.rounds}  {loss}{scores}  "
                           f"clients {record['clients']}  {seconds}", markup=False, highlight=False)

    def on_fit_end(self, orch) -> None:
        self.progress.stop()
        final = orch.progress.last_metrics
        if not final:
            return
        shown = [m for m in METRICS if m in final]
        table = Table(title=f"final clustering metrics ({len(orch.data)} samples)")
        for name in shown:
            table.add_column("Kappa" if name == "kappa" else name.upper() if name in ("nmi", "acc", "ari")
                             else name.replace("_", " "), justify="right")
        table.add_row(*(_shown(m, final[m]) for m in shown))
        self.console.print(table)

"""A rich progress bar over each round's clients, one summary line per round with the whole run's estimated
remaining time, and a final metrics table."""

from __future__ import annotations

import math
from time import perf_counter

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


def duration(seconds: float) -> str:
    """45s, 3m 05s, 2h 07m: a remaining time at the precision it deserves."""
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m {seconds % 60:02d}s"
    return f"{seconds // 3600}h {seconds % 3600 // 60:02d}m"


class ProgressCallback(Callback):
    """`live`: the bar and the per-round lines (fit's --progress); the final table is printed either way."""

    def __init__(self, console: Console | None = None, live: bool = True):
        self.console = console or Console()
        self.live = live
        self.progress: Progress | None = None
        self.task = None
        self.started, self.first_round = 0.0, 0  # this process's start and first round: the pace of the rounds

    def on_fit_start(self, orch) -> None:
        self.started, self.first_round = perf_counter(), orch.progress.done
        if not self.live:
            return
        self.progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TimeElapsedColumn(), console=self.console, transient=True)
        self.progress.start()

    def on_round_start(self, orch, ctx, clients) -> None:
        if not self.live:
            return
        done = orch.progress.done + 1
        # escaped: rich would read "[pretrain 1/15]" as markup and drop it
        left = self.remaining(orch)
        self.task = self.progress.add_task(
            escape(f"round {done}/{orch.total_rounds} [{ctx.stage.name} {ctx.round + 1}/{ctx.stage.rounds}]"
                   + ("" if left is None else f" run ~{duration(left)} left")),
            total=len(clients))

    def on_client_end(self, orch, client_id) -> None:
        if self.live:
            self.progress.advance(self.task)

    def on_round_end(self, orch, record) -> None:
        if not self.live:
            return
        self.progress.remove_task(self.task)
        scores = "  ".join(f"{m} {_shown(m, record[m])}" for m in METRICS if m in record)
        loss = "" if math.isnan(record["loss"]) else f"loss {record['loss']:.4f}  "
        stage = orch.stages[int(record["stage"])]
        seconds = (f"{record['seconds']:.1f}s (train {record['train_seconds']:.1f}, server "
                   f"{record['server_seconds']:.1f}, eval {record['eval_seconds']:.1f})")
        left = self.remaining(orch)
        eta = f"  ~{duration(left)} left" if left else ""
        self.console.print(f"round {record['round']:>4}/{orch.total_rounds} {stage.name} "
                           f"{int(record['stage_round']) + 1}/{stage.rounds}  {loss}{scores}  "
                           f"clients {record['clients']}  {seconds}{eta}", markup=False, highlight=False)

    def remaining(self, orch) -> float | None:
        """Seconds the whole run still needs: the mean wall time per round so far in this process (checkpoints and
        evaluations included) times the rounds left; None before the first round has finished."""
        timed = orch.progress.done - self.first_round
        if timed <= 0:
            return None
        return (perf_counter() - self.started) / timed * (orch.total_rounds - orch.progress.done)

    def close(self) -> None:
        """End the live bar (it hides the cursor while it runs); also after a run that stopped early."""
        if self.progress is not None:
            self.progress.stop()

    def on_fit_end(self, orch) -> None:
        self.close()
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

"""metrics.csv in the run folder, one row per round.

Written by hand rather than with Fabric's CSVLogger because that logger rewrites the file when it starts,
which would lose the rows of a resumed run; this one keeps the rows up to the checkpoint and appends.

A run on data without labels has the label-free scores (LABEL_FREE_COLUMNS) where a labelled run has NMI, ACC,
ARI, Kappa and purity: no column of scores that could not be computed."""

from __future__ import annotations

import csv
import io
from pathlib import Path

from fedclust.clustering.metrics import LABEL_FREE_METRICS, LABEL_METRICS
from fedclust.run_folder import write_output

from .base import Callback

COLUMNS = ["round", "stage", "stage_round", "loss", *LABEL_METRICS, "clients", "failed",
           "rejected", "summaries", "seconds", "train_seconds", "server_seconds", "eval_seconds", "peak_memory_mb"]
# summaries: the summary rows the clients sent this round (every declared summary key's rows, federation/client.py)
# seconds = train_seconds (the clients' local work) + server_seconds (gathering, the server step) + eval_seconds
LABEL_FREE_COLUMNS = [c for c in COLUMNS if c not in LABEL_METRICS]
LABEL_FREE_COLUMNS[4:4] = LABEL_FREE_METRICS  # in the scores' place, after loss


class CSVMetrics(Callback):
    def __init__(self, path: Path):
        self.path = Path(path)
        self.columns = COLUMNS

    def on_fit_start(self, orch) -> None:
        self.columns = COLUMNS if orch.data.dataset.has_labels else LABEL_FREE_COLUMNS
        kept = []
        if self.path.exists():  # resumed: keep the rounds the checkpoint holds, drop any later ones
            with self.path.open(newline="") as f:
                # (a row cut short, by a full disk, has missing fields: dropped)
                kept = [row for row in csv.DictReader(f)
                        if None not in row.values() and int(row["round"]) <= orch.progress.done]
        text = io.StringIO()  # rewritten whole and atomically: a failure (disk full) loses none of the kept rows
        writer = csv.DictWriter(text, self.columns, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(kept)
        write_output(self.path, text.getvalue(), "run_dir")

    def on_round_end(self, orch, record) -> None:
        with self.path.open("a", newline="") as f:
            csv.DictWriter(f, self.columns, extrasaction="ignore").writerow(record)


def read_metrics(path: Path) -> list[dict[str, float]]:
    with Path(path).open(newline="") as f:
        return [{k: float(v) if v not in ("", None) else float("nan") for k, v in row.items()}
                for row in csv.DictReader(f)]

"""Which true clusters each found cluster holds, from a run's assignments.csv: the account of a run below 100 %
purity (issue 23: UIFCA's Table 1 cells, "which local optimum"). Labels are read only to describe a finished run.

For every run folder: its purity, and for each found cluster (a UIFCA model) its size and the true clusters holding
more than ``--min-share`` of its points, e.g. `model 2: 1,998 = 0 (1,000) + 2 (998)` (two true clusters in one
model). A model that holds nothing is listed as empty. `python -m benchmarks holdings RUN_FOLDER...` prints it.
"""

from __future__ import annotations

import csv
from collections import Counter
from pathlib import Path

import torch

from fedclust.clustering.metrics import purity


def holdings(rows: list[dict[str, str]], num_clusters: int | None = None) -> dict[int, Counter]:
    """found cluster -> Counter of true labels over its points (every cluster id below ``num_clusters`` present)."""
    held: dict[int, Counter] = {k: Counter() for k in range(num_clusters or 0)}
    for row in rows:
        held.setdefault(int(row["cluster"]), Counter())[int(row["label"])] += 1
    return dict(sorted(held.items()))


def describe(held: dict[int, Counter], min_share: float) -> list[str]:
    """One line a found cluster: its size and the true clusters holding more than ``min_share`` of it."""
    lines = []
    for k, counts in held.items():
        size = sum(counts.values())
        if not size:
            lines.append(f"model {k}: empty")
            continue
        major = [f"{label} ({n:,})" for label, n in sorted(counts.items()) if n > min_share * size]
        lines.append(f"model {k}: {size:,} = " + " + ".join(major))
    return lines


def print_holdings(runs: list[Path], min_share: float = 0.2) -> None:
    """One line a run folder: its purity and what each found cluster holds."""
    for run in runs:
        with open(run / "assignments.csv", newline="") as f:
            rows = list(csv.DictReader(f))
        num_labels = len({row["label"] for row in rows})
        held = holdings(rows, num_labels)
        found, labels = (torch.tensor([int(row[key]) for row in rows]) for key in ("cluster", "label"))
        print(f"{run.name}: purity {purity(found, labels):.4f}; " + "; ".join(describe(held, min_share)))

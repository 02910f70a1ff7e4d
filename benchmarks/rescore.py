"""Re-score cached benchmark runs from their assignments.csv with the current metrics code.

    python benchmarks/rescore.py          # then re-run the result scripts: they read the cached final.json

Needed once after a metric is fixed (ARI moved from torchmetrics to scikit-learn: torchmetrics' ARI drifts
on large unbalanced clusterings). A run's final.json keeps its old figures under "metrics_before_rescore".
"""

from __future__ import annotations

import csv
import json

import torch
from common import RUNS

from fedclust.clustering.metrics import cluster_metrics


def main() -> None:
    for final in sorted(RUNS.glob("*/final.json")):
        assignments = final.parent / "assignments.csv"
        if not assignments.exists():
            continue
        with assignments.open(newline="") as f:
            rows = list(csv.DictReader(f))
        metrics = cluster_metrics(torch.tensor([int(r["cluster"]) for r in rows]),
                                  torch.tensor([int(r["label"]) for r in rows]))
        result = json.loads(final.read_text())
        changed = {k: (result["metrics"].get(k), v) for k, v in metrics.items()
                   if result["metrics"].get(k) is None or abs(result["metrics"][k] - v) > 1e-6}
        if changed:
            result.setdefault("metrics_before_rescore", dict(result["metrics"]))
            result["metrics"].update(metrics)
            final.write_text(json.dumps(result, indent=2))
            print(final.parent.name, {k: f"{old} -> {new:.4f}" for k, (old, new) in changed.items()})


if __name__ == "__main__":
    main()

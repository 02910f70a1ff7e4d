"""diagnostics.csv in the run folder: the representation and cluster diagnostics of fedclust/probes/diagnose.py
at every evaluated round (`fedclust fit --diagnose true`), so a collapse or a run of unbalanced clusters shows
while the run goes on, and the dashboard can draw them beside NMI.

Costs one extra pass of `method.embed` over the data and one k-means per evaluated round."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import torch

from fedclust.contract import FederatedMethod
from fedclust.data.dataset import to_float
from fedclust.probes.diagnose import DIAGNOSTIC_KEYS, diagnose
from fedclust.run_folder import write_output

from .base import Callback

COLUMNS = ["round", *DIAGNOSTIC_KEYS]


def sample_brightness(x: torch.Tensor, chunk: int = 4096) -> torch.Tensor | None:
    """Mean intensity of every image (None for vector data), in chunks so uint8 sets are not copied whole."""
    if x.dim() < 4:
        return None
    return torch.cat([to_float(x[i:i + chunk]).flatten(1).mean(1).cpu() for i in range(0, len(x), chunk)])


def has_embedding(cls: type) -> bool:
    """Whether a method class maps samples to a representation of its own (it overrides `embed`); one that keeps
    the contract's (the flattened input) has nothing to diagnose (fedclust.run_checks.check_diagnose)."""
    return getattr(cls, "embed", None) is not FederatedMethod.embed


@torch.no_grad()
def diagnose_model(method, data, clusters: torch.Tensor | None, seed: int = 0) -> dict[str, float]:
    """Diagnostics of ``method``'s representation of every sample of ``data`` (a FederatedData)."""
    method.eval()
    z = torch.cat([method.embed(x).float().cpu() for x in data.iter_all()])
    labels = data.labels.cpu() if data.dataset.has_labels else None  # no k-means NMI against stand-in labels
    return diagnose(z, clusters, method.num_clusters, labels, sample_brightness(data.x), seed)


class Diagnostics(Callback):
    def __init__(self, path: Path):
        self.path = Path(path)

    def on_fit_start(self, orch) -> None:
        kept = []
        if self.path.exists():  # resumed: keep the rounds the checkpoint holds
            with self.path.open(newline="") as f:
                # (a row cut short, by a full disk, has missing fields: dropped)
                kept = [row for row in csv.DictReader(f)
                        if None not in row.values() and int(row["round"]) <= orch.progress.done]
        text = io.StringIO()  # rewritten whole and atomically: a failure (disk full) loses none of the kept rows
        writer = csv.DictWriter(text, COLUMNS, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(kept)
        write_output(self.path, text.getvalue(), "run_dir")

    def on_round_end(self, orch, record) -> None:
        if "nmi" not in record and "calinski_harabasz" not in record:  # not an evaluated round
            return
        row = {"round": record["round"], **diagnose_model(orch.method, orch.data, orch.last_clusters, orch.seed)}
        with self.path.open("a", newline="") as f:
            csv.DictWriter(f, COLUMNS, extrasaction="ignore").writerow(row)

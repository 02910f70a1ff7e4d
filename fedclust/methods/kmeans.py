"""Centralized k-means: the KM column of CCFC's Tables 1-2 (the pooled-data reference, not federated).

Runs as a one-client federation (`data.num_clients: 1`), so the same data, geometry and scoring code
serve it; it sends its k centroids and their clusters' sizes (a cluster below the privacy floor,
federation.min_summary_size, joins its nearest). FAISS k-means on every point; with `data.normalize: l2`
it reproduces the reported KM cell on Fashion-MNIST (REFERENCE.md: NMI 0.6070).
"""

from __future__ import annotations

import torch
from torch import Tensor

from fedclust.clustering.floor import floored_groups
from fedclust.clustering.kmeans import kmeans
from fedclust.contract import ClientContext
from fedclust.methods.families.centralized import CentralizedCentroids
from fedclust.seeding import int_seed


class KMeans(CentralizedCentroids):
    """Centralized k-means on FAISS.

    Args:
        num_clusters: k; None takes the number of classes of the data.
        niter: Lloyd iterations.
        nredo: Restarts; the lowest inertia wins.
        cosine: Spherical k-means (unit-norm centroids, cosine assignment).
    """

    summary_keys = {"centroids": "counts"}  # the k-means centroids and their clusters' sizes

    baseline = "kmeans"

    def __init__(self, num_clusters: int | None = None, niter: int = 300, nredo: int = 10, cosine: bool = False):
        super().__init__(num_clusters)
        self.save_hyperparameters()  # so the run-level checks see them (sizes >= 1, finite numbers)
        self.niter, self.nredo, self.cosine = niter, nredo, cosine

    def on_client_end(self, ctx: ClientContext) -> dict[str, Tensor]:
        seed = int_seed(ctx.seed, "kmeans", ctx.client_id)
        x = ctx.data.all_x().flatten(1)
        result = kmeans(x, self.num_clusters, niter=self.niter, nredo=self.nredo, seed=seed, cosine=self.cosine)
        counts = torch.bincount(result.labels, minlength=self.num_clusters)
        if int(counts.min()) >= ctx.min_summary_size:  # the usual case: k-means' own centroids, as reported
            return {"centroids": result.centroids, "counts": counts.float()}
        centroids, counts, _ = floored_groups(x, result.labels, ctx.min_summary_size, self.cosine)
        return {"centroids": centroids, "counts": counts}

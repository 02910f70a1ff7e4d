"""Centralized spectral clustering: the reference that shows what training and federation add to FedSpectral.

Runs as a one-client federation (`data.num_clients: 1`), like the KMeans baseline, on whatever input the config gives
it: with `data.name: hog` the images' histograms of oriented gradients, the fixed descriptor FedSpectral clusters
beside its trunk (configs/spectral_fmnist.yaml). Ng-Jordan-Weiss spectral clustering (NIPS 2002) of every sample on
a sparse cosine k-nearest-neighbour graph with self-tuning weights (Zelnik-Manor & Perona, NIPS 2004) and LOBPCG
(fedclust/clustering/spectral.py). No training, no federation: a central method sees every sample's neighbours.

What it sends: the mean of each cluster and its size (a cluster below the privacy floor joins its nearest). A sample
keeps the label the client gave it (a spectral cluster is not the set of points nearest its mean); a sample of data
the client never held takes its nearest mean's.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from fedclust.clustering.floor import floored_groups
from fedclust.clustering.spectral import spectral_clustering
from fedclust.contract import ClientContext
from fedclust.errors import MethodArgError
from fedclust.methods.families.centralized import CentralizedCentroids
from fedclust.seeding import int_seed

LABELS = "labels"  # ctx.state: the client's spectral clusters of its samples


class Spectral(CentralizedCentroids):
    """Centralized spectral clustering.

    Args:
        num_clusters: k; None takes the number of classes of the data.
        neighbors: Nearest neighbours of each sample in the graph.
    """

    summary_keys = {"centroids": "counts"}  # each cluster's mean and size
    baseline = "spectral clustering"
    cosine = True

    def __init__(self, num_clusters: int | None = None, neighbors: int = 10):
        super().__init__(num_clusters)
        self.save_hyperparameters()
        if not isinstance(neighbors, int) or neighbors < 1:
            raise MethodArgError("neighbors", neighbors, "an integer >= 1")
        self.neighbors = neighbors

    def on_client_end(self, ctx: ClientContext) -> dict[str, Tensor]:
        x = ctx.data.all_x().flatten(1).float()
        labels = spectral_clustering(x, self.num_clusters, neighbors=self.neighbors, kernel="self_tuning",
                                     seed=int_seed(ctx.seed, "spectral", ctx.client_id))
        centroids, counts, labels = floored_groups(x, labels, ctx.min_summary_size, cosine=True)
        ctx.state[LABELS] = labels.cpu()
        return {"centroids": centroids, "counts": counts}

    @torch.no_grad()
    def predict(self, data, client_states: dict[int, dict[str, Any]]) -> Tensor:
        labels = torch.full((len(data),), -1, dtype=torch.long)
        for cid, part in enumerate(data.parts):
            own = client_states.get(cid, {}).get(LABELS)
            if isinstance(own, Tensor) and own.shape == (len(part),) and own.dtype == torch.long:
                labels[part.cpu()] = own
        missing = (labels < 0).nonzero().squeeze(1)
        if len(missing):
            labels[missing] = torch.cat([self.assign(x).cpu() for x in data.iter_indices(missing)])
        return labels

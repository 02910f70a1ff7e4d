"""k-FED: one-shot federated clustering (Dennis, Li & Smith, "Heterogeneity for the Win: One-Shot
Federated Clustering", ICML 2021), as in its official code (REFERENCE.md).

Each client runs the Awasthi-Sheffet local k-means with k_local clusters on its own data and sends the
k_local centres; the server seeds k centres from one client's centres plus farthest points and runs
k-means on all local centres (unweighted). One round, no gradient step. Lloyd re-seeds an empty cluster at
the farthest point, as the official code's scikit-learn KMeans does (fedclust/clustering/kfed.py).

Central start (`central_start`): "first" — the first client's centres (client 0 unless it failed), as the
official code; "random" — a client drawn from (seed, "central-kfed"); or a client id. Over the ten start
clients NMI spans 0.027 (p = 0), 0.031 (p = 0.5) and 0.127 (p = 1) on Fashion-MNIST
(docs/findings/kfed.md).

Labelling (`labelling`): "local" — a point takes the global cluster of its local centre (the paper);
"nearest" — a point takes the nearest global centre. The baselines' reported numbers are in cosine
geometry: pair this method with `data.normalize: l2` (configs/kfed_fmnist.yaml does).
Communicated: at most k_local centres per client and how many of its samples each averages, nothing else. Under
the run's privacy floor (federation.min_summary_size) a local cluster smaller than the floor joins its nearest
centre's cluster before the centres are sent (fedclust/clustering/floor.py), so a client may send fewer than k_local;
a client holding fewer samples than the floor sends none, and its samples take the nearest global centre.
"""

from __future__ import annotations

from typing import Any, Literal

import torch
from torch import Tensor

from fedclust.clustering.floor import floored_groups
from fedclust.clustering.kfed import central_kfed, local_kfed
from fedclust.clustering.kmeans import assign_nearest
from fedclust.contract import ClientContext, ClientUpdate, DataInfo, FederatedMethod, RoundContext, Stage
from fedclust.errors import MethodArgError
from fedclust.seeding import SERVER, generator


class KFED(FederatedMethod):
    """k-FED.

    Args:
        num_clusters: k; None takes the number of classes of the data.
        k_local: Clusters per client k' (the same for every client; k' * clients must reach k).
            None uses k.
        labelling: "local" (the paper: through the point's local centre) or "nearest" global centre.
        niter: Most Lloyd iterations, locally and on the server (scikit-learn's max_iter, 300, as the
            official code); they stop earlier once the assignment is stable.
        central_start: Whose centres seed the central step: "first" (official), "random", or a client id.
    """

    summary_keys = {"centres": "centre_counts"}  # local k-means centres, each with its cluster's size

    def __init__(self, num_clusters: int | None = None, k_local: int | None = None,
                 labelling: Literal["local", "nearest"] = "local", niter: int = 300,
                 central_start: Literal["first", "random"] | int = "first"):
        super().__init__(num_clusters)
        self.save_hyperparameters()  # so the run-level checks see them (sizes >= 1, finite numbers)
        self.k_local, self.labelling, self.niter = k_local, labelling, niter
        self.central_start = central_start
        self.centroids: Tensor | None = None
        self.client_maps: dict[int, Tensor] = {}

    def build(self, info: DataInfo) -> None:
        super().build(info)
        self.k_local = self.k_local or self.num_clusters

    def validate(self, info: DataInfo, num_clients: int) -> None:
        k_local = self.k_local or self.num_clusters or info.num_classes
        if k_local * num_clients < (self.num_clusters or info.num_classes):
            raise MethodArgError("k_local", k_local,
                              "a number with k_local * num_clients >= num_clusters")
        start = self.central_start
        if start not in ("first", "random") and not (isinstance(start, int) and 0 <= start < num_clients):
            raise MethodArgError("central_start", start,
                              f'"first", "random" or a client id below {num_clients}')

    def local_clusters(self) -> int | None:
        return self.k_local or self.num_clusters  # the Awasthi-Sheffet step finds k' centres per client

    def stages(self) -> list[Stage]:
        return [Stage("one-shot", 1, local_epochs=0)]

    def communicated(self) -> list[str]:
        return []

    def on_client_end(self, ctx: ClientContext) -> dict[str, Tensor]:
        x = ctx.data.all_x().flatten(1)
        k_local = min(self.k_local, len(x))
        _, labels = local_kfed(x, k_local, ctx.generator("local-kfed", device="cpu"), niter=self.niter)
        centres, counts, labels = floored_groups(x, labels, ctx.min_summary_size)
        ctx.state["local_labels"] = labels.cpu()  # stays on the client: only the centres are sent
        return {"centres": centres, "centre_counts": counts}

    def aggregate(self, averaged: dict[str, Tensor] | None, updates: list[ClientUpdate],
                  ctx: RoundContext) -> None:
        updates = [u for u in updates if len(u.payload["centres"])]  # a client below the floor sent none
        g = generator(ctx.seed, "central-kfed", ctx.stage_index, ctx.round, SERVER)
        start = self.central_start
        if isinstance(start, int):  # a client id; central_kfed counts positions among the clients that sent
            ids = [u.client_id for u in updates]
            if start not in ids:
                raise MethodArgError("central_start", start,
                                  f"a client that sent centres this round {ids}")
            start = ids.index(start)
        self.centroids, maps = central_kfed([u.payload["centres"] for u in updates], self.num_clusters, g,
                                            niter=self.niter, start=start)
        self.client_maps = {u.client_id: m.cpu() for u, m in zip(updates, maps)}

    def server_state(self) -> dict[str, Any]:
        return {"centroids": self.centroids, "client_maps": self.client_maps}

    def load_server_state(self, state: dict[str, Any]) -> None:
        self.centroids, self.client_maps = state["centroids"], dict(state["client_maps"])

    def assign(self, x: Tensor) -> Tensor:
        return assign_nearest(x.flatten(1), self.centroids.to(x.device))

    @torch.no_grad()
    def predict(self, data, client_states: dict[int, dict[str, Any]]) -> Tensor:
        if self.labelling == "nearest":
            return super().predict(data, client_states)
        labels = torch.full((len(data),), -1, dtype=torch.long)
        for cid, mapping in self.client_maps.items():
            local = client_states[cid]["local_labels"]
            labels[data.parts[cid].cpu()[local >= 0]] = mapping[local[local >= 0]]
        missing = labels < 0  # clients that failed in the one round: nearest global centre
        if missing.any():
            idx = missing.nonzero().squeeze(1)
            labels[idx] = torch.cat([self.assign(x).cpu() for x in data.iter_indices(idx)])
        return labels

"""What the centralized baselines (KMeans, FCM) share: the pooled data as a one-client federation, one
round without gradient steps, the client's centroids taken as the global ones, nearest-centroid labels.

Running them through the engine (rather than a separate script) lets the same data, geometry and scoring
code serve the reference columns of the papers' tables. Subclasses compute `{"centroids": ..., "counts": ...}` in
on_client_end (a centre counted 0 carries nothing and is left out).
"""

from __future__ import annotations

from typing import Any

from torch import Tensor

from fedclust.clustering.kmeans import assign_nearest
from fedclust.contract import ClientUpdate, DataInfo, FederatedMethod, RoundContext, Stage
from fedclust.errors import ConfigError


class CentralizedCentroids(FederatedMethod):
    """Base of the one-client centroid baselines; `cosine` selects cosine assignment."""

    baseline = "centralized"  # how validation errors name the method
    cosine = False

    def __init__(self, num_clusters: int | None = None):
        super().__init__(num_clusters)
        self.centroids: Tensor | None = None

    def validate(self, info: DataInfo, num_clients: int) -> None:
        if num_clients != 1:
            raise ConfigError("data.num_clients", num_clients, f"1 for the centralized {self.baseline} baseline")

    def stages(self) -> list[Stage]:
        return [Stage("one-shot", 1, local_epochs=0)]

    def communicated(self) -> list[str]:
        return []

    def aggregate(self, averaged: dict[str, Tensor] | None, updates: list[ClientUpdate],
                  ctx: RoundContext) -> None:
        payload = updates[0].payload
        self.centroids = payload["centroids"][payload["counts"] > 0]  # a centre zeroed under the floor is no centre

    def server_state(self) -> dict[str, Any]:
        return {"centroids": self.centroids}

    def load_server_state(self, state: dict[str, Any]) -> None:
        self.centroids = state["centroids"]

    def assign(self, x: Tensor) -> Tensor:
        return assign_nearest(x.flatten(1), self.centroids.to(x.device), cosine=self.cosine)

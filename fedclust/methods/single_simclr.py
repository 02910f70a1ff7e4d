"""Single-Training: every client trains SimCLR alone, then clusters its own data by k-means — the
"Single-Training" baseline of FedPNP (papers/fedpnp-past-negatives-pool.txt, Sec. 3.1: "each client is
trained locally by performing the popular scheme SimCLR without federated averaging ... we train each
client 300 epochs and report the mean clustering accuracy among all 5 clients by K-means").

Network and loss: FedCC's backbone and instance head (Linear(rep, rep) + ReLU + Linear(rep, 128), which is
SimCLR's one-hidden-layer projection head), NT-Xent at tau = 0.5 on two CC/SimCLR views, Adam 3e-4.
Nothing is communicated: the engine keeps every client's weights (and Adam state) as its local weights;
all clients start from the same initialisation (the run's one network initialisation). After each local
training the client runs k-means (K clusters) on the L2-normalised backbone representations of its own
data and keeps the centroids.

Scoring. The paper's number is the MEAN over clients of each client's metrics on its own data:
`metric_groups` returns each sample's client, so the engine's metrics (metrics.csv, final.json) are that
mean. `predict` labels each point through its client's model and centroids, with the cluster ids of
client c offset by c*K so that clusters of different clients never merge in assignments.csv. A client
that has not trained yet labels all its points with one cluster.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from fedclust.clustering.kmeans import assign_nearest, kmeans
from fedclust.contract import ClientContext, DataInfo, local_weights
from fedclust.data.views import ColorViews
from fedclust.errors import MethodArgError
from fedclust.losses.contrastive import instance_contrastive_loss
from fedclust.methods.families.contrastive import ContrastiveClustering, build_cc_network
from fedclust.seeding import int_seed


class SingleSimCLR(ContrastiveClustering):
    """SimCLR per client, no averaging, k-means per client.

    Args (FedCC's, less the cluster head's, plus):
        num_clusters: K of each client's k-means; None takes the number of classes.
        rounds: Rounds; a client trains rounds x local_epochs epochs in all (300 epochs in the paper).
        temperature: NT-Xent temperature (0.5, as CC's instance loss).
        kmeans_niter: Lloyd iterations of each client's k-means.
        kmeans_redo: k-means restarts (the best inertia is kept).
    """

    def __init__(self, num_clusters: int | None = None, backbone: str = "convnet28", resize: int | None = None,
                 rounds: int = 60, local_epochs: int = 5, batch_size: int = 128, lr: float = 3e-4,
                 instance_dim: int = 128, temperature: float = 0.5, crop_scale: tuple[float, float] = (0.08, 1.0),
                 memory_efficient_chunk: int | None = None, kmeans_niter: int = 100, kmeans_redo: int = 3):
        super().__init__(num_clusters, backbone, resize, rounds, local_epochs, batch_size, lr, instance_dim,
                         temperature, 1.0, crop_scale, memory_efficient_chunk)
        for name, value in (("kmeans_niter", kmeans_niter), ("kmeans_redo", kmeans_redo)):
            if value < 1:
                raise MethodArgError(name, value, "a positive integer")

    def build(self, info: DataInfo) -> None:
        if self.num_clusters is None:
            self.num_clusters = info.num_classes
        hp = self.hparams
        self.backbone, self.instance_head, _ = build_cc_network(hp.backbone, info, None, hp.instance_dim, hp.resize)
        self.cluster_head = None
        self.views = ColorViews(scale=tuple(hp.crop_scale))

    def communicated(self) -> list[str]:
        return []  # Single-Training: no federated averaging

    def encode(self, x: Tensor) -> tuple[Tensor, ...]:
        return (self.instance_head(self.backbone(x)),)

    def batch_loss(self, z_a: Tensor, z_b: Tensor) -> Tensor:  # type: ignore[override]
        return instance_contrastive_loss(z_a, z_b, self.hparams.temperature)

    def embed(self, x: Tensor) -> Tensor:
        return F.normalize(self.backbone(x), dim=1)

    def on_client_end(self, ctx: ClientContext) -> dict[str, Tensor]:
        with torch.no_grad():
            z = torch.cat([self.embed(x) for x in ctx.data.iter_all()])
        seed = int_seed(ctx.seed, "local-kmeans", ctx.stage_index, ctx.round, ctx.client_id)
        ctx.state["centroids"] = kmeans(z, self.num_clusters, niter=self.hparams.kmeans_niter,
                                        nredo=self.hparams.kmeans_redo, seed=seed).centroids.cpu()
        return {}

    def assign(self, x: Tensor) -> Tensor:
        raise NotImplementedError("SingleSimCLR has no global model: points are labelled through their "
                                  "client (predict)")

    def metric_groups(self, data) -> Tensor:
        """Each sample's client: the reported metrics are the mean over clients (FedPNP Table 1)."""
        groups = torch.full((len(data),), -1, dtype=torch.long)
        for cid, part in enumerate(data.parts):
            groups[part.cpu()] = cid
        return groups

    @torch.no_grad()
    def predict(self, data, client_states: dict[int, dict[str, Any]]) -> Tensor:
        self.eval()
        initial = {k: v.clone() for k, v in self.state_dict().items()}
        labels = torch.zeros(len(data), dtype=torch.long)
        for cid in range(data.num_clients):
            client = data.client(cid, self.batch_size)
            state = client_states.get(cid, {})
            offset = cid * self.num_clusters
            own = local_weights(state)
            if own is None or "centroids" not in state:
                labels[client.indices.cpu()] = offset  # not trained yet: one cluster
                continue
            self.load_state_dict(own, strict=False)
            z = torch.cat([self.embed(x) for x in client.iter_all()])
            local = assign_nearest(z, state["centroids"].to(z), cosine=True)
            labels[client.indices.cpu()] = offset + local.cpu()
        self.load_state_dict(initial)
        return labels

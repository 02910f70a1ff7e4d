"""Centralized DCN (Yang, Fu, Sidiropoulos & Hong, "Towards K-means-friendly Spaces", ICML 2017) on the pooled data:
PPFC-GAN's server clusterer run on real samples, the reference that tells its GANs' share of a result from its
clusterer's (docs/findings/orderings.md, "PPFC-GAN's gap").

Runs as a one-client federation (`data.num_clients: 1`): the client trains the autoencoder (d-500-500-2000-latent,
reconstruction epochs, then reconstruction + lam * k-means loss epochs; fedclust/clustering/dcn.py, as PPFC-GAN's
server does) on all its samples and sends the autoencoder's weights and the k centroids in its embedding with their
clusters' sizes (a cluster below the privacy floor joins its nearest). A sample takes the nearest centroid of its
embedding. The geometry is the data's: `data.normalize: none` (DCN's and PPFC-GAN's raw pixels) or `l2`.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from fedclust.clustering.dcn import embed, train_dcn
from fedclust.clustering.floor import floored_groups
from fedclust.clustering.kmeans import assign_nearest
from fedclust.contract import ClientContext, ClientUpdate, DataInfo, RoundContext
from fedclust.methods.families.centralized import CentralizedCentroids
from fedclust.nn.autoencoder import MLPAutoencoder
from fedclust.seeding import int_seed


class DCN(CentralizedCentroids):
    """Centralized DCN.

    Args:
        num_clusters: k; None takes the number of classes of the data.
        latent_dim: The embedding's width.
        ae_hidden: Hidden widths of the encoder (the decoder mirrors them).
        lam: Weight of the k-means loss beside the reconstruction.
        pretrain_epochs: Reconstruction-only epochs.
        cluster_epochs: Reconstruction + k-means epochs.
        batch_size: Mini-batch size.
        lr: Adam learning rate.
        kmeans_redo: Restarts of the k-means that initialises the centroids.
    """

    summary_keys = {"centroids": "counts"}  # the k centroids in the embedding and their clusters' sizes
    baseline = "DCN"

    def __init__(self, num_clusters: int | None = None, latent_dim: int = 10,
                 ae_hidden: tuple[int, ...] = (500, 500, 2000), lam: float = 0.05, pretrain_epochs: int = 50,
                 cluster_epochs: int = 50, batch_size: int = 256, lr: float = 1e-3, kmeans_redo: int = 10):
        super().__init__(num_clusters)
        self.save_hyperparameters()

    def build(self, info: DataInfo) -> None:
        super().build(info)
        hp = self.hparams
        self.autoencoder = MLPAutoencoder(info.num_features, tuple(hp.ae_hidden), hp.latent_dim)

    def communicated(self) -> list[str]:
        return list(self.state_dict())  # the one client's trained autoencoder becomes the global one

    def on_client_end(self, ctx: ClientContext) -> dict[str, Tensor]:
        hp = self.hparams
        x = ctx.data.all_x().flatten(1)
        result = train_dcn(x, self.num_clusters, self.autoencoder, ctx.generator("dcn", "cpu"), lam=hp.lam,
                           pretrain_epochs=hp.pretrain_epochs, cluster_epochs=hp.cluster_epochs,
                           batch_size=hp.batch_size, lr=hp.lr, kmeans_redo=hp.kmeans_redo,
                           kmeans_seed=int_seed(ctx.seed, "dcn-kmeans", ctx.client_id))
        self.autoencoder.eval()
        with torch.no_grad():
            z = embed(self.autoencoder, x)
        labels = assign_nearest(z, result.centroids.to(z.device))
        counts = torch.bincount(labels, minlength=self.num_clusters)
        if int(counts.min()) >= ctx.min_summary_size:  # the usual case: DCN's own centroids
            return {"centroids": result.centroids.to(z.device), "counts": counts.float()}
        centroids, counts, _ = floored_groups(z, labels, ctx.min_summary_size)  # privacy floor
        return {"centroids": centroids, "counts": counts}

    def aggregate(self, averaged: dict[str, Tensor] | None, updates: list[ClientUpdate],
                  ctx: RoundContext) -> None:
        if averaged:
            self.load_state_dict(averaged, strict=False)
        super().aggregate(averaged, updates, ctx)

    def server_state(self) -> dict[str, Any]:
        return {"centroids": self.centroids}

    def embed(self, x: Tensor) -> Tensor:
        return self.autoencoder.encoder(x.flatten(1))

    def assign(self, x: Tensor) -> Tensor:
        return assign_nearest(self.embed(x), self.centroids.to(x.device))

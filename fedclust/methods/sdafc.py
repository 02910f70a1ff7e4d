"""SDA-FC: synthetic-data-aided federated clustering (Yan et al., "SDA-FC: Bridging federated clustering and
deep generative model", Information Sciences 681, 2024; arXiv 2210.16524), as its official code runs it
(REFERENCE.md "SDA-FC (official code)"); the SDA-FC-KM and SDA-FC-FCM columns of CCFC's Tables 1-2.

One round. Each client trains its own GAN (fedclust/nn/gan.py) on its own images, never averaged: batch 64,
`epochs` local epochs (50), Adam betas (0.5, 0.999), lr_D 2e-4 and lr_G 1.8e-3, both times 0.99 per epoch.
Then it generates as many synthetic images as it holds and sends them. The server L2-normalises the
flattened synthetic images of all clients and runs k-means (SDA-FC-KM: Euclidean k-means on the normalised
images, 10 restarts, 300 iterations, like the reference's scikit-learn KMeans) or fuzzy c-means with
m = 1.1 (SDA-FC-FCM; at most 150 iterations, stopping once the memberships change by less than 1e-5: the
fuzzy-c-means package's defaults, which the reference keeps); the centres are L2-normalised and every real
image goes to the centre of highest cosine similarity with its flattened pixels.

Choices, stated:
- Each client's GAN starts from its own N(0, 0.02) draw (ctx.generator("init")), as the reference's clients
  start from different draws of one RNG stream; `independent_init=False` starts all from the global init.
- As in the reference code the two Adam optimizers are rebuilt every epoch (their moments reset);
  `reset_adam_each_epoch=False` keeps them.
- The reference trains on raw [0, 1] pixels (the generator ends in a Sigmoid): use `data.normalize: none`.
- FCM starts from random memberships (the reference's fuzzy-c-means package does); FAISS k-means replaces
  scikit-learn's.
- `synthetic_per_client` and `max_steps_per_epoch` exist only for budget runs (defaults: the paper). Measured
  (NMI at the paper's 50 epochs, budgets, GAN step speed): docs/findings/sdafc.md.

Sent: the synthetic images (payload "synthetic", n x C x H x W) and nothing else; no weights travel. Each client's
GAN stays in its state (its local weights).
"""

from __future__ import annotations

from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import Tensor

from fedclust.clustering.fcm import fcm
from fedclust.clustering.kmeans import assign_nearest, kmeans
from fedclust.contract import (
    ClientContext,
    ClientUpdate,
    DataInfo,
    FederatedMethod,
    RoundContext,
    Stage,
    local_weights,
)
from fedclust.methods.families.gan_clients import GANClients
from fedclust.nn.gan import init_gan_weights
from fedclust.seeding import SERVER, generator, int_seed


class SDAFC(GANClients, FederatedMethod):
    """SDA-FC-KM / SDA-FC-FCM.

    Shares synthetic data: each client sends generated images (payload "synthetic") and nothing else.

    Args:
        num_clusters: k; None takes the number of classes of the data.
        clusterer: Server clustering of the synthetic images: "kmeans" (SDA-FC-KM) or "fcm" (SDA-FC-FCM).
        epochs: Local GAN epochs (the paper: 50), all in the one round.
        batch_size: GAN mini-batch size.
        lr_d: Discriminator Adam learning rate at epoch 0.
        lr_g: Generator Adam learning rate at epoch 0.
        betas: Adam betas of both optimizers.
        lr_decay: Both learning rates are multiplied by this once per epoch.
        reset_adam_each_epoch: Fresh Adam moments every epoch, as the reference rebuilds its optimizers.
        code_dim: One-hot code width of the generator input; None uses num_clusters (10 in the paper).
        noise_dim: Gaussian noise width of the generator input.
        g_hidden: Width of the generator's first layer (1024; smaller only for tests).
        d_hidden: Width of the discriminator's hidden layer (1024; smaller only for tests).
        synthetic_per_client: Images each client generates; None: as many as it holds (the paper).
        max_steps_per_epoch: Cap on GAN steps per local epoch, for budget runs; None: a full pass.
        independent_init: Each client draws its own initial GAN weights (the reference); False: all start
            from the global initialisation.
        fcm_m: Fuzzifier of the server's fuzzy c-means.
        fcm_max_iter: Most iterations of the server's fuzzy c-means (150: the fuzzy-c-means package's).
        fcm_tol: The server's fuzzy c-means stops once the memberships change by less than this (Frobenius
            norm; 1e-5: the package's default).
        kmeans_niter: Lloyd iterations of the server's k-means.
        kmeans_redo: Restarts of the server's k-means (the lowest inertia wins).
    """

    shares_synthetic_data = True

    def __init__(self, num_clusters: int | None = None, clusterer: Literal["kmeans", "fcm"] = "kmeans",
                 epochs: int = 50, batch_size: int = 64, lr_d: float = 2e-4, lr_g: float = 1.8e-3,
                 betas: tuple[float, float] = (0.5, 0.999), lr_decay: float = 0.99,
                 reset_adam_each_epoch: bool = True, code_dim: int | None = None, noise_dim: int = 62,
                 g_hidden: int = 1024, d_hidden: int = 1024, synthetic_per_client: int | None = None,
                 max_steps_per_epoch: int | None = None, independent_init: bool = True, fcm_m: float = 1.1,
                 fcm_max_iter: int = 150, fcm_tol: float = 1e-5, kmeans_niter: int = 300, kmeans_redo: int = 10):
        super().__init__(num_clusters, batch_size)
        self.save_hyperparameters()
        self.automatic_optimization = False
        self.centres: Tensor | None = None  # L2-normalised global centres (server state)

    def build(self, info: DataInfo) -> None:
        super().build(info)
        self.build_gan(info)

    def stages(self) -> list[Stage]:
        return [Stage("local-gan", 1, local_epochs=self.hparams.epochs)]

    def communicated(self) -> list[str]:
        return []

    def on_client_start(self, ctx: ClientContext) -> None:
        super().on_client_start(ctx)
        if self.hparams.independent_init and local_weights(ctx.state) is None:
            # the loaded global model is the server's untouched init; BatchNorm layers are at their init too
            init_gan_weights(self.gan, ctx.generator("init", device="cpu"))

    def on_client_end(self, ctx: ClientContext) -> dict[str, Tensor]:
        return self.synthetic_payload(ctx)

    def aggregate(self, averaged: dict[str, Tensor] | None, updates: list[ClientUpdate],
                  ctx: RoundContext) -> None:
        hp = self.hparams
        x = F.normalize(torch.cat([u.payload["synthetic"].flatten(1) for u in updates]).float(), dim=1)
        if hp.clusterer == "kmeans":
            seed = int_seed(ctx.seed, "server-kmeans", ctx.stage_index, ctx.round)
            centres = kmeans(x, self.num_clusters, niter=hp.kmeans_niter, nredo=hp.kmeans_redo, seed=seed).centroids
        else:
            g = generator(ctx.seed, "server-fcm", ctx.stage_index, ctx.round, SERVER, device=x.device)
            centres = fcm(x, self.num_clusters, m=hp.fcm_m, max_iter=hp.fcm_max_iter, tol=hp.fcm_tol,
                          generator=g, init="random").centres
        self.centres = F.normalize(centres, dim=1)

    def server_state(self) -> dict[str, Any]:
        return {"centres": self.centres}  # the synthetic images are not kept: the centres are all that is needed

    def load_server_state(self, state: dict[str, Any]) -> None:
        self.centres = state["centres"]

    def assign(self, x: Tensor) -> Tensor:
        return assign_nearest(x.flatten(1), self.centres.to(x.device), cosine=True)


@torch.no_grad()
def recluster(saved, clusterer: Literal["kmeans", "fcm"]) -> dict[str, float]:
    """Re-run the server step of a finished one-round SDA-FC run with another clusterer, on the GANs the run
    trained: every client regenerates its synthetic images from its saved generator with the run's seeds,
    so the result equals a fresh run with that clusterer (GAN training does not depend on it) at the cost
    of the server step only. Returns the metrics of every sample.

    `saved` is the run brought back by `fedclust.run.load_run(folder, device)` (a method never
    reads run folders itself)."""
    from fedclust.clustering.metrics import cluster_metrics

    method, _, seed, state, data = saved
    if not isinstance(method, SDAFC) or state["done"] != 1:
        raise ValueError("recluster takes a finished one-round SDA-FC run")
    method.hparams.clusterer = clusterer
    method.eval()
    stage, updates = method.stages()[0], []
    for cid, client_state in sorted(state["clients"].items()):
        own = local_weights(client_state)
        if own is None:
            continue  # a client that failed in the one round sent nothing
        method.load_state_dict(own, strict=False)
        ctx = ClientContext(cid, stage, 0, 0, data.client(cid, method.batch_size), client_state, seed)
        updates.append(ClientUpdate(cid, len(ctx.data), method.on_client_end(ctx)))
    method.aggregate(None, updates, RoundContext(stage, 0, 0, seed))
    return cluster_metrics(method.predict(data, state["clients"]).cpu(), data.labels.cpu())


"""PPFC-GAN: privacy-preserving federated deep clustering based on GAN (Yan, Liu, Qi & Zhang, arXiv 2211.16965),
the PPFC-GAN column of CCFC's Tables 1-2. It has no public code; this reads the paper's abstract and REFERENCE.md.

Stage "gan" (`gan_rounds` x `local_epochs` epochs): every client trains SDA-FC's GAN (fedclust/nn/gan.py) on its own
images with SDA-FC's recipe (batch 64, Adam betas (0.5, 0.999), lr_D 2e-4, lr_G 1.8e-3, both x 0.99 an epoch, Adam
rebuilt every epoch; fedclust/methods/families/gan_clients.py). Stage "synthesize" (one round, no local step): every
client generates as many synthetic images as it holds, in eval mode, and sends them. The server trains a DCN (Yang et
al. 2017; fedclust/clustering/dcn.py) on all of them: MLP autoencoder d-500-500-2000-10, 50 reconstruction epochs,
k-means, 50 joint epochs with lam = 0.05 (DCN's MNIST values), batch 256, Adam 1e-3. A real image (raw [0, 1]
pixels: `data.normalize: none`) takes the nearest DCN centroid of its embedding. `dcn_normalize: l2` has the DCN see
every image (synthetic and real) L2-normalised instead: the paper does not say which geometry its DCN saw, and the
geometry is the measured cause of fedclust's gap to the paper (docs/findings/orderings.md, "PPFC-GAN's gap"); raw
pixels (DCN's own set-up) stay the default.

Sent: the synthetic images, once (payload "synthetic": the only data-shaped payload, as the paper shares it); GAN
weights only with `federated_gan: true`.

Choices, each measured in docs/findings/ppfc_gan.md:
- One GAN per client, nothing averaged (`federated_gan: false`, the abstract's one-shot reading): FedAvg over 10
  clients slowed the GAN several-fold and its generator drew gray images (NMI 0). `federated_gan: true` is the
  other reading, a GAN trained with FedAvg from one global initialisation; its averaged generator's BatchNorm
  statistics are re-estimated from noise before it synthesises (`recalibrate_bn`).
- Every client logs its synthetic images' spread beside its own images' and warns below half (a collapse).
- The DCN settings are DCN's own (the paper documents none); the autoencoder lives in the server state, outside
  the state dict, so it is neither averaged nor sent. `synthetic_per_client` and `max_steps_per_epoch` exist for
  budget runs.
"""

from __future__ import annotations

from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import Tensor

from fedclust.clustering.dcn import train_dcn
from fedclust.clustering.kmeans import assign_nearest
from fedclust.contract import ClientContext, ClientUpdate, DataInfo, FederatedMethod, RoundContext, Stage
from fedclust.methods.families.gan_clients import GANClients
from fedclust.nn.autoencoder import MLPAutoencoder
from fedclust.seeding import SERVER, generator, int_seed


class PPFCGAN(GANClients, FederatedMethod):
    """PPFC-GAN: a GAN per client, shared synthetic images, DCN on the server.

    Shares synthetic data: each client sends generated images once (payload "synthetic").

    Args:
        num_clusters: k; None takes the number of classes of the data.
        gan_rounds: FedAvg rounds of GAN training (stage 1).
        local_epochs: Local GAN epochs per round.
        federated_gan: Average the GANs by FedAvg; False (default, the paper's abstract) keeps one GAN per client
            (one-shot, no weights sent).
        recalibrate_bn: With FedAvg, re-estimate the averaged generator's BatchNorm statistics from noise
            before it synthesises.
        batch_size: GAN mini-batch size.
        lr_d: Discriminator Adam learning rate at epoch 0.
        lr_g: Generator Adam learning rate at epoch 0.
        betas: Adam betas of both optimizers.
        lr_decay: Both learning rates are multiplied by this once per local epoch (counted over the stage).
        reset_adam_each_epoch: Fresh Adam moments every epoch (SDA-FC's reference code).
        code_dim: One-hot code width of the generator input; None uses num_clusters.
        noise_dim: Gaussian noise width of the generator input.
        g_hidden: Width of the generator's first layer (1024; smaller only for tests).
        d_hidden: Width of the discriminator's hidden layer (1024; smaller only for tests).
        synthetic_per_client: Images each client generates; None: as many as it holds.
        max_steps_per_epoch: Cap on GAN steps per local epoch, for budget runs; None: a full pass.
        ae_hidden: Hidden widths of the DCN autoencoder's encoder (the decoder mirrors them).
        latent_dim: DCN embedding width.
        lam: Weight of DCN's k-means term.
        pretrain_epochs: Autoencoder pretraining epochs on the synthetic images.
        cluster_epochs: Joint DCN epochs.
        dcn_batch_size: DCN mini-batch size.
        dcn_lr: DCN Adam learning rate.
        kmeans_redo: Restarts of the k-means that initialises the DCN centroids.
        dcn_normalize: The DCN's input: "none" (raw pixels, the default) or "l2" (each image scaled to unit norm,
            synthetic images for training and real ones for labelling alike).
    """

    shares_synthetic_data = True

    def __init__(self, num_clusters: int | None = None, gan_rounds: int = 50, local_epochs: int = 1,
                 federated_gan: bool = False, recalibrate_bn: bool = True, batch_size: int = 64,
                 lr_d: float = 2e-4, lr_g: float = 1.8e-3,
                 betas: tuple[float, float] = (0.5, 0.999), lr_decay: float = 0.99,
                 reset_adam_each_epoch: bool = True, code_dim: int | None = None, noise_dim: int = 62,
                 g_hidden: int = 1024, d_hidden: int = 1024, synthetic_per_client: int | None = None,
                 max_steps_per_epoch: int | None = None, ae_hidden: tuple[int, ...] = (500, 500, 2000),
                 latent_dim: int = 10, lam: float = 0.05, pretrain_epochs: int = 50, cluster_epochs: int = 50,
                 dcn_batch_size: int = 256, dcn_lr: float = 1e-3, kmeans_redo: int = 10,
                 dcn_normalize: Literal["none", "l2"] = "none"):
        super().__init__(num_clusters, batch_size)
        self.save_hyperparameters()
        self.automatic_optimization = False
        self.centroids: Tensor | None = None  # DCN centroids in the embedding space (server state)

    def build(self, info: DataInfo) -> None:
        super().build(info)
        self.build_gan(info)
        hp = self.hparams
        # outside the state dict (a dict, not a submodule): neither averaged nor kept per client
        self._dcn = {"net": MLPAutoencoder(info.num_features, tuple(hp.ae_hidden), hp.latent_dim)}

    def stages(self) -> list[Stage]:
        return [Stage("gan", self.hparams.gan_rounds, self.hparams.local_epochs), Stage("synthesize", 1, 0)]

    def communicated(self) -> list[str]:
        if not self.hparams.federated_gan:
            return []
        return [k for k in self.state_dict() if k.startswith("gan.")]

    def on_round_start(self, ctx: RoundContext) -> None:
        hp = self.hparams
        if ctx.stage.name == "synthesize" and hp.federated_gan and hp.recalibrate_bn:
            device = next(self.gan.parameters()).device
            self.gan.recalibrate_batchnorm(generator(ctx.seed, "recalibrate-bn", ctx.stage_index, ctx.round, SERVER,
                                                     device=device), device)

    def on_client_end(self, ctx: ClientContext) -> dict[str, Tensor]:
        return self.synthetic_payload(ctx) if ctx.stage.name == "synthesize" else {}

    def aggregate(self, averaged: dict[str, Tensor] | None, updates: list[ClientUpdate],
                  ctx: RoundContext) -> None:
        if ctx.stage.name != "synthesize":
            super().aggregate(averaged, updates, ctx)  # FedAvg of the GAN
            return
        hp = self.hparams
        x = self._dcn_input(torch.cat([u.payload["synthetic"] for u in updates]).float())
        net = self._dcn["net"].to(x.device)
        result = train_dcn(x, self.num_clusters, net, generator(ctx.seed, "dcn", ctx.stage_index, ctx.round, SERVER),
                           lam=hp.lam, pretrain_epochs=hp.pretrain_epochs, cluster_epochs=hp.cluster_epochs,
                           batch_size=hp.dcn_batch_size, lr=hp.dcn_lr, kmeans_redo=hp.kmeans_redo,
                           kmeans_seed=int_seed(ctx.seed, "dcn-kmeans", ctx.stage_index, ctx.round))
        net.eval()
        self.centroids = result.centroids
        self.dcn_losses = {"pretrain": result.pretrain_losses, "cluster": result.cluster_losses}

    def server_state(self) -> dict[str, Any]:
        return {"centroids": self.centroids, "autoencoder": self._dcn["net"].state_dict()}

    def load_server_state(self, state: dict[str, Any]) -> None:
        self.centroids = state["centroids"]
        self._dcn["net"].load_state_dict(state["autoencoder"])

    def _dcn_input(self, x: Tensor) -> Tensor:
        """Images (n, ...) as the DCN sees them: flat, and unit-norm under `dcn_normalize: l2`."""
        x = x.flatten(1)
        return F.normalize(x, dim=1) if self.hparams.dcn_normalize == "l2" else x

    def embed(self, x: Tensor) -> Tensor:
        return self._dcn["net"].to(x.device).encoder(self._dcn_input(x))

    def assign(self, x: Tensor) -> Tensor:
        if self.centroids is None:  # during the GAN stage there are no clusters yet: one cluster
            return torch.zeros(len(x), dtype=torch.long, device=x.device)
        return assign_nearest(self.embed(x), self.centroids.to(x.device))

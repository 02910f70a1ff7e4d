"""ClusterGAN + FedAvg: the federated ClusterGAN baseline of the UIFCA paper (Chung et al., "Federated
Unsupervised Clustering with Generative Models", papers/uifca-federated-unsupervised-clustering-generative.md,
Table 3) built on ClusterGAN (Mukherjee, Asnani, Lin & Kannan, "ClusterGAN: Latent Space Clustering in
Generative Adversarial Networks", AAAI 2019).

Every round each client trains its copy of the generator G, the critic D and the encoder E on its own
data; the server averages all three weighted by the clients' sample counts (FedAvg). Networks and
losses are those of the ClusterGAN authors' code (fedclust/nn/clustergan.py): prior z = (z_n, z_c),
z_n ~ N(0, 0.1^2 I) of 30 dims, z_c one-hot of k; WGAN-GP (penalty weight 10) as in the paper's image
experiments, `gan_loss: vanilla` for the non-saturating GAN; G and E minimise together
adversarial + beta_n * mean (z_n - E_n(G(z)))^2 + beta_c * CE(z_c, E_c(G(z))), beta_n = beta_c = 10.
D takes a step on every local batch (fresh z each step), G + E one step after the 1st, (1 + n_critic)th,
... critic step of each client's round (n_critic = 5 as in the code; starting at the 1st makes G move on
every client however small). E only ever sees generated images, as in the paper.

Settings: the UIFCA paper's SGD, lr 5e-3, no momentum (none is stated); `optimizer: adam` is the ClusterGAN code's
Adam (lr 1e-4, betas (0.5, 0.9)); batch 64 (the code). The paper states no round count for this baseline: 100
rounds of one local epoch, on a plateau by round 60 at p = 0 on Fashion-MNIST (docs/findings/clustergan_fedavg.md);
`local_steps` replaces the epoch by a number of local batches. Assignment: argmax of E's z_c logits (the paper's
inference); `assignment: kmeans` clusters (z_n, softmax(z_c)), as the authors' evaluation script does. Sent: the
whole state dict (G's BatchNorm statistics follow federation.average_bn_buffers).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import Tensor

from fedclust.clustering.kmeans import kmeans
from fedclust.contract import ClientContext, DataInfo, FederatedMethod, Stage
from fedclust.errors import ConfigError, MethodArgError
from fedclust.nn.clustergan import (
    ClusterGANDiscriminator,
    ClusterGANEncoder,
    ClusterGANGenerator,
    gradient_penalty,
    sample_latent,
)
from fedclust.nn.optim import CpuAdam
from fedclust.seeding import int_seed

DEFAULT_LR = {"sgd": 5e-3, "adam": 1e-4}


class ClusterGANFedAvg(FederatedMethod):
    """ClusterGAN trained with FedAvg (the UIFCA paper's baseline).

    Args:
        num_clusters: k, the size of the one-hot z_c; None takes the number of classes of the data.
        noise_dim: Size of the Gaussian part z_n of the latent code (30 in the ClusterGAN code).
        noise_std: Standard deviation of z_n (0.1 in the ClusterGAN code).
        beta_n: Weight of the z_n cycle loss mean (z_n - E_n(G(z)))^2.
        beta_c: Weight of the z_c cycle loss CE(z_c, E_c(G(z))).
        gan_loss: wgan-gp (the paper's image experiments) or vanilla (non-saturating, BCE on logits).
        gp_weight: WGAN-GP penalty weight.
        n_critic: Critic steps per generator + encoder step.
        rounds: Communication rounds.
        local_epochs: Local epochs per round (ignored when local_steps is set).
        local_steps: Local batches per client and round instead of epochs (None: whole epochs).
        batch_size: Local mini-batch size.
        optimizer: sgd (the UIFCA paper, lr 5e-3) or adam (the ClusterGAN code, lr 1e-4, betas (0.5, 0.9)).
        lr: Learning rate of both optimizers; None: 5e-3 for sgd, 1e-4 for adam.
        momentum: SGD momentum.
        betas: Adam betas.
        weight_decay: L2 weight decay of G and E (the ClusterGAN code declares 2.5e-5 but never adds it).
        channels: Width of the first conv layer (64 in the paper; 2x in the second).
        hidden: Width of the fully connected layer (1024 in the paper).
        assignment: argmax (cluster = argmax of E's z_c logits) or kmeans (k-means on E's latent).
        kmeans_niter: Lloyd iterations of the assignment k-means.
        kmeans_redo: Restarts of the assignment k-means (the best inertia is kept).
    """

    def __init__(self, num_clusters: int | None = None, noise_dim: int = 30, noise_std: float = 0.1,
                 beta_n: float = 10.0, beta_c: float = 10.0, gan_loss: Literal["wgan-gp", "vanilla"] = "wgan-gp",
                 gp_weight: float = 10.0, n_critic: int = 5, rounds: int = 100, local_epochs: int = 1,
                 local_steps: int | None = None, batch_size: int = 64, optimizer: Literal["sgd", "adam"] = "sgd",
                 lr: float | None = None, momentum: float = 0.0, betas: tuple[float, float] = (0.5, 0.9),
                 weight_decay: float = 0.0, channels: int = 64, hidden: int = 1024,
                 assignment: Literal["argmax", "kmeans"] = "argmax", kmeans_niter: int = 100,
                 kmeans_redo: int = 1):
        super().__init__(num_clusters, batch_size)
        self.save_hyperparameters()
        self.automatic_optimization = False
        for name in ("n_critic", "rounds", "noise_dim", "channels", "hidden"):
            if getattr(self.hparams, name) < 1:
                raise MethodArgError(name, getattr(self.hparams, name), "a positive integer")
        if local_steps is not None and local_steps < 1:
            raise MethodArgError("local_steps", local_steps, "a positive integer or null")
        if lr is not None and lr <= 0:
            raise MethodArgError("lr", lr, "a positive number or null")

    def validate(self, info: DataInfo, num_clients: int) -> None:
        if not (info.is_image and info.in_channels == 1 and info.input_size == 28):
            shape = f"{info.in_channels}x{info.input_size}x{info.input_size} images" if info.is_image \
                else f"vectors of {info.num_features} numbers"
            raise ConfigError("data.name", shape, "a data set of 1x28x28 images (mnist, fmnist): "
                              "ClusterGAN's networks are built for them")

    def build(self, info: DataInfo) -> None:
        super().build(info)
        hp = self.hparams
        self.generator = ClusterGANGenerator(hp.noise_dim + self.num_clusters, hp.channels, hp.hidden)
        self.discriminator = ClusterGANDiscriminator(hp.channels, hp.hidden)
        self.encoder = ClusterGANEncoder(hp.noise_dim, self.num_clusters, hp.channels, hp.hidden)

    def stages(self) -> list[Stage]:
        epochs = 1 if self.hparams.local_steps else self.hparams.local_epochs
        return [Stage("train", self.hparams.rounds, epochs)]

    def configure_optimizers(self) -> list[torch.optim.Optimizer]:
        hp = self.hparams
        lr = hp.lr or DEFAULT_LR[hp.optimizer]
        groups = (list(self.discriminator.parameters()),
                  list(self.generator.parameters()) + list(self.encoder.parameters()))
        decay = (0.0, hp.weight_decay)
        if hp.optimizer == "adam":
            return [CpuAdam(p, lr=lr, betas=tuple(hp.betas), weight_decay=d, foreach=True)
                    for p, d in zip(groups, decay)]
        return [torch.optim.SGD(p, lr=lr, momentum=hp.momentum, weight_decay=d, fused=True)
                for p, d in zip(groups, decay)]

    # --- client ------------------------------------------------------------------------------------
    def on_client_start(self, ctx: ClientContext) -> None:
        self._latent_gen = ctx.generator("latent")
        self._mix_gen = ctx.generator("gradient-penalty")
        self._critic_steps = 0

    def client_batches(self, ctx: ClientContext, epoch: int) -> Iterator[dict[str, Tensor]]:
        steps = self.hparams.local_steps
        if steps is None:
            yield from super().client_batches(ctx, epoch)
            return
        done, sweep = 0, 0
        while done < steps:  # as many shuffled passes as the steps need, each from its own generator
            before = done
            for batch in ctx.data.batches(ctx.generator(f"shuffle-{epoch}-{sweep}", device="cpu")):
                yield batch
                done += 1
                if done == steps:
                    return
            if done == before:  # a client too small for a batch of two
                return
            sweep += 1

    def _sample(self, n: int) -> tuple[Tensor, Tensor]:
        hp = self.hparams
        z_n, z_c, ids = sample_latent(n, hp.noise_dim, self.num_clusters, hp.noise_std, self._latent_gen)
        return torch.cat([z_n, z_c], 1), ids

    def critic_loss(self, real: Tensor, fake: Tensor) -> Tensor:
        d_real, d_fake = self.discriminator(real), self.discriminator(fake)
        if self.hparams.gan_loss == "vanilla":
            return (F.binary_cross_entropy_with_logits(d_real, torch.ones_like(d_real))
                    + F.binary_cross_entropy_with_logits(d_fake, torch.zeros_like(d_fake)))
        penalty = gradient_penalty(self.discriminator, real, fake, self._mix_gen)
        return d_fake.mean() - d_real.mean() + self.hparams.gp_weight * penalty

    def generator_loss(self, z: Tensor, ids: Tensor) -> Tensor:
        hp = self.hparams
        fake = self.generator(z)
        d_fake = self.discriminator(fake)
        if hp.gan_loss == "vanilla":
            adversarial = F.binary_cross_entropy_with_logits(d_fake, torch.ones_like(d_fake))
        else:
            adversarial = -d_fake.mean()
        z_n_hat, logits = self.encoder(fake)
        return (adversarial + hp.beta_n * F.mse_loss(z_n_hat, z[:, :hp.noise_dim])
                + hp.beta_c * F.cross_entropy(logits, ids))

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        opt_d, opt_ge = self.optimizers()
        real = batch["x"]
        z, _ = self._sample(len(real))
        with torch.no_grad():
            fake = self.generator(z)
        d_loss = self.critic_loss(real, fake)
        opt_d.zero_grad(set_to_none=True)
        self.manual_backward(d_loss)
        opt_d.step()
        self._critic_steps += 1
        if (self._critic_steps - 1) % self.hparams.n_critic == 0:
            z, ids = self._sample(len(real))
            self.discriminator.requires_grad_(False)  # G + E step: D's weights are constants here
            ge_loss = self.generator_loss(z, ids)
            opt_ge.zero_grad(set_to_none=True)
            self.manual_backward(ge_loss)
            opt_ge.step()
            self.discriminator.requires_grad_(True)
        return d_loss.detach()  # the critic loss: -(Wasserstein estimate) + penalty under WGAN-GP

    # --- evaluation ---------------------------------------------------------------------------------
    def embed(self, x: Tensor) -> Tensor:
        z_n, logits = self.encoder(x)
        return torch.cat([z_n, logits.softmax(1)], 1)

    def assign(self, x: Tensor) -> Tensor:
        return self.encoder(x)[1].argmax(1)

    @torch.no_grad()
    def predict(self, data, client_states: dict[int, dict[str, Any]]) -> Tensor:
        if self.hparams.assignment == "argmax":
            return super().predict(data, client_states)
        self.eval()
        z = torch.cat([self.embed(x) for x in data.iter_all()])
        return kmeans(z, self.num_clusters, niter=self.hparams.kmeans_niter, nredo=self.hparams.kmeans_redo,
                      seed=int_seed(0, "clustergan-assignment-kmeans")).labels.cpu()

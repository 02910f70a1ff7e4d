"""ClusterGAN's networks for 1x28x28 images (Mukherjee, Asnani, Lin & Kannan, "ClusterGAN: Latent Space
Clustering in Generative Adversarial Networks", AAAI 2019), as in the authors' MNIST / Fashion-MNIST code
(sudiptodip15/ClusterGAN, mnist/clus_wgan.py), re-expressed in PyTorch:

- Generator: FC 1024 + BN + ReLU -> FC 7*7*128, reshaped to 128x7x7, + BN (per channel) + ReLU
  -> ConvT 64 (4x4, s2) + BN + ReLU -> ConvT 1 (4x4, s2) + Sigmoid. Input z = (z_n, z_c).
- Discriminator (critic): Conv 64 (4x4, s2) + LeakyReLU(0.2) -> Conv 128 (4x4, s2) + LeakyReLU(0.2)
  -> FC 1024 + LeakyReLU(0.2) -> FC 1. No BatchNorm (the code has none; WGAN-GP's critic must not).
- Encoder: the discriminator's trunk with a final FC to noise_dim + k outputs: z_n (linear) and the
  z_c logits (softmax gives the cluster probabilities).

Convolutions use padding 1, which on 28 and 14 pixels is TensorFlow's "SAME" (28 -> 14 -> 7). Weights
start N(0, 0.02) and biases 0 as in the code; the last FC of the critic and the encoder keep Xavier-uniform
(TensorFlow's default there). Differences: BatchNorm has a learned scale (TensorFlow's batch_norm has
none by default) and keeps running statistics (the code always normalises with batch statistics; the
generator is only ever run in training mode here, so the two agree). `channels` and `hidden` shrink the
networks for tests (paper: 64 and 1024).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def _init(module: nn.Module) -> None:
    for m in module.modules():
        if isinstance(m, nn.Linear | nn.Conv2d | nn.ConvTranspose2d):
            nn.init.normal_(m.weight, 0.0, 0.02)
            nn.init.zeros_(m.bias)


def _trunk(channels: int, hidden: int) -> nn.Sequential:
    """Conv c -> Conv 2c -> FC hidden, LeakyReLU(0.2) after each: 1x28x28 -> hidden."""
    return nn.Sequential(
        nn.Conv2d(1, channels, 4, 2, 1), nn.LeakyReLU(0.2),
        nn.Conv2d(channels, 2 * channels, 4, 2, 1), nn.LeakyReLU(0.2), nn.Flatten(),
        nn.Linear(2 * channels * 7 * 7, hidden), nn.LeakyReLU(0.2),
    )


def _head(hidden: int, out: int) -> nn.Linear:
    head = nn.Linear(hidden, out)
    nn.init.xavier_uniform_(head.weight)
    nn.init.zeros_(head.bias)
    return head


class ClusterGANGenerator(nn.Module):
    """z (B, latent_dim) -> images (B, 1, 28, 28) in [0, 1]."""

    def __init__(self, latent_dim: int, channels: int = 64, hidden: int = 1024):
        super().__init__()
        self.latent_dim = latent_dim
        self.net = nn.Sequential(
            nn.Linear(latent_dim, hidden), nn.BatchNorm1d(hidden), nn.ReLU(),
            nn.Linear(hidden, 2 * channels * 7 * 7), nn.Unflatten(1, (2 * channels, 7, 7)),
            nn.BatchNorm2d(2 * channels), nn.ReLU(),  # the code normalises after the reshape: per channel
            nn.ConvTranspose2d(2 * channels, channels, 4, 2, 1), nn.BatchNorm2d(channels), nn.ReLU(),
            nn.ConvTranspose2d(channels, 1, 4, 2, 1), nn.Sigmoid(),
        )
        _init(self)

    def forward(self, z: Tensor) -> Tensor:
        return self.net(z)


class ClusterGANDiscriminator(nn.Module):
    """Images (B, 1, 28, 28) -> one unbounded score per image (B,): a WGAN critic, or logits."""

    def __init__(self, channels: int = 64, hidden: int = 1024):
        super().__init__()
        self.net = _trunk(channels, hidden)
        _init(self.net)
        self.head = _head(hidden, 1)

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.net(x)).squeeze(1)


class ClusterGANEncoder(nn.Module):
    """Images (B, 1, 28, 28) -> (z_n (B, noise_dim), z_c logits (B, num_clusters))."""

    def __init__(self, noise_dim: int, num_clusters: int, channels: int = 64, hidden: int = 1024):
        super().__init__()
        self.noise_dim = noise_dim
        self.net = _trunk(channels, hidden)
        _init(self.net)
        self.head = _head(hidden, noise_dim + num_clusters)

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        out = self.head(self.net(x))
        return out[:, :self.noise_dim], out[:, self.noise_dim:]


def sample_latent(n: int, noise_dim: int, num_clusters: int, noise_std: float,
                  generator: torch.Generator) -> tuple[Tensor, Tensor, Tensor]:
    """ClusterGAN's prior: z_n ~ N(0, noise_std^2 I) (noise_std 0.1 in the code), z_c one-hot of a
    uniformly drawn cluster. Returns (z_n, z_c, cluster ids) on the generator's device."""
    device = generator.device
    z_n = noise_std * torch.randn(n, noise_dim, generator=generator, device=device)
    ids = torch.randint(num_clusters, (n,), generator=generator, device=device)
    return z_n, F.one_hot(ids, num_clusters).to(z_n.dtype), ids


def gradient_penalty(critic: nn.Module, real: Tensor, fake: Tensor, generator: torch.Generator) -> Tensor:
    """WGAN-GP's penalty E[(||grad_x critic(x_hat)|| - 1)^2], x_hat = eps real + (1 - eps) fake with one
    eps ~ U(0, 1) per sample (Gulrajani et al. 2017; the authors' code draws one eps per batch)."""
    eps = torch.rand(real.shape[0], *([1] * (real.dim() - 1)), generator=generator, device=generator.device)
    x_hat = (eps * real + (1 - eps) * fake).requires_grad_(True)
    (grad,) = torch.autograd.grad(critic(x_hat).sum(), x_hat, create_graph=True)
    return (grad.flatten(1).norm(dim=1) - 1).pow(2).mean()

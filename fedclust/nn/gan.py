"""The GAN of SDA-FC (Yan et al., "SDA-FC: Bridging federated clustering and deep generative model",
Information Sciences 2024), as its official code builds it (REFERENCE.md), also used by PPFC-GAN.

Generator: [one-hot code (10) | Gaussian noise (62)] -> Linear(72, 1024) + BN + ReLU
-> Linear(1024, 128 * s/4 * s/4) + BN + ReLU -> ConvT(128, 64, 4, 2, 1) + BN + ReLU
-> ConvT(64, C, 4, 2, 1) + Sigmoid, i.e. images in [0, 1] like the data (s = 28, C = 1 in the paper).
Discriminator: CCFC's 3-conv trunk (ConvNet28) -> Linear(2304, 1024) + BN + LeakyReLU(0.2) -> Linear(1024, 1),
a logit. Conv, transposed-conv and linear weights start N(0, 0.02), their biases 0; BatchNorm keeps
torch's init. Losses: non-saturating BCE-with-logits.

Beyond the paper: image side s and channels C are parameters (any s divisible by 4 and at least 8), and
the two 1024-wide layers can be narrowed (`hidden`) for tests; the defaults are the paper's nets.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from fedclust.errors import ConfigError
from fedclust.nn.backbones import ConvNet28

CODE_DIM, NOISE_DIM = 10, 62


def check_gan_image(in_channels: int, input_size: int, is_image: bool) -> None:
    """Raise ConfigError unless the data are square images whose side is a multiple of 4, at least 8."""
    if not is_image or input_size < 8 or input_size % 4:
        shape = f"{in_channels}x{input_size}x{input_size} images" if is_image else "vector data"
        raise ConfigError("data.name", shape, "image data whose side is a multiple of 4 and at least 8 "
                          "(the SDA-FC GAN is built for 1x28x28 images; 8x8 and 32x32 also work)")


class Generator(nn.Module):
    """SDA-FC's generator: latent (code_dim + noise_dim) -> image (channels, size, size) in [0, 1]."""

    def __init__(self, code_dim: int = CODE_DIM, noise_dim: int = NOISE_DIM, channels: int = 1, size: int = 28,
                 hidden: int = 1024):
        super().__init__()
        check_gan_image(channels, size, True)
        self.code_dim, self.noise_dim, self.base = code_dim, noise_dim, size // 4
        self.fc = nn.Sequential(
            nn.Linear(code_dim + noise_dim, hidden), nn.BatchNorm1d(hidden), nn.ReLU(),
            nn.Linear(hidden, 128 * self.base * self.base), nn.BatchNorm1d(128 * self.base * self.base), nn.ReLU(),
        )
        self.deconv = nn.Sequential(
            nn.ConvTranspose2d(128, 64, 4, 2, 1), nn.BatchNorm2d(64), nn.ReLU(),
            nn.ConvTranspose2d(64, channels, 4, 2, 1), nn.Sigmoid(),
        )

    def forward(self, latent: Tensor) -> Tensor:
        return self.deconv(self.fc(latent).view(-1, 128, self.base, self.base))


class Discriminator(nn.Module):
    """SDA-FC's discriminator: CCFC's 3-conv trunk, then Linear + BN + LeakyReLU(0.2) + Linear -> logit (n, 1)."""

    def __init__(self, channels: int = 1, size: int = 28, hidden: int = 1024):
        super().__init__()
        check_gan_image(channels, size, True)
        self.trunk = ConvNet28(channels, size)
        self.fc = nn.Sequential(nn.Linear(self.trunk.out_dim, hidden), nn.BatchNorm1d(hidden), nn.LeakyReLU(0.2),
                                nn.Linear(hidden, 1))

    def forward(self, x: Tensor) -> Tensor:
        return self.fc(self.trunk(x))


@torch.no_grad()
def init_gan_weights(module: nn.Module, generator: torch.Generator | None = None, std: float = 0.02) -> None:
    """N(0, std) weights and zero biases for every Conv2d, ConvTranspose2d and Linear (the reference's init);
    draws from `generator` (a CPU generator; None uses torch's global RNG, seeded once by fit)."""
    for m in module.modules():
        if isinstance(m, nn.Conv2d | nn.ConvTranspose2d | nn.Linear):
            w = torch.randn(m.weight.shape, generator=generator, device=generator.device if generator else "cpu")
            m.weight.copy_(w.mul_(std))
            if m.bias is not None:
                m.bias.zero_()


def sample_latent(n: int, code_dim: int = CODE_DIM, noise_dim: int = NOISE_DIM,
                  generator: torch.Generator | None = None, device: torch.device | str | None = None) -> Tensor:
    """Generator inputs (n, code_dim + noise_dim): one-hot codes, then N(0, 1) noise drawn from `generator`.

    The codes are not random: as in the reference code, the batch is cut into code_dim blocks of
    round(n / code_dim) rows taking codes 0, 1, ... in turn, the last block taking the rest."""
    device = device if device is not None else (generator.device if generator is not None else "cpu")
    block = round(n / code_dim)
    rows = torch.arange(n, device=device)
    labels = (rows // block).clamp_max(code_dim - 1) if block else torch.full_like(rows, code_dim - 1)
    noise = torch.randn(n, noise_dim, generator=generator,
                        device=generator.device if generator is not None else device).to(device)
    return torch.cat([F.one_hot(labels, code_dim).float(), noise], dim=1)


def pixel_spread(images: Tensor) -> float:
    """The mean over pixels of the per-pixel standard deviation across `images`: near 0 when a generator
    draws near-identical images (a collapse), about 0.27 for Fashion-MNIST and 0.23 for the 8x8 digits."""
    return images.flatten(1).float().std(0).mean().item() if len(images) > 1 else 0.0


def discriminator_loss(real_logits: Tensor, fake_logits: Tensor) -> Tensor:
    """BCE-with-logits of real samples against 1 plus fake samples against 0 (summed, as the reference)."""
    return (F.binary_cross_entropy_with_logits(real_logits, torch.ones_like(real_logits))
            + F.binary_cross_entropy_with_logits(fake_logits, torch.zeros_like(fake_logits)))


def generator_loss(fake_logits: Tensor) -> Tensor:
    """The non-saturating generator loss: BCE-with-logits of fake samples against 1."""
    return F.binary_cross_entropy_with_logits(fake_logits, torch.ones_like(fake_logits))


def gan_losses(real_logits: Tensor, fake_logits_detached: Tensor, fake_logits: Tensor) -> tuple[Tensor, Tensor]:
    """(discriminator loss, generator loss); the first fake logits come from detached fakes."""
    return discriminator_loss(real_logits, fake_logits_detached), generator_loss(fake_logits)


class GAN(nn.Module):
    """A generator and a discriminator for images of `channels` x `size` x `size`, initialised N(0, 0.02)."""

    def __init__(self, channels: int = 1, size: int = 28, code_dim: int = CODE_DIM, noise_dim: int = NOISE_DIM,
                 g_hidden: int = 1024, d_hidden: int = 1024):
        super().__init__()
        self.generator = Generator(code_dim, noise_dim, channels, size, g_hidden)
        self.discriminator = Discriminator(channels, size, d_hidden)
        init_gan_weights(self)

    def latent(self, n: int, generator: torch.Generator | None, device: torch.device) -> Tensor:
        return sample_latent(n, self.generator.code_dim, self.generator.noise_dim, generator, device)

    def train_step(self, x: Tensor, opt_d: torch.optim.Optimizer, opt_g: torch.optim.Optimizer,
                   generator: torch.Generator | None, backward=None) -> tuple[Tensor, Tensor]:
        """One reference-code step: D on real + detached fakes, then G on fresh fakes. Returns detached
        (d_loss, g_loss). `backward` replaces loss.backward() (Lightning's manual_backward)."""
        backward = backward or (lambda loss: loss.backward())
        n = x.shape[0]
        opt_d.zero_grad(set_to_none=True)
        fake = self.generator(self.latent(n, generator, x.device)).detach()
        d_loss = discriminator_loss(self.discriminator(x), self.discriminator(fake))
        backward(d_loss)
        opt_d.step()
        opt_g.zero_grad(set_to_none=True)
        g_loss = generator_loss(self.discriminator(self.generator(self.latent(n, generator, x.device))))
        backward(g_loss)
        opt_g.step()
        return d_loss.detach(), g_loss.detach()

    @torch.no_grad()
    def synthesize(self, n: int, generator: torch.Generator | None, device: torch.device,
                   batch_size: int = 200) -> Tensor:
        """n generated images with the generator in eval mode (BatchNorm running statistics), drawn in
        batches of `batch_size` (the reference draws 200 at a time, each batch cycling through the codes)."""
        was_training = self.generator.training
        self.generator.eval()
        parts = [self.generator(self.latent(min(batch_size, n - s), generator, device))
                 for s in range(0, n, batch_size)]
        self.generator.train(was_training)
        return torch.cat(parts) if parts else torch.empty(0, device=device)

    @torch.no_grad()
    def recalibrate_batchnorm(self, generator: torch.Generator | None, device: torch.device, batches: int = 20,
                              batch_size: int = 200) -> None:
        """Re-estimate the generator's BatchNorm running statistics from `batches` batches of its own latent
        inputs (an exact average over them, not a moving one). Needs no data: the generator's input is noise.

        Why: a FedAvg-averaged generator carries the average of the clients' running statistics, which
        describe the clients' weights, not the averaged ones; in eval mode it then under-states its own
        spread (measured on Fashion-MNIST at p = 1, 15 rounds: per-pixel std 0.078 with the averaged
        statistics, 0.097 re-estimated, benchmarks/results/ppfc_gan_collapse.md)."""
        norms = [m for m in self.generator.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
        was_training, momenta = self.generator.training, [m.momentum for m in norms]
        for m in norms:
            m.reset_running_stats()
            m.momentum = None  # None: a cumulative average over the batches below
        self.generator.train()
        for _ in range(batches):
            self.generator(self.latent(batch_size, generator, device))
        for m, momentum in zip(norms, momenta):
            m.momentum = momentum
        self.generator.train(was_training)

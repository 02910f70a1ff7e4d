"""The client side of the GAN methods (SDA-FC, PPFC-GAN): one GAN per client trained with two Adam
optimizers, the per-epoch learning-rate decay of SDA-FC's official code, and the synthetic payload."""

from __future__ import annotations

import logging
from itertools import islice
from typing import Any

import torch
from torch import Tensor

from fedclust.contract import ClientContext, DataInfo
from fedclust.nn.gan import GAN, check_gan_image, pixel_spread
from fedclust.nn.optim import CpuAdam, reset_optimizer

log = logging.getLogger("fedclust")

# Synthetic images whose per-pixel spread is below this share of the client's own images' are a collapse: an
# untrained or collapsed generator measured 0.02-0.08 of Fashion-MNIST's 0.27 (benchmarks/results/ppfc_gan_collapse.md).
COLLAPSE_SHARE = 0.5


class GANClients:
    """The client side SDA-FC and PPFC-GAN share (a mixin placed before FederatedMethod): one GAN, two Adam
    optimizers stepped by training_step, the per-epoch learning-rate decay, and the synthetic payload.
    Expects hparams lr_d, lr_g, betas, lr_decay, reset_adam_each_epoch, code_dim, noise_dim, g_hidden,
    d_hidden, synthetic_per_client, max_steps_per_epoch."""

    hparams: Any

    def validate(self, info: DataInfo, num_clients: int) -> None:
        check_gan_image(info.in_channels, info.input_size, info.is_image)

    def build_gan(self, info: DataInfo) -> None:
        hp = self.hparams
        self.gan = GAN(info.in_channels, info.input_size, hp.code_dim or self.num_clusters, hp.noise_dim,
                       hp.g_hidden, hp.d_hidden)

    def configure_optimizers(self) -> list[torch.optim.Optimizer]:
        hp = self.hparams
        betas = tuple(hp.betas)
        return [CpuAdam(self.gan.discriminator.parameters(), lr=hp.lr_d, betas=betas, foreach=True),
                CpuAdam(self.gan.generator.parameters(), lr=hp.lr_g, betas=betas, foreach=True)]

    def client_batches(self, ctx: ClientContext, epoch: int):
        # The engine has no scheduler hook, and it calls this at the start of every local epoch: the epoch's
        # learning rates are set here, lr = base * lr_decay ** e with e counted over the whole stage
        # (round * local_epochs + epoch). They are set from the base, never multiplied, because the one
        # optimizer pair is shared by every client.
        hp = self.hparams
        e = ctx.round * ctx.stage.local_epochs + epoch
        for opt, base in zip(self.optimizers(), (hp.lr_d, hp.lr_g)):
            if hp.reset_adam_each_epoch:
                reset_optimizer(opt)
            for group in opt.param_groups:
                group["lr"] = base * hp.lr_decay ** e
        batches = super().client_batches(ctx, epoch)
        return islice(batches, hp.max_steps_per_epoch) if hp.max_steps_per_epoch else batches

    def on_client_start(self, ctx: ClientContext) -> None:
        self._latent_gen = ctx.generator("latent")

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        opt_d, opt_g = self.optimizers()
        d_loss, g_loss = self.gan.train_step(batch["x"], opt_d, opt_g, self._latent_gen,
                                             backward=self.manual_backward)
        return d_loss + g_loss

    def synthetic_payload(self, ctx: ClientContext) -> dict[str, Tensor]:
        n = self.hparams.synthetic_per_client or len(ctx.data)
        synthetic = self.gan.synthesize(n, ctx.generator("synthesize"), ctx.data.device)
        self.report_spread(ctx, synthetic)
        return {"synthetic": synthetic}

    def report_spread(self, ctx: ClientContext, synthetic: Tensor) -> float:
        """Log the synthetic images' per-pixel spread beside the client's own: at INFO (shown where logging is
        set to INFO, e.g. from Python), and as a warning (the console and run.log) when it is below
        COLLAPSE_SHARE of it, since a collapsed generator makes the server cluster near-identical images and no
        clustering metric says so until the end. Both numbers stay on the client (only the log sees them).
        Returns the ratio."""
        own, made = pixel_spread(ctx.data.all_x()), pixel_spread(synthetic)
        ratio = made / own if own > 0 else 1.0
        name = type(self).__name__
        if ratio < COLLAPSE_SHARE:
            log.warning("%s client %d: its synthetic images vary %.3f per pixel against its own images' %.3f: the "
                        "generator has collapsed (too few GAN steps, or a GAN averaged over many clients)",
                        name, ctx.client_id, made, own)
        else:
            log.info("%s client %d: synthetic images vary %.3f per pixel, its own images %.3f", name,
                     ctx.client_id, made, own)
        return ratio

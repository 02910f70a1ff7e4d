"""MCC: centralized momentum contrastive clustering (Miao & Koyuncu, papers/fedmcc-momentum-contrastive-
clustering.md, Section II-B, eq. 6, Fig. 2).

One network pair (online f^O, g_I^O, g_C^O; target by EMA, m = 0.99), both views through both networks,
and the whole loss at once (eq. 6 = eq. 8 + eq. 9):
    L_MCC = 1/2 (L(z^{a,O}, z^{b,T}) + L(z^{a,T}, z^{b,O}) + L(c^{a,O}, c^{b,T}) + L(c^{a,T}, c^{b,O}))
            + H(c^{a,O}) + H(c^{b,O}) + H(c^{a,T}) + H(c^{b,T}),
with FedMCC's reading of L and H (fedclust/methods/fedmcc.py). The paper's centralized runs use a ResNet-34
(224x224), Adam 3e-4, batch 128; Fig. 5 shows 500 epochs: `epochs` = 500 by default.

Two ways to run it:
- through the engine as a one-client federation (`data.num_clients: 1`; more clients are refused with a
  ConfigError — FedMCC is the federated form): one "round" per epoch, so every epoch can be scored; the
  online network is "averaged" over its one client (the identity), the target stays the client's;
  views come from the engine's (seed, round, client) generators;
- as an ordinary LightningModule: `mcc.build(DataInfo(...))`, then
  `L.Trainer(max_epochs=1, accelerator="cpu").fit(mcc, loader)` with a DataLoader of images (a tensor,
  an (x, y) pair or the engine's {"x": ...} dict per batch). Without the engine's client context the views
  are drawn from a generator MCC owns, seeded by `view_seed`.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

from fedclust.contract import DataInfo, Stage
from fedclust.data.views import two_views
from fedclust.errors import ConfigError, MethodArgError
from fedclust.methods.families.contrastive import batch_inputs
from fedclust.methods.families.momentum import MomentumContrastiveClustering, backward
from fedclust.nn.ema import ema_update


class MCC(MomentumContrastiveClustering):
    """Centralized MCC (eq. 6).

    Args:
        epochs: Training epochs (one engine round each).
        view_seed: Seed of the views' generator when run without the engine (Lightning Trainer).
        The others: as FedMCC (backbone, resize, batch_size, lr, ema_decay, instance_dim, head_hidden,
            temperatures, augment, crop_scale, memory_efficient_chunk, color_strength, blur: CC's views).
    """

    def __init__(self, num_clusters: int | None = None, backbone: str = "resnet34", resize: int | None = None,
                 epochs: int = 500, batch_size: int = 128, lr: float = 3e-4, ema_decay: float = 0.99,
                 instance_dim: int = 128, head_hidden: int | None = None, instance_temperature: float = 0.5,
                 cluster_temperature: float = 1.0, augment: Literal["color", "simsiam28"] = "color",
                 crop_scale: tuple[float, float] = (0.08, 1.0), memory_efficient_chunk: int | None = None,
                 color_strength: float = 0.5, blur: bool = False, view_seed: int = 0):
        if epochs < 1:
            raise MethodArgError("epochs", epochs, "a positive integer")
        super().__init__(num_clusters, backbone, resize, representation_rounds=epochs, cluster_rounds=1,
                         local_epochs=1, cluster_local_epochs=1, batch_size=batch_size, lr=lr, ema_decay=ema_decay,
                         instance_dim=instance_dim, head_hidden=head_hidden,
                         instance_temperature=instance_temperature, cluster_temperature=cluster_temperature,
                         augment=augment, crop_scale=crop_scale, memory_efficient_chunk=memory_efficient_chunk,
                         color_strength=color_strength, blur=blur)
        self.save_hyperparameters()
        self._own_gen: torch.Generator | None = None

    def validate(self, info: DataInfo, num_clients: int) -> None:
        super().validate(info, num_clients)
        if num_clients != 1:
            raise ConfigError("data.num_clients", num_clients, "1: MCC is centralized (FedMCC is the federated form)")

    def stages(self) -> list[Stage]:
        return [Stage("mcc", self.hparams.epochs, 1)]

    def aggregation_weights(self, ctx) -> None:
        return None  # one stage, one loss: the client's whole online network is the global model

    def views_generator(self, x: Tensor) -> torch.Generator:
        if self.ctx is not None:
            return super().views_generator(x)
        if self._own_gen is None or self._own_gen.device != x.device:  # Lightning Trainer: no client context
            self._own_gen = torch.Generator(device=x.device)
            self._own_gen.manual_seed(self.hparams.view_seed)
        return self._own_gen

    def encode_online(self, x: Tensor) -> tuple[Tensor, Tensor]:
        h = self.encoder(x)
        return self.instance_head(h), self.cluster_head(h)

    def training_step(self, batch, batch_idx: int) -> Tensor:
        x = batch_inputs(batch)
        x_a, x_b = two_views(self.views, x, self.views_generator(x))
        with torch.no_grad():
            h_a, h_b = self.target_encoder(x_a), self.target_encoder(x_b)
            za_t, zb_t = self.target_instance_head(h_a), self.target_instance_head(h_b)
            ca_t, cb_t = self.target_cluster_head(h_a), self.target_cluster_head(h_b)

        def loss_fn(za: Tensor, ca: Tensor, zb: Tensor, cb: Tensor) -> Tensor:
            return self.instance_loss(za, zb, za_t, zb_t) + self.cluster_loss(ca, cb, ca_t, cb_t)

        optimizer = self.optimizers()
        optimizer.zero_grad(set_to_none=True)
        loss = backward(self, self.encode_online, [x_a, x_b], loss_fn, self.hparams.memory_efficient_chunk)
        optimizer.step()
        for name in ("encoder", "instance_head", "cluster_head"):
            ema_update(getattr(self, "target_" + name), getattr(self, name), self.hparams.ema_decay)
        return loss

"""CC: centralized Contrastive Clustering (Li et al., AAAI 2021), the upper bound of the federated tables.

The same network and loss as FedCC (fedclust/methods/fedcc.py) on one client holding all the data: with
one client FedAvg is the identity, so `epochs` rounds of one local epoch are `epochs` centralized epochs
(the client's Adam state is kept across rounds by the engine's default `optimizer_state: persist`), and the
engine scores the model after every epoch.

It is also an ordinary LightningModule: after `build(DataInfo(...))`,
`L.Trainer(max_epochs=1).fit(cc, dataloader)` trains it without the engine. The views are then drawn
from a generator the module owns, seeded by `seed` on the first batch's device, so two runs from the same
initial weights and data order see the same views.
"""

from __future__ import annotations

import torch
from torch import Tensor

from fedclust.contract import DataInfo
from fedclust.errors import ConfigError, MethodArgError
from fedclust.methods.families.contrastive import ContrastiveClustering


class CC(ContrastiveClustering):
    """Centralized Contrastive Clustering.

    Args:
        num_clusters: K; None takes the number of classes of the data.
        backbone: As FedCC (CC's paper: ResNet-34; FedPNP's tables: ResNet-18).
        resize: Resize inputs to this side before the backbone (None keeps the size).
        epochs: Training epochs (one engine round each).
        batch_size: Mini-batch size (CC: 256; FedPNP: 128).
        lr: Adam learning rate (3e-4).
        instance_dim: Output width of the instance head (128).
        instance_temperature: tau_I (0.5).
        cluster_temperature: tau_C (1.0).
        crop_scale: Area range of the random resized crop (0.08-1).
        memory_efficient_chunk: As FedCC.
        seed: Seed of the module's own view generator, used only outside the engine (Lightning Trainer).
    """

    def __init__(self, num_clusters: int | None = None, backbone: str = "convnet28", resize: int | None = None,
                 epochs: int = 100, batch_size: int = 128, lr: float = 3e-4, instance_dim: int = 128,
                 instance_temperature: float = 0.5, cluster_temperature: float = 1.0,
                 crop_scale: tuple[float, float] = (0.08, 1.0), memory_efficient_chunk: int | None = None,
                 seed: int = 0):
        if epochs < 1:
            raise MethodArgError("epochs", epochs, "a positive integer")
        super().__init__(num_clusters, backbone, resize, rounds=epochs, local_epochs=1, batch_size=batch_size,
                         lr=lr, instance_dim=instance_dim, instance_temperature=instance_temperature,
                         cluster_temperature=cluster_temperature, crop_scale=crop_scale,
                         memory_efficient_chunk=memory_efficient_chunk)
        self._own_gen: torch.Generator | None = None

    def validate(self, info: DataInfo, num_clients: int) -> None:
        super().validate(info, num_clients)
        if num_clients != 1:
            raise ConfigError("data.num_clients", num_clients, "1 (CC is centralized: one client holds all data)")

    def augment_generator(self, x: Tensor) -> torch.Generator:
        if self.ctx is not None:  # in the engine: the client's (seed, stage, round) generator
            return super().augment_generator(x)
        if self._own_gen is None or self._own_gen.device != x.device:
            self._own_gen = torch.Generator(device=x.device)
            self._own_gen.manual_seed(self.hparams.seed)
        return self._own_gen

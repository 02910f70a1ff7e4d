"""FedBYOLCC: BYOL + Contrastive Clustering's cluster loss, trained with FedAvg — the second baseline of
FedPNP (Miao & Koyuncu, papers/fedpnp-past-negatives-pool.txt, Sec. 3.1 "Baselines": "we combine BYOL and
CC to train the model by minimizing MSE loss in BYOL and cluster-level contrastive loss in CC"; Table 1).

Local loss per batch: BYOL's symmetric normalized regression loss (the "MSE loss", fedclust/losses/byol.py)
between the online predictions and the target projections of the other view, + CC's cluster-level loss
(cluster-column NT-Xent, tau_C = 1.0, + the entropy term of each view) on the online cluster head's
softmax outputs of the two views, unweighted (CC adds its terms unweighted; FedPNP gives no weight).
A point's cluster is the argmax of the global cluster head (FedPNP Sec. 3.1, "Evaluation").

Choices the paper leaves open, stated:
- BYOL part as FedU's code (fedclust/methods/families/fedu.py): backbone f, projector and predictor Linear + BN +
  ReLU + Linear (4096 -> 2048), target f^T, g^T by EMA m = 0.99, both views through the online network
  and the other view's target (symmetric loss).
- The cluster head is CC's (Linear(rep, rep) + ReLU + Linear(rep, K) + Softmax) on the online backbone's
  representation h, as in CC; it has no target twin (the cluster term is CC's, not MCC's).
- FedAvg averages every online weight (f, projector, predictor, cluster head, BatchNorm buffers), the
  predictor always (no divergence-aware update: that is FedU's, not BYOL's). The target stays on each client
  (`average_target: false`, as FedU and FedMCC, whose Table VII shows averaging targets hurts); set it
  true to average the targets too.
- Training as FedPNP's Sec. 3.1: ResNet-18 at 224 x 224, Adam 3e-4 without weight decay, batch 128, 5 clients,
  100 rounds x 5 local epochs; no learning-rate decay. Round-1 targets: copies of the global initialisation.
- Views: CC's CIFAR views (jitter s = 0.5, `color_strength`), like FedPNP's other CC-based methods and
  unlike FedU's BYOL views (s = 1): FedPNP states no augmentation, and its CIFAR runs are CC's setting.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

from fedclust.contract import DataInfo
from fedclust.errors import MethodArgError
from fedclust.losses.byol import byol_loss
from fedclust.losses.contrastive import cluster_contrastive_loss
from fedclust.methods.families.fedu import FedU
from fedclust.methods.families.momentum import TARGET
from fedclust.nn.heads import mlp_head


class FedBYOLCC(FedU):
    """BYOL + CC cluster loss + FedAvg.

    Args:
        cluster_temperature: tau_C (1.0).
        head_hidden: Hidden width of the cluster head (None: the backbone's width, as CC).
        average_target: Average the target networks too (default: they stay on each client).
        color_strength: SimCLR's jitter strength s (0.5: CC's CIFAR views). blur: CC's ImageNet-10 blur.
        The others: as FedU (without its divergence-aware predictor update), with FedPNP's defaults.
    """

    def __init__(self, num_clusters: int | None = None, backbone: str = "resnet18", resize: int | None = 224,
                 rounds: int = 100, local_epochs: int = 5, batch_size: int = 128, projector_hidden: int = 4096,
                 projection_dim: int = 2048, predictor_hidden: int = 4096, optimizer: Literal["sgd", "adam"] = "adam",
                 lr: float = 3e-4, weight_decay: float = 0.0, ema_decay: float = 0.99,
                 cluster_temperature: float = 1.0, head_hidden: int | None = None, average_target: bool = False,
                 augment: Literal["color", "simsiam28"] = "color", crop_scale: tuple[float, float] = (0.08, 1.0),
                 color_strength: float = 0.5, blur: bool = False):
        super().__init__(num_clusters, backbone, resize, rounds, local_epochs, batch_size, projector_hidden,
                         projection_dim, predictor_hidden, optimizer, lr, weight_decay=weight_decay,
                         cosine_decay=False, ema_decay=ema_decay, divergence_threshold=None, augment=augment,
                         crop_scale=crop_scale, color_strength=color_strength, blur=blur)
        self.save_hyperparameters()
        if not cluster_temperature > 0:
            raise MethodArgError("cluster_temperature", cluster_temperature, "a positive number")

    def build(self, info: DataInfo) -> None:
        super().build(info)
        rep = self.encoder.out_dim
        self.cluster_head = mlp_head(rep, self.hparams.head_hidden or rep, self.num_clusters, softmax=True)

    def communicated(self) -> list[str]:
        keys = list(self.state_dict())
        return keys if self.hparams.average_target else [k for k in keys if not k.startswith(TARGET)]

    def byol_objective(self, x_a: Tensor, x_b: Tensor) -> Tensor:
        h_a, h_b = self.encoder(x_a), self.encoder(x_b)
        p_a, p_b = self.predictor(self.projector(h_a)), self.predictor(self.projector(h_b))
        with torch.no_grad():
            t_a, t_b = (self.target_projector(self.target_encoder(v)) for v in (x_a, x_b))
        cluster = cluster_contrastive_loss(self.cluster_head(h_a), self.cluster_head(h_b),
                                           self.hparams.cluster_temperature)
        return byol_loss(p_a, p_b, t_a, t_b) + cluster

    def assign(self, x: Tensor) -> Tensor:
        return self.cluster_head(self.encoder(x)).argmax(1)

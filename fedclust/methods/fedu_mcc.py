"""FedU + MCC, FedMCC's baseline (Section IV-B, Tables I-II): FedU (fedclust/methods/families/fedu.py),
then FedMCC's clustering stage (Algorithm 2) with FedMCC's Adam. See families/fedu.py for FedU's settings."""

from __future__ import annotations

from typing import Any, Literal

import torch
from torch import Tensor

from fedclust.contract import ClientContext, DataInfo, Stage
from fedclust.errors import MethodArgError
from fedclust.methods.families.contrastive import batch_inputs
from fedclust.methods.families.fedu import FedU
from fedclust.methods.families.momentum import MomentumClusterStage, check_common
from fedclust.nn.optim import CpuAdam


class FedUMCC(MomentumClusterStage, FedU):
    """FedU + MCC (FedMCC Tables I-II): FedU, then FedMCC's clustering stage (Algorithm 2).

    Args:
        cluster_rounds: Rounds of the clustering stage (10). cluster_local_epochs: its local epochs (5).
        head_hidden: Hidden width of g_C (None: the backbone's). cluster_temperature: tau_C (1.0).
        memory_efficient_chunk: Section VI gradients for the cluster stage (exact: g_C has no BatchNorm).
        cluster_optimizer: adam (FedMCC's stage 2: Adam, no weight decay, constant lr) or sgd (FedU's
            optimizer and cosine schedule, restarted over the cluster rounds).
        cluster_lr: Learning rate of the Adam cluster stage (3e-4, FedMCC Section IV-A).
        The others: as FedU.
    """

    def __init__(self, *args: Any, cluster_rounds: int = 10, cluster_local_epochs: int = 5,
                 head_hidden: int | None = None, cluster_temperature: float = 1.0,
                 memory_efficient_chunk: int | None = None, cluster_optimizer: Literal["adam", "sgd"] = "adam",
                 cluster_lr: float = 3e-4, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.save_hyperparameters()
        for name in ("cluster_rounds", "cluster_local_epochs"):
            if getattr(self.hparams, name) < 1:
                raise MethodArgError(name, getattr(self.hparams, name), "a positive integer")
        if cluster_optimizer not in ("adam", "sgd"):
            raise MethodArgError("cluster_optimizer", cluster_optimizer, "adam or sgd")
        if not cluster_lr > 0:
            raise MethodArgError("cluster_lr", cluster_lr, "a positive number")
        check_common(self.hparams, self.num_clusters)

    def build(self, info: DataInfo) -> None:
        super().build(info)
        self.build_cluster_heads(self.encoder.out_dim, self.hparams.head_hidden)

    def stages(self) -> list[Stage]:
        hp = self.hparams
        return [*super().stages(), Stage("cluster", hp.cluster_rounds, hp.cluster_local_epochs)]

    def aggregation_weights(self, ctx: ClientContext) -> dict[str, float] | None:
        if ctx.stage.name == "cluster":  # Algorithm 2 line 7: g_C alone
            return {"encoder.": 0.0, "projector.": 0.0, "predictor.": 0.0}
        return {"cluster_head.": 0.0}

    def configure_optimizers(self) -> list[torch.optim.Optimizer]:
        """[FedU's optimizer for the BYOL stage, the cluster stage's optimizer for g_C]."""
        hp = self.hparams
        head = list(self.cluster_head.parameters())
        ids = {id(p) for p in head}
        byol = self.byol_optimizer_for([p for p in self.online_parameters() if id(p) not in ids])
        cluster = (CpuAdam(head, lr=hp.cluster_lr, foreach=True) if hp.cluster_optimizer == "adam"
                   else self.byol_optimizer_for(head))
        return [byol, cluster]

    def byol_optimizer(self) -> torch.optim.Optimizer:
        return self.optimizers()[0]

    def cluster_optimizer(self) -> torch.optim.Optimizer:
        return self.optimizers()[1]

    def on_client_start(self, ctx: ClientContext) -> None:
        super().on_client_start(ctx)
        if self._stage == "cluster" and self.hparams.cluster_optimizer == "adam":
            self._lr = self.hparams.cluster_lr  # FedMCC's stage 2 has no schedule

    def training_step(self, batch: object, batch_idx: int) -> Tensor:
        if self._stage != "cluster":
            return super().training_step(batch, batch_idx)
        for group in self.cluster_optimizer().param_groups:
            group["lr"] = self._lr
        return self.cluster_step(batch_inputs(batch), self._views_gen)

    def assign(self, x: Tensor) -> Tensor:
        return self.cluster_assign(x)

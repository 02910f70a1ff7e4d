"""FedU (Zhuang et al. 2021, "Collaborative unsupervised visual representation learning from decentralized
data") and the two clustering baselines FedMCC builds on it (papers/fedmcc-momentum-contrastive-clustering.md,
Section IV-B: "FedU + K-means" and "FedU + MCC", Tables I-II).

FedU, as the EasyFL code behind FedMCC's baselines (REFERENCE.md "FedU / FedEMA"): BYOL on every client (online
encoder f + projector g + predictor q, target f^T + g^T by EMA m = 0.99, symmetric normalized regression loss,
fedclust/losses/byol.py); the server averages the online encoder, projector and predictor (what a client sends);
the target stays on the client. Settings as its code: CIFAR ResNet-18, MLPs 512 -> 4096 -> 2048, batch 128, 5 local
epochs, 100 rounds, SGD 0.032 momentum 0.9 weight decay 5e-4 with a half-cosine decay over the rounds; views are
EasyFL's SimCLR views with s = 1 (`color_strength`; `blur` adds CC's ImageNet-10 blur).

Divergence-aware predictor update (DAPU), as EasyFL's fedssl client (`train`, `_calculate_divergence`): at the end
of its local training a client measures how far its online encoder moved from the global encoder it started from,
d = the mean ||w_end - w_start||_2 over the encoder's parameters named "conv" and "weight" (EasyFL's names; a
backbone without them uses its Conv2d, else Linear, weights); in its NEXT round it starts from the global predictor
if d < `divergence_threshold` (0.4), else from its own. A client's first round takes the global predictor;
`divergence_threshold: null` always does (plain FedAvg BYOL, FedBYOLCC's base). How that reading was checked:
docs/findings/fedu.md.

FedUKMeans: then K-means (FAISS) on the global encoder's representations of every sample, on the server at scoring
time, once per global encoder (the paper does not federate it: its baseline "clusters the resulting
representations"). FedUMCC: then FedMCC's clustering stage (Algorithm 2, `MomentumClusterStage`) for 10 rounds,
g_C alone averaged, with FedMCC's Adam 3e-4 (Section IV-A; `cluster_optimizer: sgd` keeps FedU's SGD instead).
"""

from __future__ import annotations

import math
from typing import Literal

import torch
from torch import Tensor, nn

from fedclust.contract import ClientContext, DataInfo, FederatedMethod, RoundContext, Stage
from fedclust.data.views import two_views
from fedclust.errors import ConfigError, MethodArgError
from fedclust.losses.byol import byol_loss
from fedclust.methods.families.contrastive import batch_inputs
from fedclust.methods.families.dapu import divergence, divergence_weights
from fedclust.methods.families.momentum import TARGET, check_common, make_views
from fedclust.nn.backbones import build_backbone
from fedclust.nn.ema import ema_update, frozen_copy
from fedclust.nn.heads import byol_mlp
from fedclust.nn.optim import CpuAdam


class FedU(FederatedMethod):
    """FedU: BYOL + FedAvg of the online networks + the divergence-aware predictor update.

    Args:
        num_clusters: K (used by the clustering subclasses); None takes the number of classes.
        backbone: resnet18_cifar (the FedU code), resnet18 / resnet50, convnet28, mlp.
        resize: Resize inputs to this side first (None keeps the size).
        rounds: Communication rounds (100).
        local_epochs: Local epochs per round (5).
        batch_size: Local mini-batch size (128).
        projector_hidden / projection_dim / predictor_hidden: BYOL MLP widths (4096 / 2048 / 4096).
        optimizer: sgd (FedU's code) or adam.
        lr: Initial learning rate (0.032 with SGD).
        sgd_momentum: SGD momentum (0.9).
        weight_decay: Weight decay (5e-4).
        cosine_decay: Decay the learning rate over the rounds of each stage by a half cosine.
        ema_decay: Target EMA m (0.99).
        divergence_threshold: DAPU threshold mu (0.4); null: always the global predictor.
        augment: color (SimCLR views) or simsiam28.
        crop_scale: Area range of the random resized crop.
        color_strength: SimCLR's jitter strength s (1.0: EasyFL's BYOL views).
        blur: Add CC's ImageNet-10 Gaussian blur to the colour views.
    """

    def __init__(self, num_clusters: int | None = None, backbone: str = "resnet18_cifar",
                 resize: int | None = None, rounds: int = 100, local_epochs: int = 5, batch_size: int = 128,
                 projector_hidden: int = 4096, projection_dim: int = 2048, predictor_hidden: int = 4096,
                 optimizer: Literal["sgd", "adam"] = "sgd", lr: float = 0.032, sgd_momentum: float = 0.9,
                 weight_decay: float = 5e-4, cosine_decay: bool = True, ema_decay: float = 0.99,
                 divergence_threshold: float | None = 0.4, augment: Literal["color", "simsiam28"] = "color",
                 crop_scale: tuple[float, float] = (0.08, 1.0), color_strength: float = 1.0, blur: bool = False):
        super().__init__(num_clusters, batch_size)
        self.save_hyperparameters()
        hp = self.hparams
        check_common(hp, num_clusters)
        for name in ("rounds", "local_epochs", "projector_hidden", "projection_dim", "predictor_hidden"):
            if getattr(hp, name) < 1:
                raise MethodArgError(name, getattr(hp, name), "a positive integer")
        if hp.optimizer not in ("sgd", "adam"):
            raise MethodArgError("optimizer", hp.optimizer, "sgd or adam")
        if hp.divergence_threshold is not None and not hp.divergence_threshold >= 0:
            raise MethodArgError("divergence_threshold", hp.divergence_threshold, "a number >= 0 or null")
        self.automatic_optimization = False  # the EMA follows each optimizer step inside training_step
        self._views_gen: torch.Generator | None = None
        self._stage = "byol"
        self._lr = hp.lr
        self._seed = 0
        self._round_start: dict[str, Tensor] = {}  # the encoder weights DAPU compares, as the round began

    def validate(self, info: DataInfo, num_clients: int) -> None:
        if not info.is_image:
            raise ConfigError("data.name", "vector data", "an image data set (BYOL trains on augmented views)")
        if type(self).assign is FederatedMethod.assign:  # FedU itself learns representations only
            raise ConfigError("method.class_path", type(self).__name__,
                              "FedUKMeans or FedUMCC (FedU alone does not cluster)")

    def build(self, info: DataInfo) -> None:
        super().build(info)
        hp = self.hparams
        self.encoder = build_backbone(hp.backbone, info.in_channels, info.input_size or None,
                                      in_features=info.num_features, resize=hp.resize)
        self.projector = byol_mlp(self.encoder.out_dim, hp.projector_hidden, hp.projection_dim)
        self.predictor = byol_mlp(hp.projection_dim, hp.predictor_hidden, hp.projection_dim)
        # Round-1 target of every client: a copy of the global online initialisation (BYOL).
        self.target_encoder = frozen_copy(self.encoder)
        self.target_projector = frozen_copy(self.projector)
        self.views = make_views(hp.augment, hp.crop_scale, hp.color_strength, hp.blur)
        self._dapu_keys = [f"encoder.{k}" for k in divergence_weights(self.encoder)]

    def stages(self) -> list[Stage]:
        return [Stage("byol", self.hparams.rounds, self.hparams.local_epochs)]

    def communicated(self) -> list[str]:
        return [k for k in self.state_dict() if not k.startswith(TARGET)]

    def online_parameters(self) -> list[nn.Parameter]:
        return [p for name, p in self.named_parameters() if not name.startswith(TARGET)]

    def byol_optimizer_for(self, params: list[nn.Parameter]) -> torch.optim.Optimizer:
        hp = self.hparams
        if hp.optimizer == "adam":
            return CpuAdam(params, lr=hp.lr, weight_decay=hp.weight_decay, foreach=True)
        return torch.optim.SGD(params, lr=hp.lr, momentum=hp.sgd_momentum, weight_decay=hp.weight_decay,
                               fused=True)

    def configure_optimizers(self) -> torch.optim.Optimizer | list[torch.optim.Optimizer]:
        return self.byol_optimizer_for(self.online_parameters())

    def byol_optimizer(self) -> torch.optim.Optimizer:
        return self.optimizers()

    # --- the round -----------------------------------------------------------------------------------
    def on_round_start(self, ctx: RoundContext) -> None:
        self._seed = ctx.seed

    def on_client_start(self, ctx: ClientContext) -> None:
        hp = self.hparams
        self._views_gen = ctx.generator("views")
        self._stage = ctx.stage.name
        self._lr = hp.lr * (0.5 * (1 + math.cos(math.pi * ctx.round / ctx.stage.rounds)) if hp.cosine_decay else 1)
        if self._stage == "byol":
            self.divergence_aware_predictor(ctx)

    def divergence_aware_predictor(self, ctx: ClientContext) -> None:
        """DAPU at the start of a round: the client starts from its own predictor where the decision says so.
        The client's state keeps the last divergence and decision ("divergence", "global_predictor")."""
        threshold, state = self.hparams.divergence_threshold, ctx.state
        if threshold is None:
            state["divergence"], state["global_predictor"] = math.nan, True
            return
        weights = self.state_dict()
        # EasyFL: the decision was taken at the end of the client's last round; the first round is global
        self._round_start = {k: weights[k].detach().clone() for k in self._dapu_keys}
        state.setdefault("global_predictor", True)
        if not state["global_predictor"]:
            self.predictor.load_state_dict(state["own_predictor"])

    def on_client_end(self, ctx: ClientContext) -> dict[str, Tensor]:
        threshold, state = self.hparams.divergence_threshold, ctx.state
        if self._stage != "byol" or threshold is None:
            return {}
        weights = self.state_dict()  # the client's model after local training
        d = divergence({k: weights[k] for k in self._dapu_keys}, self._round_start)
        state["divergence"], state["global_predictor"] = d, d < threshold  # for the client's next round
        self._round_start = {}
        if not state["global_predictor"]:
            state["own_predictor"] = {k: v.detach().cpu().clone() for k, v in self.predictor.state_dict().items()}
        else:
            state.pop("own_predictor", None)  # next round starts from the global predictor: nothing to keep
        return {}

    # --- training ------------------------------------------------------------------------------------
    def byol_objective(self, x_a: Tensor, x_b: Tensor) -> Tensor:
        """The local loss to descend (FedBYOLCC adds CC's cluster term)."""
        p_a, p_b = (self.predictor(self.projector(self.encoder(v))) for v in (x_a, x_b))
        with torch.no_grad():
            t_a, t_b = (self.target_projector(self.target_encoder(v)) for v in (x_a, x_b))
        return byol_loss(p_a, p_b, t_a, t_b)

    def byol_step(self, x: Tensor) -> Tensor:
        x_a, x_b = two_views(self.views, x, self._views_gen)
        optimizer = self.byol_optimizer()
        for group in optimizer.param_groups:
            group["lr"] = self._lr
        optimizer.zero_grad(set_to_none=True)
        loss = self.byol_objective(x_a, x_b)
        self.manual_backward(loss)
        optimizer.step()
        ema_update(self.target_encoder, self.encoder, self.hparams.ema_decay)
        ema_update(self.target_projector, self.projector, self.hparams.ema_decay)
        return loss.detach()

    def training_step(self, batch: object, batch_idx: int) -> Tensor:
        if self._views_gen is None:
            raise RuntimeError(f"{type(self).__name__}.training_step needs a client context (the engine)")
        return self.byol_step(batch_inputs(batch))

    def embed(self, x: Tensor) -> Tensor:
        return self.encoder(x)

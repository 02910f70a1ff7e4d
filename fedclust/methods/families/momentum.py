"""Momentum Contrastive Clustering as a family (FedMCC paper, papers/fedmcc-momentum-contrastive-clustering.md):
the online/target networks with their EMA, the views of CC's code, the memory-efficient backward and the
clustering stage (Algorithm 2) that FedMCC, the centralized MCC and FedU + MCC share. The settings and their
sources are in fedclust/methods/fedmcc.py's docstring."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal

import torch
from torch import Tensor, nn

from fedclust.contract import ClientContext, DataInfo, FederatedMethod, Stage
from fedclust.data.views import ColorViews, SimSiamViews28, two_views
from fedclust.errors import ConfigError, MethodArgError
from fedclust.losses.contrastive import cluster_entropy, nt_xent
from fedclust.methods.families.contrastive import batch_inputs
from fedclust.nn.backbones import build_backbone
from fedclust.nn.ema import ema_update, frozen_copy
from fedclust.nn.heads import mlp_head
from fedclust.nn.memory_efficient import chunked_backward
from fedclust.nn.optim import CpuAdam

TARGET = "target_"  # prefix of every target-network module: never communicated
CC_VIEW_SIZE = 224  # CC's blur is defined on 224 x 224 views; other view sizes get it scaled


def make_views(augment: str, crop_scale: Sequence[float], color_strength: float = 0.5, blur: bool = False):
    """CC/SimCLR colour views at jitter strength s = `color_strength` (+ CC's ImageNet-10 blur), or
    CCFC's crop/rotation/blur views for 28x28 grey images."""
    if augment == "color":
        return ColorViews.strength(color_strength, scale=tuple(crop_scale), blur_p=0.5 if blur else 0.0,
                                   blur_reference=CC_VIEW_SIZE)
    if augment == "simsiam28":
        return SimSiamViews28(scale=tuple(crop_scale))
    raise MethodArgError("augment", augment, "color or simsiam28")


def check_common(hp, num_clusters: int | None) -> None:
    """ConfigErrors for options FedMCC, MCC, FedU and FedBYOLCC share."""
    if hp.batch_size < 2:
        raise MethodArgError("batch_size", hp.batch_size, "at least 2 (contrastive losses need pairs)")
    if not 0 <= hp.ema_decay < 1:
        raise MethodArgError("ema_decay", hp.ema_decay, "a number in [0, 1)")
    cluster_m = hp.get("cluster_ema_decay")
    if cluster_m is not None and not 0 <= cluster_m < 1:
        raise MethodArgError("cluster_ema_decay", cluster_m, "a number in [0, 1) or null (ema_decay)")
    if not hp.lr > 0:
        raise MethodArgError("lr", hp.lr, "a positive number")
    lo, hi = tuple(hp.crop_scale)
    if not 0 < lo <= hi <= 1:
        raise MethodArgError("crop_scale", list(hp.crop_scale), "two numbers 0 < low <= high <= 1")
    strength = getattr(hp, "color_strength", 0.5)
    if not 0 <= strength <= 1.25:  # 0.8 s > 1 would draw negative brightness factors
        raise MethodArgError("color_strength", strength, "a number in [0, 1.25] (SimCLR's s)")
    chunk = getattr(hp, "memory_efficient_chunk", None)
    if chunk is not None and chunk < 1:
        raise MethodArgError("memory_efficient_chunk", chunk,
                          "a positive integer (samples per chunk) or null")
    if num_clusters is not None and num_clusters < 2:
        raise MethodArgError("num_clusters", num_clusters, "at least 2 or null")


def backward(method: FederatedMethod, encode: Callable[[Tensor], Tensor | tuple[Tensor, ...]],
             inputs: Sequence[Tensor], loss_fn: Callable[..., Tensor], chunk: int | None) -> Tensor:
    """Gradients of loss_fn(encode(inputs[0]), encode(inputs[1]), ...) into .grad: ordinary back-propagation,
    or chunk by chunk (Section VI) when `chunk` is set. Returns the detached loss."""
    if chunk:
        return chunked_backward(encode, inputs, loss_fn, chunk)
    outs = [encode(x) for x in inputs]
    loss = loss_fn(*[r for out in outs for r in (out if isinstance(out, tuple) else (out,))])
    method.manual_backward(loss)
    return loss.detach()


class MomentumClusterStage:
    """FedMCC's clustering stage (Algorithm 2, eq. 9), shared with FedU + MCC: any method with modules
    `encoder` / `target_encoder` (frozen here), `views`, hparams `cluster_temperature`, `ema_decay`,
    `memory_efficient_chunk` (and, optionally, `cluster_ema_decay`, `cluster_target_encoder`), and manual
    optimization."""

    def build_cluster_heads(self, rep_dim: int, hidden: int | None) -> None:
        self.cluster_head = mlp_head(rep_dim, hidden or rep_dim, self.num_clusters, softmax=True)
        self.target_cluster_head = frozen_copy(self.cluster_head)

    def cluster_loss(self, ca_o: Tensor, cb_o: Tensor, ca_t: Tensor, cb_t: Tensor) -> Tensor:
        """Eq. (9): cluster-column contrast across online/target and views + the four entropy terms (weighted by
        `entropy_weight` where a method has it: 1, the paper's unweighted sum, otherwise)."""
        tau = self.hparams.cluster_temperature
        contrast = 0.5 * (nt_xent(ca_o.T, cb_t.T, tau) + nt_xent(ca_t.T, cb_o.T, tau))
        weight = self.hparams.get("entropy_weight", 1.0)
        return contrast + weight * sum(cluster_entropy(c) for c in (ca_o, cb_o, ca_t, cb_t))

    def cluster_optimizer(self) -> torch.optim.Optimizer:
        """The optimizer of g_C (FedMCC has one optimizer for both stages)."""
        return self.optimizers()

    def cluster_step(self, x: Tensor, generator: torch.Generator) -> Tensor:
        """One step of Algorithm 2 lines 13-14 on a batch: returns the detached loss."""
        x_a, x_b = two_views(self.views, x, generator)
        self.encoder.eval()  # frozen: no gradient, no BatchNorm statistics update
        self.target_encoder.eval()
        with torch.no_grad():
            h = [self.encoder(x_a), self.encoder(x_b)]
            ca_t, cb_t = (self.target_cluster_head(self.cluster_target_features(v)) for v in (x_a, x_b))
        optimizer = self.cluster_optimizer()
        optimizer.zero_grad(set_to_none=True)
        loss = backward(self, self.cluster_head, h, lambda ca, cb: self.cluster_loss(ca, cb, ca_t, cb_t),
                        self.hparams.memory_efficient_chunk)
        optimizer.step()
        ema_update(self.target_cluster_head, self.cluster_head, self.cluster_ema_decay())
        return loss

    def cluster_ema_decay(self) -> float:
        """m of g_C^T's EMA in stage 2: the one m of the paper unless `cluster_ema_decay` sets its own."""
        own = self.hparams.get("cluster_ema_decay")
        return self.hparams.ema_decay if own is None else own

    def cluster_target_features(self, x: Tensor) -> Tensor:
        """The representation the target path of eq. (9) clusters: the client's own target encoder f_k^T, or
        the global f* where `cluster_target_encoder` is "global"."""
        global_encoder = self.hparams.get("cluster_target_encoder") == "global"
        return (self.encoder if global_encoder else self.target_encoder)(x)

    def cluster_assign(self, x: Tensor) -> Tensor:
        return self.cluster_head(self.encoder(x)).argmax(1)


class MomentumContrastiveClustering(MomentumClusterStage, FederatedMethod):
    """Momentum Contrastive Clustering trained by the engine: FedMCC's Algorithms 1-2 (MCC builds on it too).

    Args:
        num_clusters: K (cluster projector width); None takes the number of classes.
        backbone: resnet18 / resnet50 (the paper's federated encoders), *_cifar stems, convnet28, mlp.
        resize: Resize inputs to this side first (224 in the paper, 32 for MNIST; None keeps the size).
        representation_rounds: Rounds of Algorithm 1 (100); 0 trains only the cluster head, on an encoder a
            finished run gave (`init_from`: the head studied apart, on one frozen encoder), with
            `cluster_target_encoder: global`.
        cluster_rounds: Rounds of Algorithm 2 (10); 0 stops after the representation.
        local_epochs: E of Algorithm 1 (5).
        cluster_local_epochs: E of Algorithm 2 (not given; 5 as Algorithm 1).
        batch_size: n (128).
        lr: Adam learning rate (3e-4, no weight decay).
        ema_decay: m of the target EMA (0.99).
        instance_dim: d_1, output of g_I (128).
        head_hidden: Hidden width of g_I and g_C (None: the backbone's width, as CC).
        instance_temperature: tau_I (0.5).
        cluster_temperature: tau_C (1.0).
        augment: color (CC/SimCLR views) or simsiam28 (crop, rotation, blur for 28x28 grey images).
        crop_scale: Area range of the random resized crop (CC: 0.08-1).
        memory_efficient_chunk: Samples per chunk of Section VI's gradients (None: ordinary back-propagation).
        color_strength: SimCLR's jitter strength s (CC's code: 0.5 for CIFAR, 1.0 for STL-10 and ImageNet-10).
        blur: Add CC's ImageNet-10 Gaussian blur to the colour views.
        average_target: Average the target networks too (Table VII, "Update Both"); default: they stay local.
        cluster_target_encoder: What the target path of stage 2 (eq. 9) encodes with: "own", the client's
            target encoder f_k^T, as eq. (7) writes it (the default); "global", the frozen global encoder f*
            that the online path uses (an ablation: the two paths then cluster the same representation).
        cluster_ema_decay: m of the cluster projector's target g_C^T in stage 2; None (the default) uses
            `ema_decay`, the one m the paper gives every target (Section II-B). An ablation: 0 makes g_C^T
            follow g_C^O at every step (docs/findings/fedmcc.md).
        entropy_weight: Weight of eq. (9)'s four entropy terms against its cluster contrast; 1 (the default) is
            the paper's unweighted sum. An ablation: 0 leaves the contrast alone (docs/findings/orderings.md).
    """

    def __init__(self, num_clusters: int | None = None, backbone: str = "resnet18", resize: int | None = None,
                 representation_rounds: int = 100, cluster_rounds: int = 10, local_epochs: int = 5,
                 cluster_local_epochs: int = 5, batch_size: int = 128, lr: float = 3e-4, ema_decay: float = 0.99,
                 instance_dim: int = 128, head_hidden: int | None = None, instance_temperature: float = 0.5,
                 cluster_temperature: float = 1.0, augment: Literal["color", "simsiam28"] = "color",
                 crop_scale: tuple[float, float] = (0.08, 1.0), memory_efficient_chunk: int | None = None,
                 color_strength: float = 0.5, blur: bool = False, average_target: bool = False,
                 cluster_target_encoder: Literal["own", "global"] = "own", cluster_ema_decay: float | None = None,
                 entropy_weight: float = 1.0):
        super().__init__(num_clusters, batch_size)
        self.save_hyperparameters()
        check_common(self.hparams, num_clusters)
        if not entropy_weight >= 0:
            raise MethodArgError("entropy_weight", entropy_weight, "a non-negative number")
        for name in ("representation_rounds", "cluster_rounds", "local_epochs", "cluster_local_epochs"):
            if getattr(self.hparams, name) < (0 if name.endswith("rounds") else 1):
                raise MethodArgError(name, getattr(self.hparams, name), "a non-negative integer"
                                  if name.endswith("rounds") else "a positive integer")
        if representation_rounds + cluster_rounds == 0:
            raise MethodArgError("cluster_rounds", 0,
                              "a positive integer when representation_rounds is 0")
        if representation_rounds == 0 and cluster_target_encoder == "own":  # no client has a target of its own yet
            raise MethodArgError("cluster_target_encoder", "own",
                              "global when representation_rounds is 0 (a client's own target encoder comes from its "
                              "representation rounds)")
        self.automatic_optimization = False  # the EMA follows each optimizer step inside training_step
        self._views_gen: torch.Generator | None = None
        self._stage = "representation"

    def validate(self, info: DataInfo, num_clients: int) -> None:
        if not info.is_image:
            raise ConfigError("data.name", "vector data", "an image data set (MCC trains on augmented views)")

    def build(self, info: DataInfo) -> None:
        super().build(info)
        hp = self.hparams
        self.encoder = build_backbone(hp.backbone, info.in_channels, info.input_size or None,
                                      in_features=info.num_features, resize=hp.resize)
        rep = self.encoder.out_dim
        self.instance_head = mlp_head(rep, hp.head_hidden or rep, hp.instance_dim)
        self.build_cluster_heads(rep, hp.head_hidden)
        # Targets = copies of the global initialisation: every client's round-1 target (see module doc).
        self.target_encoder = frozen_copy(self.encoder)
        self.target_instance_head = frozen_copy(self.instance_head)
        self.views = make_views(hp.augment, hp.crop_scale, hp.color_strength, hp.blur)

    def stages(self) -> list[Stage]:
        hp = self.hparams
        return [Stage("representation", hp.representation_rounds, hp.local_epochs),
                Stage("cluster", hp.cluster_rounds, hp.cluster_local_epochs)]

    def communicated(self) -> list[str]:
        keys = list(self.state_dict())
        return keys if self.hparams.average_target else [k for k in keys if not k.startswith(TARGET)]

    def aggregation_weights(self, ctx: ClientContext) -> dict[str, float] | None:
        # Algorithm 1 line 7 averages f and g_I; Algorithm 2 line 7 averages g_C only (and, for Table VII,
        # each target with its online twin).
        if ctx.stage.name == "cluster":
            kept = ("encoder.", "instance_head.")
        else:
            kept = ("cluster_head.",)
        return {prefix: 0.0 for p in kept for prefix in (p, TARGET + p)}

    def online_parameters(self) -> list[nn.Parameter]:
        return [p for name, p in self.named_parameters() if not name.startswith(TARGET)]

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return CpuAdam(self.online_parameters(), lr=self.hparams.lr, foreach=True)

    # --- training ------------------------------------------------------------------------------------
    def on_client_start(self, ctx: ClientContext) -> None:
        self._views_gen = ctx.generator("views")
        self._stage = ctx.stage.name

    def views_generator(self, x: Tensor) -> torch.Generator:
        if self._views_gen is None:
            raise RuntimeError(f"{type(self).__name__}.training_step needs a client context (the engine)")
        return self._views_gen

    def instance_loss(self, za_o: Tensor, zb_o: Tensor, za_t: Tensor, zb_t: Tensor) -> Tensor:
        """Eq. (8): instance contrast between each view's online and the other view's target projection."""
        tau = self.hparams.instance_temperature
        return 0.5 * (nt_xent(za_o, zb_t, tau) + nt_xent(za_t, zb_o, tau))

    def instance_online(self, x: Tensor) -> Tensor:
        return self.instance_head(self.encoder(x))

    def representation_step(self, x: Tensor, generator: torch.Generator) -> Tensor:
        """One step of Algorithm 1 lines 12-13: returns the detached loss."""
        x_a, x_b = two_views(self.views, x, generator)
        with torch.no_grad():
            za_t, zb_t = (self.target_instance_head(self.target_encoder(v)) for v in (x_a, x_b))
        optimizer = self.optimizers()
        optimizer.zero_grad(set_to_none=True)
        loss = backward(self, self.instance_online, [x_a, x_b],
                        lambda za, zb: self.instance_loss(za, zb, za_t, zb_t), self.hparams.memory_efficient_chunk)
        optimizer.step()
        ema_update(self.target_encoder, self.encoder, self.hparams.ema_decay)
        ema_update(self.target_instance_head, self.instance_head, self.hparams.ema_decay)
        return loss

    def training_step(self, batch: object, batch_idx: int) -> Tensor:
        x = batch_inputs(batch)
        generator = self.views_generator(x)
        if self._stage == "cluster":
            return self.cluster_step(x, generator)
        return self.representation_step(x, generator)

    # --- evaluation ----------------------------------------------------------------------------------
    def embed(self, x: Tensor) -> Tensor:
        return self.encoder(x)

    def assign(self, x: Tensor) -> Tensor:
        return self.cluster_assign(x)

"""Contrastive Clustering (Li et al., AAAI 2021) as a family: CC's network (backbone f, instance head g_I,
cluster head g_C), its local loss (instance NT-Xent + cluster-column NT-Xent + marginal entropy), the
generator-seeded views and the memory-efficient gradients (FedMCC Sec. VI). FedCC, FedPNP, the centralized CC
and Single-Training SimCLR are methods built on `ContrastiveClustering`; `encode` (the outputs a loss needs
per view), `batch_loss` (the loss of those outputs) and `views_of` (the augmentation) are the hooks they
override. See fedclust/methods/fedcc.py for the settings and their sources."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from fedclust.contract import ClientContext, DataInfo, FederatedMethod, Stage
from fedclust.data.views import ColorViews, two_views
from fedclust.errors import ConfigError, MethodArgError
from fedclust.losses.contrastive import cluster_contrastive_loss, instance_contrastive_loss
from fedclust.nn.backbones import build_backbone
from fedclust.nn.heads import mlp_head
from fedclust.nn.memory_efficient import chunked_backward
from fedclust.nn.optim import CpuAdam


def build_cc_network(backbone: str, info: DataInfo, num_clusters: int | None, instance_dim: int = 128,
                     resize: int | None = None) -> tuple[nn.Module, nn.Module, nn.Module | None]:
    """CC's backbone, instance head and cluster head (None when ``num_clusters`` is None: SimCLR)."""
    trunk = build_backbone(backbone, info.in_channels, info.input_size or None, in_features=info.num_features,
                           resize=resize)
    rep = trunk.out_dim
    instance = mlp_head(rep, rep, instance_dim)
    cluster = mlp_head(rep, rep, num_clusters, softmax=True) if num_clusters is not None else None
    return trunk, instance, cluster


def batch_inputs(batch: object) -> Tensor:
    """The images of a batch: the engine's dict, or a DataLoader's tensor / (x, ...) sequence."""
    if isinstance(batch, dict):
        return batch["x"]
    if isinstance(batch, list | tuple):
        return batch[0]
    return batch


class ContrastiveClustering(FederatedMethod):
    """Contrastive Clustering trained by the engine (FedAvg of every weight unless a subclass says otherwise).

    Args:
        num_clusters: K (cluster head width); None takes the number of classes of the data.
        backbone: convnet28, mlp, resnet18/34/50 (ImageNet stem) or resnet18_cifar/... (3x3 stem).
        resize: Resize inputs to this side before the backbone (FedPNP resizes to 224; None keeps the size).
        rounds: Communication rounds (100 in FedPNP).
        local_epochs: Local epochs per round (5 in FedPNP).
        batch_size: Local mini-batch size (128 in FedPNP).
        lr: Adam learning rate (3e-4 in FedPNP).
        instance_dim: Output width of the instance head (128).
        instance_temperature: tau_I (0.5).
        cluster_temperature: tau_C (1.0).
        crop_scale: Area range of the random resized crop (CC: torchvision's default 0.08-1).
        memory_efficient_chunk: Encode this many samples at a time with chunked gradients (None: ordinary
            back-propagation).
    """

    def __init__(self, num_clusters: int | None = None, backbone: str = "convnet28", resize: int | None = None,
                 rounds: int = 100, local_epochs: int = 5, batch_size: int = 128, lr: float = 3e-4,
                 instance_dim: int = 128, instance_temperature: float = 0.5, cluster_temperature: float = 1.0,
                 crop_scale: tuple[float, float] = (0.08, 1.0), memory_efficient_chunk: int | None = None):
        super().__init__(num_clusters, batch_size)
        self.save_hyperparameters()
        self._check_options()
        # chunked_backward accumulates the gradients itself: the method steps the optimizer (manual mode)
        self.automatic_optimization = memory_efficient_chunk is None
        self._augment_gen: torch.Generator | None = None

    def _check_options(self) -> None:
        hp = self.hparams
        positive = {"rounds": hp.rounds, "batch_size": hp.batch_size, "instance_dim": hp.instance_dim}
        for name, value in positive.items():
            if int(value) < 1:
                raise MethodArgError(name, value, "a positive integer")
        if hp.local_epochs < 1:
            raise MethodArgError("local_epochs", hp.local_epochs, "a positive integer")
        for name in ("lr", "instance_temperature", "cluster_temperature"):
            if not getattr(hp, name) > 0:
                raise MethodArgError(name, getattr(hp, name), "a positive number")
        lo, hi = tuple(hp.crop_scale)
        if not 0 < lo <= hi <= 1:
            raise MethodArgError("crop_scale", list(hp.crop_scale), "two numbers 0 < low <= high <= 1")
        if hp.memory_efficient_chunk is not None and hp.memory_efficient_chunk < 1:
            raise MethodArgError("memory_efficient_chunk", hp.memory_efficient_chunk,
                              "a positive integer (samples per chunk) or null")
        if self.num_clusters is not None and self.num_clusters < 2:
            raise MethodArgError("num_clusters", self.num_clusters, "at least 2 or null")

    def validate(self, info: DataInfo, num_clients: int) -> None:
        if not info.is_image:
            raise ConfigError("data.name", "vector data", "an image data set (CC trains on augmented views)")

    def build(self, info: DataInfo) -> None:
        super().build(info)
        hp = self.hparams
        self.backbone, self.instance_head, self.cluster_head = build_cc_network(
            hp.backbone, info, self.num_clusters, hp.instance_dim, hp.resize)
        self.views = ColorViews(scale=tuple(hp.crop_scale))

    def stages(self) -> list[Stage]:
        return [Stage("train", self.hparams.rounds, self.hparams.local_epochs)]

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return CpuAdam(self.parameters(), lr=self.hparams.lr, foreach=True)

    # --- training ------------------------------------------------------------------------------------
    def on_client_start(self, ctx: ClientContext) -> None:
        self._augment_gen = ctx.generator("augment")

    def augment_generator(self, x: Tensor) -> torch.Generator:
        """The generator of this batch's views: the client's (engine) — subclasses run without one."""
        if self._augment_gen is None:
            raise RuntimeError(f"{type(self).__name__}.training_step needs a client context (the engine)")
        return self._augment_gen

    def encode(self, x: Tensor) -> tuple[Tensor, ...]:
        """Per-sample outputs the loss needs: (instance projection, cluster probabilities)."""
        h = self.backbone(x)
        return self.instance_head(h), self.cluster_head(h)

    def batch_loss(self, z_a: Tensor, c_a: Tensor, z_b: Tensor, c_b: Tensor) -> Tensor:
        """CC's loss (REFERENCE.md; FedPNP eqs. 4 and 7): instance NT-Xent + cluster NT-Xent + entropy."""
        hp = self.hparams
        return (instance_contrastive_loss(z_a, z_b, hp.instance_temperature)
                + cluster_contrastive_loss(c_a, c_b, hp.cluster_temperature))

    def before_loss(self, x_a: Tensor, x_b: Tensor) -> None:
        """Called with the two views before they are encoded (FedPNP runs its past model here)."""

    def training_step(self, batch: object, batch_idx: int) -> Tensor:
        x = batch_inputs(batch)
        x_a, x_b = two_views(self.views, x, self.augment_generator(x))
        self.before_loss(x_a, x_b)
        chunk = self.hparams.memory_efficient_chunk
        if chunk is None:
            return self.batch_loss(*self.encode(x_a), *self.encode(x_b))
        optimizer = self.optimizers()
        optimizer.zero_grad(set_to_none=True)
        loss = chunked_backward(self.encode, [x_a, x_b], self.batch_loss, chunk)
        optimizer.step()
        return loss

    # --- evaluation ----------------------------------------------------------------------------------
    def embed(self, x: Tensor) -> Tensor:
        return self.backbone(x)

    def assign(self, x: Tensor) -> Tensor:
        return self.cluster_head(self.backbone(x)).argmax(1)

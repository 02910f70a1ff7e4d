"""CCFC's machinery as a family (Yan et al., "CCFC: Bridging Federated Clustering and Contrastive Learning",
papers/ccfc-cluster-contrastive-federated-clustering.md): SimSiam encoder + predictor, the model-contrastive term,
the cluster-contrastive stage on pseudo-labels from the global centroids, local k-means on each client's z and
server k-means on the local centroids. CCFC (fedclust/methods/ccfc.py, where the settings and their sources are
written) and CCFC++ (fedclust/methods/ccfcpp.py) are methods built on `ClusterContrastiveFC`; `regulariser`
(a term added to the local loss, given the batch's z of every view) is the hook CCFC++ overrides."""


from __future__ import annotations

import copy
from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from fedclust.clustering.floor import floored_groups
from fedclust.clustering.kmeans import assign_nearest, kmeans
from fedclust.contract import (
    ClientContext,
    ClientUpdate,
    DataInfo,
    FederatedMethod,
    RoundContext,
    Stage,
    local_weights,
)
from fedclust.data.views import ColorViews, SimSiamViews28
from fedclust.errors import NotFittedError
from fedclust.losses.simsiam import cluster_contrastive_loss, model_contrastive_loss, simsiam_loss
from fedclust.nn.backbones import build_backbone
from fedclust.nn.heads import predictor, projector
from fedclust.nn.optim import CpuAdam
from fedclust.seeding import int_seed


class ClusterContrastiveFC(FederatedMethod):
    """CCFC and its ablations (SCFC, lambda = 0, standalone); see fedclust/methods/ccfc.py.

    Args:
        num_clusters: k; None takes the number of classes of the data.
        backbone: convnet28 (3-conv trunk of the paper for MNIST/Fashion-MNIST), resnet18_cifar, resnet18, mlp.
        latent_dim: Size of z (256 MNIST, 64 Fashion-MNIST, 256 CIFAR-10/STL-10 in the paper).
        projector_hidden: Hidden width of the projector.
        predictor_hidden: Bottleneck width of the predictor.
        lam: Weight of the model-contrastive term (0.001 / 1 / 0.1 / 0.1 in the paper).
        pretrain_rounds: Rounds of SimSiam pretraining (stage 1).
        cluster_rounds: Rounds of cluster-contrastive training (stage 2).
        local_epochs: Local epochs per round.
        batch_size: Local mini-batch size.
        lr: Adam learning rate.
        augment: Stage-1 views: simsiam28 (crop, rotation 10, blur) or color (SimCLR-style).
        crop_scale: Area range of the random resized crop (0.5-1 in the reference code; tiny 8x8 images
            need a gentler range).
        blur_sigma: Range of the stage-1 Gaussian blur's sigma in pixels (the official code's 0.1-2 on 28x28
            images; smaller images need it scaled, e.g. 0.1-0.6 on 8x8 digits).
        jitter: Brightness/contrast jitter of the simsiam28 views (factors U[1 - jitter, 1 + jitter], p 0.8);
            0 (the official MNIST code) draws nothing. Fashion-MNIST needs it: without it SimSiam's z
            encodes image brightness (docs/findings/ccfc.md).
        resize: Resize inputs to this side before the backbone (None keeps the data's size).
        scfc: Keep the SimSiam loss in stage 2 (the SCFC baseline).
        standalone: No averaging: every client keeps its own model (the standalone ablation).
        exclude_self: Cluster-contrastive loss as eqs. (1)-(2) print it instead of the reference code.
        kmeans_niter: Lloyd iterations of the local and server k-means.
        kmeans_redo: Restarts of the local and server k-means (the best inertia is kept).
        sync_init: True: every client starts round 1 from the global initialisation (Algorithm 1 as printed);
            False: from its own random initialisation, seeded by (seed, client), as the reference code does.
    """

    summary_keys = {"centroids": "centroid_counts"}  # local k-means centroids and their clusters' sizes

    def __init__(self, num_clusters: int | None = None, backbone: str = "convnet28", latent_dim: int = 64,
                 projector_hidden: int = 256, predictor_hidden: int = 16, lam: float = 1.0,
                 pretrain_rounds: int = 100, cluster_rounds: int = 30, local_epochs: int = 1,
                 batch_size: int = 128, lr: float = 1e-3, augment: Literal["simsiam28", "color"] = "simsiam28",
                 crop_scale: tuple[float, float] = (0.5, 1.0), blur_sigma: tuple[float, float] = (0.1, 2.0),
                 jitter: float = 0.0, resize: int | None = None, scfc: bool = False, standalone: bool = False,
                 exclude_self: bool = False, kmeans_niter: int = 100, kmeans_redo: int = 3,
                 sync_init: bool = True):
        super().__init__(num_clusters, batch_size)
        self.save_hyperparameters()
        self.centroids: Tensor | None = None  # global centroids (server state)
        self.client_maps: dict[int, Tensor] = {}  # standalone: local centroid -> global cluster

    def build(self, info: DataInfo) -> None:
        super().build(info)
        hp = self.hparams
        trunk = build_backbone(hp.backbone, info.in_channels, info.input_size or None,
                               in_features=info.num_features, resize=hp.resize)
        self.encoder = nn.Sequential(trunk, projector(trunk.out_dim, hp.projector_hidden, hp.latent_dim))
        self.predictor = predictor(hp.latent_dim, hp.predictor_hidden)
        scale = tuple(hp.crop_scale)
        self.views = (SimSiamViews28(scale=scale, sigma=tuple(hp.blur_sigma), jitter=hp.jitter)
                      if hp.augment == "simsiam28"
                      else ColorViews(scale=scale))
        # The frozen global model of the model-contrastive term: one copy, refreshed once per round
        # (kept in a dict so it is neither a submodule nor part of the communicated state).
        self._frozen = {"net": copy.deepcopy(nn.Sequential(self.encoder, self.predictor)).requires_grad_(False)}

    def bf16_by_default(self) -> bool:
        # bf16 + channels-last kept NMI within seed noise of fp32 over three seeds and trained the ConvNet28
        # 1.7x faster at one thread (benchmarks/results/precision_quality.md, cpu_speed.md); the MLP trunk
        # gained nothing, the ResNets were not measured.
        return self.hparams.backbone == "convnet28"

    def local_clusters(self) -> int | None:
        return self.num_clusters  # every client runs k-means with k clusters on its own z

    def stages(self) -> list[Stage]:
        hp = self.hparams
        return [Stage("pretrain", hp.pretrain_rounds, hp.local_epochs), Stage("cluster", hp.cluster_rounds,
                                                                              hp.local_epochs)]

    def communicated(self) -> list[str]:
        return [] if self.hparams.standalone else super().communicated()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return CpuAdam(self.parameters(), lr=self.hparams.lr, foreach=True)

    # --- client ------------------------------------------------------------------------------------
    def on_round_start(self, ctx: RoundContext) -> None:
        if self.hparams.lam and not self.hparams.standalone:
            frozen = self._frozen["net"].to(self.device)
            frozen.load_state_dict(nn.Sequential(self.encoder, self.predictor).state_dict())
            frozen.eval()

    def on_client_start(self, ctx: ClientContext) -> None:
        if not self.hparams.sync_init and ctx.stage_index == 0 and ctx.round == 0:
            self._own_initialisation(ctx)
        self._augment_gen = ctx.generator("augment")
        self._pseudo = None
        centroids = ctx.state.get("centroids", self.centroids) if self.hparams.standalone else self.centroids
        # a cluster round before any centroid exists (no client took part so far) keeps the stage-1 objective
        if ctx.stage.name == "cluster" and not self.hparams.scfc and centroids is not None:
            self.eval()
            with torch.no_grad():
                z = torch.cat([self.embed(x) for x in ctx.data.iter_all()])
            self._pseudo = assign_nearest(z, centroids.to(z), cosine=True)
            self._client_indices = ctx.data.indices.to(z.device)  # once per client, not per batch

    def _own_initialisation(self, ctx: ClientContext) -> None:
        # the reference code builds one network per client and loads the global one only from round 2
        cuda = [self.device] if self.device.type == "cuda" else []
        with torch.random.fork_rng(devices=cuda):  # torch's global RNG is left as it was
            torch.manual_seed(int_seed(ctx.seed, "client-init", ctx.client_id))
            for module in (*self.encoder.modules(), *self.predictor.modules()):
                if hasattr(module, "reset_parameters"):
                    module.reset_parameters()

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        return self.loss_from_inputs(self.batched_inputs(batch))

    def batched_inputs(self, batch: dict[str, Tensor]) -> dict[str, Tensor]:
        """Stage 1 (SimSiam): the batch's two views, drawn from the client's generator; the cluster stage: the
        un-augmented images and their pseudo-labels."""
        x = batch["x"]
        if self._pseudo is None:  # SimSiam (stage 1, or stage 2 of SCFC)
            return {"x1": self.views(x, self._augment_gen), "x2": self.views(x, self._augment_gen)}
        labels = self._pseudo[torch.searchsorted(self._client_indices, batch["index"].to(x.device))]
        return {"x": x, "labels": labels}

    def loss_from_inputs(self, inputs: dict[str, Tensor]) -> Tensor:
        lam = self.hparams.lam
        frozen = self._frozen["net"] if lam and not self.hparams.standalone else None
        if "labels" not in inputs:
            x1, x2 = inputs["x1"], inputs["x2"]
            z1, z2 = self.encoder(x1), self.encoder(x2)
            p1, p2 = self.predictor(z1), self.predictor(z2)
            loss = simsiam_loss(p1, p2, z1, z2)
            if frozen is not None:
                with torch.no_grad():
                    g1, g2 = frozen(x1), frozen(x2)
                loss = loss + lam * 0.5 * (model_contrastive_loss(p1, g1) + model_contrastive_loss(p2, g2))
            return self._regularised(loss, [z1, z2])
        x = inputs["x"]
        z = self.encoder(x)
        p = self.predictor(z)
        # the pseudo-labels are global cluster ids: grouped over a table of num_clusters rows (a fixed shape)
        loss = cluster_contrastive_loss(p, z, inputs["labels"], exclude_self=self.hparams.exclude_self,
                                        num_clusters=self.num_clusters, label_count=self.num_clusters)
        if frozen is not None:
            with torch.no_grad():
                g = frozen(x)
            loss = loss + lam * model_contrastive_loss(p, g)
        return self._regularised(loss, [z])

    def regulariser(self, zs: list[Tensor]) -> Tensor | None:
        """A term added to the local loss, given the batch's z of each view (one view in the cluster stage);
        None adds nothing (CCFC). Read ``self.ctx`` for the stage."""
        return None

    def _regularised(self, loss: Tensor, zs: list[Tensor]) -> Tensor:
        extra = self.regulariser(zs)
        return loss if extra is None else loss + extra

    def on_client_end(self, ctx: ClientContext) -> dict[str, Tensor]:
        with torch.no_grad():
            z = torch.cat([self.embed(x) for x in ctx.data.iter_all()])
        seed = int_seed(ctx.seed, "local-kmeans", ctx.stage_index, ctx.round, ctx.client_id)
        result = kmeans(z, self.num_clusters, niter=self.hparams.kmeans_niter, nredo=self.hparams.kmeans_redo,
                        seed=seed)
        centroids, counts = result.centroids, torch.bincount(result.labels, minlength=self.num_clusters).float()
        if float(counts.min()) < ctx.min_summary_size:  # a cluster below the privacy floor joins its nearest
            centroids, counts, _ = floored_groups(z, result.labels, ctx.min_summary_size)
        if self.hparams.standalone:
            ctx.state["centroids"] = centroids.cpu()
        return {"centroids": centroids, "centroid_counts": counts}

    def summary_norm_bound(self) -> float:
        return 1.0  # the local centroids are k-means means of unit-normalised z (embed): DP noise may apply

    # --- server ------------------------------------------------------------------------------------
    def aggregate(self, averaged: dict[str, Tensor] | None, updates: list[ClientUpdate],
                  ctx: RoundContext) -> None:
        super().aggregate(averaged, updates, ctx)
        updates = [u for u in updates if len(u.payload["centroids"])]  # a client below the floor sent none
        local = torch.cat([u.payload["centroids"] for u in updates])
        result = kmeans(local, self.num_clusters, niter=self.hparams.kmeans_niter,
                        nredo=self.hparams.kmeans_redo, seed=int_seed(ctx.seed, "server-kmeans",
                                                                      ctx.stage_index, ctx.round))
        self.centroids = result.centroids
        offsets = torch.tensor([0] + [len(u.payload["centroids"]) for u in updates]).cumsum(0)
        self.client_maps.update({u.client_id: result.labels[offsets[i]:offsets[i + 1]].cpu()
                                 for i, u in enumerate(updates)})

    def server_state(self) -> dict[str, Any]:
        return {"centroids": self.centroids, "client_maps": self.client_maps}

    def load_server_state(self, state: dict[str, Any]) -> None:
        self.centroids = state["centroids"]
        self.client_maps = dict(state["client_maps"])

    # --- evaluation ---------------------------------------------------------------------------------
    def embed(self, x: Tensor) -> Tensor:
        return F.normalize(self.encoder(x), dim=1)

    def assign(self, x: Tensor) -> Tensor:
        if self.centroids is None:
            raise NotFittedError("CCFC has no global centroids yet (no client has sent local centroids)")
        return assign_nearest(self.embed(x), self.centroids.to(x.device), cosine=True)

    @torch.no_grad()
    def predict(self, data, client_states: dict[int, dict[str, Any]]) -> Tensor:
        if not self.hparams.standalone:
            return super().predict(data, client_states)
        self.eval()
        shared = copy.deepcopy(self.state_dict())
        labels = torch.full((len(data),), -1, dtype=torch.long)  # -1: a client that never trained has no labels
        for cid, state in client_states.items():
            own = local_weights(state)
            if own is None or cid not in self.client_maps:
                continue
            self.load_state_dict(own, strict=False)
            client = data.client(cid, self.batch_size)
            z = torch.cat([self.embed(x) for x in client.iter_all()])
            local = assign_nearest(z, state["centroids"].to(z), cosine=True)
            labels[client.indices.cpu()] = self.client_maps[cid][local.cpu()]
        self.load_state_dict(shared)
        return labels

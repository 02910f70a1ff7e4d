"""FedSpectral: fedclust's own federated clustering method, built for class skew and for a privacy floor.

What it does, each round (findings and figures: docs/findings/fedspectral.md):
- Clients train one shared model by FedAvg: SimCLR's NT-Xent between two views (Chen et al., ICML 2020) plus
  FedDecorr's decorrelation of z (Shi et al., ICLR 2023), which keeps contrastive training from collapsing into a
  few directions under label skew; optionally (`cluster_weight`) a supervised contrastive term (Khosla et al.,
  NeurIPS 2020) whose positives are the samples the federation's last clustering put together, so that the
  representation learns the server's clusters (the idea of Orchestra, Lubana et al., ICML 2022); optionally
  (`neighbor_positives`) a sample's second view drawn from one of its nearest samples of the client in the round's
  clustering space (NNCLR's neighbours as positives, Dwibedi et al., ICCV 2021, taken in the client's own data, as
  SCAN mines them, Van Gansbeke et al., ECCV 2020). The trunk uses
  GroupNorm (Hsieh et al., ICML 2020): it learns nothing of a client's class mix from batch statistics.
- The clustering space (`cluster_space`): the trunk's features, beside the images' histograms of oriented
  gradients for images (a fixed, brightness-blind descriptor of shape, Dalal & Triggs, CVPR 2005).
- Summaries, the server's step and the labels are the SummarySpectral family's (fedclust/methods/families/
  summary_spectral.py): each client sends the means of fixed groups of its samples in the round's clustering space
  (equal sizes, at least `summary_size`, by default the run's floor federation.min_summary_size), optionally
  smoothed over its own graph (`smooth_steps`); the server clusters them spectrally on a sparse nearest-neighbour
  graph; each client labels a sample by its nearest summary's cluster, spread over its own graph and voted over
  its last `round_vote` rounds (or, `labelling: walk`, by a two-level random walk over every client's own graph
  and all summaries, fedclust/clustering/two_level_walk.py).

What leaves a client: the model's weights, and per round n / summary_size means of fixed groups of at least the
floor's samples each, with their counts (with `labelling: walk`, also per evaluation step of the walk one
mean of k numbers per group and a k x k Gram). No raw or per-sample vector, no group redrawn (so the server cannot
difference two groupings of the same samples; the smoothing graph is fixed with the groups, so a summary stays one
combination of the same samples), no label. Fine structure stays on the client: its own graph.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal, get_args

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from fedclust.clustering.knn_vote import nearest_neighbors
from fedclust.contract import ClientContext, DataInfo, Stage
from fedclust.data.hog import hog
from fedclust.data.views import ColorViews, SimSiamViews28
from fedclust.errors import MethodArgError
from fedclust.losses.contrastive import nt_xent, supervised_nt_xent
from fedclust.losses.decorrelation import decorrelation_loss
from fedclust.methods.families.summary_spectral import (
    Labelling,
    SummarySpectral,
    check_summary_settings,
    check_walk_settings,
)
from fedclust.nn.backbones import build_backbone
from fedclust.nn.optim import CpuAdam

ClusterSpace = Literal["backbone", "hog+backbone"]
CLUSTER_SPACES = get_args(ClusterSpace)
TEMPERATURE = 0.5  # NT-Xent's temperature (SimCLR's)


class FedSpectral(SummarySpectral):
    """Decorrelated contrastive training, fixed-group summaries under the floor, spectral clustering of them.

    Args:
        num_clusters: K; None takes the number of classes of the data.
        backbone: convnet28, mlp, resnet18/34/50 or resnet18_cifar/... (GroupNorm, or LayerNorm in convnet28/mlp).
        projector_hidden: Hidden width of the projector (Linear + ReLU + Linear).
        projector_rank: None, or the projector's first layer factored through this many numbers (Linear(in, rank,
            no bias) then Linear(rank, hidden)): the trunk's flat features within CCFC's memory.
        latent_dim: Width of z, what the contrastive and decorrelation terms see.
        rounds: Communication rounds.
        local_epochs: Local epochs per round.
        batch_size: Local mini-batch size.
        lr: Adam learning rate.
        decorrelation_weight: Weight of FedDecorr's term on z (mean over the two views).
        augment: simsiam28 (CCFC's crop, rotation, blur, with brightness/contrast jitter: 28x28 grey images) or
            color (SimCLR's crop, flip, colour jitter, grey). Vector data take Gaussian noise as their views.
        crop_scale: Area range of the random resized crop.
        blur_sigma: Blur range of the simsiam28 views in pixels.
        summary_size: Samples a client's fixed groups hold at least (n // summary_size equal groups); None: the
            run's floor, federation.min_summary_size, the most summaries the floor allows. Below the floor the
            engine refuses the summaries.
        neighbors: Nearest neighbours of each summary in the server's spectral graph.
        cluster_space: Where summaries are made and samples labelled: "backbone" (the trunk's unit features: any
            data) or "hog+backbone" (the images' unit HOG beside them, each block weighing the same: images only).
        hog_cell: In "hog+backbone", the side in pixels of the HOG's cells (9 orientation bins each).
        spread_neighbors: Each client's graph over its own samples: each sample and its this many nearest (0: no
            spreading, a sample keeps its nearest summary's cluster).
        spread_alpha: Label spreading's alpha over that graph, in [0, 1) (how far a label travels).
        round_vote: A client labels its samples by a vote over its labels of its last this many evaluated rounds
            (cluster ids renamed by overlap; 1: the last round's alone).
        smooth_steps: Propagation steps of each client's clustering-space rows over its own graph (the sample and its
            spread_neighbors nearest, built the first round the client takes part and kept, as its groups are)
            before they are grouped, summarised and labelled (0: none; no config sets it, docs/findings/fedspectral.md).
        smooth_alpha: The share of each step taken from the neighbours, in [0, 1] (the rest returns to the row).
        cluster_weight: Weight of the supervised contrastive term on z (0: none). From the second round a client
            labels its samples as it does for evaluation (nearest summary of the server's last clustering, spread
            over its own graph; no vote, no true label) and treats same-label samples of a batch as positives (no
            config sets it, docs/findings/fedspectral.md).
        neighbor_positives: A sample's second view is drawn from itself or, as likely each, one of its this many
            nearest samples of the client, found each round in the clustering space of the round's global model (0:
            its own second view, SimCLR's pair). The neighbours stay on the client; nothing more leaves (no config
            sets it, docs/findings/fedspectral.md).
        labelling: How a client labels its samples from the server's clustering: "nearest" (its nearest summary's
            cluster, spread over its own graph) or "walk" (the leading eigenvectors of a random walk that steps on the
            client's own spread_neighbors graph and to the walk_links nearest summaries of any client, and from a
            summary to its group's members or its server neighbours; spread_alpha is not used, walk_spread_alpha
            is; cluster_weight's labels stay the nearest summary's). With the walk federation.dp_epsilon is refused:
            its messages are not noised.
        walk_restart: The walk's chance of stepping from a sample to a summary rather than to a neighbour, in (0, 1).
        walk_server: The walk's chance of stepping from a summary to a server neighbour rather than to one of its
            group's members, in (0, 1).
        walk_links: The nearest summaries a sample steps to.
        walk_iterations: Block power steps (federated exchanges) that find the walk's eigenvectors, per evaluation.
        walk_spread_alpha: Label spreading's alpha for the walk's labels over each client's own graph, in [0, 1)
            (0: a sample keeps the walk's label).
    """

    def __init__(self, num_clusters: int | None = None, backbone: str = "convnet28", projector_hidden: int = 512,
                 projector_rank: int | None = None, latent_dim: int = 128, rounds: int = 30, local_epochs: int = 1,
                 batch_size: int = 128, lr: float = 1e-3, decorrelation_weight: float = 1.0,
                 augment: Literal["simsiam28", "color"] = "simsiam28", crop_scale: tuple[float, float] = (0.5, 1.0),
                 blur_sigma: tuple[float, float] = (0.1, 2.0), summary_size: int | None = None, neighbors: int = 5,
                 cluster_space: ClusterSpace = "backbone", hog_cell: int = 4, spread_neighbors: int = 5,
                 spread_alpha: float = 0.99, round_vote: int = 10, smooth_steps: int = 0, smooth_alpha: float = 0.9,
                 cluster_weight: float = 0.0, neighbor_positives: int = 0, labelling: Labelling = "nearest",
                 walk_restart: float = 0.1, walk_server: float = 0.5, walk_links: int = 5, walk_iterations: int = 300,
                 walk_spread_alpha: float = 0.0):
        super().__init__(num_clusters, batch_size)
        self.save_hyperparameters()
        check_summary_settings(summary_size, neighbors, spread_neighbors, spread_alpha, round_vote, smooth_steps,
                               smooth_alpha)
        check_walk_settings(labelling, walk_restart, walk_server, walk_links, walk_iterations, spread_neighbors,
                            walk_spread_alpha)
        for name, value, low in (("hog_cell", hog_cell, 1), ("neighbor_positives", neighbor_positives, 0)):
            if not isinstance(value, int) or value < low:
                raise MethodArgError(name, value, f"an integer >= {low}")
        if projector_rank is not None and (not isinstance(projector_rank, int) or projector_rank < 1):
            raise MethodArgError("projector_rank", projector_rank, "null or an integer >= 1")
        if cluster_space not in CLUSTER_SPACES:
            raise MethodArgError("cluster_space", cluster_space, ", ".join(CLUSTER_SPACES))
        for name, value in (("decorrelation_weight", decorrelation_weight), ("cluster_weight", cluster_weight)):
            if not value >= 0:
                raise MethodArgError(name, value, "a non-negative number")
        self._sample_ids: Tensor | None = None  # client: its sample indices (sorted), how a batch finds its rows
        self._pseudo: Tensor | None = None  # client: its samples' labels from the server's last clustering
        # client: each sample's candidates (itself and its nearest), and the samples' gather
        self._partners: tuple[Tensor, Callable[[Tensor], Tensor]] | None = None

    def build(self, info: DataInfo) -> None:
        super().build(info)
        hp = self.hparams
        if hp.cluster_space == "hog+backbone":
            if not info.is_image:
                raise MethodArgError("cluster_space", hp.cluster_space,
                                  "backbone (the data are vectors, not "
                                  "images, and have no histograms of oriented gradients)")
            if hp.hog_cell > info.input_size:
                raise MethodArgError("hog_cell", hp.hog_cell,
                                  f"an integer from 1 to the images' side, {info.input_size}")
        self.trunk = build_backbone(hp.backbone, info.in_channels, info.input_size or None,
                                    in_features=info.num_features, norm="group")
        first = ([nn.Linear(self.trunk.out_dim, hp.projector_rank, bias=False)] if hp.projector_rank else [])
        width = hp.projector_rank or self.trunk.out_dim
        self.projector = nn.Sequential(*first, nn.Linear(width, hp.projector_hidden), nn.ReLU(inplace=True),
                                       nn.Linear(hp.projector_hidden, hp.latent_dim))
        if not info.is_image:
            self.views = None  # vectors: views are the samples themselves plus Gaussian noise (see _view)
        elif hp.augment == "simsiam28":
            self.views = SimSiamViews28(scale=tuple(hp.crop_scale), sigma=tuple(hp.blur_sigma), jitter=0.4)
        else:
            self.views = ColorViews(scale=tuple(hp.crop_scale))

    def stages(self) -> list[Stage]:
        return [Stage("train", self.hparams.rounds, self.hparams.local_epochs)]

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return CpuAdam(self.parameters(), lr=self.hparams.lr, foreach=True)

    # --- client ------------------------------------------------------------------------------------
    def on_client_start(self, ctx: ClientContext) -> None:
        self._augment_gen = ctx.generator("augment")
        # Summaries come from the global model, before local training, so that every client describes its samples
        # in the one space the server clusters in.
        h = self.make_summaries(ctx)
        # A client's indices are sorted (as CCFC's pseudo-labels also rely on), so a batch finds its rows by binary
        # search; both per-sample options below are read through them.
        self._sample_ids = ctx.data.indices.to(h.device)
        self._pseudo = None
        if self.hparams.cluster_weight and self.summaries is not None:
            # The last round's summaries were made one round of training earlier; the HOG block, half of every
            # cosine, does not move, and the labels only pick positives.
            self._pseudo = self.summary_labels_of(h)
        self._partners = None
        if self.hparams.neighbor_positives:  # each sample's candidates: itself and its nearest, in the round's space
            self._partners = (nearest_neighbors(h, self.hparams.neighbor_positives), ctx.data.source.gather)

    def _view(self, x: Tensor) -> Tensor:
        if self.views is None:  # vector data: a noisy copy (no image augmentation applies)
            return x + 0.1 * x.std(0, keepdim=True) * torch.randn(x.shape, generator=self._augment_gen,
                                                                   device=x.device)
        return self.views(x, self._augment_gen)

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        return self.loss_from_inputs(self.batched_inputs(batch))

    def batched_inputs(self, batch: dict[str, Tensor]) -> dict[str, Tensor]:
        """The batch's two views, drawn from the client's generator (the step's only randomness)."""
        x = batch["x"]
        rows = None
        if self._partners is not None or self._pseudo is not None:
            rows = torch.searchsorted(self._sample_ids, batch["index"].to(self._sample_ids.device))
        if self._partners is None:
            inputs = {"x1": self._view(x), "x2": self._view(x)}  # drawn in this order, as the views always were
        else:
            graph, gather = self._partners
            pick = torch.randint(graph.shape[1], (len(rows),), generator=self._augment_gen,
                                 device=self._augment_gen.device).to(graph.device)
            inputs = {"x1": self._view(x), "x2": self._view(gather(self._sample_ids[graph[rows, pick]]))}
        if self._pseudo is not None:
            inputs["y"] = self._pseudo[rows]
        return inputs

    def loss_from_inputs(self, inputs: dict[str, Tensor]) -> Tensor:
        z1, z2 = self.projector(self.trunk(inputs["x1"])), self.projector(self.trunk(inputs["x2"]))
        return self.representation_loss(z1, z2, inputs.get("y"))

    def representation_loss(self, z1: Tensor, z2: Tensor, labels: Tensor | None = None) -> Tensor:
        """NT-Xent between the two views' projections plus the weighted decorrelation of both and, given the
        samples' labels, the weighted supervised contrast."""
        loss = nt_xent(z1, z2, TEMPERATURE)
        if labels is not None:
            loss = loss + self.hparams.cluster_weight * supervised_nt_xent(z1, z2, labels, TEMPERATURE)
        if self.hparams.decorrelation_weight:
            loss = loss + self.hparams.decorrelation_weight * 0.5 * (decorrelation_loss(z1) + decorrelation_loss(z2))
        return loss

    def on_client_end(self, ctx: ClientContext) -> dict[str, Tensor]:
        self._partners = None  # holds the data set's gather: not kept past the client's visit
        return self.summary_payload()

    # --- evaluation ---------------------------------------------------------------------------------
    def embed(self, x: Tensor) -> Tensor:
        h = F.normalize(self.trunk(x), dim=1)
        if self.hparams.cluster_space == "hog+backbone":  # two unit blocks, equal shares of every cosine
            return F.normalize(torch.cat([hog(x, self.hparams.hog_cell), h], 1), dim=1)
        return h

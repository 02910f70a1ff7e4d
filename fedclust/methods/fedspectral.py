"""FedSpectral: heterogeneity-robust deep federated clustering (fedclust's own method; issue 22).

Why each part, from what the project measured on Fashion-MNIST (benchmarks/results/heterogeneity_fmnist.md,
whole_schedule_findings.md, ccfc_stage1_fmnist_test.md):
- Representation: SimCLR's NT-Xent between two augmented views (Chen et al., ICML 2020) plus FedDecorr's
  decorrelation term (Shi et al., ICLR 2023; the regulariser CCFC++ adds). Contrastive training alone collapses
  dimensionally under label skew (CCFC's z: 90 % of the variance in 3 of 64 directions; its NMI falls to 0.1 at
  p = 1); the decorrelation term keeps the directions apart, and it is computed per client batch, so it needs
  nothing but the client's own samples. Measured on 10,000 training images: without it the pipeline re-clusters
  0.008 lower at p = 0 and 0.021 lower at p = 1 (benchmarks/results/fedspectral_recluster.md, sixth pass).
- The projector sees the trunk's flat features (on convnet28 2,304 of them), so the model has 1.90 M parameters
  against CCFC's 1.32 M. Smaller inputs for it, each trunk channel's mean (`projector_input: pooled`, 0.85 M) or
  its means over a 2 x 2 grid (`pooled2x2`, 1.25 M), tie the level over rounds 11-30 on seven 30-round models of
  10,000 training images and end 0.007 / 0.014 lower in the final round on average
  (benchmarks/results/fedspectral_recluster.md, tenth pass). The Fashion-MNIST config keeps the flat input and
  factors the projector's first layer through 128 numbers (`projector_rank: 128`, 1.08 M parameters, within
  CCFC's memory): on the same seven models it ended 0.004 below flat on the mean and tied its level (0.6957
  against 0.6937), above both pooled inputs (fedspectral_recluster.md, fifteenth pass).
- GroupNorm instead of BatchNorm in the trunk (Hsieh et al., ICML 2020): with one class per client, BatchNorm
  trains on one-class batch statistics and is scored with averaged ones; GroupNorm normalises each sample alone.
- Views with brightness/contrast jitter: without it SimSiam's z on Fashion-MNIST encodes image brightness.
  Mirrored views without rotation (`flip`, `rotation`) or a wider crop measured no better on Fashion-MNIST's
  training split (benchmarks/results/fedspectral_recluster.md), so the shipped views stay CCFC's.
- Summaries, not centroids of k: every client groups its own representations into about n / `summary_size`
  small groups (spherical k-means; no group of fewer than `min_summary_size` samples, so no summary is a
  sample) and sends their means and sizes. Many small summaries keep the shape of the data that k means of a
  client's samples would lose, and the server weighs them by size whatever each client's class mix.
  (Orchestra's equal-size groups, Lubana et al., ICML 2022, `summaries: balanced`, give every summary exactly
  n / k samples but mix the few samples a client holds of each class: fedclust/clustering/summaries.py.)
- Spectral clustering of the summaries on the server (KASP: Yan, Huang & Jordan, KDD 2009): the classes of
  Fashion-MNIST are not k-means' round clusters; a nearest-neighbour graph over many small summaries follows
  their shape (on raw pixels: NMI 0.62-0.65 against k-means' 0.60).
- The clustering space (`cluster_space`): by default the trunk's features; the packaged configs put the
  unit-normalised input beside them ("input+backbone"), so the learned features add to the images' own
  geometry instead of replacing it, and weigh the graph's edges by a self-tuning kernel (Zelnik-Manor & Perona,
  NIPS 2004). Chosen on 10,000 training images at p = 1 (configs/fedspectral_fmnist.yaml): 0.67 against
  0.64-0.65 for the trunk's features alone and 0.66 for pixels alone. "input+mid+backbone" adds a third block,
  the trunk's mid-level features (on convnet28 its second block's maps averaged to the output's 3 x 3 grid), a
  lower layer's view of the image: re-clustering seven final models of 10,000 training images it scored 0.701
  against 0.695, but paired runs (the space does not change training) measured the level over rounds 11-30 0.001
  lower on average over four models (benchmarks/results/fedspectral_recluster.md, twelfth and thirteenth passes),
  so the Fashion-MNIST config does not use it.
  "hog+backbone" puts the images' histograms of oriented gradients (Dalal & Triggs, CVPR 2005;
  fedclust/nn/hog.py) where the pixels were: a fixed, label-free description of local shape that brightness and
  contrast do not move (the project's probes found brightness dominating what contrastive views learn). The
  Fashion-MNIST config uses it: four paired 30-round runs on 10,000 training images (p = 0 / 0.5 / 0.75 / 1; the
  space does not change training) levelled over rounds 11-30 at 0.669 / 0.668 / 0.661 / 0.779 against 0.646 /
  0.650 / 0.646 / 0.768 with the pixels (fedspectral_recluster.md, sixteenth pass). What federated training adds
  in that space: the same runs' first round (a trunk after one local epoch beside the HOG block) scored 0.653 /
  0.657 / 0.667 / 0.765, so +0.016 / +0.011 / -0.006 / +0.015 to the level.
- Labels through the client (as k-FED, Dennis et al., ICML 2021): a sample's cluster is the server's label of the
  summary its client put it in; a sample no client holds (another split) takes its nearest summary's label.
- Then each client smooths those labels over its own samples' nearest-neighbour graph: a majority vote of each
  sample's `vote_neighbors` nearest, or label spreading over the same graph (`spread_alpha`; Zhou et al., NIPS
  2004). Spreading lets a label travel along the client's graph, so under label skew, where a client holds few
  classes, a mixed summary's minority is pulled to the class its neighbourhood holds. Chosen on 10,000 training
  images (configs/fedspectral_fmnist.yaml): alpha 0.99 against the vote, seed means 0.649 / 0.646 / 0.778 against
  0.654 / 0.627 / 0.689 at p = 0 / 0.5 / 1.
- Last, each client votes over its labels of its last `round_vote` rounds (earlier rounds' cluster ids renamed to
  the latest by overlap on its own samples). Every round draws new summaries and clusters them anew, so the last
  round is one draw from a scatter (NMI std 0.005-0.015 over rounds 11-30); chosen on 10,000 training images
  (configs/fedspectral_fmnist.yaml): 10 rounds lift four 30-round models by 0.001-0.005 and lower none.

What crosses the boundary: the model's weights (FedAvg) and, per client, its summaries (means of
`summary_size` samples each) and their sizes. No labels anywhere in training, model selection or stopping.
"""

from __future__ import annotations

from typing import Any, Literal, get_args

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from fedclust.clustering.kmeans import assign_nearest
from fedclust.clustering.knn_vote import nearest_neighbors, vote
from fedclust.clustering.label_history import vote_over_labellings
from fedclust.clustering.label_spreading import label_spreading
from fedclust.clustering.spectral import spectral_clustering
from fedclust.clustering.summaries import local_summaries
from fedclust.contract import ClientContext, ClientUpdate, DataInfo, FederatedMethod, RoundContext, Stage
from fedclust.data.views import ColorViews, SimSiamViews28
from fedclust.errors import ConfigError, NotFittedError
from fedclust.losses.contrastive import nt_xent
from fedclust.losses.decorrelation import decorrelation_loss
from fedclust.nn.backbones import build_backbone, with_mid_features
from fedclust.nn.heads import channel_pool
from fedclust.nn.hog import hog
from fedclust.seeding import int_seed

# projector_input -> the grid of each trunk channel's means the projector sees (0: the flat output itself)
_POOL_GRID = {"flat": 0, "pooled": 1, "pooled2x2": 2}

ClusterSpace = Literal["backbone", "projection", "input+backbone", "input+mid+backbone", "hog+backbone"]
CLUSTER_SPACES = get_args(ClusterSpace)

LOCAL = "summary_of"  # ctx.state: which of its summaries each of the client's samples is in
VOTERS = "voters_of"  # ctx.state: each of the client's samples and its vote_neighbors nearest (vote_neighbors > 0)
HISTORY = "labels_before"  # ctx.state: the client's labels of its last round_vote - 1 rounds (round_vote > 1)


class FedSpectral(FederatedMethod):
    """Decorrelated contrastive training, k-anonymous summaries, spectral clustering of the summaries.

    Args:
        num_clusters: K; None takes the number of classes of the data.
        backbone: convnet28, mlp, resnet18/34/50 or resnet18_cifar/...
        norm: "group" (GroupNorm / LayerNorm in the trunk: what a client learns does not depend on its class mix)
            or "batch".
        projector_hidden: Hidden width of the projector (Linear + ReLU + Linear, no normalisation).
        projector_input: What the projector sees of the trunk's output: "flat" (all of it: on convnet28 256 maps of
            3 x 3, so the projector's first layer is 2,304 x ``projector_hidden``) or "pooled" (each channel's mean:
            256 numbers, global average pooling as SimCLR's ResNet has before its projector; 9 times fewer weights in
            that layer, so every client keeps a smaller model and Adam state). The clustering space is unchanged
            (``cluster_space``). The same for backbones whose output is pooled already. "pooled2x2": each channel's
            mean over the four 2 x 2 cells of its map (on convnet28's 3 x 3 maps overlapping windows of 2 x 2
            positions): 1,024 numbers that keep where in the image a pattern is (top or bottom, left or right),
            a first layer 1,024 x ``projector_hidden``.
        projector_rank: None, or the projector's first layer factored through this many numbers (a linear
            ``Linear(in, rank, bias=False)`` before ``Linear(rank, projector_hidden)``: a rank-``projector_rank``
            first layer). With the flat input on convnet28, rank 128 keeps every position of every channel in
            view at 360,960 weights and biases for that layer against 1,180,160 (the model 1,084,352 parameters
            against CCFC's 1,322,608): the flat input's information within CCFC's memory, where ``pooled``
            averages it away.
        latent_dim: Width of the projection z the contrastive and decorrelation terms see.
        rounds: Communication rounds.
        local_epochs: Local epochs per round.
        batch_size: Local mini-batch size.
        lr: Adam learning rate.
        temperature: NT-Xent temperature.
        decorrelation_weight: Weight of FedDecorr's term on z (mean over the two views).
        augment: simsiam28 (crop, rotation, blur, brightness/contrast jitter: 28x28 grey images) or color
            (SimCLR's crop, flip, colour jitter, grey: colour images).
        crop_scale: Area range of the random resized crop.
        jitter: Brightness/contrast jitter of the simsiam28 views (factors U[1 - jitter, 1 + jitter], p 0.8).
        blur_sigma: Blur range of the simsiam28 views in pixels.
        rotation: Largest rotation of the simsiam28 views, in degrees (CCFC's 10).
        flip: Probability that a simsiam28 view is mirrored left to right (0: CCFC's views, which never mirror).
        resize: Resize inputs to this side before the backbone (None keeps the data's size).
        summary_size: Samples a summary stands for, about (a client with n samples groups them in ceil(n / size)).
        min_summary_size: No summary is the mean of fewer samples (smaller groups join their nearest neighbour).
        summaries: "kmeans" groups, or "balanced" (Sinkhorn, equal sizes: every summary exactly n / k samples).
        neighbors: Nearest neighbours of each summary in the server's spectral graph.
        kernel: Edge weights of that graph: "cosine" ((1 + cos) / 2) or "self_tuning" (a Gaussian scaled by each
            summary's distance to its neighbours-th neighbour, Zelnik-Manor & Perona 2004).
        cluster_space: Where summaries are made and samples clustered: "backbone" (the trunk's features),
            "projection" (z), or "input+backbone" (the unit-normalised input beside the unit-normalised trunk
            features: the learned features add to the input's own geometry instead of replacing it), or
            "input+mid+backbone" (a third unit block between them: the trunk's mid-level features,
            fedclust/nn/backbones.with_mid_features; on convnet28 its second block's 128 maps averaged to 3 x 3),
            or "hog+backbone" (the input's histograms of oriented gradients, fedclust/nn/hog.py, instead of its
            pixels: a fixed description of local shape that brightness does not move; images only).
        backbone_weight: In "input+backbone", "input+mid+backbone" and "hog+backbone", the trunk's unit features
            are scaled by this before the blocks are joined and normalised again (1: equal shares of every cosine;
            larger leans on what was learned).
        hog_cell: In "hog+backbone", the side in pixels of the HOG's square cells (4: 7 x 7 cells on 28 x 28 images).
        hog_bins: In "hog+backbone", the HOG's orientation bins over [0, pi) (9: Dalal & Triggs').
        vote_neighbors: When the server's labels come back, each client relabels every sample by the majority label
            among it and its ``vote_neighbors`` nearest samples of its own (0: off), found in the features its
            summaries were made from. A summary gives all its members one label, so the minority of a mixed
            summary is wrong together; its nearest samples mostly sit in other summaries and outvote it. Local:
            no extra communication.
        spread_alpha: Instead of the vote, spread the server's labels over the same graph (each sample and its
            ``vote_neighbors`` nearest, symmetrised, every edge 1) by label spreading (Zhou et al. 2004), 30 steps
            of F <- alpha S F + (1 - alpha) Y; 0: the vote. In [0, 1); needs ``vote_neighbors`` > 0. Local.
        neighbor_positives: The share of each batch whose second view is made from one of the sample's
            ``vote_neighbors`` nearest samples (drawn uniformly; the same graph, found at the round's start with
            the global model) instead of from the sample itself, so that the contrastive term pulls neighbours
            together as well as views (nearest-neighbour positives: NNCLR, Dwibedi et al., ICCV 2021; SCAN's
            mined neighbours, Van Gansbeke et al., ECCV 2020). 0: off (every positive is the sample's own view).
            In [0, 1]; needs ``vote_neighbors`` > 0. Local: the neighbours are the client's own samples.
            Measured on 10,000 Fashion-MNIST training images: no lift (0.649-0.655 at p = 0 and 0.644 at p = 0.5
            against 0.649 / 0.646 off; fedspectral_recluster.md, seventh pass), so the packaged configs leave it off.
        round_vote: Each client labels its samples by a vote over its labels of the last ``round_vote`` rounds
            (1: the last round's alone). The server names its clusters anew every round, so the client first
            renames each earlier round's ids to the latest by overlap on its own samples
            (fedclust/clustering/label_history.py); a tie keeps the latest label. Every round draws new
            summaries and clusters them anew, and a sample on a boundary changes cluster from round to round;
            the vote keeps the side most rounds put it on. Local: the client keeps round_vote - 1 label vectors.
    """

    summary_keys = {"summaries": "summary_sizes"}

    def __init__(self, num_clusters: int | None = None, backbone: str = "convnet28",
                 norm: Literal["group", "batch"] = "group", projector_hidden: int = 512,
                 projector_input: Literal["flat", "pooled", "pooled2x2"] = "flat", projector_rank: int | None = None,
                 latent_dim: int = 128,
                 rounds: int = 130, local_epochs: int = 1, batch_size: int = 128, lr: float = 1e-3,
                 temperature: float = 0.5, decorrelation_weight: float = 1.0,
                 augment: Literal["simsiam28", "color"] = "simsiam28", crop_scale: tuple[float, float] = (0.5, 1.0),
                 jitter: float = 0.4, blur_sigma: tuple[float, float] = (0.1, 2.0), rotation: float = 10.0,
                 flip: float = 0.0, resize: int | None = None,
                 summary_size: int = 20, min_summary_size: int = 5,
                 summaries: Literal["kmeans", "balanced"] = "kmeans", neighbors: int = 10,
                 kernel: Literal["cosine", "self_tuning"] = "cosine",
                 cluster_space: ClusterSpace = "backbone",
                 backbone_weight: float = 1.0, vote_neighbors: int = 0, spread_alpha: float = 0.0,
                 neighbor_positives: float = 0.0, round_vote: int = 1, hog_cell: int = 4, hog_bins: int = 9):
        super().__init__(num_clusters, batch_size)
        self.save_hyperparameters()
        for name, value, low in (("summary_size", summary_size, 1), ("min_summary_size", min_summary_size, 1),
                                 ("neighbors", neighbors, 1), ("vote_neighbors", vote_neighbors, 0),
                                 ("round_vote", round_vote, 1), ("hog_cell", hog_cell, 1), ("hog_bins", hog_bins, 2)):
            if not isinstance(value, int) or value < low:
                raise ConfigError(f"method.{name}", value, f"an integer >= {low}")
        if projector_rank is not None and (not isinstance(projector_rank, int) or projector_rank < 1):
            raise ConfigError("method.projector_rank", projector_rank, "null or an integer >= 1")
        if projector_input not in _POOL_GRID:
            raise ConfigError("method.projector_input", projector_input, "flat, pooled or pooled2x2")
        if not temperature > 0:
            raise ConfigError("method.temperature", temperature, "a positive number")
        if not 0 <= flip <= 1:
            raise ConfigError("method.flip", flip, "a probability in [0, 1]")
        if not 0 <= rotation <= 180:
            raise ConfigError("method.rotation", rotation, "an angle in degrees in [0, 180]")
        if cluster_space not in CLUSTER_SPACES:
            raise ConfigError("method.cluster_space", cluster_space, ", ".join(CLUSTER_SPACES))
        if not backbone_weight > 0:
            raise ConfigError("method.backbone_weight", backbone_weight, "a positive number")
        if not 0 <= spread_alpha < 1:
            raise ConfigError("method.spread_alpha", spread_alpha, "a number in [0, 1)")
        if spread_alpha and not vote_neighbors:
            raise ConfigError("method.spread_alpha", spread_alpha,
                              "0 while vote_neighbors is 0 (it spreads over the vote's neighbour graph)")
        if not 0 <= neighbor_positives <= 1:
            raise ConfigError("method.neighbor_positives", neighbor_positives, "a share in [0, 1]")
        if neighbor_positives and not vote_neighbors:
            raise ConfigError("method.neighbor_positives", neighbor_positives,
                              "0 while vote_neighbors is 0 (the positives are the vote's neighbours)")
        if not decorrelation_weight >= 0:
            raise ConfigError("method.decorrelation_weight", decorrelation_weight, "a non-negative number")
        self.summaries: Tensor | None = None  # server: every client's summaries (S, d), unit norm
        self.summary_labels: Tensor | None = None  # server: their clusters (S,)
        self.client_labels: dict[int, Tensor] = {}  # server: a client's summaries' clusters

    def build(self, info: DataInfo) -> None:
        super().build(info)
        hp = self.hparams
        if hp.cluster_space == "hog+backbone":
            if not info.is_image:
                raise ConfigError("method.cluster_space", hp.cluster_space,
                                  f"one of {', '.join(s for s in CLUSTER_SPACES if s != 'hog+backbone')} "
                                  "(the data are vectors, not images)")
            if hp.hog_cell > info.input_size:
                raise ConfigError("method.hog_cell", hp.hog_cell,
                                  f"an integer from 1 to the images' side, {info.input_size}")
        self.trunk = build_backbone(hp.backbone, info.in_channels, info.input_size or None,
                                    in_features=info.num_features, resize=hp.resize, norm=hp.norm)
        grid = _POOL_GRID[hp.projector_input]
        before, width = [], self.trunk.out_dim  # what comes before the first layer (flat: nothing, as before)
        if grid:
            pooling, width = channel_pool(self.trunk.out_channels, self.trunk.out_dim, grid)
            before.append(pooling)
        if hp.projector_rank:  # the first layer as two: in -> rank (no bias) -> hidden
            before.append(nn.Linear(width, hp.projector_rank, bias=False))
            width = hp.projector_rank
        self.projector = nn.Sequential(*before, nn.Linear(width, hp.projector_hidden), nn.ReLU(inplace=True),
                                       nn.Linear(hp.projector_hidden, hp.latent_dim))
        if not info.is_image:
            self.views = None  # vectors: views are the samples themselves plus Gaussian noise (see _view)
        elif hp.augment == "simsiam28":
            self.views = SimSiamViews28(scale=tuple(hp.crop_scale), sigma=tuple(hp.blur_sigma), jitter=hp.jitter,
                                        degrees=hp.rotation, flip_p=hp.flip)
        else:
            self.views = ColorViews(scale=tuple(hp.crop_scale))

    def stages(self) -> list[Stage]:
        return [Stage("train", self.hparams.rounds, self.hparams.local_epochs)]

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=self.hparams.lr, foreach=True)

    # --- client ------------------------------------------------------------------------------------
    def on_client_start(self, ctx: ClientContext) -> None:
        self._augment_gen = ctx.generator("augment")
        if self.hparams.round_vote > 1:  # before this round replaces them: the labels the last round gave
            self._remember_labels(ctx.client_id, ctx.state)
        # Summaries come from the global model, before local training: every client then describes its samples
        # in the one feature space the server clusters in. (Made by each client's locally trained model, as
        # CCFC's local centroids are, the summaries of one client sit closer to each other than to anyone
        # else's, and the spectral graph groups clients instead of classes: NMI 0.13 against 0.66 on digits.)
        self.eval()
        with torch.no_grad():
            h = torch.cat([self.embed(x) for x in ctx.data.iter_all()])
        self.train()
        hp = self.hparams
        self._summaries, member, self._summary_sizes = local_summaries(
            h, hp.summary_size, max(hp.min_summary_size, ctx.min_summary_size), int_seed(ctx.seed, "summaries", ctx.stage_index, ctx.round,
                                                               ctx.client_id), hp.summaries)
        ctx.state[LOCAL] = member.cpu()
        if hp.vote_neighbors:  # found now, in the features the summaries were made in; used when labels come back
            neighbours = nearest_neighbors(h, hp.vote_neighbors)
            ctx.state[VOTERS] = neighbours.cpu()
            if hp.neighbor_positives:  # and by training: the positives of neighbor_positives
                self._neighbours, self._source = neighbours, ctx.data.source  # all on the data's device
                self._client_indices = ctx.data.indices.to(neighbours.device)
                self._neighbour_gen = ctx.generator("neighbour-positives")

    def _remember_labels(self, client_id: int, state: dict[str, Any]) -> None:
        """Adds the client's labels of its last round (the server's labels for its summaries, smoothed over its
        graph, as predict gives them) to the round_vote - 1 it keeps."""
        labels = self._client_labels(client_id, state)
        if labels is not None:
            state[HISTORY] = (self._history(state, len(labels)) + [labels])[-(self.hparams.round_vote - 1):]

    def _history(self, state: dict[str, Any], n: int) -> list[Tensor]:
        """The client's kept earlier labels of its n samples that are valid cluster ids (a checkpoint is untrusted),
        the last round_vote - 1 of them."""
        history = state.get(HISTORY)
        if not isinstance(history, list):
            return []
        valid = [h for h in history if isinstance(h, Tensor) and h.ndim == 1 and h.dtype == torch.long
                 and len(h) == n and int(h.min()) >= 0 and int(h.max()) < self.num_clusters]
        return valid[-(self.hparams.round_vote - 1):] if self.hparams.round_vote > 1 else []

    def _view(self, x: Tensor) -> Tensor:
        if self.views is None:  # vector data: a noisy copy (no image augmentation applies)
            return x + 0.1 * x.std(0, keepdim=True) * torch.randn(x.shape, generator=self._augment_gen,
                                                                   device=x.device)
        return self.views(x, self._augment_gen)

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        x = batch["x"]
        x1 = self._view(x)
        x2 = self._view(self._with_neighbours(x, batch["index"]) if self.hparams.neighbor_positives else x)
        return self.representation_loss(self.projector(self.trunk(x1)), self.projector(self.trunk(x2)))

    def _with_neighbours(self, x: Tensor, index: Tensor) -> Tensor:
        """The batch with a neighbor_positives share of its samples replaced by one of their nearest neighbours."""
        gen, device = self._neighbour_gen, self._neighbours.device
        at = torch.searchsorted(self._client_indices, index.to(device))
        row = self._neighbours[at]  # column 0: the sample itself
        swap = torch.rand(len(at), generator=gen, device=device) < self.hparams.neighbor_positives
        if row.shape[1] < 2 or not swap.any():
            return x
        pick = torch.randint(1, row.shape[1], (len(at),), generator=gen, device=device)
        chosen = row[torch.arange(len(at), device=device), pick][swap]
        x = x.clone()
        x[swap] = self._source.gather(self._client_indices[chosen])
        return x

    def representation_loss(self, z1: Tensor, z2: Tensor) -> Tensor:
        """NT-Xent between the two views' projections plus the weighted decorrelation of both."""
        loss = nt_xent(z1, z2, self.hparams.temperature)
        if self.hparams.decorrelation_weight:
            loss = loss + self.hparams.decorrelation_weight * 0.5 * (decorrelation_loss(z1) + decorrelation_loss(z2))
        return loss

    def on_client_end(self, ctx: ClientContext) -> dict[str, Tensor]:
        return {"summaries": self._summaries, "summary_sizes": self._summary_sizes}

    # --- server ------------------------------------------------------------------------------------
    def aggregate(self, averaged: dict[str, Tensor] | None, updates: list[ClientUpdate],
                  ctx: RoundContext) -> None:
        super().aggregate(averaged, updates, ctx)
        points = torch.cat([u.payload["summaries"] for u in updates])
        sizes = torch.cat([u.payload["summary_sizes"] for u in updates])
        labels = spectral_clustering(points, self.num_clusters, neighbors=self.hparams.neighbors, weights=sizes,
                                     seed=int_seed(ctx.seed, "server-spectral", ctx.stage_index, ctx.round),
                                     kernel=self.hparams.kernel)
        self.summaries, self.summary_labels = F.normalize(points, dim=1), labels
        offsets = torch.tensor([0] + [len(u.payload["summaries"]) for u in updates]).cumsum(0)
        self.client_labels.update({u.client_id: labels[offsets[i]:offsets[i + 1]].cpu()
                                   for i, u in enumerate(updates)})

    def server_state(self) -> dict[str, Any]:
        return {"summaries": self.summaries, "summary_labels": self.summary_labels,
                "client_labels": self.client_labels}

    def load_server_state(self, state: dict[str, Any]) -> None:
        self.summaries, self.summary_labels = state["summaries"], state["summary_labels"]
        self.client_labels = dict(state["client_labels"])

    def global_centroids(self) -> Tensor | None:
        """Each cluster's mean summary direction (the clusters themselves are unions of summaries)."""
        if self.summaries is None:
            return None
        sums = torch.zeros(self.num_clusters, self.summaries.shape[1]).index_add_(
            0, self.summary_labels.cpu(), self.summaries.cpu())
        return F.normalize(sums, dim=1)

    # --- evaluation ---------------------------------------------------------------------------------
    def embed(self, x: Tensor) -> Tensor:
        space = self.hparams.cluster_space
        if space == "input+mid+backbone":  # the input, the trunk's mid level, its output
            h, mid = with_mid_features(self.trunk, x)
            return self._joined([F.normalize(x.flatten(1), dim=1), F.normalize(mid, dim=1)], h)
        h = self.trunk(x)
        if space == "hog+backbone":  # hog() returns unit rows already
            return self._joined([hog(x, self.hparams.hog_cell, self.hparams.hog_bins)], h)
        if space == "input+backbone":
            return self._joined([F.normalize(x.flatten(1), dim=1)], h)
        if space == "projection":
            return F.normalize(self.projector(h), dim=1)
        return F.normalize(h, dim=1)

    def _joined(self, unit_blocks: list[Tensor], h: Tensor) -> Tensor:
        """The joined spaces: unit-norm blocks beside the trunk's unit output scaled by ``backbone_weight``, the
        whole row re-normalised, so each block weighs the same whatever its width (on Fashion-MNIST 441 HOG numbers
        or 784 pixels beside convnet28's 2,304)."""
        trunk = self.hparams.backbone_weight * F.normalize(h, dim=1)
        return F.normalize(torch.cat([*unit_blocks, trunk], 1), dim=1)

    def assign(self, x: Tensor) -> Tensor:
        if self.summaries is None:
            raise NotFittedError("FedSpectral has no summaries yet (no client has sent any)")
        nearest = assign_nearest(self.embed(x), self.summaries.to(x.device), cosine=True)
        return self.summary_labels.to(x.device)[nearest]

    def _smooth_client_labels(self, labels: Tensor, voters: Any) -> Tensor:
        """A client's labels after its local kNN vote (``vote_neighbors``) or label spreading over the same graph
        (``spread_alpha``); unchanged when both are off, and when the client's saved neighbours (read back from a
        checkpoint, untrusted) do not fit its samples."""
        n = len(labels)
        fits = (isinstance(voters, Tensor) and voters.ndim == 2 and len(voters) == n and voters.numel() > 0
                and voters.dtype == torch.long and int(voters.min()) >= 0 and int(voters.max()) < n)
        if not self.hparams.vote_neighbors or not fits:
            return labels
        if self.hparams.spread_alpha:
            return label_spreading(voters, labels, self.num_clusters, self.hparams.spread_alpha)
        return vote(labels, voters, self.num_clusters)

    def _client_labels(self, client_id: int, state: dict[str, Any]) -> Tensor | None:
        """A client's samples' labels from the server's labels for its summaries of its last round, smoothed over
        its graph; None when the server has none for it or its summary membership does not fit them."""
        mapping, member = self.client_labels.get(client_id), state.get(LOCAL)
        if mapping is None or not isinstance(member, Tensor) or member.dtype != torch.long or member.ndim != 1 \
                or member.numel() == 0 or int(member.min()) < 0 or int(member.max()) >= len(mapping):
            return None
        return self._smooth_client_labels(mapping[member], state.get(VOTERS))

    @torch.no_grad()
    def predict(self, data, client_states: dict[int, dict[str, Any]]) -> Tensor:
        """Each sample of a client that sent summaries: the cluster of its summary (after the client's kNN vote, or
        label spreading with ``spread_alpha``, when ``vote_neighbors``; then voted over the client's last
        ``round_vote`` rounds); any other: the nearest summary's."""
        self.eval()
        labels = torch.full((len(data),), -1, dtype=torch.long)
        for cid in self.client_labels:
            state = client_states.get(cid, {})
            mine = self._client_labels(cid, state)
            if mine is not None and len(mine) == len(data.parts[cid]):
                mine = vote_over_labellings([*self._history(state, len(mine)), mine], self.num_clusters)
                labels[data.parts[cid].cpu()] = mine
        missing = (labels < 0).nonzero().squeeze(1)
        if len(missing):
            labels[missing] = torch.cat([self.assign(x).cpu() for x in data.iter_indices(missing)])
        return labels

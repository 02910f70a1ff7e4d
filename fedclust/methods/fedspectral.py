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
- Each client describes its samples in the clustering space of the round's global model (`cluster_space`: the
  trunk's features, beside the images' histograms of oriented gradients for images: a fixed, brightness-blind
  descriptor of shape, Dalal & Triggs, CVPR 2005), optionally (`smooth_steps`) propagated over its own samples'
  nearest-neighbour graph, built once (personalised PageRank, APPNP: Klicpera et al., ICLR 2019), and sends the
  means of fixed groups of its samples, drawn once (equal sizes, at least `summary_size`, by default the run's
  floor federation.min_summary_size), with their sizes.
- The server clusters all summaries by spectral clustering on a sparse nearest-neighbour graph (KASP: Yan, Huang &
  Jordan, KDD 2009; self-tuning edge weights, Zelnik-Manor & Perona, NIPS 2004; LOBPCG), and sends every summary's
  cluster back with the summaries.
- Each client labels a sample by its nearest summary's cluster, spreads those labels over its own samples'
  nearest-neighbour graph (Zhou et al., NIPS 2004) and votes over its labels of its last `round_vote` rounds.

What leaves a client: the model's weights, and per round n / summary_size means of fixed groups of at least the
floor's samples each, with their counts. No raw or per-sample vector, no group redrawn (so the server cannot
difference two groupings of the same samples; the smoothing graph is fixed with the groups, so a summary stays one
combination of the same samples), no label. Fine structure stays on the client: its own graph.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal, get_args

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from fedclust.clustering.graph_smoothing import propagate
from fedclust.clustering.knn_vote import nearest_neighbors, nearest_rows
from fedclust.clustering.label_history import vote_over_labellings
from fedclust.clustering.label_spreading import label_spreading
from fedclust.clustering.spectral import spectral_clustering
from fedclust.clustering.summaries import fixed_groups, group_summaries
from fedclust.contract import ClientContext, ClientUpdate, DataInfo, FederatedMethod, RoundContext, Stage
from fedclust.data.hog import hog
from fedclust.data.views import ColorViews, SimSiamViews28
from fedclust.errors import ConfigError, NotFittedError
from fedclust.losses.contrastive import nt_xent, supervised_nt_xent
from fedclust.losses.decorrelation import decorrelation_loss
from fedclust.nn.backbones import build_backbone
from fedclust.seeding import int_seed

ClusterSpace = Literal["backbone", "hog+backbone"]
CLUSTER_SPACES = get_args(ClusterSpace)
TEMPERATURE = 0.5  # NT-Xent's temperature (SimCLR's)
GROUPS = "groups"  # ctx.state: each of the client's samples' fixed group, drawn the first round it takes part
GRAPH = "graph"  # ctx.state: the client's smoothing graph (n, spread_neighbors + 1), built with its groups
HISTORY = "labels_by_round"  # ctx.state: {round: its labels} of the client's last round_vote evaluated rounds


class FedSpectral(FederatedMethod):
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
            before they are grouped, summarised and labelled (0: none). An option not taken: 16 steps gained 0.07 at
            p = 1 (one seed) and ended 0.006 lower at p = 0 (three seeds) on the training split (docs/findings/
            fedspectral.md).
        smooth_alpha: The share of each step taken from the neighbours, in [0, 1] (the rest returns to the row).
        cluster_weight: Weight of the supervised contrastive term on z (0: none). From the second round a client
            labels its samples as it does for evaluation (nearest summary of the server's last clustering, spread
            over its own graph; no vote, no true label) and treats same-label samples of a batch as positives. An
            option not taken: weight 1 ended 0.06 lower at p = 0 on the training split (docs/findings/fedspectral.md).
        neighbor_positives: A sample's second view is drawn from itself or, as likely each, one of its this many
            nearest samples of the client, found each round in the clustering space of the round's global model (0:
            its own second view, SimCLR's pair). The neighbours stay on the client; nothing more leaves. An option
            not taken: k = 1 and 5 ended 0.006 lower at p = 0 (three seeds) on the training split (docs/findings/
            fedspectral.md).
    """

    summary_keys = {"summaries": "summary_sizes"}

    def __init__(self, num_clusters: int | None = None, backbone: str = "convnet28", projector_hidden: int = 512,
                 projector_rank: int | None = None, latent_dim: int = 128, rounds: int = 30, local_epochs: int = 1,
                 batch_size: int = 128, lr: float = 1e-3, decorrelation_weight: float = 1.0,
                 augment: Literal["simsiam28", "color"] = "simsiam28", crop_scale: tuple[float, float] = (0.5, 1.0),
                 blur_sigma: tuple[float, float] = (0.1, 2.0), summary_size: int | None = None, neighbors: int = 5,
                 cluster_space: ClusterSpace = "backbone", hog_cell: int = 4, spread_neighbors: int = 5,
                 spread_alpha: float = 0.99, round_vote: int = 10, smooth_steps: int = 0, smooth_alpha: float = 0.9,
                 cluster_weight: float = 0.0, neighbor_positives: int = 0):
        super().__init__(num_clusters, batch_size)
        self.save_hyperparameters()
        for name, value, low in (("neighbors", neighbors, 1), ("spread_neighbors", spread_neighbors, 0),
                                 ("round_vote", round_vote, 1), ("hog_cell", hog_cell, 1),
                                 ("smooth_steps", smooth_steps, 0), ("neighbor_positives", neighbor_positives, 0)):
            if not isinstance(value, int) or value < low:
                raise ConfigError(f"method.{name}", value, f"an integer >= {low}")
        for name, value in (("summary_size", summary_size), ("projector_rank", projector_rank)):
            if value is not None and (not isinstance(value, int) or value < 1):
                raise ConfigError(f"method.{name}", value, "null or an integer >= 1")
        if cluster_space not in CLUSTER_SPACES:
            raise ConfigError("method.cluster_space", cluster_space, ", ".join(CLUSTER_SPACES))
        if not 0 <= spread_alpha < 1:
            raise ConfigError("method.spread_alpha", spread_alpha, "a number in [0, 1)")
        if not 0 <= smooth_alpha <= 1:
            raise ConfigError("method.smooth_alpha", smooth_alpha, "a number in [0, 1]")
        if smooth_steps and not spread_neighbors:
            raise ConfigError("method.spread_neighbors", spread_neighbors,
                              "an integer >= 1 when method.smooth_steps is set (smoothing runs over that graph)")
        for name, value in (("decorrelation_weight", decorrelation_weight), ("cluster_weight", cluster_weight)):
            if not value >= 0:
                raise ConfigError(f"method.{name}", value, "a non-negative number")
        self.summaries: Tensor | None = None  # server: every client's summaries this round (S, d), unit norm
        self.summary_labels: Tensor | None = None  # server: their clusters (S,)
        self.space: dict[str, Tensor] | None = None  # the global weights the round's summaries were made with
        self.space_round = -1  # which round (over all stages) that was
        self._sample_ids: Tensor | None = None  # client: its sample indices (sorted), how a batch finds its rows
        self._pseudo: Tensor | None = None  # client: its samples' labels from the server's last clustering
        # client: each sample's candidates (itself and its nearest), and the samples' gather
        self._partners: tuple[Tensor, Callable[[Tensor], Tensor]] | None = None

    def build(self, info: DataInfo) -> None:
        super().build(info)
        hp = self.hparams
        if hp.cluster_space == "hog+backbone":
            if not info.is_image:
                raise ConfigError("method.cluster_space", hp.cluster_space, "backbone (the data are vectors, not "
                                  "images, and have no histograms of oriented gradients)")
            if hp.hog_cell > info.input_size:
                raise ConfigError("method.hog_cell", hp.hog_cell,
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
        return torch.optim.Adam(self.parameters(), lr=self.hparams.lr, foreach=True)

    def summary_norm_bound(self) -> float:
        return 1.0  # summaries are means of unit rows (embed)

    # --- client ------------------------------------------------------------------------------------
    def on_round_start(self, ctx: RoundContext) -> None:
        """The round's global weights: the space every client's summaries are made in, and its labels later."""
        self.space = {k: v.detach().clone() for k, v in self.state_dict().items()}
        self.space_round += 1

    def on_client_start(self, ctx: ClientContext) -> None:
        self._augment_gen = ctx.generator("augment")
        # Summaries come from the global model, before local training, so that every client describes its samples
        # in the one space the server clusters in.
        h = self._smoothed(self._embed_all(ctx.data), ctx.state)
        size = self.hparams.summary_size or ctx.min_summary_size
        groups = ctx.state.get(GROUPS)
        if not _indices(groups, (len(h),), len(h)):  # first round (or an untrusted checkpoint's nonsense): draw once
            groups = fixed_groups(h, size, int_seed(ctx.seed, "groups", ctx.client_id)).cpu()
            ctx.state[GROUPS] = groups
        self._summaries, self._sizes = group_summaries(h, groups.to(h.device))
        if len(h) < ctx.min_summary_size:  # a client smaller than the floor sends no summary (still trains)
            self._summaries, self._sizes = self._summaries[:0], self._sizes[:0]
        # A client's indices are sorted (as CCFC's pseudo-labels also rely on), so a batch finds its rows by binary
        # search; both per-sample options below are read through them.
        self._sample_ids = ctx.data.indices.to(h.device)
        self._pseudo = None
        if self.hparams.cluster_weight and self.summaries is not None:
            # The last round's summaries were made one round of training earlier; the HOG block, half of every
            # cosine, does not move, and the labels only pick positives.
            self._pseudo = self._summary_labels(h)
        self._partners = None
        if self.hparams.neighbor_positives:  # each sample's candidates: itself and its nearest, in the round's space
            self._partners = (nearest_neighbors(h, self.hparams.neighbor_positives), ctx.data.source.gather)

    def _smoothed(self, h: Tensor, state: dict[str, Any]) -> Tensor:
        """The client's rows h propagated over its own graph, built from the first h it saw and kept in its state
        (smooth_steps 0: h unchanged)."""
        hp = self.hparams
        if not hp.smooth_steps:
            return h
        graph = state.get(GRAPH)
        width = min(hp.spread_neighbors + 1, len(h))
        if not _indices(graph, (len(h), width), len(h)):
            graph = nearest_neighbors(h, hp.spread_neighbors).cpu()  # first round, or an untrusted checkpoint's
            state[GRAPH] = graph
        return propagate(h, graph.to(h.device), hp.smooth_steps, hp.smooth_alpha)

    def _embed_all(self, data) -> Tensor:
        training = self.training
        self.eval()
        with torch.no_grad():
            h = torch.cat([self.embed(x) for x in data.iter_all()])
        self.train(training)
        return h

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
        return {"summaries": self._summaries, "summary_sizes": self._sizes}

    # --- server ------------------------------------------------------------------------------------
    def aggregate(self, averaged: dict[str, Tensor] | None, updates: list[ClientUpdate],
                  ctx: RoundContext) -> None:
        super().aggregate(averaged, updates, ctx)
        points = torch.cat([u.payload["summaries"] for u in updates])
        sizes = torch.cat([u.payload["summary_sizes"] for u in updates])
        if len(points) == 0:  # every client that took part is below the floor: the clustering stays the last one's
            return
        self.summary_labels = spectral_clustering(points, self.num_clusters, neighbors=self.hparams.neighbors,
                                                  weights=sizes, kernel="self_tuning",
                                                  seed=int_seed(ctx.seed, "server-spectral", ctx.stage_index,
                                                                ctx.round)).cpu()
        self.summaries = F.normalize(points.float(), dim=1).cpu()

    def server_state(self) -> dict[str, Any]:
        return {"summaries": self.summaries, "summary_labels": self.summary_labels, "space": self.space,
                "space_round": self.space_round}

    def load_server_state(self, state: dict[str, Any]) -> None:
        self.summaries, self.summary_labels = state["summaries"], state["summary_labels"]
        self.space, self.space_round = state.get("space"), int(state.get("space_round", -1))

    def global_centroids(self) -> Tensor | None:
        """Each cluster's mean summary direction (the clusters themselves are unions of summaries)."""
        if self.summaries is None:
            return None
        sums = torch.zeros(self.num_clusters, self.summaries.shape[1]).index_add_(0, self.summary_labels,
                                                                                   self.summaries)
        return F.normalize(sums, dim=1)

    # --- evaluation ---------------------------------------------------------------------------------
    def embed(self, x: Tensor) -> Tensor:
        h = F.normalize(self.trunk(x), dim=1)
        if self.hparams.cluster_space == "hog+backbone":  # two unit blocks, equal shares of every cosine
            return F.normalize(torch.cat([hog(x, self.hparams.hog_cell), h], 1), dim=1)
        return h

    def assign(self, x: Tensor) -> Tensor:
        if self.summaries is None:
            raise NotFittedError("FedSpectral has no summaries yet (no client has sent any)")
        nearest = nearest_rows(self.embed(x), self.summaries.to(x.device))
        return self.summary_labels.to(x.device)[nearest]

    @torch.no_grad()
    def predict(self, data, client_states: dict[int, dict[str, Any]]) -> Tensor:
        """What every client does with the server's labels, in the space its summaries were made in: each sample
        takes its nearest summary's cluster, spread over the client's own nearest-neighbour graph, then voted over
        the client's last round_vote evaluated rounds. A sample no client holds takes its nearest summary's."""
        if self.summaries is None:
            raise NotFittedError("FedSpectral has no summaries yet (no client has sent any)")
        current = {k: v.detach().clone() for k, v in self.state_dict().items()}
        if self.space is not None:
            self.load_state_dict(self.space)
        labels = torch.full((len(data),), -1, dtype=torch.long)
        try:
            for cid, part in enumerate(data.parts):
                if len(part):
                    labels[part.cpu()] = self._client_labels(data.client(cid, self.batch_size),
                                                             client_states.setdefault(cid, {}))
            missing = (labels < 0).nonzero().squeeze(1)
            if len(missing):
                labels[missing] = torch.cat([self.assign(x).cpu() for x in data.iter_indices(missing)])
        finally:
            self.load_state_dict(current)
        return labels

    def _client_labels(self, client, state: dict[str, Any]) -> Tensor:
        hp = self.hparams
        labels = self._summary_labels(self._smoothed(self._embed_all(client), state)).cpu()
        kept = self._kept_labels(state.get(HISTORY), len(labels))
        kept[self.space_round] = labels
        state[HISTORY] = dict(sorted(kept.items())[-hp.round_vote:])
        return vote_over_labellings(list(state[HISTORY].values()), self.num_clusters)

    def _summary_labels(self, h: Tensor) -> Tensor:
        """A client's samples (embedded as h) labelled by their nearest summary's cluster, spread over its graph."""
        hp = self.hparams
        labels = self.summary_labels.to(h.device)[nearest_rows(h, self.summaries.to(h.device))]
        if hp.spread_neighbors and hp.spread_alpha:
            labels = label_spreading(nearest_neighbors(h, hp.spread_neighbors), labels, self.num_clusters,
                                     hp.spread_alpha)
        return labels

    def _kept_labels(self, history: Any, n: int) -> dict[int, Tensor]:
        """The client's earlier labels that are valid cluster ids of its n samples (a checkpoint is untrusted)."""
        if not isinstance(history, dict):
            return {}
        return {r: h for r, h in history.items() if isinstance(r, int) and r < self.space_round
                and _indices(h, (n,), self.num_clusters)}


def _indices(value: Any, shape: tuple[int, ...], high: int) -> bool:
    """Whether a value read from a client's (untrusted) state is an int64 tensor of this shape with every entry in
    [0, high): the check before the method indexes with it."""
    return (isinstance(value, Tensor) and value.dtype == torch.long and value.shape == shape and value.numel() > 0
            and int(value.min()) >= 0 and int(value.max()) < high)

"""Clustering under the privacy floor by fixed-group summaries: the labelling half of FedSpectral.

A method built on `SummarySpectral` supplies the representation (`embed`: unit rows per sample, in the space it
wants clustered) and trains it as it likes; the family makes what leaves a client and what the labels are:
- Each client describes its samples with the round's global model, before local training (one space for every
  client's summaries), optionally propagated over its own nearest-neighbour graph (APPNP, Klicpera et al., ICLR
  2019; built once), and sends the means of fixed groups of its samples, drawn once, of equal size at least the
  floor (fedclust/clustering/summaries.py says why fixed), with their sizes.
- The server clusters all summaries by spectral clustering on a sparse nearest-neighbour graph (KASP: Yan, Huang &
  Jordan, KDD 2009; self-tuning weights, Zelnik-Manor & Perona, NIPS 2004) and sends every summary's cluster back.
- A client labels a sample by its nearest summary's cluster, spreads the labels over its own graph (Zhou et al.,
  NIPS 2004) and votes over its labels of its last rounds; evaluation runs in the space the summaries were made in.
  With `labelling: walk` the labels come instead from a two-level random walk over every client's samples and all
  summaries (fedclust/clustering/two_level_walk.py): a block power iteration in which a client sends, per step, the
  mean of each of its groups' members' rows and a k x k Gram, aggregates of at least the floor's samples; the
  server's clustering of the summaries (for `assign`) is the same in both.

The subclass's hparams hold the family's settings (names as in FedSpectral's Args): summary_size, neighbors,
spread_neighbors, spread_alpha, round_vote, smooth_steps, smooth_alpha, labelling, walk_restart, walk_server,
walk_links, walk_iterations, walk_spread_alpha; `check_summary_settings` and `check_walk_settings` refuse bad ones.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal, get_args

import torch
import torch.nn.functional as F
from torch import Tensor

from fedclust.clustering.graph_smoothing import propagate
from fedclust.clustering.kept_state import kept_or_made
from fedclust.clustering.knn_vote import nearest_neighbors, nearest_rows
from fedclust.clustering.label_history import remember_and_vote
from fedclust.clustering.label_spreading import label_spreading
from fedclust.clustering.spectral import spectral_clustering
from fedclust.clustering.summaries import fixed_groups, group_summaries, label_by_summaries
from fedclust.clustering.two_level_walk import (
    client_walk,
    server_walk,
    summary_links_search,
    summary_scales,
    walk_labels,
    walk_rows,
)
from fedclust.contract import ClientContext, ClientUpdate, FederatedMethod, RoundContext
from fedclust.errors import MethodArgError, NotFittedError
from fedclust.seeding import int_seed

GROUPS = "groups"  # ctx.state: each of the client's samples' fixed group, drawn the first round it takes part
GRAPH = "graph"  # ctx.state: the client's smoothing graph (n, spread_neighbors + 1), built with its groups
HISTORY = "labels_by_round"  # ctx.state: {round: its labels} of the client's last round_vote evaluated rounds
Labelling = Literal["nearest", "walk"]
LABELLINGS = get_args(Labelling)


def check_summary_settings(summary_size: int | None, neighbors: int, spread_neighbors: int, spread_alpha: float,
                           round_vote: int, smooth_steps: int, smooth_alpha: float) -> None:
    """One sentence for the first of the family's settings that is out of range."""
    for name, value, low in (("neighbors", neighbors, 1), ("spread_neighbors", spread_neighbors, 0),
                             ("round_vote", round_vote, 1), ("smooth_steps", smooth_steps, 0)):
        if not isinstance(value, int) or value < low:
            raise MethodArgError(name, value, f"an integer >= {low}")
    if summary_size is not None and (not isinstance(summary_size, int) or summary_size < 1):
        raise MethodArgError("summary_size", summary_size, "null or an integer >= 1")
    if not 0 <= spread_alpha < 1:
        raise MethodArgError("spread_alpha", spread_alpha, "a number in [0, 1)")
    if not 0 <= smooth_alpha <= 1:
        raise MethodArgError("smooth_alpha", smooth_alpha, "a number in [0, 1]")
    if smooth_steps and not spread_neighbors:
        raise MethodArgError("spread_neighbors", spread_neighbors,
                          "an integer >= 1 when method.smooth_steps is set (smoothing runs over that graph)")


def check_walk_settings(labelling: str, walk_restart: float, walk_server: float, walk_links: int,
                        walk_iterations: int, spread_neighbors: int, walk_spread_alpha: float = 0.0) -> None:
    """One sentence for the first of the labelling settings that is out of range."""
    if labelling not in LABELLINGS:
        raise MethodArgError("labelling", labelling, " or ".join(LABELLINGS))
    if labelling == "walk" and spread_neighbors < 1:
        raise MethodArgError("spread_neighbors", spread_neighbors,
                          "an integer >= 1 with method.labelling walk (the walk steps on each client's own graph)")
    for name, value in (("walk_restart", walk_restart), ("walk_server", walk_server)):
        if not 0 < value < 1:
            raise MethodArgError(name, value, "a number in (0, 1)")
    for name, value in (("walk_links", walk_links), ("walk_iterations", walk_iterations)):
        if not isinstance(value, int) or value < 1:
            raise MethodArgError(name, value, "an integer >= 1")
    if not 0 <= walk_spread_alpha < 1:
        raise MethodArgError("walk_spread_alpha", walk_spread_alpha, "a number in [0, 1)")


class SummarySpectral(FederatedMethod):
    """Fixed-group summaries under the floor, spectral clustering of them on the server, labels on the clients."""

    summary_keys = {"summaries": "summary_sizes"}

    def __init__(self, num_clusters: int | None = None, batch_size: int = 128):
        super().__init__(num_clusters, batch_size)
        self.summaries: Tensor | None = None  # server: every client's summaries this round (S, d), unit norm
        self.summary_labels: Tensor | None = None  # server: their clusters (S,)
        self.summary_owners: Tensor | None = None  # server: the client that sent each summary (S,), in group order
        self.walk_seed = 0  # server: the round's seed of the walk's start and k-means
        self.space: dict[str, Tensor] | None = None  # the global weights the round's summaries were made with
        self.space_round = -1  # which round (over all stages) that was

    def summary_norm_bound(self) -> float | None:
        # summaries are means of unit rows (embed); the walk's messages are not noised, so no noise may claim the run
        return None if self._walks() else 1.0

    def _walks(self) -> bool:
        return getattr(self.hparams, "labelling", "nearest") == "walk"

    # --- client ------------------------------------------------------------------------------------
    def on_round_start(self, ctx: RoundContext) -> None:
        """The round's global weights: the space every client's summaries are made in, and its labels later."""
        self.space = {k: v.detach().clone() for k, v in self.state_dict().items()}
        self.space_round += 1

    def make_summaries(self, ctx: ClientContext) -> Tensor:
        """The client's summaries, kept for `summary_payload`; returns its rows in the round's space (h), which
        the subclass may use (before local training, the global model's)."""
        h = self._smoothed(self._embed_all(ctx.data), ctx.state)
        size = self.hparams.summary_size or ctx.min_summary_size
        groups = kept_or_made(ctx.state, GROUPS, (len(h),), len(h),  # drawn the first round, then kept
                              lambda: fixed_groups(h, size, int_seed(ctx.seed, "groups", ctx.client_id)))
        self._summaries, self._sizes = group_summaries(h, groups.to(h.device))
        if len(h) < ctx.min_summary_size:  # a client smaller than the floor sends no summary (still trains)
            self._summaries, self._sizes = self._summaries[:0], self._sizes[:0]
        return h

    def summary_payload(self) -> dict[str, Tensor]:
        return {"summaries": self._summaries, "summary_sizes": self._sizes}

    def _smoothed(self, h: Tensor, state: dict[str, Any]) -> Tensor:
        """The client's rows h propagated over its own graph, built from the first h it saw and kept in its state
        (smooth_steps 0: h unchanged)."""
        hp = self.hparams
        if not hp.smooth_steps:
            return h
        width = min(hp.spread_neighbors + 1, len(h))
        graph = kept_or_made(state, GRAPH, (len(h), width), len(h), lambda: nearest_neighbors(h, hp.spread_neighbors))
        return propagate(h, graph.to(h.device), hp.smooth_steps, hp.smooth_alpha)

    def _embed_all(self, data) -> Tensor:
        training = self.training
        self.eval()
        with torch.no_grad():
            h = torch.cat([self.embed(x) for x in data.iter_all()])
        self.train(training)
        return h

    def summary_labels_of(self, h: Tensor) -> Tensor:
        """A client's samples (embedded as h) labelled by their nearest summary's cluster, spread over its graph."""
        return label_by_summaries(h, self.summaries, self.summary_labels, self.num_clusters,
                                  self.hparams.spread_neighbors, self.hparams.spread_alpha)

    # --- server ------------------------------------------------------------------------------------
    def aggregate(self, averaged: dict[str, Tensor] | None, updates: list[ClientUpdate],
                  ctx: RoundContext) -> None:
        super().aggregate(averaged, updates, ctx)
        points = torch.cat([u.payload["summaries"] for u in updates])
        sizes = torch.cat([u.payload["summary_sizes"] for u in updates])
        owners = torch.cat([torch.full((len(u.payload["summaries"]),), u.client_id) for u in updates])
        if len(points) == 0:  # every client that took part is below the floor: the clustering stays the last one's
            return
        self.summary_labels = spectral_clustering(points, self.num_clusters, neighbors=self.hparams.neighbors,
                                                  weights=sizes, kernel="self_tuning",
                                                  seed=int_seed(ctx.seed, "server-spectral", ctx.stage_index,
                                                                ctx.round)).cpu()
        self.summaries = F.normalize(points.float(), dim=1).cpu()
        self.summary_owners = owners
        self.walk_seed = int_seed(ctx.seed, "walk", ctx.stage_index, ctx.round)

    def server_state(self) -> dict[str, Any]:
        return {"summaries": self.summaries, "summary_labels": self.summary_labels, "space": self.space,
                "space_round": self.space_round, "summary_owners": self.summary_owners,
                "walk_seed": self.walk_seed}

    def load_server_state(self, state: dict[str, Any]) -> None:
        self.summaries, self.summary_labels = state["summaries"], state["summary_labels"]
        self.space, self.space_round = state.get("space"), int(state.get("space_round", -1))
        owners = state.get("summary_owners")  # untrusted: one client id per summary, or the walk cannot use them
        valid = (isinstance(owners, Tensor) and self.summaries is not None and owners.shape == (len(self.summaries),)
                 and not owners.is_floating_point())
        self.summary_owners = owners.long() if valid else None
        self.walk_seed = int(state.get("walk_seed", 0))

    def global_centroids(self) -> Tensor | None:
        """Each cluster's mean summary direction (the clusters themselves are unions of summaries)."""
        if self.summaries is None:
            return None
        sums = torch.zeros(self.num_clusters, self.summaries.shape[1]).index_add_(0, self.summary_labels,
                                                                                   self.summaries)
        return F.normalize(sums, dim=1)

    # --- evaluation ---------------------------------------------------------------------------------
    def assign(self, x: Tensor) -> Tensor:
        if self.summaries is None:
            raise NotFittedError(f"{type(self).__name__} has no summaries yet (no client has sent any)")
        nearest = nearest_rows(self.embed(x), self.summaries.to(x.device))
        return self.summary_labels.to(x.device)[nearest]

    @torch.no_grad()
    def predict(self, data, client_states: dict[int, dict[str, Any]]) -> Tensor:
        """What every client does with the server's labels, in the space its summaries were made in: each sample
        takes its nearest summary's cluster, spread over the client's own nearest-neighbour graph (or, with
        `labelling: walk`, its label from the two-level walk), then voted over the client's last round_vote
        evaluated rounds. A sample no client holds takes its nearest summary's."""
        if self.summaries is None:
            raise NotFittedError(f"{type(self).__name__} has no summaries yet (no client has sent any)")
        current = {k: v.detach().clone() for k, v in self.state_dict().items()}
        if self.space is not None:
            self.load_state_dict(self.space)
        labels = torch.full((len(data),), -1, dtype=torch.long)
        try:
            held = [cid for cid, part in enumerate(data.parts) if len(part)]

            def rows_of(cid: int) -> Tensor:
                return self._smoothed(self._embed_all(data.client(cid, self.batch_size)),
                                      client_states.setdefault(cid, {}))

            if self._walks():  # every client at once: each step of the walk visits them all
                label_of = self._walk_labels(((cid, rows_of(cid)) for cid in held), client_states).__getitem__
            else:  # one client's rows at a time
                def label_of(cid: int) -> Tensor:
                    return self.summary_labels_of(rows_of(cid)).cpu()
            for cid in held:
                state = client_states.setdefault(cid, {})
                state[HISTORY], labels[data.parts[cid].cpu()] = remember_and_vote(
                    state.get(HISTORY), label_of(cid), self.space_round, self.hparams.round_vote, self.num_clusters)
            missing = (labels < 0).nonzero().squeeze(1)
            if len(missing):
                labels[missing] = torch.cat([self.assign(x).cpu() for x in data.iter_indices(missing)])
        finally:
            self.load_state_dict(current)
        return labels

    def _walk_labels(self, rows: Iterable[tuple[int, Tensor]],
                     client_states: dict[int, dict[str, Any]]) -> dict[int, Tensor]:
        """Every client's labels from the two-level walk over all clients' rows and the round's summaries. A client
        walks to the summaries of every client; its own groups take part when it sent this round's summaries of them
        (its fixed groups, as many as its rows among the server's). Each client's rows are dropped once its sparse
        walk is built, so memory holds n x (neighbours + links) entries, not every client's rows."""
        hp = self.hparams
        summaries = self.summaries
        owners = self.summary_owners if self.summary_owners is not None else torch.full((len(summaries),), -1)
        scales = summary_scales(summaries, hp.neighbors)
        search = summary_links_search(summaries, hp.walk_links)  # one index over the summaries, for every client
        walks, clients = [], []
        for cid, h in rows:
            own = (owners == cid).nonzero().squeeze(1)
            groups = client_states[cid].get(GROUPS)
            if not (isinstance(groups, Tensor) and groups.shape == (len(h),) and len(own)
                    and int(groups.min()) >= 0 and int(groups.max()) + 1 == len(own)):
                own, groups = own[:0], torch.zeros(len(h), dtype=torch.long)
            neighbors_of = nearest_neighbors(h, hp.spread_neighbors)
            walks.append(client_walk(h, neighbors_of, summaries, scales, groups, own, hp.walk_links, search))
            clients.append((cid, neighbors_of))
        seed = self.walk_seed
        summary_rows, sample_rows = walk_rows(walks, server_walk(summaries, hp.neighbors), self.num_clusters,
                                              hp.walk_restart, hp.walk_server, hp.walk_iterations, seed)
        labels = walk_labels(summary_rows, sample_rows, self.num_clusters, seed)
        alpha = getattr(hp, "walk_spread_alpha", 0.0)  # spread over the client's own graph, as the nearest path does
        return {cid: label_spreading(graph, found, self.num_clusters, alpha) if alpha else found
                for (cid, graph), found in zip(clients, labels)}

"""FFCM: federated fuzzy c-means (Stallmann & Wilbik, "Towards Federated Clustering: A Federated Fuzzy
c-Means Algorithm (FFCM)", AAAI 2022 Workshop on Trustable, Verifiable and Auditable Federated Learning),
as in its official code (REFERENCE.md "FFCM").

The global centres start uniform in [0, 1)^d, drawn by the server from (seed, "ffcm-init"). Each round every client
runs full fuzzy c-means on its own data (fedclust/clustering/fcm.py; m = 2, at most 1000 iterations, local stop at a
membership change below 1e-4) from memberships to the global centres, and sends its c centres, their supports (sums
of memberships) and their effective sample counts, nothing else; a centre with fewer effective samples than the
privacy floor (federation.min_summary_size) is zeroed and carries no support. The server either averages each centre
over the clients weighted by support (`server: "avg"`, the official default) or runs k-means on all client centres
(`server: "kmeans"`, as CCFC describes FFCM's server step): from `kmeans_redo` = 10 k-means++ seedings in the first
`warm_start_after` rounds (the official scikit-learn call's n_init), then from the previous centres. A point takes
its nearest global centre.

Stopping: once the global centres move less than `tol`, or after `max_rounds`; the engine runs the declared rounds,
so later rounds are no-ops (`converged_round` is logged and kept). A cycle stops it too (our addition): when the
centres come back within `tol` of those of 2 ... `cycle_window` rounds before with the same clients, one warning is
logged and the remaining rounds replay the cycle without client work, so every later round holds what the official
loop would hold. Seeded once, the server's k-means cycled at p = 1 on Fashion-MNIST; seeded 10 times it converged.

The class defaults are the official code's (m = 2, avg); the config's m = 1.1 with the k-means server is the measured
setting closest to CCFC's FFCM row (docs/findings/ffcm.md). With `data.normalize: l2` the data lie in the unit ball,
far from the uniform start, and the first local runs pull every centre in, as the official code's would.
"""

from __future__ import annotations

import logging
from typing import Any, Literal

import torch
from torch import Tensor

from fedclust.clustering.fcm import fcm
from fedclust.clustering.floor import effective_counts, zero_below_floor
from fedclust.clustering.kmeans import assign_nearest, kmeans
from fedclust.contract import ClientContext, ClientUpdate, DataInfo, FederatedMethod, RoundContext, Stage
from fedclust.errors import MethodArgError
from fedclust.seeding import SERVER, generator, int_seed

log = logging.getLogger("fedclust")


class FFCM(FederatedMethod):
    """Federated fuzzy c-means.

    Args:
        num_clusters: c; None takes the number of classes of the data.
        m: Fuzzifier of the local fuzzy c-means (> 1).
        local_max_iter: Most local fuzzy c-means iterations per round.
        local_tol: Local stop: no membership changes by local_tol or more.
        server: "avg" (support-weighted average of matching centres) or "kmeans" on all client centres.
        max_rounds: Most communication rounds (the schedule's length).
        tol: Global stop: the global centres move less than tol (Frobenius norm of the change).
        kmeans_niter: Lloyd iterations of the server k-means ("kmeans" server).
        kmeans_redo: k-means++ seedings of the server k-means while it is not warm-started (the best
            inertia wins; 10 = scikit-learn's n_init in the official code).
        warm_start_after: Rounds after which the server k-means starts from the previous global centres
            (1: every round but the first, as the official code).
        cycle_window: Stop once the global centres return within tol of those of 2 ... cycle_window rounds
            before (a cycle); 0 never stops on a cycle.
    """

    # local FCM centres and supports, with each centre's effective sample size; a centre below the privacy floor is
    # sent as zeros with count and support 0 (the server matches centres by position), so it weighs nothing
    summary_keys = {"centres": "counts", "supports": "counts"}

    def __init__(self, num_clusters: int | None = None, m: float = 2.0, local_max_iter: int = 1000,
                 local_tol: float = 1e-4, server: Literal["avg", "kmeans"] = "avg", max_rounds: int = 1000,
                 tol: float = 1e-4, kmeans_niter: int = 500, kmeans_redo: int = 10, warm_start_after: int = 1,
                 cycle_window: int = 10):
        super().__init__(num_clusters)
        self.save_hyperparameters()  # so the run-level checks see them (sizes >= 1, finite numbers)
        self.m, self.local_max_iter, self.local_tol = m, local_max_iter, local_tol
        self.server, self.max_rounds, self.tol = server, max_rounds, tol
        self.kmeans_niter, self.kmeans_redo, self.warm_start_after = kmeans_niter, kmeans_redo, warm_start_after
        self.cycle_window = cycle_window
        self.num_features = 0
        self.centroids: Tensor | None = None
        self.converged, self.converged_round, self.shift = False, None, float("inf")
        self.cycle: list[Tensor] | None = None  # the states replayed after a cycle was found
        self.cycle_round: int | None = None  # 1-based round whose centres closed the cycle
        self.past: list[Tensor] = []  # the global centres before each of the last rounds, oldest first
        self.past_clients: list[list[int]] = []  # who took part in each of those rounds

    @property
    def stopped(self) -> bool:
        return self.converged or self.cycle is not None

    def build(self, info: DataInfo) -> None:
        super().build(info)
        self.num_features = info.num_features

    def validate(self, info: DataInfo, num_clients: int) -> None:
        if not self.m > 1:
            raise MethodArgError("m", self.m, "a fuzzifier greater than 1")
        if self.server not in ("avg", "kmeans"):
            raise MethodArgError("server", self.server, '"avg" or "kmeans"')
        for name in ("local_max_iter", "max_rounds", "kmeans_niter", "kmeans_redo"):
            if getattr(self, name) < 1:
                raise MethodArgError(name, getattr(self, name), "a positive integer")
        if self.cycle_window < 0:
            raise MethodArgError("cycle_window", self.cycle_window,
                              "0 (off) or a positive number of rounds")

    def stages(self) -> list[Stage]:
        return [Stage("ffcm", self.max_rounds, local_epochs=0)]

    def communicated(self) -> list[str]:
        return []

    def on_round_start(self, ctx: RoundContext) -> None:
        if self.centroids is None:
            g = generator(ctx.seed, "ffcm-init", SERVER)
            self.centroids = torch.rand(self.num_clusters, self.num_features, generator=g)
        if self.cycle is not None:  # no client work: the state the cycle holds at this round
            self.centroids = self.cycle[(ctx.round - self.cycle_round) % len(self.cycle)]

    def on_client_end(self, ctx: ClientContext) -> dict[str, Tensor]:
        if self.stopped:
            return {}
        x = ctx.data.all_x().flatten(1)
        result = fcm(x, self.num_clusters, m=self.m, max_iter=self.local_max_iter, tol=self.local_tol,
                     init_centres=self.centroids.to(x))
        ctx.state["fcm_iterations"] = ctx.state.get("fcm_iterations", 0) + result.n_iter
        centres, counts = zero_below_floor(result.centres, effective_counts(result.memberships, self.m),
                                           ctx.min_summary_size)
        return {"centres": centres, "supports": result.supports.masked_fill(counts == 0, 0.0), "counts": counts}

    def aggregate(self, averaged: dict[str, Tensor] | None, updates: list[ClientUpdate],
                  ctx: RoundContext) -> None:
        if self.stopped:
            return
        old = self.centroids
        centres = torch.stack([u.payload["centres"] for u in updates])  # (clients, c, d)
        if self.server == "avg":
            supports = torch.stack([u.payload["supports"] for u in updates]).double()  # (clients, c)
            total = supports.sum(0)
            mean = (supports[..., None] * centres.double()).sum(0) / total.clamp_min(1e-300)[:, None]
            new = torch.where(total[:, None] > 0, mean, old.to(mean)).to(centres.dtype)
        else:
            warm = ctx.round >= self.warm_start_after
            sent = torch.cat([u.payload["counts"] for u in updates]) > 0  # zeroed centres carry nothing
            new = kmeans(centres.flatten(0, 1)[sent], self.num_clusters, niter=self.kmeans_niter,
                         nredo=1 if warm else self.kmeans_redo, init_centroids=old if warm else None,
                         seed=int_seed(ctx.seed, "ffcm-kmeans", ctx.stage_index, ctx.round)).centroids
        self.shift = float((new.double() - old.to(new).double()).norm())
        self.centroids = new
        self.past.append(old.cpu())
        self.past_clients.append([u.client_id for u in updates])
        if self.shift < self.tol:
            self.converged, self.converged_round = True, ctx.round + 1
            log.info("FFCM converged at round %d (global centres moved %.3g)", ctx.round + 1, self.shift)
        else:
            self._find_cycle(new, ctx.round + 1)
        keep = max(0, len(self.past) - self.cycle_window)  # the last cycle_window rounds (none when 0)
        self.past, self.past_clients = self.past[keep:], self.past_clients[keep:]

    def _find_cycle(self, new: Tensor, round_1: int) -> None:
        """Stop at the shortest period L >= 2 whose state L rounds back is within tol of `new`, the same
        clients having taken part in each of the L rounds (so the same map was applied)."""
        new64 = new.detach().cpu().double()
        for period in range(2, min(self.cycle_window, len(self.past)) + 1):
            if any(c != self.past_clients[-1] for c in self.past_clients[-period:]):
                return  # different clients: an earlier match would not be the same map repeating
            gap = float((new64 - self.past[-period].double()).norm())
            if gap < self.tol:
                self.cycle, self.cycle_round = [*self.past[-period + 1:], new.detach().cpu()], round_1
                log.warning("FFCM stopped at round %d: its global centres came back to those of round %d (within "
                            "%.3g < tol %g), a cycle of %d states that never meets the tolerance; the remaining "
                            "rounds replay it without client work", round_1, round_1 - period, gap, self.tol, period)
                return

    @property
    def period(self) -> int | None:
        """1 once converged, L after a cycle of L states, None while running."""
        return 1 if self.converged else len(self.cycle) if self.cycle is not None else None

    def server_state(self) -> dict[str, Any]:
        return {"centroids": self.centroids, "converged": self.converged, "converged_round": self.converged_round,
                "shift": self.shift, "cycle": self.cycle, "cycle_round": self.cycle_round, "period": self.period,
                "past": self.past, "past_clients": self.past_clients}

    def load_server_state(self, state: dict[str, Any]) -> None:
        self.centroids, self.converged = state["centroids"], state["converged"]
        self.converged_round, self.shift = state["converged_round"], state["shift"]
        self.cycle, self.cycle_round = state.get("cycle"), state.get("cycle_round")
        self.past, self.past_clients = list(state.get("past", [])), list(state.get("past_clients", []))

    def assign(self, x: Tensor) -> Tensor:
        return assign_nearest(x.flatten(1), self.centroids.to(x.device))

"""Centralized fuzzy c-means: the FCM column of CCFC's Tables 1-2 (the pooled-data reference of FFCM, not
federated), after Bezdek (1981) / Bezdek, Ehrlich & Full (1984).

Runs as a one-client federation (`data.num_clients: 1`) like KMeans, so the same data, geometry and scoring
code serve it: one round, no gradient step, FCM (fedclust/clustering/fcm.py) on every point. A point is
labelled by its largest membership, i.e. its nearest centre. The baselines' reported numbers are in
cosine geometry: pair this method with `data.normalize: l2` (configs/fcm_fmnist.yaml does). The client sends its c
centres, their supports and their effective sample counts (a centre below the privacy floor is zeroed). Why the
config runs m = 1.1 with 5 starts: docs/findings/fcm.md.
"""

from __future__ import annotations

import logging
from typing import Literal

from torch import Tensor

from fedclust.clustering.fcm import fcm
from fedclust.clustering.floor import effective_counts, zero_below_floor
from fedclust.contract import ClientContext, DataInfo
from fedclust.errors import MethodArgError
from fedclust.methods.families.centralized import CentralizedCentroids

log = logging.getLogger("fedclust")


class FCM(CentralizedCentroids):
    """Centralized fuzzy c-means.

    Args:
        num_clusters: c; None takes the number of classes of the data.
        m: Fuzzifier (> 1); 2 is Bezdek's usual choice.
        max_iter: Most centre updates.
        tol: Stop once the memberships change by less than tol (Frobenius norm) between two iterations.
        init: "kmeans++" seeding of the centres, or "random" memberships (scikit-fuzzy's start).
        n_init: Runs from different starts; the lowest objective J_m wins.
    """

    # FCM centres with their effective sample sizes (a centre below the privacy floor is zeroed, counted 0, and
    # dropped by the server) and their supports (membership sums)
    summary_keys = {"centroids": "counts", "supports": "counts"}

    baseline = "fuzzy c-means"

    def __init__(self, num_clusters: int | None = None, m: float = 2.0, max_iter: int = 1000, tol: float = 1e-4,
                 init: Literal["kmeans++", "random"] = "kmeans++", n_init: int = 1):
        super().__init__(num_clusters)
        self.save_hyperparameters()  # so the run-level checks see them (sizes >= 1, finite numbers)
        self.m, self.max_iter, self.tol, self.init, self.n_init = m, max_iter, tol, init, n_init

    def validate(self, info: DataInfo, num_clients: int) -> None:
        super().validate(info, num_clients)
        if not self.m > 1:
            raise MethodArgError("m", self.m, "a fuzzifier greater than 1")
        for name in ("max_iter", "n_init"):
            if getattr(self, name) < 1:
                raise MethodArgError(name, getattr(self, name), "a positive integer")

    def on_client_end(self, ctx: ClientContext) -> dict[str, Tensor]:
        x = ctx.data.all_x().flatten(1)
        result, iterations = None, 0
        for run in range(self.n_init):
            g = ctx.generator("fcm-init" if run == 0 else f"fcm-init-{run}", device="cpu")
            candidate = fcm(x, self.num_clusters, m=self.m, max_iter=self.max_iter, tol=self.tol, generator=g,
                            init=self.init)
            log.info("FCM start %d: %d iterations, objective %.8g", run, candidate.n_iter, candidate.objective)
            iterations += candidate.n_iter
            if result is None or candidate.objective < result.objective:
                result = candidate
        ctx.state["n_iter"], ctx.state["objective"] = iterations, result.objective
        centres, counts = zero_below_floor(result.centres, effective_counts(result.memberships, self.m),
                                           ctx.min_summary_size)
        return {"centroids": centres, "supports": result.supports.masked_fill(counts == 0, 0.0), "counts": counts}

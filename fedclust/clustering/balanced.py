"""Equal-size (balanced) clustering with Sinkhorn-Knopp assignments, as Orchestra's clients cluster their
representations (Lubana et al., "Orchestra: Unsupervised Federated Learning via Globally Consistent Clustering",
ICML 2022, Sec. 4; its local clustering: Sinkhorn-balanced assignments, then spherical centroid updates).

Why balanced: a summary that stands for a fixed number of samples reveals no sample on its own (every centroid is
the mean of n / k of a client's points: k-anonymity with k = n / clusters), and summaries of equal mass can be
pooled on the server without weights, whatever each client's class mix.

Written here rather than taken from a library: Sinkhorn-Knopp is a few lines of tensor algebra, and scikit-learn
and FAISS have no balanced k-means.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor


def sinkhorn(scores: Tensor, epsilon: float = 0.05, iterations: int = 10) -> Tensor:
    """An (N, K) transport plan whose rows sum to 1 and whose columns each sum to N / K, close to softmax(scores /
    epsilon): the balanced soft assignment of SwAV / Orchestra. Computed in float64 in log space (no overflow)."""
    n, k = scores.shape
    log_q = scores.double() / epsilon
    for _ in range(iterations):
        log_q = log_q - torch.logsumexp(log_q, dim=0, keepdim=True) + math.log(n / k)
        log_q = log_q - torch.logsumexp(log_q, dim=1, keepdim=True)
    return log_q.exp().to(scores.dtype)


def balanced_assignment(scores: Tensor, epsilon: float = 0.05, iterations: int = 10) -> Tensor:
    """Hard cluster ids (N,) with sizes within one of each other (N mod K clusters hold one more): the Sinkhorn
    plan rounded greedily, most confident points first, each to its best cluster that still has room (argmax alone
    can leave a cluster over-full)."""
    n, k = scores.shape
    plan = sinkhorn(scores, epsilon, iterations)
    base, extras = divmod(n, k)
    count = [0] * k
    labels = torch.full((n,), -1, dtype=torch.long)
    order = torch.argsort(plan.max(dim=1).values, descending=True).tolist()
    preference = torch.argsort(plan, dim=1, descending=True).tolist()
    for i in order:
        for c in preference[i]:
            if count[c] < base or (count[c] == base and extras > 0):
                if count[c] == base:
                    extras -= 1
                labels[i], count[c] = c, count[c] + 1
                break
    return labels


def balanced_kmeans(x: Tensor, k: int, iterations: int = 10, generator: torch.Generator | None = None,
                    epsilon: float = 0.05) -> tuple[Tensor, Tensor]:
    """Spherical k-means with equal-size clusters on the rows of ``x`` (N, d): centroids (k, d, unit norm) and
    labels (N,), every cluster holding floor(N / k) or ceil(N / k) points. Seeded by k distinct rows drawn with
    ``generator``. Raises ValueError when k > N."""
    n = x.shape[0]
    if not 1 <= k <= n:
        raise ValueError(f"balanced_kmeans needs 1 <= k <= N, got k = {k} for {n} points")
    z = F.normalize(x.detach().float(), dim=1)
    start = torch.randperm(n, generator=generator, device=generator.device if generator else "cpu")[:k]
    centroids = z[start.to(z.device)].clone()
    for step in range(iterations):
        scores = z @ centroids.T
        # Lloyd steps on the Sinkhorn plan's argmax (nearly balanced); the last one rounds it exactly
        labels = (balanced_assignment(scores.cpu(), epsilon).to(z.device) if step == iterations - 1
                  else sinkhorn(scores, epsilon).argmax(dim=1))
        sums = torch.zeros_like(centroids).index_add_(0, labels, z)
        centroids = torch.where(sums.norm(dim=1, keepdim=True) > 0, F.normalize(sums, dim=1), centroids)
    return centroids, labels

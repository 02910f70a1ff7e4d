"""Equal-size groups of a client's samples: what FedSpectral summarises (fedclust/methods/families/
summary_spectral.py).

Why equal sizes: under the privacy floor (federation.min_summary_size = M) a client of n samples can send at most
n / M summaries; equal groups reach that number, while k-means groups of uneven size, once the small ones are
dissolved into their neighbours, leave about half as many (measured on Fashion-MNIST HOG, 10 clients of 1,000 images,
M = 50: 77 summaries against 200, NMI 0.58 against 0.61 at p = 0: docs/findings/fedspectral.md). Orchestra's clients
balance their local clusters for a like reason (Lubana et al., ICML 2022).

How: spherical k-means (fedclust's k-means, FAISS or torch) into k groups, then a capacity-constrained rounding of
the points' cosine scores to the centroids, refined by a few Lloyd steps on the rounded groups. The rounding is
vectorised in proposal rounds (every unplaced point proposes to its best group with room; each group keeps its
most similar proposers), O(n k) a round, where Sinkhorn's float64 plan took 70 s on a 60,000-sample client.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from fedclust.clustering.kmeans import kmeans


def equal_sizes(n: int, k: int) -> Tensor:
    """k group sizes summing to n, each floor(n / k) or one more."""
    sizes = torch.full((k,), n // k, dtype=torch.long)
    sizes[: n % k] += 1
    return sizes


def balanced_assignment(scores: Tensor, sizes: Tensor) -> Tensor:
    """Each row's group (n,) under the capacities ``sizes`` (k,) summing to n: in rounds, every unplaced row
    proposes to its highest-scoring group that still has room, and each group accepts its best proposers up to its
    room. Every row is placed (the capacities sum to n, so some group always has room)."""
    n, k = scores.shape
    room = sizes.to(scores.device).clone()
    labels = torch.full((n,), -1, dtype=torch.long, device=scores.device)
    while bool((labels < 0).any()):
        free = (labels < 0).nonzero().squeeze(1)
        masked = scores[free].masked_fill((room == 0)[None, :], -float("inf"))
        confidence, choice = masked.max(dim=1)
        order = torch.argsort(confidence, descending=True)  # the most confident proposers first
        choice = choice[order]
        by_group = torch.argsort(choice, stable=True)  # proposers grouped by choice, confidence order kept
        count = torch.bincount(choice, minlength=k)
        rank = torch.empty_like(by_group)
        rank[by_group] = torch.arange(len(by_group), device=scores.device) - (count.cumsum(0) - count)[choice[by_group]]
        accept = rank < room[choice]
        labels[free[order[accept]]] = choice[accept]
        room -= torch.bincount(choice[accept], minlength=k)
    return labels


def balanced_groups(x: Tensor, k: int, seed: int = 0, lloyd: int = 20, balanced_steps: int = 3) -> Tensor:
    """Group ids (n,) of the rows of ``x`` in ``k`` groups of floor(n / k) or ceil(n / k) rows, by cosine
    similarity. Raises ValueError when k is not in [1, n]."""
    n = len(x)
    if not 1 <= k <= n:
        raise ValueError(f"balanced_groups needs 1 <= k <= n, got k = {k} for {n} rows")
    z = F.normalize(x.detach().float(), dim=1)
    if k == 1:
        return torch.zeros(n, dtype=torch.long, device=x.device)
    centroids = F.normalize(kmeans(z, k, niter=lloyd, nredo=1, seed=seed, cosine=True).centroids.to(z), dim=1)
    sizes = equal_sizes(n, k)
    for _ in range(balanced_steps):
        labels = balanced_assignment(z @ centroids.T, sizes)
        sums = torch.zeros_like(centroids).index_add_(0, labels, z)
        centroids = F.normalize(sums, dim=1)
    return balanced_assignment(z @ centroids.T, sizes)

"""Spectral clustering of a modest number of points (cluster summaries), as KASP does (Yan, Huang & Jordan, "Fast
Approximate Spectral Clustering", KDD 2009: k-means into many small clusters first, then spectral clustering of
their centroids). In fedclust the small clusters are the clients' local clusters, so the server clusters their
centroids by the shape of the data (a mutual nearest-neighbour graph) rather than by distance to k centres.

The graph: cosine similarity between unit-normalised points, each point linked to its ``neighbors`` most similar
others, symmetrised (an edge if either end chose it); edge weight ``kernel`` "cosine": the similarity mapped to
[0, 1], or "self_tuning": exp(-d_ij^2 / (s_i s_j)) with d the chord distance and s_i the distance of point i to its
``neighbors``-th neighbour (Zelnik-Manor & Perona, "Self-Tuning Spectral Clustering", NIPS 2004), which adapts
the scale to the local density. ``weights``
(the number of samples each point summarises) scale the graph to the samples': an edge between summaries of w_i
and w_j samples stands for w_i * w_j sample pairs. Ng-Jordan-Weiss embedding (the k leading eigenvectors of the
normalised affinity, rows normalised), then k-means on it (fedclust's k-means, seeded).

Written in torch (an eigendecomposition of an n x n matrix, n = the number of summaries, a few thousand at most)
rather than with scikit-learn's SpectralClustering, which takes no point weights.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from fedclust.clustering.kmeans import kmeans

KERNELS = ("cosine", "self_tuning")


def knn_affinity(points: Tensor, neighbors: int, kernel: str = "cosine") -> Tensor:
    """Symmetric (n, n) affinity: each point linked to its ``neighbors`` most cosine-similar others, weighted by
    ``kernel`` (module docstring). Computed in place on one n x n matrix (a server may hold thousands of
    summaries): the same numbers as the plain expressions in the comments, a few times less memory."""
    if kernel not in KERNELS:
        raise ValueError(f"kernel is one of {KERNELS}, not {kernel!r}")
    z = F.normalize(points.double(), dim=1)
    similarity = z @ z.T
    del z
    n = len(similarity)
    m = max(1, min(neighbors, n - 1))
    similarity.fill_diagonal_(-float("inf"))  # no point is its own neighbour; the diagonal is masked out below
    nearest = similarity.topk(m, dim=1)
    chosen = torch.zeros(n, n, dtype=torch.bool, device=similarity.device)
    chosen.scatter_(1, nearest.indices, True)
    chosen |= chosen.T.clone()
    weight = similarity
    if kernel == "cosine":  # (1 + similarity) / 2
        weight.add_(1).div_(2)
    else:  # exp(-chord2 / (s_i s_j)), chord2 = (2 - 2 similarity).clamp_min(0)
        scale = (2 - 2 * nearest.values[:, -1]).clamp_min(1e-12).sqrt()  # distance to the m-th neighbour
        weight.mul_(-2).add_(2).clamp_min_(0)
        weight.div_(scale[:, None] * scale[None, :]).neg_().exp_()
    return weight.masked_fill_(~chosen, 0.0)  # torch.where(chosen, weight, 0)


def spectral_embedding(affinity: Tensor, k: int, weights: Tensor | None = None) -> Tensor:
    """Rows of the k leading eigenvectors of D^-1/2 W D^-1/2, each row unit-normalised (Ng, Jordan & Weiss 2002);
    W = diag(w) A diag(w) + diag(w^2) when point weights w are given (each summary's own pairs as a self-loop)."""
    a = affinity.to(torch.float64, copy=True)  # in place from here: w_i a_ij w_j + [i = j] w_i^2, then D^-1/2 . D^-1/2
    if weights is not None:
        w = weights.double().to(a.device)
        a.mul_(w[:, None]).mul_(w[None, :])
        a.diagonal().add_(w * w)
    degree = a.sum(1).clamp_min(1e-12)
    scale = degree.rsqrt()
    normalized = a.mul_(scale[:, None]).mul_(scale[None, :])
    _, vectors = torch.linalg.eigh(normalized)  # ascending eigenvalues
    return F.normalize(vectors[:, -k:], dim=1)


def spectral_clustering(points: Tensor, k: int, neighbors: int = 10, weights: Tensor | None = None,
                        seed: int = 0, nredo: int = 10, kernel: str = "cosine") -> Tensor:
    """Cluster ids (n,) of ``points`` (n, d) into ``k`` clusters by spectral clustering of their cosine kNN graph.
    ``weights``: samples each point stands for (None: equal). k >= n gives every point its own cluster."""
    n = len(points)
    if k >= n:
        return torch.arange(n, device=points.device)
    embedding = spectral_embedding(knn_affinity(points, neighbors, kernel), k, weights)
    return kmeans(embedding.float(), k, niter=100, nredo=nredo, seed=seed).labels.to(points.device)

"""Spectral clustering on a sparse k-nearest-neighbour graph, linear in the points: FedSpectral's server step over
the clients' summaries (as KASP clusters many small clusters' centroids: Yan, Huang & Jordan, KDD 2009) and the
central spectral baseline over samples (fedclust/methods/spectral.py).

The graph: each unit-normalised point linked to its ``neighbors`` most cosine-similar others (FAISS or torch top-k,
fedclust/clustering/knn_vote.py), symmetrised (an edge if either end chose it); edge weight ``kernel`` "cosine" (the
similarity mapped to [0, 1]) or "self_tuning", exp(-d_ij^2 / (s_i s_j)) with d the chord distance and s_i the
distance of point i to its ``neighbors``-th neighbour (Zelnik-Manor & Perona, NIPS 2004). ``weights`` (the samples
each summary stands for) scale the graph to the samples': W = diag(w) A diag(w) + diag(w^2), each summary's own
pairs a self-loop. Ng-Jordan-Weiss embedding: the k leading eigenvectors of D^-1/2 W D^-1/2, rows normalised, then
fedclust's k-means.

The matrix is a scipy.sparse matrix of n * neighbors entries, never n x n; its leading eigenvectors come from
LOBPCG (scipy.sparse.linalg.lobpcg, Knyazev 2001), a block solver started from a seeded block so runs repeat; it
finds every copy of the eigenvalue 1 that a graph of several components has, where single-vector Lanczos (eigsh)
found 6 of 10 on ten separated clusters. Below DENSE_BELOW points the same matrix is densified and solved by
LAPACK's eigh, faster at that size (benchmarks/results/scale_fedspectral.md) and exact.
"""

from __future__ import annotations

import warnings

import numpy as np
import scipy.sparse as sp
import torch
import torch.nn.functional as F
from scipy.sparse.linalg import lobpcg
from torch import Tensor

from fedclust.clustering.kmeans import kmeans
from fedclust.clustering.knn_vote import nearest_neighbors

KERNELS = ("cosine", "self_tuning")
DENSE_BELOW = 2000  # points: a dense eigh of the (small) affinity is faster than Lanczos below this


def knn_affinity(points: Tensor, neighbors: int, kernel: str = "cosine") -> sp.csr_matrix:
    """The symmetric sparse (n, n) affinity of the module docstring (no self-loops), float64."""
    if kernel not in KERNELS:
        raise ValueError(f"kernel is one of {KERNELS}, not {kernel!r}")
    n = len(points)
    m = max(1, min(neighbors, n - 1))
    unit = F.normalize(points.detach().float(), dim=1)
    found = nearest_neighbors(unit, m).to(unit.device)
    rows = torch.arange(n, device=unit.device)[:, None].expand_as(found)
    own = found == rows  # each row's own index (usually column 0) is not its neighbour
    # keep m neighbours per row: drop the row itself, or the last column when the row itself was not found (ties)
    keep = ~own
    keep[~own.any(1), -1] = False
    src, dst = rows[keep].reshape(n, -1)[:, :m], found[keep].reshape(n, -1)[:, :m]
    similarity = (unit[src] * unit[dst]).sum(-1).double().clamp(-1, 1)
    if kernel == "cosine":
        weight = (1 + similarity) / 2
    else:
        chord2 = (2 - 2 * similarity).clamp_min(0)
        scale = chord2[:, -1].sqrt().clamp_min(1e-6)  # distance to the m-th neighbour (rows sorted by similarity)
        weight = torch.exp(-chord2 / (scale[src] * scale[dst]))
    a = sp.csr_matrix((weight.flatten().cpu().numpy(), (src.flatten().cpu().numpy(), dst.flatten().cpu().numpy())),
                      shape=(n, n))
    return a.maximum(a.T).tocsr()  # an edge if either end chose it, with its (symmetric) weight


def spectral_embedding(affinity: sp.spmatrix, k: int, weights: Tensor | None = None, seed: int = 0) -> Tensor:
    """Rows (n, k) of the k leading eigenvectors of D^-1/2 W D^-1/2, each row unit-normalised (Ng, Jordan & Weiss
    2002); W = diag(w) A diag(w) + diag(w^2) with point weights w."""
    a = sp.csr_matrix(affinity, dtype=np.float64)
    n = a.shape[0]
    if weights is not None:
        w = weights.detach().double().cpu().numpy()
        scale = sp.diags(w)
        a = (scale @ a @ scale + sp.diags(w * w)).tocsr()
    degree = np.asarray(a.sum(axis=1)).ravel()
    inv_sqrt = sp.diags(1.0 / np.sqrt(np.maximum(degree, 1e-300)))
    normalized = (inv_sqrt @ a @ inv_sqrt).tocsr()
    if n < DENSE_BELOW or k >= n - 1:
        _, vectors = np.linalg.eigh(normalized.toarray())
        vectors = vectors[:, -k:]
    else:  # a block method: Lanczos (eigsh) finds too few of a repeated eigenvalue 1 (one per connected component)
        start = np.random.default_rng(seed).standard_normal((n, k))
        with warnings.catch_warnings():  # a stop at maxiter still returns the best block found, which k-means uses
            warnings.simplefilter("ignore", UserWarning)
            _, vectors = lobpcg(normalized, start, largest=True, tol=1e-5, maxiter=300)
    return F.normalize(torch.from_numpy(np.ascontiguousarray(vectors)), dim=1)


def spectral_clustering(points: Tensor, k: int, neighbors: int = 10, weights: Tensor | None = None,
                        seed: int = 0, nredo: int = 10, kernel: str = "cosine") -> Tensor:
    """Cluster ids (n,) of ``points`` (n, d) into ``k`` clusters by spectral clustering of their cosine kNN graph.
    ``weights``: samples each point stands for (None: equal). k >= n gives every point its own cluster."""
    n = len(points)
    if k >= n:
        return torch.arange(n, device=points.device)
    embedding = spectral_embedding(knn_affinity(points, neighbors, kernel), k, weights, seed)
    return kmeans(embedding.float(), k, niter=100, nredo=nredo, seed=seed).labels.to(points.device)

"""Diagnostics of a representation and of a clustering: the probes that found CCFC's collapse on Fashion-MNIST
(benchmarks/results/ccfc_stage1_fmnist_test.md), as one function a run calls at every evaluated round
(`fedclust fit --diagnose true`: callbacks/diagnostics.py) and `fedclust evaluate --diagnose true` calls on a
saved model; docs/diagnostics.md says how to read them.

- **Spectrum** of the (L2-normalised) representation's covariance: the effective rank (Roy & Vetterli 2007:
  exp of the entropy of the normalised eigenvalues; d when every direction carries the same variance, 1 when
  one does), the share of the variance in the first and in the first three principal directions, and how many
  directions hold 90 % of it. Dimensional collapse (FedDecorr, Shi et al. 2023; CCFC++) shows as a low
  effective rank and a large top-3 share.
- **Nuisance**: |Pearson r| between the first principal direction and each sample's mean intensity (image
  brightness), the nuisance SimSiam's z tracked on Fashion-MNIST.
- **Clusters**: the sizes of the method's clusters, smallest / largest and the normalised entropy of the size
  distribution (1 = equal sizes, 0 = one cluster holds every sample), and how many clusters are empty.
- **k-means on the representation** (when labels exist): NMI of k-means with as many clusters as the method uses,
  on the normalised representation: what a server clustering of these features could reach.

Labels are used here only to score, never to train or choose anything.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from fedclust.clustering.kmeans import kmeans
from fedclust.clustering.metrics import nmi

DIAGNOSTIC_KEYS = ("effective_rank", "top1_share", "top3_share", "directions_90", "pc1_brightness_r",
                   "cluster_min", "cluster_max", "cluster_balance", "empty_clusters", "embed_kmeans_nmi")


def spectrum(z: Tensor) -> Tensor:
    """Eigenvalues of the covariance of the rows of ``z``, largest first, normalised to sum to 1 (float64)."""
    zc = z.double() - z.double().mean(0)
    eig = torch.linalg.eigvalsh(zc.T @ zc / max(len(z) - 1, 1)).flip(0).clamp_min(0)
    total = eig.sum()
    return eig / total if total > 0 else torch.full_like(eig, 1.0 / len(eig))


def effective_rank(share: Tensor) -> float:
    """exp(entropy) of a normalised spectrum: between 1 (one direction) and its length (all equal)."""
    p = share[share > 0]
    return float(torch.exp(-(p * p.log()).sum()))


def first_direction(z: Tensor) -> Tensor:
    """Each row's coordinate on the first principal direction of ``z``."""
    zc = z.double() - z.double().mean(0)
    _, _, v = torch.linalg.svd(zc, full_matrices=False)
    return zc @ v[0]


def abs_correlation(a: Tensor, b: Tensor) -> float:
    """|Pearson r| of two vectors; 0 when either is constant."""
    a, b = a.double() - a.double().mean(), b.double() - b.double().mean()
    den = a.norm() * b.norm()
    return float((a @ b).abs() / den) if den > 0 else 0.0


def cluster_balance(clusters: Tensor, k: int) -> dict[str, float]:
    """Sizes of ``k`` clusters (ids 0..k-1; -1 = unassigned, not counted): smallest, largest, normalised size
    entropy (1 = equal) and the number of empty clusters."""
    assigned = clusters[clusters >= 0].long().cpu()
    k = max(k, int(assigned.max()) + 1 if len(assigned) else 1)
    sizes = torch.bincount(assigned, minlength=k).double()
    p = sizes[sizes > 0] / max(float(sizes.sum()), 1.0)
    entropy = float(-(p * p.log()).sum()) / math.log(k) if k > 1 and len(p) else 0.0
    return {"cluster_min": float(sizes.min()), "cluster_max": float(sizes.max()), "cluster_balance": entropy,
            "empty_clusters": float((sizes == 0).sum())}


def diagnose(z: Tensor, clusters: Tensor | None = None, num_clusters: int | None = None,
             labels: Tensor | None = None, brightness: Tensor | None = None, seed: int = 0) -> dict[str, float]:
    """Every diagnostic of module docstring for the representations ``z`` (N, d) of N samples, their clusters
    under the method (N,) and, when given, their labels (to score k-means on ``z``) and mean intensities."""
    z = F.normalize(z.float().flatten(1), dim=1)
    share = spectrum(z)
    out = {"effective_rank": effective_rank(share), "top1_share": float(share[0]),
           "top3_share": float(share[:3].sum()),
           "directions_90": float(int((share.cumsum(0) < 0.9).sum()) + 1)}
    out["pc1_brightness_r"] = abs_correlation(first_direction(z), brightness) if brightness is not None else math.nan
    k = num_clusters or (int(clusters.max()) + 1 if clusters is not None and len(clusters) else 1)
    if clusters is not None:
        out.update(cluster_balance(clusters, k))
    if labels is not None and len(z) > k:
        found = kmeans(z, k, niter=100, nredo=3, seed=seed, cosine=True).labels
        out["embed_kmeans_nmi"] = nmi(found.cpu(), labels.cpu())
    return out

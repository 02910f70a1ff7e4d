"""Contrastive Clustering losses (Li et al., AAAI 2021), the base of FedCC, FedPNP and FedMCC.

As the official CC code (REFERENCE.md): the instance loss is NT-Xent over the L2-normalised projections
of two views (2B - 2 negatives per anchor, temperature 0.5); the cluster loss is the same contrastive form
over the K columns of the two views' softmax assignment matrices (temperature 1.0) plus, per view, the
entropy term log K - H(cluster marginal); CC's total is instance + cluster, unweighted.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F


def nt_xent(a: torch.Tensor, b: torch.Tensor, temperature: float) -> torch.Tensor:
    """NT-Xent between rows of two matched sets: row i of ``a`` and row i of ``b`` are positives, every
    other row of both sets a negative. Rows are L2-normalised here (cosine similarity). Mean over 2N
    anchors, as CC's ``loss / N`` with N = 2B."""
    n = a.shape[0]
    z = F.normalize(torch.cat([a, b]), dim=1)
    sim = z @ z.T / temperature
    sim = sim.masked_fill(torch.eye(2 * n, dtype=torch.bool, device=z.device), float("-inf"))
    positives = torch.cat([torch.arange(n, 2 * n), torch.arange(0, n)]).to(z.device)
    return F.cross_entropy(sim, positives)


def supervised_nt_xent(a: torch.Tensor, b: torch.Tensor, labels: torch.Tensor, temperature: float) -> torch.Tensor:
    """SupCon's L^sup_out (Khosla et al., NeurIPS 2020) over two matched sets: as nt_xent, but every other row with
    the same label, in either set, is a positive too (the anchor's loss is the mean over its positives). With all
    labels distinct it is nt_xent."""
    n = a.shape[0]
    z = F.normalize(torch.cat([a, b]), dim=1)
    itself = torch.eye(2 * n, dtype=torch.bool, device=z.device)
    sim = (z @ z.T / temperature).masked_fill(itself, float("-inf"))
    log_prob = sim - torch.logsumexp(sim, dim=1, keepdim=True)
    y = torch.cat([labels, labels]).to(z.device)
    positive = (y[:, None] == y[None, :]) & ~itself
    return -(log_prob.masked_fill(~positive, 0.0).sum(1) / positive.sum(1)).mean()


def instance_contrastive_loss(z1: torch.Tensor, z2: torch.Tensor, temperature: float = 0.5) -> torch.Tensor:
    """CC's instance-level loss: NT-Xent over the (B, d) projections of the two views."""
    return nt_xent(z1, z2, temperature)


def cluster_entropy(c: torch.Tensor) -> torch.Tensor:
    """log K - H(p), p the cluster marginal of a (B, K) soft assignment; 0 when p is uniform. Minimising
    it spreads the batch over the clusters (CC's guard against the trivial one-cluster solution)."""
    p = c.sum(0) / c.sum()
    return math.log(c.shape[1]) + (p * torch.log(p.clamp_min(1e-12))).sum()


def cluster_contrastive_loss(c1: torch.Tensor, c2: torch.Tensor, temperature: float = 1.0,
                             entropy_weight: float = 1.0) -> torch.Tensor:
    """CC's cluster-level loss: NT-Xent over the K cluster columns of the (B, K) soft assignments of the
    two views, plus ``entropy_weight`` x (entropy term of view 1 + entropy term of view 2)."""
    contrast = nt_xent(c1.T, c2.T, temperature)
    return contrast + entropy_weight * (cluster_entropy(c1) + cluster_entropy(c2))

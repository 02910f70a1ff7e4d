"""Consensus among several clusterings of the same samples, from their contingency tables alone.

Used to choose among a method's independent starts without labels and without a likelihood (UIFCA's restarts on data
whose likelihood is unbounded): starts that found the same partition agree with each other, while a start stuck in a
local optimum (two true clusters in one model, another model starved) agrees with few. The contingency tables are
sums of counts, so a federated run adds each client's tables and no sample-level assignment leaves a client
(Strehl & Ghosh, "Cluster Ensembles", JMLR 2002: the partition sharing the most information with the others).
"""

from __future__ import annotations

import torch
from torch import Tensor


def contingency_tables(assignments: Tensor, num_clusters: int) -> Tensor:
    """(R, n) cluster ids of R clusterings -> (R, R, K, K) counts: [r, s, a, b] = samples in a under r and b under s."""
    one_hot = torch.nn.functional.one_hot(assignments.long(), num_clusters).double()
    return torch.einsum("rna,snb->rsab", one_hot, one_hot)


def pairwise_nmi(tables: Tensor) -> Tensor:
    """(R, R, K, K) contingency tables -> (R, R) normalised mutual information (arithmetic mean of the entropies,
    scikit-learn's default); 1 for identical partitions up to relabelling, 0 for independent ones."""
    joint = tables.double() / tables.sum((-1, -2), keepdim=True).clamp_min(1e-300)
    row, col = joint.sum(-1, keepdim=True), joint.sum(-2, keepdim=True)
    ratio = torch.where(joint > 0, joint / (row * col).clamp_min(1e-300), torch.ones_like(joint))
    mutual = (joint * ratio.log()).sum((-1, -2))
    entropy_row = -(row * row.clamp_min(1e-300).log()).sum((-1, -2))
    entropy_col = -(col * col.clamp_min(1e-300).log()).sum((-1, -2))
    mean_entropy = (entropy_row + entropy_col) / 2
    # two single-cluster partitions agree fully (scikit-learn's convention); otherwise MI over the mean entropy
    nmi = torch.where(mean_entropy > 1e-12, mutual / mean_entropy.clamp_min(1e-12), torch.ones_like(mutual))
    return nmi.clamp(0, 1)


def consensus_scores(tables: Tensor) -> Tensor:
    """(R,) each clustering's mean NMI with the R - 1 others (the diagonal left out)."""
    nmi = pairwise_nmi(tables)
    count = nmi.shape[0]
    if count < 2:
        return torch.ones(count, dtype=nmi.dtype)
    return (nmi.sum(1) - nmi.diagonal()) / (count - 1)

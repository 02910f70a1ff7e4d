"""A client's summaries of its own samples: the means of fixed, equal-size groups of its representations, what a
FedSpectral client sends instead of samples (fedclust/methods/families/summary_spectral.py).

- Groups are drawn once, the first time a client takes part, and kept for the run: a server that received the
  means of regrouped samples round after round could difference them back into samples (the fixed HOG block of
  every image would make that a linear system). Only the representation the means are taken in changes.
- Every group holds at least ``size`` samples (k = n // size groups of equal size, fedclust/clustering/balanced.py),
  so with size >= the run's floor (federation.min_summary_size) every summary meets it; a client with fewer samples
  than ``size`` forms one group of all of them, which the engine refuses if it is below the floor.
- A sample is labelled from the server's clustering of all clients' summaries by its nearest summary's cluster (the
  nearest of every client's summaries is purer than its own group of mixed samples), spread over its client's own
  nearest-neighbour graph.
- A summary is the plain mean of the group's unit representations (not re-normalised): a mean of vectors of norm
  at most 1, as the optional differential privacy of fedclust/federation/privacy.py assumes.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from fedclust.clustering.balanced import balanced_groups
from fedclust.clustering.knn_vote import nearest_neighbors, nearest_rows
from fedclust.clustering.label_spreading import label_spreading


def fixed_groups(x: Tensor, size: int, seed: int = 0) -> Tensor:
    """Each row's group (n,): n // size equal groups of at least ``size`` rows by cosine similarity (one group when
    n < size)."""
    return balanced_groups(x, max(1, len(x) // size), seed=seed)


def group_summaries(x: Tensor, member: Tensor) -> tuple[Tensor, Tensor]:
    """The mean (m, d) of every group's unit-normalised rows and the group sizes (m,) as floats."""
    z = F.normalize(x.float(), dim=1)
    sizes = torch.bincount(member)
    sums = torch.zeros(len(sizes), z.shape[1], device=z.device).index_add_(0, member, z)
    return sums / sizes.clamp_min(1)[:, None].to(sums), sizes.float()


def label_by_summaries(x: Tensor, summaries: Tensor, summary_labels: Tensor, num_labels: int,
                       spread_neighbors: int = 0, spread_alpha: float = 0.0) -> Tensor:
    """A client's rows x labelled by their nearest summary's label (cosine), spread over the rows' own graph (each
    row and its ``spread_neighbors`` nearest, label spreading with ``spread_alpha``; 0: no spreading)."""
    labels = summary_labels.to(x.device)[nearest_rows(x, summaries.to(x.device))]
    if spread_neighbors and spread_alpha:
        labels = label_spreading(nearest_neighbors(x, spread_neighbors), labels, num_labels, spread_alpha)
    return labels

"""Relabel each sample by the majority label of its nearest neighbours (a local kNN vote)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def nearest_neighbors(x: Tensor, neighbors: int, chunk: int = 4096) -> Tensor:
    """Indices (n, neighbors + 1) of each row itself and its ``neighbors`` nearest rows by cosine similarity (fewer
    when there are fewer rows). Written here rather than with sklearn's NearestNeighbors: it runs in torch on the
    rows' device, in chunks of ``chunk`` rows."""
    k = min(neighbors + 1, len(x))
    unit = F.normalize(x.float(), dim=1)
    return torch.cat([(unit[s:s + chunk] @ unit.T).topk(k, dim=1).indices for s in range(0, len(x), chunk)])


def vote(labels: Tensor, neighbors_of: Tensor, num_labels: int | None = None) -> Tensor:
    """Each row's most frequent label among the rows ``neighbors_of`` names for it; ties go to the smallest."""
    num_labels = int(labels.max()) + 1 if num_labels is None else num_labels
    return F.one_hot(labels[neighbors_of], num_labels).sum(1).argmax(1)


def knn_vote(x: Tensor, labels: Tensor, neighbors: int, num_labels: int | None = None, chunk: int = 4096) -> Tensor:
    """Each row's most frequent label among itself and its ``neighbors`` nearest rows (cosine).

    A clustering made on groups of samples (FedSpectral's summaries) gives every member its group's label, so
    the minority of a mixed group is wrong together; its nearest samples mostly are not in the same group and
    outvote it. ``neighbors`` 0 returns a copy of ``labels``.
    """
    if neighbors <= 0 or len(x) <= 1:
        return labels.clone()
    return vote(labels, nearest_neighbors(x, neighbors, chunk), num_labels)

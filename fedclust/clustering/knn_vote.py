"""Relabel each sample by the majority label of its nearest neighbours (a local kNN vote)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def knn_vote(x: Tensor, labels: Tensor, neighbors: int, num_labels: int | None = None,
             chunk: int = 4096) -> Tensor:
    """Each row's most frequent label among itself and its ``neighbors`` nearest rows by cosine similarity.

    A clustering made on groups of samples (FedSpectral's summaries) gives every member its group's label, so
    the minority of a mixed group is wrong together; its nearest samples mostly are not in the same group and
    outvote it. Ties go to the smallest label. ``neighbors`` 0 returns ``labels`` unchanged.
    Written here rather than with sklearn's KNeighborsClassifier: it runs in torch on the samples' device.
    """
    if neighbors <= 0 or len(x) <= 1:
        return labels.clone()
    k = min(neighbors + 1, len(x))  # the sample itself counts as one vote
    num_labels = int(labels.max()) + 1 if num_labels is None else num_labels
    unit = F.normalize(x.float(), dim=1)
    out = torch.empty_like(labels)
    for s in range(0, len(x), chunk):
        nearest = (unit[s:s + chunk] @ unit.T).topk(k, dim=1).indices
        votes = F.one_hot(labels[nearest], num_labels).sum(1)
        out[s:s + chunk] = votes.argmax(1)
    return out

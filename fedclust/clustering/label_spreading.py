"""Label spreading over a k-nearest-neighbour graph (Zhou, Bousquet, Lal, Weston & Schoelkopf, "Learning with
Local and Global Consistency", NIPS 2004).

Given labels for every node (here: the clusters a server gave a client's samples through their summaries), each
node's label is smoothed over the graph, F <- alpha S F + (1 - alpha) Y with S = D^-1/2 W D^-1/2, and the
largest entry of F is its new label. alpha 0 keeps the given labels; alpha near 1 lets a label travel far along the
graph. A majority vote over the neighbours is its one-step, unweighted case.

Written on edge lists rather than with sklearn's LabelSpreading: that one only spreads from a labelled subset to
unlabelled nodes with its own graph, here every node is labelled and the graph is the one the caller already
built; the edge list keeps memory at n x neighbours instead of n x n.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def label_spreading(neighbors_of: Tensor, labels: Tensor, num_labels: int, alpha: float,
                    iterations: int = 30) -> Tensor:
    """New labels (n,) after spreading ``labels`` (n,) over the graph ``neighbors_of`` (n, m) names, every edge 1
    (cosine-weighted edges measured the same on Fashion-MNIST: docs/findings/fedspectral.md).

    Args:
        neighbors_of: Row i holds i's neighbours' indices (a column equal to i itself is ignored), as
            fedclust.clustering.knn_vote.nearest_neighbors returns them.
        labels: Every node's label in [0, num_labels), or an (n, num_labels) start of scores (e.g. the share of
            several labellings that gave each label).
        num_labels: Number of labels.
        alpha: In [0, 1): how far labels travel (0: unchanged).
        iterations: Steps of the fixed-point iteration (alpha^iterations is what is left of the start).
    """
    if not 0 <= alpha < 1:
        raise ValueError(f"alpha must be in [0, 1), got {alpha}")
    n = len(labels)
    if alpha == 0 or n <= 1:
        return labels.argmax(1) if labels.ndim == 2 else labels.clone()
    rows = torch.arange(n, device=neighbors_of.device).unsqueeze(1).expand_as(neighbors_of)
    keep = neighbors_of != rows
    src, dst = rows[keep], neighbors_of[keep]
    src, dst = torch.cat([src, dst]), torch.cat([dst, src])  # symmetric: W + W^T (a mutual pair counts twice)
    scale = torch.bincount(src, minlength=n).clamp_min(1).float().rsqrt()  # D^-1/2
    w = scale[src] * scale[dst]
    start = labels.float() if labels.ndim == 2 else F.one_hot(labels, num_labels).float()
    found = start
    for _ in range(iterations):
        found = alpha * torch.zeros_like(found).index_add_(0, src, w.unsqueeze(1) * found[dst]) + (1 - alpha) * start
    return found.argmax(1)

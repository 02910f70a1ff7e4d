"""Feature propagation over a client's own nearest-neighbour graph: each sample's representation pulled toward
its neighbours', so that the samples of one class sit closer before they are grouped and labelled.

Personalised-PageRank propagation (APPNP: Klicpera, Bojchevski & Guennemann, ICLR 2019; with alpha 1 and no
restart, SGC's P^t x: Wu et al., ICML 2019): g <- (1 - alpha) x + alpha P g, ``steps`` times from g = x, where P
averages a row over itself and its graph neighbours. Used by FedSpectral on the client (fedclust/methods/
families/summary_spectral.py): the graph and the smoothed rows never leave it; only means of fixed groups of them do.

P is a torch sparse matrix of n x m entries built from the (n, m) neighbour lists nearest_neighbors returns, so a
step is one sparse product and memory stays n x (m + d), never n x n; written here rather than taken from a graph
library because it is those few lines and torch_geometric is not a dependency.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def propagate(x: Tensor, neighbors_of: Tensor, steps: int, alpha: float) -> Tensor:
    """Rows (n, d), unit-normalised, after ``steps`` propagation steps of ``x`` (n, d) over ``neighbors_of`` (n, m).

    Args:
        x: The rows to smooth.
        neighbors_of: Row i holds the indices of i and its neighbours (fedclust.clustering.knn_vote.
            nearest_neighbors); P averages each row over the rows it names, itself included once.
        steps: Propagation steps (0: ``x`` itself, unit-normalised).
        alpha: In [0, 1]: the share of each step taken from the neighbours (1 - alpha returns to ``x``).
    """
    if not 0 <= alpha <= 1:
        raise ValueError(f"alpha must be in [0, 1], got {alpha}")
    if steps < 0:
        raise ValueError(f"steps must be >= 0, got {steps}")
    start = x.float()
    smoothed = start
    if steps == 0 or alpha == 0:
        return F.normalize(smoothed, dim=1)
    n, m = neighbors_of.shape
    rows = torch.arange(n, device=x.device).repeat_interleave(m)
    average = torch.sparse_coo_tensor(torch.stack([rows, neighbors_of.to(x.device).flatten()]),
                                      torch.full((n * m,), 1.0 / m, device=x.device), (n, n)).coalesce()
    for _ in range(steps):
        smoothed = (1 - alpha) * start + alpha * torch.sparse.mm(average, smoothed)
    return F.normalize(smoothed, dim=1)

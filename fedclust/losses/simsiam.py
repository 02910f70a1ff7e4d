"""SimSiam-family losses used by CCFC: negative cosine with stop-gradient, the symmetric SimSiam loss,
the model-contrastive term (CCFC eq. 5) and the cluster-contrastive loss (CCFC eq. 1-2).

Every target (``z``, ``p_global``) is detached here, so callers cannot forget the stop-gradient.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def negative_cosine(p: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
    """SimSiam's D(p, sg(z)) = -mean_i cos(p_i, z_i); no gradient flows into ``z``."""
    return -F.cosine_similarity(p, z.detach(), dim=-1).mean()


def simsiam_loss(p1: torch.Tensor, p2: torch.Tensor, z1: torch.Tensor, z2: torch.Tensor) -> torch.Tensor:
    """0.5 * D(p1, sg(z2)) + 0.5 * D(p2, sg(z1)); -1 at perfect agreement."""
    return 0.5 * negative_cosine(p1, z2) + 0.5 * negative_cosine(p2, z1)


def model_contrastive_loss(p_local: torch.Tensor, p_global: torch.Tensor) -> torch.Tensor:
    """CCFC eq. (5) averaged over the batch: -mean_i cos(p_local_i, p_global_i), ``p_global`` fixed."""
    return negative_cosine(p_local, p_global)


def cluster_contrastive_loss(p: torch.Tensor, z: torch.Tensor, labels: torch.Tensor,
                             exclude_self: bool = False, num_clusters: int | None = None,
                             label_count: int | None = None) -> torch.Tensor:
    """CCFC's stage-2 loss inside a mini-batch, samples grouped by pseudo-label; ``z`` is stop-gradient.

    Default (``exclude_self=False``), as CCFC's reference code: each group c with n_c >= 2 members gives
    ``L_c = -1/n_c^2 * sum_{i,j in c} cos(p_i, z_j)`` -- all pairs, i = j included -- and the loss is the
    unweighted mean of L_c over those groups.

    ``exclude_self=True`` is the paper's eq. (1)-(2) as written:
    ``L = sum_c 1/(k n_c) * sum_{i in c} D_i``, ``D_i = -1/(n_c - 1) * sum_{j in c, j != i} cos(p_i, z_j)``,
    i.e. pairs i = j left out and each group's mean D divided by k (not by the number of groups that
    qualify). k is ``num_clusters`` (CCFC's global k), or by default the number of distinct labels in the
    batch. Groups of one member have no j != i and add nothing (the reference skips them too).

    In both forms, a batch without any group of two or more gives zero that still has a grad_fn (like
    ``p.sum() * 0``), so an optimizer step stays valid.

    Vectorised with no loop over groups: sum_{i,j in c} p_i . z_j = (sum_{i in c} p_i) . (sum_{j in c} z_j),
    so only per-group sums of the normalised vectors are needed (O(B d), no B x B matrix).

    ``label_count``: the labels lie in [0, label_count) (CCFC passes its k); the groups are the rows of a table
    of that many, absent labels empty groups that add nothing, so no shape depends on the labels' values (as
    torch.func.vmap needs). None: the largest label + 1 (one host sync).
    """
    pn = F.normalize(p, dim=1)
    zn = F.normalize(z.detach(), dim=1)
    g = int(labels.max()) + 1 if label_count is None else label_count
    count = pn.new_zeros(g).index_add(0, labels, pn.new_ones(labels.shape))
    present = (count > 0).sum()  # the number of distinct labels, as a tensor (no host sync)
    p_sum = pn.new_zeros(g, pn.shape[1]).index_add(0, labels, pn)
    z_sum = zn.new_zeros(g, zn.shape[1]).index_add(0, labels, zn)
    pair_sum = (p_sum * z_sum).sum(1)  # sum over all (i, j) in the group, i = j included
    # masks instead of boolean indexing / `if`: no extra host-device sync, and the result keeps a grad_fn
    # (a zero that backpropagates zeros) when no group qualifies
    ok = count >= 2
    size = count.clamp(min=1)  # an empty group of the table divides nothing by zero (its gradient would be NaN)
    if not exclude_self:
        per_group = torch.where(ok, pair_sum / size**2, 0.0)
        return -per_group.sum() / ok.sum().clamp(min=1)
    self_sum = pn.new_zeros(g).index_add(0, labels, (pn * zn).sum(1))  # sum_i cos(p_i, z_i) per group
    d_sum = -(pair_sum - self_sum) / (count - 1).clamp(min=1)  # sum_{i in c} D_i
    k = present if num_clusters is None else num_clusters
    return torch.where(ok, d_sum / (k * size), 0.0).sum()

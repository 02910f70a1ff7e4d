"""Local clusters under the run's privacy floor (federation.min_summary_size): every group a client summarises for
the server holds at least ``floor`` of its samples. A method adapts to the floor instead of refusing: the samples
of a group below it join the nearest group that is not (k-FED's local clusters, CCFC's local centroids, a
centralized baseline's clusters), and a client holding fewer samples than the floor sends no summary at all.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def group_means(x: Tensor, member: Tensor, cosine: bool = False) -> tuple[Tensor, Tensor]:
    """The mean of every group (m, d) and its size (m,), groups numbered 0..m-1; with ``cosine`` the means of the
    unit-normalised rows (the same direction as a spherical k-means centre)."""
    rows = F.normalize(x.float(), dim=1) if cosine else x.float()
    sizes = torch.bincount(member)
    sums = torch.zeros(len(sizes), rows.shape[1], device=rows.device).index_add_(0, member, rows)
    return sums / sizes.clamp_min(1)[:, None].to(sums), sizes


def dissolve_small_groups(x: Tensor, member: Tensor, min_size: int, cosine: bool = True) -> Tensor:
    """Group ids (0..m-1, consecutive) after the points of every group smaller than ``min_size`` moved to the
    nearest mean (cosine, or Euclidean) of a group that is not; unchanged when all groups are large enough. When no
    group is, every point joins one group (which may itself be below ``min_size``: see `floored_groups`)."""
    means, sizes = group_means(x, member, cosine)
    keep = (sizes >= min_size).nonzero().squeeze(1)
    if len(keep) == len(sizes):
        return member
    if len(keep) == 0:
        return torch.zeros_like(member)
    moved = ~torch.isin(member, keep)
    new = torch.searchsorted(keep, member.clamp(max=int(keep.max())))  # renumber the kept groups 0..m-1
    rows = x[moved].float()
    if cosine:
        new[moved] = (F.normalize(rows, dim=1) @ F.normalize(means[keep], dim=1).T).argmax(dim=1)
    else:
        new[moved] = torch.cdist(rows, means[keep]).argmin(dim=1)
    return new


def floored_groups(x: Tensor, member: Tensor, floor: int, cosine: bool = False) -> tuple[Tensor, Tensor, Tensor]:
    """What a client may send of a local clustering under the floor: the means (m, d) and sizes (m,) of its groups
    after the small ones dissolved, and each sample's group (n,). A client with fewer than ``floor`` samples sends
    nothing: (0, d) means, no sizes, and every sample's group -1."""
    if len(x) < floor:
        return (torch.zeros(0, x.flatten(1).shape[1], device=x.device), torch.zeros(0, device=x.device),
                torch.full_like(member, -1))
    member = dissolve_small_groups(x, member, floor, cosine)
    means, sizes = group_means(x, member, cosine)
    return means, sizes.float(), member


def effective_counts(memberships: Tensor, m: float) -> Tensor:
    """How many samples each fuzzy centre (FCM, FFCM) stands for: the effective sample size (sum w)^2 / sum w^2 of
    its weights w = u^m over the samples (Kish 1965), the count of equal weights that would average as few samples.
    A centre that rests on one sample counts about 1; one that weighs n samples alike counts n."""
    w = memberships.double().pow(m)
    return (w.sum(0).pow(2) / w.pow(2).sum(0).clamp_min(1e-300)).float()


def zero_below_floor(centres: Tensor, counts: Tensor, floor: int) -> tuple[Tensor, Tensor]:
    """Centres whose count is below the floor become rows of zeros counted 0 (they carry nothing to the server):
    for methods whose server matches centres by position (FFCM) and so cannot drop a row."""
    below = counts < floor
    return centres.masked_fill(below[:, None], 0.0), counts.masked_fill(below, 0.0)

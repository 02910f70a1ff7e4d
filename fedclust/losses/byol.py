"""BYOL's normalized regression loss (Grill et al. 2020, eq. 2): the mean squared error between the
L2-normalised prediction and the L2-normalised target projection, which equals 2 - 2 cos(p, z).

The symmetric form (BYOL eq. 2 plus its swapped twin) feeds each view to the online network and the other
to the target network and sums the two terms, as the EasyFL code behind FedU (REFERENCE.md) does:
loss = mean_i [l(p1_i, t2_i) + l(p2_i, t1_i)]. Targets are detached here: no gradient reaches them.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def regression_loss(p: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
    """Per-sample 2 - 2 cos(p_i, z_i) = ||p_i/|p_i| - z_i/|z_i|||^2, shape (B,); z is detached."""
    return 2 - 2 * (F.normalize(p, dim=1) * F.normalize(z.detach(), dim=1)).sum(dim=1)


def byol_loss(p1: torch.Tensor, p2: torch.Tensor, t1: torch.Tensor, t2: torch.Tensor) -> torch.Tensor:
    """Symmetric BYOL loss: online predictions p1, p2 of views 1, 2 against target projections t2, t1
    of the other view; mean over the batch of the two per-sample terms' sum (range [0, 8])."""
    return (regression_loss(p1, t2) + regression_loss(p2, t1)).mean()

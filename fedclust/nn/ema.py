"""Target networks that follow an online network by an exponential moving average (BYOL, MCC, FedU)."""

from __future__ import annotations

import copy

import torch
from torch import nn


def frozen_copy(module: nn.Module) -> nn.Module:
    """A copy without gradients: a target network starts as its online twin (BYOL)."""
    return copy.deepcopy(module).requires_grad_(False)


@torch.no_grad()
def ema_update(target: nn.Module, online: nn.Module, decay: float) -> None:
    """P(target) <- m P(target) + (1 - m) P(online) for every parameter (FedMCC Section II-B; BYOL)."""
    t, o = list(target.parameters()), list(online.parameters())
    torch._foreach_mul_(t, decay)
    torch._foreach_add_(t, o, alpha=1.0 - decay)

"""FedU's divergence-aware predictor update (DAPU), as EasyFL's fedssl code measures it: how far local training
moved the encoder's conv weights, compared with a threshold (0.4) to decide whether the client takes the global
predictor next round."""

from __future__ import annotations

import torch
from torch import Tensor, nn


def divergence_weights(encoder: nn.Module) -> list[str]:
    """State-dict names of the weights DAPU compares: parameters named "conv" and "weight" (EasyFL's rule);
    for a backbone without such names, its Conv2d weights, else its Linear weights."""
    named = [n for n, _ in encoder.named_parameters() if "conv" in n and "weight" in n]
    if named:
        return named
    convs = [n for n, m in encoder.named_modules() if isinstance(m, nn.Conv2d)]
    names = convs or [n for n, m in encoder.named_modules() if isinstance(m, nn.Linear)]
    return [f"{n}.weight" for n in names]


def divergence(local: dict[str, Tensor], global_: dict[str, Tensor]) -> float:
    """Mean over the given weight tensors of the L2 norm of their difference (EasyFL's torch.dist mean),
    computed on the device of `local`."""
    dists = [torch.linalg.vector_norm(v.float() - global_[k].to(v.device).float()) for k, v in local.items()]
    return float(torch.stack(dists).mean())

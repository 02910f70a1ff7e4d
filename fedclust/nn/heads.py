"""MLP heads: SimSiam-style projector/predictor (CCFC) and BatchNorm-free heads (Contrastive Clustering)."""

from __future__ import annotations

from torch import nn


def projector(in_dim: int, hidden: int = 256, out_dim: int = 256,
              last_bn_affine: bool = False) -> nn.Sequential:
    """Linear + BN + ReLU + Linear + BN; the last BN has no affine parameters (CCFC reference code)."""
    return nn.Sequential(
        nn.Linear(in_dim, hidden), nn.BatchNorm1d(hidden), nn.ReLU(inplace=True),
        nn.Linear(hidden, out_dim), nn.BatchNorm1d(out_dim, affine=last_bn_affine),
    )


def predictor(dim: int, hidden: int = 16) -> nn.Sequential:
    """Linear + BN + ReLU + Linear with a narrow bottleneck (CCFC's predictor is 16 wide)."""
    return nn.Sequential(
        nn.Linear(dim, hidden), nn.BatchNorm1d(hidden), nn.ReLU(inplace=True), nn.Linear(hidden, dim),
    )


def mlp_head(in_dim: int, hidden: int, out_dim: int, softmax: bool = False) -> nn.Sequential:
    """Linear + ReLU + Linear (+ Softmax over features), no BatchNorm: CC's instance and cluster heads."""
    layers: list[nn.Module] = [nn.Linear(in_dim, hidden), nn.ReLU(inplace=True), nn.Linear(hidden, out_dim)]
    if softmax:
        layers.append(nn.Softmax(dim=1))
    return nn.Sequential(*layers)


def byol_mlp(in_dim: int, hidden: int, out_dim: int) -> nn.Sequential:
    """BYOL's projector / predictor: Linear + BN + ReLU + Linear."""
    return nn.Sequential(nn.Linear(in_dim, hidden), nn.BatchNorm1d(hidden), nn.ReLU(inplace=True),
                         nn.Linear(hidden, out_dim))

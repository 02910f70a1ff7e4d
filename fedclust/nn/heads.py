"""MLP heads: SimSiam-style projector/predictor (CCFC) and BatchNorm-free heads (Contrastive Clustering)."""

from __future__ import annotations

import math

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


def channel_pool(channels: int, in_features: int, grid: int = 1) -> tuple[nn.Sequential, int]:
    """A backbone's flat output of ``channels`` square maps, each channel averaged over the cells of a ``grid`` x
    ``grid`` partition of its map (``grid`` 1: global average pooling), and the pooled width. torch's adaptive
    average pooling between an unflatten and a flatten: the maps' side is fixed here, when the head is built. A map
    is never split finer than its positions, so output that is pooled already (one position a channel) passes
    unchanged."""
    positions = in_features // channels
    side = math.isqrt(positions)
    if grid < 1 or side * side != positions or positions * channels != in_features:
        raise ValueError(f"cannot pool {in_features} features as {channels} square maps on a {grid} x {grid} grid")
    cells = min(grid, side)
    pool = nn.Sequential(nn.Unflatten(1, (channels, side, side)), nn.AdaptiveAvgPool2d(cells), nn.Flatten())
    return pool, channels * cells * cells

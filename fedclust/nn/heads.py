"""MLP heads: SimSiam-style projector/predictor (CCFC) and BatchNorm-free heads (Contrastive Clustering)."""

from __future__ import annotations

import math

from torch import Tensor, nn
from torch.nn import functional as F


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


class ChannelMean(nn.Module):
    """The mean of each channel over the cells of a ``grid`` x ``grid`` partition of its square map, from a backbone's
    flat output of ``channels`` maps (adaptive average pooling; ``grid`` 1 is global average pooling). Output that is
    pooled already (one position a channel) passes unchanged, and a map is never split finer than its positions.

    Written here rather than as ``nn.AdaptiveAvgPool2d`` alone because the backbones hand over flat features: the
    maps' side is known only from ``channels``."""

    def __init__(self, channels: int, grid: int = 1):
        super().__init__()
        if grid < 1:
            raise ValueError(f"grid must be a positive integer, got {grid}")
        self.channels, self.grid = channels, grid

    def out_features(self, in_features: int) -> int:
        """The width of the output for a flat input of ``in_features``."""
        return self.channels if self.grid == 1 else self.channels * min(self.grid, self._side(in_features)) ** 2

    def _side(self, in_features: int) -> int:
        positions = in_features // self.channels
        side = math.isqrt(positions)
        if side * side != positions or positions * self.channels != in_features:
            raise ValueError(f"{in_features} features are not {self.channels} square maps")
        return side

    def forward(self, h: Tensor) -> Tensor:
        if self.grid == 1:  # any map, square or not: the mean over its positions
            return h.view(len(h), self.channels, -1).mean(2)
        side = self._side(h.shape[1])
        maps = h.view(len(h), self.channels, side, side)
        return F.adaptive_avg_pool2d(maps, min(self.grid, side)).flatten(1)

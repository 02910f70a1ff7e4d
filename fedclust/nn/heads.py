"""MLP heads: SimSiam-style projector/predictor (CCFC) and BatchNorm-free heads (Contrastive Clustering)."""

from __future__ import annotations

from torch import Tensor, nn


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
    """The mean of each channel over its positions, from a backbone's flat output of ``channels`` maps (global average
    pooling; the identity on output that is pooled already, where there is one position a channel)."""

    def __init__(self, channels: int):
        super().__init__()
        self.channels = channels

    def forward(self, h: Tensor) -> Tensor:
        return h.view(len(h), self.channels, -1).mean(2)

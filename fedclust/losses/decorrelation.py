"""Feature decorrelation against dimensional collapse: FedDecorr (Shi et al., "Towards Understanding and Mitigating
Dimensional Collapse in Heterogeneous Federated Learning", ICLR 2023), the regulariser CCFC++ (Yan et al., arXiv
2402.12852) adds to CCFC's local objective.

The batch's features are centred and scaled to unit variance per dimension, K = Z^T Z / N is their correlation
matrix, and the loss is ||K||_F^2 / d^2 without K's diagonal. The paper writes the whole Frobenius norm; the
diagonal of a correlation matrix is 1 whatever the weights, so leaving it out changes no gradient and makes the
loss 0 for decorrelated features (the official FedDecorr code, Yujun-Shi/FedCLS loss.py, also sums only the
off-diagonal entries; it scales them by N instead of 1/d^2, which only moves the weight).
"""

from __future__ import annotations

import torch


def correlation_matrix(z: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    """The (d, d) correlation matrix of the rows of ``z`` (N, d): per-dimension centring and scaling by the
    (biased) standard deviation; a constant dimension gets zero correlations instead of NaN."""
    centred = z - z.mean(0, keepdim=True)
    scaled = centred / torch.sqrt(centred.pow(2).mean(0, keepdim=True) + eps)
    return scaled.T @ scaled / z.shape[0]


def decorrelation_loss(z: torch.Tensor) -> torch.Tensor:
    """FedDecorr: squared off-diagonal entries of the batch correlation matrix of ``z`` (N, d), summed and
    divided by d^2. 0 for uncorrelated dimensions, (d - 1) / d when every dimension is the same feature.
    A batch of one sample has no correlation: 0."""
    n, d = z.shape
    if n < 2:
        return z.sum() * 0.0
    k = correlation_matrix(z.to(torch.promote_types(z.dtype, torch.float32)))  # bf16 up, float64 kept
    off = k - torch.diag_embed(torch.diagonal(k))
    return off.pow(2).sum() / d**2

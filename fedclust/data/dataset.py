"""What every loader returns: one whole data set in memory (:class:`Dataset`), and how its stored samples become
a model's float inputs (:func:`to_float`, :func:`prepare`).

Images stay uint8 (N, C, H, W) in 0..255 so that CIFAR-sized sets fit on the device as one tensor; vector data
are float32 (N, d). The loaders are in datasets.py (the registry) and derived.py; the federated view of a set is
client_data.py.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass
class Dataset:
    """A whole data set in memory; ``split`` marks each sample 0 = official train part, 1 = test part."""

    name: str
    x: Tensor  # uint8 (N, C, H, W) for images, float32 (N, d) for vectors
    y: Tensor  # int64 (N,)
    num_classes: int
    is_image: bool
    split: Tensor  # int8 (N,)

    def __len__(self) -> int:
        return len(self.y)


def to_float(x: Tensor) -> Tensor:
    """uint8 images -> float32 in [0, 1]; float tensors are returned unchanged."""
    if x.dtype == torch.uint8:
        return x.float().div_(255.0)
    if x.is_floating_point():
        return x
    raise TypeError(f"to_float expects uint8 or floating tensors, got {x.dtype}")


def prepare(x: Tensor, normalize: str) -> Tensor:
    """uint8 -> float in [0, 1]; with normalize="l2" every sample is scaled to unit L2 norm (the cosine
    geometry in which CCFC's classic baselines are reported, REFERENCE.md)."""
    x = to_float(x)
    if normalize == "l2":
        norms = x.flatten(1).norm(dim=1).clamp_min(1e-12)
        x = x / norms.view(-1, *([1] * (x.dim() - 1)))
    return x

"""Pixel-level transforms for likelihood models, batched, every draw from an explicit torch.Generator.

Inputs are float images in [0, 1] of any shape (usually (B, C, H, W)); outputs keep shape, dtype and
device. The generator may live on the input's device or on the CPU (noise is then drawn there and moved),
as in ``fedclust.data.views``. Noise is drawn for every pixel, so the output depends only on the input's
shape and the generator's state: same seed, same output.
"""

from __future__ import annotations

import torch
from torch import Tensor


def _check_float(x: Tensor, name: str) -> None:
    if not x.is_floating_point():
        raise TypeError(f"{name} expects float images in [0, 1] (see datasets.to_float), got {x.dtype}")


def _uniform_like(x: Tensor, generator: torch.Generator) -> Tensor:
    """U[0, 1) noise of x's shape drawn from ``generator`` on its own device, moved to x's device and dtype."""
    return torch.rand(x.shape, generator=generator, device=generator.device, dtype=x.dtype).to(x.device)


def randomize_background(x: Tensor, generator: torch.Generator, threshold: float = 0.01) -> Tensor:
    """UIFCA's "RB" (Chung, Lee & Ramchandran, Figure 4): pixels below ``threshold`` become U[0, 1) noise.

    Dark (background) pixels share one pattern across classes; a likelihood model can score them well
    whatever the class, which the UIFCA ablation (Table 2) found to hide the class from the likelihood.
    Replacing them with noise leaves no background pattern to learn. Pixels >= ``threshold`` are unchanged.
    """
    _check_float(x, "randomize_background")
    return torch.where(x < threshold, _uniform_like(x, generator), x)


def dequantize(x: Tensor, generator: torch.Generator, levels: int = 256) -> Tensor:
    """x + U[0, 1) / levels, clamped to [0, 1]: uniform dequantisation of images with ``levels`` grey levels.

    A continuous density fitted to discrete pixel values can grow without bound on them; spreading each
    value over a 1 / levels wide interval (Theis, van den Oord & Bethge 2016; Dinh et al. 2017) makes the
    likelihood a lower bound on the discrete model's.
    """
    _check_float(x, "dequantize")
    return (x + _uniform_like(x, generator) / levels).clamp_(0.0, 1.0)

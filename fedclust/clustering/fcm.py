"""Fuzzy c-means (Bezdek, "Pattern Recognition with Fuzzy Objective Function Algorithms", 1981; Bezdek,
Ehrlich & Full, "FCM: the fuzzy c-means clustering algorithm", 1984) on torch.

Minimises J_m = sum_i sum_k u_ik^m ||x_i - c_k||^2 over memberships u (rows sum to 1) and centres c by
alternating the two closed-form steps:

    u_ik = 1 / sum_j (d_ik / d_ij)^(2 / (m - 1))          (d = Euclidean distance)
    c_k  = sum_i u_ik^m x_i / sum_i u_ik^m

Written here rather than taken from a library: there is no maintained torch FCM package, and
scikit-fuzzy / fuzzy-c-means are numpy-only and CPU-only. This version runs on the data's device and
dtype (float32 or float64), passes over the data in row chunks (so 70,000 x 784 never needs more than
the data plus (rows x k) temporaries), and draws randomness only from the generator it is given.

Choices:
- Memberships are computed as softmax(-log(d^2) / (m - 1)) over the centres, which equals the formula
  above but cannot overflow when m is close to 1. A point at distance 0 from one or more centres
  (where the formula divides by zero) gets membership 1 split equally over those centres, never nan.
  Squared distances use ||x||^2 - 2 x.c + ||c||^2, clamped at 0.
- Stop when the Frobenius norm of the membership change between two iterations is below tol (as in
  scikit-fuzzy, fuzzy-c-means and the FFCM code; it grows with n, so large sets run longer than under
  Bezdek et al.'s max-norm) or after max_iter centre updates. Returned memberships, labels, supports
  and objective are those of the returned centres.
- A centre whose membership weights all underflow to 0 (possible for m near 1) keeps its position.
- Without init_centres: "kmeans++" seeds the centres with k-means++; "random" draws uniform random
  memberships normalised per point (scikit-fuzzy's and fuzzy-c-means' start) and takes their centres.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

from fedclust.clustering.kmeans import _check_k, _rows_per_chunk, kmeans_plusplus_init
from fedclust.errors import ConfigError


@dataclass
class FCMResult:
    """centres (k, d) in x's dtype; memberships (n, k) to those centres; labels (n,) = argmax membership
    (= nearest centre); supports (k,) = membership sums; n_iter centre updates; objective J_m."""

    centres: Tensor
    memberships: Tensor
    labels: Tensor
    supports: Tensor
    n_iter: int
    objective: float


def _check_m(m: float) -> None:
    if not m > 1:
        raise ConfigError("m", m, "a fuzzifier greater than 1")


def _sq_distances(x: Tensor, x_sq: Tensor, c: Tensor, c_sq: Tensor) -> Tensor:
    return (x_sq[:, None] - 2.0 * (x @ c.T) + c_sq[None, :]).clamp_min_(0.0)


def memberships_from_sq_distances(d2: Tensor, m: float) -> Tensor:
    """FCM memberships (n, k) from squared distances (n, k), guarded against zero distances."""
    _check_m(m)
    zero = d2 <= 0
    u = torch.softmax(-torch.log(d2.clamp_min(torch.finfo(d2.dtype).tiny)) / (m - 1.0), dim=1)
    on_centre = zero.any(1, keepdim=True)
    split = zero.to(d2.dtype) / zero.sum(1, keepdim=True).clamp_min(1).to(d2.dtype)
    return torch.where(on_centre, split, u)


def memberships(x: Tensor, centres: Tensor, m: float = 2.0, chunk_size: int | None = None) -> Tensor:
    """FCM memberships (n, k) of the rows of `x` (n, d) to `centres` (k, d), in x's dtype and device."""
    c = centres.to(device=x.device, dtype=x.dtype)
    c_sq = c.pow(2).sum(1)
    step = chunk_size or _rows_per_chunk(c.shape[0], x.shape[1], x.element_size())
    parts = [memberships_from_sq_distances(_sq_distances(xc, xc.pow(2).sum(1), c, c_sq), m)
             for xc in x.split(step)]
    return torch.cat(parts)


def _pass(x: Tensor, x_sq: Tensor, c: Tensor, m: float, step: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """One pass over the data: memberships to `c`, the weighted sums and weights of the next centres
    (accumulated in float64), and the objective J_m(u, c)."""
    c_sq = c.pow(2).sum(1)
    k, d = c.shape
    sums = torch.zeros(k, d, dtype=torch.float64, device=x.device)
    weights = torch.zeros(k, dtype=torch.float64, device=x.device)
    objective = torch.zeros((), dtype=torch.float64, device=x.device)
    parts = []
    for s in range(0, x.shape[0], step):
        xc = x[s : s + step]
        d2 = _sq_distances(xc, x_sq[s : s + step], c, c_sq)
        u = memberships_from_sq_distances(d2, m)
        um = u.pow(m)
        sums += (um.T @ xc).double()
        weights += um.sum(0).double()
        objective += (um * d2).sum().double()
        parts.append(u)
    return torch.cat(parts), sums, weights, objective


def _centres(sums: Tensor, weights: Tensor, previous: Tensor) -> Tensor:
    new = (sums / weights.clamp_min(torch.finfo(torch.float64).tiny)[:, None]).to(previous.dtype)
    return torch.where(weights[:, None] > 0, new, previous)


def fcm(
    x: Tensor,
    k: int,
    m: float = 2.0,
    max_iter: int = 1000,
    tol: float = 1e-4,
    init_centres: Tensor | None = None,
    generator: torch.Generator | None = None,
    init: Literal["kmeans++", "random"] = "kmeans++",
    chunk_size: int | None = None,
) -> FCMResult:
    """Fuzzy c-means of the rows of `x` (n, d) into `k` clusters with fuzzifier `m` > 1.

    init_centres: (k, d) start (the first step computes memberships to them); otherwise `init` with
    draws from `generator` (required then). chunk_size: rows per pass chunk (default: ~256 MB bound).
    """
    if x.ndim != 2:
        raise ValueError(f"fcm expects a 2-D tensor (n, d), got shape {tuple(x.shape)}")
    n, d = x.shape
    _check_k(k, n)
    _check_m(m)
    if max_iter < 1:
        raise ConfigError("max_iter", max_iter, "a positive integer")
    step = chunk_size or _rows_per_chunk(k, d, x.element_size())
    x_sq = torch.cat([xc.pow(2).sum(1) for xc in x.split(step)])
    if init_centres is not None:
        if tuple(init_centres.shape) != (k, d):
            raise ValueError(f"init_centres must have shape {(k, d)}, got {tuple(init_centres.shape)}")
        c = init_centres.to(device=x.device, dtype=x.dtype).clone()
    elif generator is None:
        raise ValueError("fcm needs init_centres or a generator to draw the start from")
    elif init == "kmeans++":
        c = kmeans_plusplus_init(x, k, generator).to(x.dtype)
    elif init == "random":
        u0 = torch.rand(n, k, generator=generator, device=generator.device).to(device=x.device, dtype=x.dtype)
        um = (u0 / u0.sum(1, keepdim=True)).pow(m)
        c = _centres((um.T @ x).double(), um.sum(0).double(), torch.zeros(k, d, dtype=x.dtype, device=x.device))
    else:
        raise ConfigError("init", init, '"kmeans++" or "random"')

    u, sums, weights, objective = _pass(x, x_sq, c, m, step)
    n_iter, delta = 0, float("inf")
    while n_iter < max_iter and delta >= tol:
        c = _centres(sums, weights, c)
        u_new, sums, weights, objective = _pass(x, x_sq, c, m, step)
        delta, u, n_iter = float(torch.linalg.vector_norm(u_new - u)), u_new, n_iter + 1
    return FCMResult(c, u, u.argmax(1), u.sum(0), n_iter, float(objective))

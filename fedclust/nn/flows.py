"""Normalizing flows for UIFCA (Chung, Lee & Ramchandran): an affine flow, planar flows and RealNVP.

UIFCA keeps one flow per cluster and assigns every sample to the flow under which it is most likely, so
all flows here share one interface:

- ``log_prob(x)``: per-sample log-likelihood in nats, shape (B,), for x of shape (B, d) (vector flows)
  or (B, C, H, W) (image flows); ``forward(x)`` is the same, so ``flow(x)`` works with DDP/Fabric;
- ``nll(x)`` = ``-log_prob(x)`` (per sample; take ``.mean()`` for a training loss);
- ``encode(x) -> (z, log_det)``: the data-to-latent map and log|det dz/dx| per sample;
- ``decode(z) -> x``: its inverse; ``sample(n, generator)`` draws n samples with ``generator``.

The prior on z is N(0, I) for every flow (:class:`PlanarFlow`'s learnable diagonal Gaussian base is an
element-wise affine map at the end of its ``encode``). :func:`stack_log_prob` scores a batch under K flows
at once, (K, B).

Parameters are initialised from torch's global RNG, like ``nn.Linear`` (fedclust seeds it once before
``method.build``); every draw after that (sampling) takes an explicit ``torch.Generator``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from fedclust.errors import ConfigError

LOG_2PI = math.log(2 * math.pi)
MASKINGS = ("checkerboard", "cyclic")


def standard_normal_log_prob(z: Tensor) -> Tensor:
    """log N(z; 0, I) summed over every dimension but the first: shape (B,)."""
    return -0.5 * (z.flatten(1).pow(2).sum(1) + z[0].numel() * LOG_2PI)


def stack_log_prob(flows: Sequence[nn.Module], x: Tensor) -> Tensor:
    """log p_k(x_i) for every flow k and sample i, shape (K, B).

    UIFCA's cluster identity of x_i is ``stack_log_prob(flows, x).argmax(0)`` (the flow with the lowest
    loss, i.e. the highest likelihood).
    """
    return torch.stack([flow.log_prob(x) for flow in flows])


def _randn(shape: tuple[int, ...], generator: torch.Generator | None, like: Tensor) -> Tensor:
    """N(0, 1) draws from ``generator`` (on its own device), returned on ``like``'s device and dtype."""
    device = generator.device if generator is not None else like.device
    return torch.randn(shape, generator=generator, device=device, dtype=like.dtype).to(like.device)


class _Flow(nn.Module):
    """Shared plumbing: log_prob from ``encode`` + the prior, nll, forward."""

    def encode(self, x: Tensor) -> tuple[Tensor, Tensor]:
        raise NotImplementedError

    def prior_log_prob(self, z: Tensor) -> Tensor:
        return standard_normal_log_prob(z)

    def log_prob(self, x: Tensor) -> Tensor:
        """Per-sample log-likelihood in nats, shape (B,): log p_Z(encode(x)) + log|det dz/dx|."""
        z, log_det = self.encode(x)
        return self.prior_log_prob(z) + log_det

    def nll(self, x: Tensor) -> Tensor:
        """Per-sample negative log-likelihood in nats, shape (B,)."""
        return -self.log_prob(x)

    def forward(self, x: Tensor) -> Tensor:
        return self.log_prob(x)


# ---------------------------------------------------------------------------------------------- vector flows


class AffineFlow(_Flow):
    """UIFCA's synthetic-data flow: x = g(z) = W z + b with z ~ N(0, I), a full d x d matrix W.

    UIFCA (Chung, Lee & Ramchandran, "Synthetic experiments") calls its model a "1-layer planar flow
    (Rezende and Mohamed)" but writes the map as the linear transformation g(z) = w^T z + b. We implement
    the affine map as written: its density is N(b, W W^T), which is what the paper's explanation needs
    ("our model learns the projection from standard basis to such subspaces"). A Rezende-Mohamed planar
    flow z + u h(w^T z + b) changes z along one direction only and cannot model a random 16-dim subspace
    of R^32; it is available as :class:`PlanarFlow`.

    log p(x) = log N(W^{-1}(x - b); 0, I) - log|det W|, with W^{-1} applied by a linear solve (never an
    explicit inverse) and log|det W| from ``torch.linalg.slogdet``.

    ``triangular=True`` stores W as a lower-triangular matrix with a positive diagonal exp(log_diag)
    instead (the Cholesky factor of the covariance): the same family of densities, with one parameter
    vector per density (a full W is only determined up to W Q, Q orthogonal, so two copies fitted to the
    same cluster can disagree and their FedAvg average be a worse model) and a log-determinant that is
    linear in the parameters, which keeps gradient steps stable when the data lie in a subspace (the
    maximum-likelihood W is then singular and the NLL decreases without bound as W approaches it).

    Initialisation ("random model", then the caller perturbs each copy): W = I + init_std * G / sqrt(d)
    and b = init_std * g, G and g standard normal from torch's global RNG.
    """

    def __init__(self, dim: int, init_std: float = 0.1, triangular: bool = False):
        super().__init__()
        if dim < 1:
            raise ConfigError("dim", dim, "a positive integer")
        self.dim, self.triangular = dim, triangular
        noise = init_std * torch.randn(dim, dim) / math.sqrt(dim)
        if triangular:
            self.lower = nn.Parameter(torch.tril(noise, -1))
            self.log_diag = nn.Parameter(torch.zeros(dim))  # exp(0) = 1: starts at I + strictly lower noise
        else:
            self.weight = nn.Parameter(torch.eye(dim) + noise)
        self.bias = nn.Parameter(init_std * torch.randn(dim))

    def matrix(self) -> Tensor:
        """W as a (d, d) tensor (the ``weight`` parameter, or built from its factors when ``triangular``)."""
        if self.triangular:
            return torch.tril(self.lower, -1) + torch.diag(self.log_diag.exp())
        return self.weight

    def log_abs_det(self) -> Tensor:
        """log|det W| (a scalar)."""
        if self.triangular:
            return self.log_diag.sum()
        return torch.linalg.slogdet(self.weight).logabsdet

    def encode(self, x: Tensor) -> tuple[Tensor, Tensor]:
        if x.dim() != 2 or x.shape[1] != self.dim:
            raise ValueError(f"AffineFlow({self.dim}) expects (B, {self.dim}) inputs, got {tuple(x.shape)}")
        centred = (x - self.bias).T  # (d, B): one solve for the whole batch
        if self.triangular:
            z = torch.linalg.solve_triangular(self.matrix(), centred, upper=False)
        else:
            z = torch.linalg.solve(self.weight, centred)
        return z.T, (-self.log_abs_det()).expand(x.shape[0])

    def decode(self, z: Tensor) -> Tensor:
        return z @ self.matrix().T + self.bias

    @torch.no_grad()
    def sample(self, n: int, generator: torch.Generator | None = None) -> Tensor:
        return self.decode(_randn((n, self.dim), generator, self.bias))


class PlanarFlow(_Flow):
    """Planar flows (Rezende & Mohamed 2015) on a learnable diagonal Gaussian base, for vectors (B, d).

    Each layer is f(x) = x + u' tanh(w^T x + b), with u' = u + (m(w^T u) - w^T u) w / |w|^2 and
    m(a) = -1 + softplus(a), the paper's reparametrisation that keeps w^T u' >= -1 so f is invertible
    (Rezende & Mohamed 2015, Appendix A.1); log|det df/dx| = log|1 + u'^T w tanh'(w^T x + b)|.

    The layers are applied in the normalising direction (data x -> latent), so ``log_prob`` is exact and in
    closed form: z = f_L(...f_1(x)), z ~ N(mu, diag(sigma^2)). (Rezende & Mohamed push base samples towards
    the data; that direction would need a root-find inside every likelihood evaluation.) ``sample`` inverts
    each layer by bisection on the scalar equation a + (w^T u') tanh(a + b) = w^T y, monotone in a.

    With one layer this can only bend the data along one direction; UIFCA's affine model is
    :class:`AffineFlow`.
    """

    def __init__(self, dim: int, layers: int = 1, init_std: float = 0.1):
        super().__init__()
        if dim < 1 or layers < 0:
            raise ConfigError("dim/layers", (dim, layers), "dim >= 1 and layers >= 0")
        self.dim = dim
        self.u = nn.Parameter(init_std * torch.randn(layers, dim))
        self.w = nn.Parameter(init_std * torch.randn(layers, dim))
        self.b = nn.Parameter(torch.zeros(layers))
        self.loc = nn.Parameter(torch.zeros(dim))
        self.log_scale = nn.Parameter(torch.zeros(dim))

    def _u_hat(self) -> Tensor:
        wu = (self.w * self.u).sum(1, keepdim=True)
        # |w|^2 is floored so that an all-zero w (a layer that does nothing) does not divide by 0
        w_sq = self.w.pow(2).sum(1, keepdim=True).clamp_min(1e-12)
        return self.u + (F.softplus(wu) - 1 - wu) * self.w / w_sq

    def encode(self, x: Tensor) -> tuple[Tensor, Tensor]:
        if x.dim() != 2 or x.shape[1] != self.dim:
            raise ValueError(f"PlanarFlow({self.dim}) expects (B, {self.dim}) inputs, got {tuple(x.shape)}")
        u_hat, log_det = self._u_hat(), x.new_zeros(x.shape[0])
        for k in range(self.w.shape[0]):
            h = torch.tanh(x @ self.w[k] + self.b[k])
            # 1 + tanh'(.) w^T u' >= 1 - tanh'(.) >= 0 since tanh' <= 1 and w^T u' >= -1: no abs needed;
            # log1p keeps precision when the layer is close to the identity
            log_det = log_det + torch.log1p((1 - h.pow(2)) * (self.w[k] @ u_hat[k]))
            x = x + h[:, None] * u_hat[k]
        z = (x - self.loc) * torch.exp(-self.log_scale)
        return z, log_det - self.log_scale.sum()

    def decode(self, z: Tensor, iterations: int = 100) -> Tensor:
        y = z * self.log_scale.exp() + self.loc
        u_hat = self._u_hat()
        for k in reversed(range(self.w.shape[0])):
            wu, target = self.w[k] @ u_hat[k], y @ self.w[k]
            # a = w^T x solves a + wu tanh(a + b) = target; |tanh| < 1 brackets it in target -+ |wu|
            lo, hi = target - wu.abs() - 1e-6, target + wu.abs() + 1e-6
            for _ in range(iterations):
                mid = (lo + hi) / 2
                above = mid + wu * torch.tanh(mid + self.b[k]) > target
                lo, hi = torch.where(above, lo, mid), torch.where(above, mid, hi)
            y = y - torch.tanh((lo + hi) / 2 + self.b[k])[:, None] * u_hat[k]
        return y

    @torch.no_grad()
    def sample(self, n: int, generator: torch.Generator | None = None) -> Tensor:
        return self.decode(_randn((n, self.dim), generator, self.loc))


# ---------------------------------------------------------------------------------------------- RealNVP


def checkerboard_mask(height: int, width: int) -> Tensor:
    """1 where (row + column) is even, 0 elsewhere, shape (H, W)."""
    rows, cols = torch.arange(height)[:, None], torch.arange(width)[None, :]
    return ((rows + cols) % 2 == 0).float()


def quadrant_mask(height: int, width: int, quadrant: int) -> Tensor:
    """1 on one quadrant, shape (H, W): 0 top-left, 1 top-right, 2 bottom-right, 3 bottom-left.

    Split at (H // 2, W // 2), so with odd sides the bottom/right quadrants are one pixel larger.
    """
    h, w = height // 2, width // 2
    rows, cols = [slice(0, h), slice(0, h), slice(h, None), slice(h, None)], [
        slice(0, w), slice(w, None), slice(w, None), slice(0, w)]
    mask = torch.zeros(height, width)
    mask[rows[quadrant], cols[quadrant]] = 1.0
    return mask


def coupling_masks(masking: str, height: int, width: int, num_couplings: int) -> Tensor:
    """(num_couplings, 2, H, W) binary masks: [:, 0] the pixels a coupling reads, [:, 1] those it changes.

    "checkerboard" (Dinh et al. 2017): coupling i reads the checkerboard b and changes 1 - b for even i,
    and the other way round for odd i. "cyclic" (Kirichenko et al. 2020's cycle-mask): coupling i reads
    quadrant i mod 4 and changes quadrant (i + 1) mod 4 (0 top-left -> 1 top-right -> 2 bottom-right ->
    3 bottom-left -> 0); the other two quadrants pass through unchanged.
    """
    if masking not in MASKINGS:
        raise ConfigError("masking", masking, "one of " + ", ".join(MASKINGS))
    masks = torch.zeros(num_couplings, 2, height, width)
    for i in range(num_couplings):
        if masking == "checkerboard":
            board = checkerboard_mask(height, width)
            masks[i, 0], masks[i, 1] = (board, 1 - board) if i % 2 == 0 else (1 - board, board)
        else:
            masks[i, 0], masks[i, 1] = quadrant_mask(height, width, i % 4), quadrant_mask(height, width, (i + 1) % 4)
    return masks


class _ResidualBlock(nn.Module):
    """ReLU -> conv -> ReLU -> conv, plus the input (pre-activation ResNet block, no normalisation)."""

    def __init__(self, channels: int, kernel_size: int, dilations: tuple[int, int] = (1, 1)):
        super().__init__()
        pads = [d * (kernel_size // 2) for d in dilations]  # "same" padding for odd kernels
        self.conv1 = nn.Conv2d(channels, channels, kernel_size, padding=pads[0], dilation=dilations[0])
        self.conv2 = nn.Conv2d(channels, channels, kernel_size, padding=pads[1], dilation=dilations[1])

    def forward(self, h: Tensor) -> Tensor:
        return h + self.conv2(F.relu(self.conv1(F.relu(h))))


class AffineCoupling(nn.Module):
    """One affine coupling layer (Dinh et al. 2017): y = x * exp(s) + t on the changed pixels, x elsewhere.

    s = scale * tanh(s_raw) and t come from a small residual conv net that sees only the read pixels
    (x * read, plus the read mask as an extra channel so it knows which zeros are masked out); read and
    changed pixels are disjoint, so the Jacobian is triangular and log|det| = sum of s over changed pixels.
    The net's last conv is zero-initialised: every coupling starts as the identity. No batch norm: its
    batch statistics would make a sample's likelihood depend on the rest of its batch, and its running
    statistics would need their own FedAvg treatment.
    """

    def __init__(self, channels: int, masks: Tensor, hidden_channels: int, num_blocks: int, kernel_size: int = 3,
                 dilation: int = 1):
        super().__init__()
        pad = kernel_size // 2
        self.register_buffer("read", masks[0][None, None].clone(), persistent=False)  # (1, 1, H, W)
        self.register_buffer("change", masks[1][None, None].clone(), persistent=False)
        # the j-th conv inside the residual blocks has dilation dilation**j (1 everywhere by default)
        dil = [dilation**j for j in range(2 * num_blocks)]
        self.net = nn.Sequential(
            nn.Conv2d(channels + 1, hidden_channels, kernel_size, padding=pad),
            *[_ResidualBlock(hidden_channels, kernel_size, (dil[2 * b], dil[2 * b + 1])) for b in range(num_blocks)],
            nn.ReLU(),
            nn.Conv2d(hidden_channels, 2 * channels, kernel_size, padding=pad),
        )
        nn.init.zeros_(self.net[-1].weight)
        nn.init.zeros_(self.net[-1].bias)
        # learnable per-channel bound on |s| (RealNVP's "scale * tanh"): starts at 1, so exp(s) in [1/e, e]
        self.scale = nn.Parameter(torch.ones(channels, 1, 1))

    def _scale_shift(self, x: Tensor) -> tuple[Tensor, Tensor]:
        read = self.read.to(x.dtype)
        h = self.net(torch.cat([x * read, read.expand(x.shape[0], 1, -1, -1)], dim=1))
        s_raw, t = h.chunk(2, dim=1)
        change = self.change.to(x.dtype)
        return self.scale * torch.tanh(s_raw) * change, t * change

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        s, t = self._scale_shift(x)
        return x * torch.exp(s) + t, s.flatten(1).sum(1)

    def inverse(self, y: Tensor) -> Tensor:
        s, t = self._scale_shift(y)  # the read pixels are the same in x and y
        return (y - t) * torch.exp(-s)


class RealNVP(_Flow):
    """RealNVP (Dinh, Sohl-Dickstein & Bengio 2017) for images in [0, 1], single scale, N(0, I) prior.

    x (B, C, H, W) in [0, 1] -> logit(alpha + (1 - 2 alpha) x) -> ``num_couplings`` affine couplings -> z.
    The logit pre-transform (Dinh et al. 2017, Section 4.1) is part of the flow: its log-det is in
    ``log_prob``, so likelihoods are densities of the [0, 1] pixels (dequantise discrete images first, see
    ``fedclust.data.transforms.dequantize``). alpha = 0.05 as in RealNVP's MNIST/CIFAR setting.

    ``masking``:

    - "checkerboard": the standard pixel checkerboard, alternating with its complement (Dinh et al. 2017);
      one scale, no squeeze (the 8-coupling single-scale flow UIFCA's "Default" and Kirichenko et al.'s
      baselines compare with).
    - "cyclic": the cycle-mask of Kirichenko, Izmailov & Wilson (NeurIPS 2020, "Why Normalizing Flows Fail to
      Detect Out-of-Distribution Data", Section 7, "changing the masking strategy"): the image is split
      into four quadrants and coupling i updates quadrant (i + 1) mod 4 from quadrant i mod 4 (top-left ->
      top-right -> bottom-right -> bottom-left -> top-left, repeated), so a coupling cannot predict a pixel
      from its neighbours (pixels at the quadrant seam excepted), only from another part of the image. Our
      reading of the authors' code (PolinaKirichenko/flows_ood, ``MaskQuadrant`` / ``RealNVPCycleMask``):
      the s/t net sees the read quadrant only (others zeroed) and s, t are applied to the written quadrant
      only; 8 couplings = the cycle twice. UIFCA's "CM" adopts this from the same repository.

    The s/t nets (:class:`AffineCoupling`) are ``hidden_channels`` wide with ``num_blocks`` residual blocks
    of ``kernel_size`` convs; a written pixel sees read pixels up to r = 2 + (kernel_size // 2) * (sum of
    the block convs' dilations) away (r = 2 + 2 * num_blocks for 3 x 3 kernels and ``dilation`` 1, the
    standard net). With "cyclic", written pixels farther than r from the read quadrant see only zeros, so
    they all get the same affine map, whatever the image: the authors' nets (6-8 blocks) see the whole
    quadrant. ``dilation`` > 1 gives the j-th block conv dilation ``dilation ** j`` (r = 17 with 2 blocks
    and dilation 2), a cheap way to see the whole quadrant on a CPU budget; the default 1 is standard.
    """

    def __init__(self, in_channels: int = 1, size: int = 28, masking: str = "checkerboard", num_couplings: int = 8,
                 hidden_channels: int = 64, num_blocks: int = 2, kernel_size: int = 3, alpha: float = 0.05,
                 dilation: int = 1):
        super().__init__()
        if num_couplings < 1 or size < 2 or in_channels < 1:
            raise ConfigError("num_couplings/size/in_channels", (num_couplings, size, in_channels),
                              "at least 1 coupling, a side of at least 2 pixels and 1 channel")
        if not 0 < alpha < 0.5:
            raise ConfigError("alpha", alpha, "a number in (0, 0.5)")
        if dilation < 1 or kernel_size % 2 == 0:
            raise ConfigError("dilation/kernel_size", (dilation, kernel_size), "dilation >= 1 and an odd kernel")
        self.in_channels, self.size, self.masking, self.alpha = in_channels, size, masking, alpha
        masks = coupling_masks(masking, size, size, num_couplings)
        self.couplings = nn.ModuleList(
            AffineCoupling(in_channels, m, hidden_channels, num_blocks, kernel_size, dilation) for m in masks)

    @property
    def masks(self) -> Tensor:
        """(num_couplings, 2, H, W): per coupling, the pixels it reads and the pixels it changes."""
        return torch.stack([torch.stack([c.read[0, 0], c.change[0, 0]]) for c in self.couplings])

    def _check(self, x: Tensor) -> None:
        if x.dim() != 4 or tuple(x.shape[1:]) != (self.in_channels, self.size, self.size):
            raise ValueError(f"RealNVP expects (B, {self.in_channels}, {self.size}, {self.size}) images, "
                             f"got {tuple(x.shape)}")

    def logit(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """The pre-transform x -> logit(alpha + (1 - 2 alpha) x) and its per-sample log|det|."""
        p = self.alpha + (1 - 2 * self.alpha) * x
        y = torch.log(p) - torch.log1p(-p)
        # dy/dx = (1 - 2 alpha) / (p (1 - p)), element-wise
        log_det = (math.log(1 - 2 * self.alpha) - torch.log(p) - torch.log1p(-p)).flatten(1).sum(1)
        return y, log_det

    def encode(self, x: Tensor) -> tuple[Tensor, Tensor]:
        self._check(x)
        z, log_det = self.logit(x)
        for coupling in self.couplings:
            z, ld = coupling(z)
            log_det = log_det + ld
        return z, log_det

    def decode(self, z: Tensor) -> Tensor:
        self._check(z)
        for coupling in reversed(self.couplings):
            z = coupling.inverse(z)
        return (torch.sigmoid(z) - self.alpha) / (1 - 2 * self.alpha)

    @torch.no_grad()
    def sample(self, n: int, generator: torch.Generator | None = None) -> Tensor:
        like = self.couplings[0].scale
        z = _randn((n, self.in_channels, self.size, self.size), generator, like)
        return self.decode(z).clamp(0, 1)

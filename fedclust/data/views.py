"""Augmented views computed batched on the device, every random draw from an explicit torch.Generator.

fedclust seeds each client's draws by (seed, stage, round, client) (see ``fedclust.seeding``), so that a
run does not depend on client order or process layout. torchvision.transforms.v2 and kornia draw from
torch's global RNG (and torchvision per image), so the transforms are written here instead: all geometry
(crop, rotation, flip) of a sample is one affine map applied with ``F.affine_grid``/``F.grid_sample``,
photometric ops are element-wise with per-sample parameters.

Inputs are float tensors (B, C, H, W) in [0, 1]; outputs have the same shape and range. The generator may
live on the input's device or on the CPU (parameters are then drawn on the CPU and moved).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

_GRAY = (0.299, 0.587, 0.114)  # ITU-R 601-2 luma, as torchvision's rgb_to_grayscale


def _rand(n: int | tuple[int, ...], g: torch.Generator, device: torch.device) -> torch.Tensor:
    """U[0, 1) draws from ``g`` on ``g``'s device, moved to ``device``."""
    shape = (n,) if isinstance(n, int) else n
    return torch.rand(shape, generator=g, device=g.device).to(device)


def _uniform(lo: float, hi: float, n: int, g: torch.Generator, device: torch.device) -> torch.Tensor:
    return lo + (hi - lo) * _rand(n, g, device)


def _crop_boxes(b: int, h: int, w: int, scale, ratio, g, device, attempts: int = 10):
    """RandomResizedCrop boxes as torchvision samples them (10 tries, then the central fallback).

    Returns crop width, height and centre in pixels, shape (b,) each. Sizes and offsets are continuous
    (torchvision rounds them to whole pixels): the crop is resampled anyway.
    """
    area = h * w * _uniform(scale[0], scale[1], b * attempts, g, device).view(b, attempts)
    log_r = _uniform(math.log(ratio[0]), math.log(ratio[1]), b * attempts, g, device).view(b, attempts)
    aspect = torch.exp(log_r)
    cw, ch = torch.sqrt(area * aspect), torch.sqrt(area / aspect)
    ok = (cw <= w) & (ch <= h)
    first = torch.argmax(ok.int(), dim=1, keepdim=True)  # the first valid try, as torchvision's loop
    any_ok = ok.any(dim=1)
    # fallback: the whole image, trimmed to the nearest allowed aspect ratio
    in_r = w / h
    fw, fh = (w, w / ratio[0]) if in_r < ratio[0] else ((h * ratio[1], h) if in_r > ratio[1] else (w, h))
    cw = torch.where(any_ok, cw.gather(1, first).squeeze(1), torch.full_like(any_ok, fw, dtype=cw.dtype))
    ch = torch.where(any_ok, ch.gather(1, first).squeeze(1), torch.full_like(any_ok, fh, dtype=ch.dtype))
    u = _rand((b, 2), g, device)
    cx = cw / 2 + u[:, 0] * (w - cw)
    cy = ch / 2 + u[:, 1] * (h - ch)
    return cw, ch, cx, cy


def _affine(x, cw, ch, cx, cy, angle_deg, flip) -> torch.Tensor:
    """Crop (box), resize to x's size, rotate by ``angle_deg`` and mirror where ``flip`` -- one resample.

    Output normalised coordinate u maps to input coordinate S @ F @ D^-1 R D @ u + t: rotation R acts in
    pixel units (D = diag(W/2, H/2)) so it stays a rotation on non-square images.
    """
    b, _, h, w = x.shape
    a = torch.deg2rad(angle_deg)
    cos, sin = torch.cos(a), torch.sin(a)
    f = torch.where(flip, -1.0, 1.0).to(cos.dtype)
    # rows of D^-1 R D, then the flip on the output's x axis, then the crop scale
    sx, sy = cw / w, ch / h
    theta = torch.stack([
        torch.stack([sx * cos * f, sx * (-sin) * (h / w), 2 * cx / w - 1], dim=1),
        torch.stack([sy * sin * (w / h) * f, sy * cos, 2 * cy / h - 1], dim=1),
    ], dim=1).to(x.dtype)
    grid = F.affine_grid(theta, list(x.shape), align_corners=False)
    return F.grid_sample(x, grid, mode="bilinear", padding_mode="zeros", align_corners=False)


def gaussian_blur(x: torch.Tensor, sigma: torch.Tensor, kernel_size: int) -> torch.Tensor:
    """Separable Gaussian blur with one sigma per sample (grouped conv2d, reflect padding)."""
    b, c, h, w = x.shape
    r = min(kernel_size // 2, h - 1, w - 1)  # reflect padding needs fewer taps than pixels
    t = torch.arange(-r, r + 1, device=x.device, dtype=x.dtype)
    k = torch.exp(-(t[None] ** 2) / (2 * sigma.to(x.dtype)[:, None] ** 2))
    k = (k / k.sum(1, keepdim=True)).repeat_interleave(c, dim=0)  # (b*c, kernel_size)
    y = F.pad(x.reshape(1, b * c, h, w), (r, r, r, r), mode="reflect")
    y = F.conv2d(y, k[:, None, :, None], groups=b * c)
    y = F.conv2d(y, k[:, None, None, :], groups=b * c)
    return y.view(b, c, h, w)


class SimSiamViews28:
    """CCFC's stage-1 views: RandomResizedCrop(H, scale, ratio) + RandomRotation(degrees), then Gaussian
    blur (sigma ~ U[sigma], probability ``blur_p``). No normalisation. ``flip_p`` > 0 mirrors a view left to
    right with that probability (off by default: CCFC's views do not mirror).

    Crop and rotation are one bilinear resample with zero fill (torchvision's RandomRotation resamples
    with nearest by default). The blur is the reference code's PIL GaussianBlur(radius = sigma): a
    Gaussian whose kernel grows with sigma. ``kernel_size`` None truncates it at 3 * max(sigma) on each
    side (13 taps at sigma 2; within 0.02 of PIL's output, tests/data/test_views.py); a fixed small
    kernel is much weaker (3 taps: about 4x at sigma 2).
    """

    def __init__(self, scale=(0.5, 1.0), ratio=(3 / 4, 4 / 3), degrees: float = 10.0,
                 sigma=(0.1, 2.0), blur_p: float = 0.5, kernel_size: int | None = None,
                 jitter: float = 0.0, jitter_p: float = 0.8, flip_p: float = 0.0):
        self.scale, self.ratio, self.degrees = tuple(scale), tuple(ratio), float(degrees)
        self.flip_p = float(flip_p)
        self.sigma, self.blur_p = tuple(sigma), float(blur_p)
        self.jitter, self.jitter_p = float(jitter), float(jitter_p)
        self.kernel_size = int(kernel_size) if kernel_size else 2 * math.ceil(3 * max(self.sigma)) + 1

    def __call__(self, x: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        b, _, h, w = x.shape
        dev = x.device
        box = _crop_boxes(b, h, w, self.scale, self.ratio, generator, dev)
        angle = _uniform(-self.degrees, self.degrees, b, generator, dev)
        # no draw when off, so the views of every existing config stay bit-identical
        flip = _rand(b, generator, dev) < self.flip_p if self.flip_p > 0 else torch.zeros(b, dtype=torch.bool,
                                                                                           device=dev)
        y = _affine(x, *box, angle, flip)
        sigma = _uniform(self.sigma[0], self.sigma[1], b, generator, dev)
        blur = _rand(b, generator, dev) < self.blur_p
        # blur every sample and select: no data-dependent branch, so no host-device sync
        y = torch.where(blur[:, None, None, None], gaussian_blur(y, sigma, self.kernel_size), y)
        if self.jitter > 0:  # brightness then contrast factors ~ U[1 - j, 1 + j]; no draws when off
            bri = _uniform(1 - self.jitter, 1 + self.jitter, b, generator, dev).view(-1, 1, 1, 1)
            con = _uniform(1 - self.jitter, 1 + self.jitter, b, generator, dev).view(-1, 1, 1, 1)
            on = (_rand(b, generator, dev) < self.jitter_p).view(-1, 1, 1, 1)
            j = (y.clamp(0.0, 1.0) * bri).clamp(0.0, 1.0)
            j = _blend(j, j.mean((1, 2, 3), keepdim=True), con)
            y = torch.where(on, j, y)
        return y.clamp_(0.0, 1.0)


_GRAY_WEIGHTS: dict[tuple[torch.device, torch.dtype], torch.Tensor] = {}


def _gray(x: torch.Tensor) -> torch.Tensor:
    # the weights made once per device and dtype: torch.tensor(list, device=cuda) is a host-to-device copy per call
    key = (x.device, x.dtype)
    wt = _GRAY_WEIGHTS.get(key)
    if wt is None:
        wt = _GRAY_WEIGHTS[key] = torch.tensor(_GRAY, device=x.device, dtype=x.dtype).view(1, 3, 1, 1)
    return (x * wt).sum(1, keepdim=True)


def _blend(x: torch.Tensor, other: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    """factor * x + (1 - factor) * other, clamped (torchvision's _blend)."""
    f = factor.view(-1, 1, 1, 1).to(x.dtype)
    return (f * x + (1 - f) * other).clamp(0.0, 1.0)


def _hue(x: torch.Tensor, shift: torch.Tensor) -> torch.Tensor:
    """Shift hue by ``shift`` turns per sample: RGB -> HSV -> RGB, as torchvision's adjust_hue."""
    r, g, b = x.unbind(1)
    maxc, minc = x.amax(1), x.amin(1)
    gray = maxc == minc
    chroma = maxc - minc
    one = torch.ones_like(maxc)
    sat = chroma / torch.where(gray, one, maxc)
    cdiv = torch.where(gray, one, chroma)  # grey pixels: any hue, avoid 0/0
    rc, gc, bc = (maxc - r) / cdiv, (maxc - g) / cdiv, (maxc - b) / cdiv
    hue = ((maxc == r) * (bc - gc) + ((maxc == g) & (maxc != r)) * (2.0 + rc - bc)
           + ((maxc != g) & (maxc != r)) * (4.0 + gc - rc))
    hue = torch.remainder(hue / 6.0 + shift.to(x.dtype).view(-1, 1, 1), 1.0)
    h6 = hue * 6.0
    sector = torch.floor(h6)
    f = h6 - sector
    v = maxc
    p_ = (v * (1 - sat)).clamp(0, 1)
    q_ = (v * (1 - sat * f)).clamp(0, 1)
    t_ = (v * (1 - sat * (1 - f))).clamp(0, 1)
    sel = F.one_hot(sector.long() % 6, 6).to(x.dtype)  # (b, h, w, 6)
    table = torch.stack([torch.stack(c, -1) for c in ((v, q_, p_, p_, t_, v), (t_, v, v, q_, p_, p_),
                                                      (p_, p_, t_, v, v, q_))], 1)  # (b, 3, h, w, 6)
    return (table * sel[:, None]).sum(-1)


class ColorViews:
    """SimCLR / Contrastive-Clustering views: RandomResizedCrop, horizontal flip (p 0.5), ColorJitter
    (brightness, contrast, saturation, hue) with probability ``jitter_p`` in a random order per sample
    (as torchvision), grayscale with probability ``gray_p``, then (``blur_p`` > 0) a Gaussian blur.

    The jitter defaults are CC's CIFAR setting, s = 0.5 of SimCLR's ColorJitter(0.8s, 0.8s, 0.8s, 0.2s);
    :meth:`strength` builds any s (CC's STL-10 / ImageNet-10 and EasyFL's BYOL use s = 1). The blur is CC's
    ImageNet-10 one (Contrastive-Clustering modules/transform.py): with probability 0.5, sigma ~ U[0.1, 2]
    pixels, a fixed 23-tap kernel (cv2.GaussianBlur(ksize 23), reflect-101 border = torch's "reflect"),
    after the grayscale step. CC blurs 224 x 224 views; ``blur_reference`` = 224 scales sigma and the kernel
    by H / 224 on views of another size (the same blur relative to the image; None: pixels as given). Blur
    draws are made only when ``blur_p`` > 0, so views without blur keep their stream of draws.

    On 1-channel input, saturation, hue and grayscale are no-ops (as torchvision's on grayscale images).
    """

    def __init__(self, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3), flip_p: float = 0.5,
                 brightness: float = 0.4, contrast: float = 0.4, saturation: float = 0.4, hue: float = 0.1,
                 jitter_p: float = 0.8, gray_p: float = 0.2, blur_p: float = 0.0, blur_sigma=(0.1, 2.0),
                 blur_kernel: int = 23, blur_reference: int | None = None):
        self.scale, self.ratio, self.flip_p = tuple(scale), tuple(ratio), float(flip_p)
        self.brightness, self.contrast = float(brightness), float(contrast)
        self.saturation = float(saturation)
        self.hue, self.jitter_p, self.gray_p = float(hue), float(jitter_p), float(gray_p)
        self.blur_p, self.blur_sigma, self.blur_kernel = float(blur_p), tuple(blur_sigma), int(blur_kernel)
        self.blur_reference = blur_reference

    @classmethod
    def strength(cls, s: float, **kwargs) -> ColorViews:
        """Views with SimCLR's jitter at strength s: ColorJitter(0.8 s, 0.8 s, 0.8 s, 0.2 s)."""
        return cls(brightness=0.8 * s, contrast=0.8 * s, saturation=0.8 * s, hue=0.2 * s, **kwargs)

    def __call__(self, x: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        b, c, h, w = x.shape
        g, dev = generator, x.device
        box = _crop_boxes(b, h, w, self.scale, self.ratio, g, dev)
        flip = _rand(b, g, dev) < self.flip_p
        y = _affine(x, *box, torch.zeros(b, device=dev), flip).clamp(0.0, 1.0)
        # draw every parameter for every sample so the stream of draws does not depend on the data
        bri = _uniform(1 - self.brightness, 1 + self.brightness, b, g, dev)
        con = _uniform(1 - self.contrast, 1 + self.contrast, b, g, dev)
        sat = _uniform(1 - self.saturation, 1 + self.saturation, b, g, dev)
        hue = _uniform(-self.hue, self.hue, b, g, dev)
        order = torch.argsort(_rand((b, 4), g, dev), dim=1)  # a random op order per sample
        jitter = _rand(b, g, dev) < self.jitter_p
        gray = _rand(b, g, dev) < self.gray_p
        colour = c == 3

        def lum(t: torch.Tensor) -> torch.Tensor:
            return _gray(t) if colour else t.mean(1, keepdim=True)

        ops = [
            lambda t: _blend(t, torch.zeros_like(t), bri),
            lambda t: _blend(t, lum(t).mean((1, 2, 3), keepdim=True), con),
            (lambda t: _blend(t, lum(t), sat)) if colour else (lambda t: t),
            (lambda t: _hue(t, hue)) if colour else (lambda t: t),
        ]
        j = y
        for step in range(4):
            out = j
            for k, op in enumerate(ops):
                sel = (order[:, step] == k)[:, None, None, None]
                out = torch.where(sel, op(j), out)
            j = out
        y = torch.where(jitter[:, None, None, None], j, y)
        if colour:
            y = torch.where(gray[:, None, None, None], _gray(y).expand(-1, 3, -1, -1), y)
        if self.blur_p > 0:
            f = h / self.blur_reference if self.blur_reference else 1.0
            sigma = f * _uniform(self.blur_sigma[0], self.blur_sigma[1], b, g, dev)
            blur = _rand(b, g, dev) < self.blur_p
            kernel = 2 * math.ceil(f * (self.blur_kernel // 2)) + 1
            y = torch.where(blur[:, None, None, None], gaussian_blur(y, sigma, kernel), y)
        return y


def two_views(aug, x: torch.Tensor, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Two independent views of ``x`` (drawn one after the other from ``generator``)."""
    return aug(x, generator), aug(x, generator)

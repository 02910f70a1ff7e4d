"""The views' random parameters follow their configured ranges and distributions (issue 46 item 1): crop areas,
aspect ratios and positions, rotation angles, blur sigmas, jitter factors and the probabilities of blur, jitter,
flip and grayscale, read off the draws the views make on 4,000 images. The same checks run on CUDA (marked gpu),
where the draws come from a generator on the device.

Each parameter is captured where the views use it (fedclust.data.views' _uniform, _affine and gaussian_blur,
wrapped), and judged by a Kolmogorov-Smirnov test against its distribution (p > 1e-4; the seeds are fixed, so a
pass is repeatable) and by binomial bounds on the probabilities (4.5 standard deviations)."""

import dataclasses
import math

import numpy as np
import pytest
import torch
from scipy import stats

import fedclust.data.views as views
from fedclust.data.views import ColorViews, SimSiamViews28
from fedclust.seeding import generator

N, SIZE = 4000, 28
P_MIN = 1e-4
DEVICES = ["cpu", pytest.param("cuda", marks=[pytest.mark.gpu, pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs CUDA")])]


class Draws:
    """What one call of a view drew: every _uniform call (lo, hi, values), the crop boxes, angles and flips handed
    to _affine, and the blur sigmas handed to gaussian_blur."""

    def __init__(self, monkeypatch):
        self.uniform: list[tuple[float, float, np.ndarray]] = []
        self.affine: list[tuple[np.ndarray, ...]] = []
        self.sigma: list[np.ndarray] = []
        uniform, affine, blur = views._uniform, views._affine, views.gaussian_blur

        def _uniform(lo, hi, n, g, device):
            out = uniform(lo, hi, n, g, device)
            self.uniform.append((lo, hi, out.double().cpu().numpy()))
            return out

        def _affine(x, cw, ch, cx, cy, angle, flip):
            self.affine.append(tuple(t.double().cpu().numpy() for t in (cw, ch, cx, cy, angle, flip)))
            return affine(x, cw, ch, cx, cy, angle, flip)

        def gaussian_blur(x, sigma, kernel_size):
            self.sigma.append(sigma.double().cpu().numpy())
            return blur(x, sigma, kernel_size)

        monkeypatch.setattr(views, "_uniform", _uniform)
        monkeypatch.setattr(views, "_affine", _affine)
        monkeypatch.setattr(views, "gaussian_blur", gaussian_blur)


def _images(device: str, channels: int = 1, n: int = N) -> torch.Tensor:
    return torch.rand(n, channels, SIZE, SIZE, generator=generator(0, "stats-images")).to(device)


def _gen(device: str) -> torch.Generator:
    return generator(46, "views-stats", device=device)


def _uniform_fits(values: np.ndarray, lo: float, hi: float) -> None:
    assert values.min() >= lo - 1e-6 and values.max() <= hi + 1e-6, (values.min(), values.max(), lo, hi)
    if hi > lo:
        assert stats.kstest(values, stats.uniform(lo, hi - lo).cdf).pvalue > P_MIN


def _fraction_fits(hits: np.ndarray, p: float) -> None:
    n = len(hits)
    assert abs(hits.mean() - p) <= 4.5 * math.sqrt(p * (1 - p) / n) + 1e-12, (hits.mean(), p)


def _reference_crops(n: int, scale, ratio, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """torchvision's RandomResizedCrop.get_params (10 tries, then the whole image), without rounding to pixels:
    the crops' area fractions and log aspect ratios."""
    area = rng.uniform(scale[0], scale[1], (n, 10)) * SIZE * SIZE
    log_r = rng.uniform(math.log(ratio[0]), math.log(ratio[1]), (n, 10))
    cw, ch = np.sqrt(area * np.exp(log_r)), np.sqrt(area / np.exp(log_r))
    ok = (cw <= SIZE) & (ch <= SIZE)
    first = ok.argmax(1)
    rows = np.arange(n)
    w = np.where(ok.any(1), cw[rows, first], SIZE)
    h = np.where(ok.any(1), ch[rows, first], SIZE)
    return w * h / SIZE**2, np.log(w / h)


def _check_crops(draws: Draws, scale, ratio) -> None:
    cw, ch, cx, cy, _, _ = draws.affine[0]
    frac, log_aspect = cw * ch / SIZE**2, np.log(cw / ch)
    assert frac.min() >= scale[0] - 1e-5 and frac.max() <= 1 + 1e-5
    assert log_aspect.min() >= math.log(ratio[0]) - 1e-5 and log_aspect.max() <= math.log(ratio[1]) + 1e-5
    ref_frac, ref_aspect = _reference_crops(20 * N, scale, ratio, np.random.default_rng(0))
    assert stats.ks_2samp(frac, ref_frac).pvalue > P_MIN
    assert stats.ks_2samp(log_aspect, ref_aspect).pvalue > P_MIN
    # the box lies inside the image, its offset uniform over the room left (cx = cw / 2 + U * (W - cw))
    for centre, side in ((cx, cw), (cy, ch)):
        room = SIZE - side
        assert (centre - side / 2 >= -1e-4).all() and (centre + side / 2 <= SIZE + 1e-4).all()
        inside = room > 0.5
        _uniform_fits((centre[inside] - side[inside] / 2) / room[inside], 0.0, 1.0)


def _changed(a: torch.Tensor, b: torch.Tensor) -> np.ndarray:
    return ((a - b).abs().flatten(1).amax(1) > 1e-6).cpu().numpy()


def _chosen_fraction_fits(make, option: str, p: float, x: torch.Tensor, device: str) -> None:
    """The share of images an option with probability p acts on: the views made with the option at p, at 1 and at
    0 share every draw, so an image is chosen where the view at p equals the view at 1. Images the option leaves
    alike (a blur of sigma 0.1 moves no pixel) tell nothing and are left out: which they are does not depend on
    the choice."""
    x = x[..., :8, :8]  # which images are chosen does not depend on their size: small ones cost less
    y, every, none = (make(**{option: q})(x, _gen(device)) for q in (p, 1.0, 0.0))
    telling = _changed(every, none)
    assert telling.mean() > 0.5
    _fraction_fits(~_changed(y, every)[telling], p)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("settings", [
    {},  # CCFC's packaged views (ccfc_fmnist): crop 0.5-1, rotation 10, blur sigma 0.1-2 with p 0.5
    {"scale": (0.8, 1.0), "sigma": (0.1, 0.6)},  # ccfc_digits
    {"jitter": 0.4, "flip_p": 0.5},  # ccfc_fmnist_jitter, and the mirror option
], ids=["fmnist", "digits", "jitter-flip"])
def test_simsiam28_draws_follow_their_configuration(monkeypatch, device, settings):
    aug = SimSiamViews28(**settings)
    x = _images(device)
    draws = Draws(monkeypatch)
    y = aug(x, _gen(device))
    assert y.device.type == device and y.min() >= 0 and y.max() <= 1 + 1e-6
    for lo, hi, values in draws.uniform:  # every uniform draw, raw: crop area, log ratio, angle, sigma, jitter
        _uniform_fits(values, lo, hi)
    _check_crops(draws, aug.scale, aug.ratio)
    angle, flip = draws.affine[0][4], draws.affine[0][5]
    _uniform_fits(angle, -aug.degrees, aug.degrees)
    _fraction_fits(flip, aug.flip_p)
    _uniform_fits(draws.sigma[0], *aug.sigma)
    if aug.jitter:
        factors = [v for lo, hi, v in draws.uniform if (lo, hi) == (1 - aug.jitter, 1 + aug.jitter)]
        assert len(factors) == 2  # brightness, then contrast, one factor per image each
        assert all(len(f) == N for f in factors)
    def make(**option):
        return SimSiamViews28(**{**settings, **option})

    _chosen_fraction_fits(make, "blur_p", aug.blur_p, x, device)
    if aug.jitter:
        _chosen_fraction_fits(make, "jitter_p", aug.jitter_p, x, device)


@pytest.mark.parametrize("device", DEVICES)
def test_colour_views_draws_follow_their_configuration(monkeypatch, device):
    aug = ColorViews(blur_p=0.5)  # CC's CIFAR jitter (s = 0.5), crop 0.08-1, flip 0.5, gray 0.2, its blur
    x = _images(device, channels=3, n=N // 4)  # colour ops cost more: 1,000 images
    draws = Draws(monkeypatch)
    y = aug(x, _gen(device))
    assert y.device.type == device and y.min() >= 0 and y.max() <= 1 + 1e-6
    for lo, hi, values in draws.uniform:
        _uniform_fits(values, lo, hi)
    ranges = [(lo, hi) for lo, hi, _ in draws.uniform]
    for name, spread in (("brightness", aug.brightness), ("contrast", aug.contrast),
                         ("saturation", aug.saturation)):
        assert (1 - spread, 1 + spread) in ranges, name
    assert (-aug.hue, aug.hue) in ranges
    _check_crops(draws, aug.scale, aug.ratio)
    _fraction_fits(draws.affine[0][5], aug.flip_p)
    _uniform_fits(draws.sigma[0], *aug.blur_sigma)
    def make(**option):
        return ColorViews(**{"blur_p": 0.5, **option})

    for option, p in (("blur_p", aug.blur_p), ("jitter_p", aug.jitter_p), ("gray_p", aug.gray_p)):
        _chosen_fraction_fits(make, option, p, x, device)


@pytest.mark.parametrize("device", ["meta", *DEVICES[1:]])
def test_batches_of_samples_on_a_device_gather_there_with_indices_already_there(device):
    """Item 1: samples placed on the accelerator are gathered there by indices that are there, the epoch's order
    moved once, so no batch copies its indices host-to-device (torch's meta device stands in for one on the CPU:
    a CPU index tensor would show as such in every batch); the order is the CPU one."""
    from fedclust.data.client_data import FederatedData
    from fedclust.data.dataset import Dataset

    x = torch.randint(0, 256, (300, 1, SIZE, SIZE), dtype=torch.uint8)
    dataset = Dataset(name="t", x=x.to(device), y=torch.zeros(300, dtype=torch.long), num_classes=1, is_image=True,
                      split=torch.zeros(300, dtype=torch.int8))
    parts = [torch.arange(0, 150), torch.arange(150, 300)]
    data = FederatedData(dataset, parts, torch.device(device))
    batches = list(data.client(1, 64).batches(generator(0, "order")))
    assert all(b["index"].device.type == device and b["x"].device.type == device for b in batches)
    assert [len(b["index"]) for b in batches] == [64, 64, 22]
    on_cpu = FederatedData(dataclasses.replace(dataset, x=x), parts, torch.device("cpu"))
    expected = [b["index"] for b in on_cpu.client(1, 64).batches(generator(0, "order"))]
    if device != "meta":  # meta tensors hold no values
        assert all(torch.equal(b["index"].cpu(), e) for b, e in zip(batches, expected))
        assert all(torch.equal(b["x"].cpu(), on_cpu.gather(e)) for b, e in zip(batches, expected))
    assert all(e.device.type == "cpu" for e in expected)
    assert all(t.device.type == device for t in data.iter_indices(torch.arange(300), 128))

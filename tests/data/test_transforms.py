import pytest
import torch

from fedclust.data.transforms import dequantize, randomize_background
from fedclust.seeding import generator


def _images(b=4):
    x = torch.rand(b, 1, 8, 8, generator=generator(0, "images"))
    x[:, :, :3] = 0.0  # a black band of background
    x[:, :, 3, :4] = 0.005  # dark but not black: still below the 0.01 threshold
    return x


def test_randomize_background_touches_only_dark_pixels():
    x = _images()
    y = randomize_background(x, generator(1, "rb"))
    dark = x < 0.01
    assert y.shape == x.shape and y.dtype == x.dtype
    assert torch.equal(y[~dark], x[~dark])
    assert (y[dark] >= 0).all() and (y[dark] < 1).all()
    assert (y[dark] != x[dark]).float().mean() > 0.99  # noise, not the old black
    assert y[dark].std() > 0.2  # spread over [0, 1) (std of U[0, 1) is 0.29)
    assert torch.equal(randomize_background(x, generator(1, "rb"), threshold=0.0), x)


def test_randomize_background_is_seeded():
    x = _images()
    a = randomize_background(x, generator(7, "rb"))
    b = randomize_background(x, generator(7, "rb"))
    c = randomize_background(x, generator(8, "rb"))
    assert torch.equal(a, b)
    assert not torch.equal(a, c)


def test_transforms_keep_dtype_and_reject_integers():
    x = _images().double()
    assert randomize_background(x, generator(0, "rb")).dtype == torch.float64
    assert dequantize(x, generator(0, "dq")).dtype == torch.float64
    with pytest.raises(TypeError):
        randomize_background((x * 255).to(torch.uint8), generator(0, "rb"))
    with pytest.raises(TypeError):
        dequantize((x * 255).to(torch.uint8), generator(0, "dq"))


def test_dequantize_adds_bounded_seeded_noise():
    x = torch.randint(0, 256, (4, 1, 8, 8), generator=generator(0, "px")).float() / 255
    y = dequantize(x, generator(3, "dq"))
    assert torch.equal(y, dequantize(x, generator(3, "dq")))
    assert (y >= x).all() and (y - x <= 1 / 256 + 1e-7).all()
    assert y.min() >= 0 and y.max() <= 1
    assert not torch.equal(y, x)

import pytest
import torch

from fedclust.data.views import ColorViews, SimSiamViews28, gaussian_blur, two_views
from fedclust.seeding import generator

AUGS = [SimSiamViews28, ColorViews]


def _images(c=1, b=6, size=28):
    return torch.rand(b, c, size, size, generator=generator(0, "images"))


@pytest.mark.parametrize("aug,c", [(SimSiamViews28, 1), (ColorViews, 3), (ColorViews, 1)])
def test_shape_and_range(aug, c):
    x = _images(c)
    y = aug()(x, generator(1, "v"))
    assert y.shape == x.shape and y.dtype == x.dtype
    assert y.min() >= 0 and y.max() <= 1
    assert not torch.allclose(y, x)


@pytest.mark.parametrize("aug", AUGS)
def test_same_seed_same_views_other_seed_differs(aug):
    x = _images(3)
    a = aug()(x, generator(7, "stage", 2, 5))
    b = aug()(x, generator(7, "stage", 2, 5))
    c = aug()(x, generator(7, "stage", 2, 6))
    assert torch.equal(a, b)
    assert not torch.allclose(a, c)


def test_two_views_differ_and_are_deterministic():
    x = _images()
    v1, v2 = two_views(SimSiamViews28(), x, generator(3, 0))
    w1, w2 = two_views(SimSiamViews28(), x, generator(3, 0))
    assert torch.equal(v1, w1) and torch.equal(v2, w2)
    assert not torch.allclose(v1, v2)


def test_identity_settings_give_input_back():
    x = _images()
    aug = SimSiamViews28(scale=(1.0, 1.0), degrees=0.0, blur_p=0.0)
    torch.testing.assert_close(aug(x, generator(0, 1)), x)
    rgb = _images(3)
    colour = ColorViews(scale=(1.0, 1.0), flip_p=0.0, jitter_p=0.0, gray_p=0.0)
    torch.testing.assert_close(colour(rgb, generator(0, 1)), rgb)


def test_flip_only_mirrors():
    x = _images(3)
    aug = ColorViews(scale=(1.0, 1.0), flip_p=1.0, jitter_p=0.0, gray_p=0.0)
    torch.testing.assert_close(aug(x, generator(0, 1)), x.flip(-1))


def test_grayscale_always_gives_equal_channels():
    aug = ColorViews(scale=(1.0, 1.0), flip_p=0.0, jitter_p=0.0, gray_p=1.0)
    y = aug(_images(3), generator(0, 1))
    torch.testing.assert_close(y[:, 0], y[:, 1])
    torch.testing.assert_close(y[:, 1], y[:, 2])


def test_zero_hue_jitter_with_unit_factors_is_identity():
    x = _images(3)
    aug = ColorViews(scale=(1.0, 1.0), flip_p=0.0, brightness=0.0, contrast=0.0, saturation=0.0, hue=0.0,
                     jitter_p=1.0, gray_p=0.0)
    torch.testing.assert_close(aug(x, generator(0, 1)), x, atol=1e-5, rtol=0)


def test_blur_preserves_constant_image_and_smooths():
    const = torch.full((3, 2, 9, 9), 0.3)
    out = gaussian_blur(const, torch.tensor([0.1, 1.0, 2.0]), 3)
    torch.testing.assert_close(out, const)
    x = _images(1, b=2)
    blurred = gaussian_blur(x, torch.tensor([2.0, 2.0]), 5)
    assert blurred.std() < x.std()
    aug = SimSiamViews28(scale=(1.0, 1.0), degrees=0.0, blur_p=1.0)
    y = aug(torch.full((4, 1, 28, 28), 0.6), generator(0, 2))
    torch.testing.assert_close(y, torch.full_like(y, 0.6))


def test_batch_of_one():
    for aug, c in [(SimSiamViews28(), 1), (ColorViews(), 3)]:
        y = aug(_images(c, b=1), generator(5, "one"))
        assert y.shape == (1, c, 28, 28)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("aug", AUGS)
def test_cpu_generator_with_cuda_input(aug):
    x = _images(3).cuda()
    a = aug()(x, generator(1, 2))
    b = aug()(x.cpu(), generator(1, 2))
    torch.testing.assert_close(a.cpu(), b, atol=1e-4, rtol=0)
    assert aug()(x, generator(1, 2, device="cuda")).shape == x.shape


def test_colour_ops_match_torchvision():
    tvf = pytest.importorskip("torchvision.transforms.v2.functional")
    from fedclust.data.views import _blend, _gray, _hue

    x = _images(3, b=2)
    f = torch.tensor([1.3, 0.7])
    torch.testing.assert_close(_blend(x, torch.zeros_like(x), f)[0], tvf.adjust_brightness(x[0], 1.3))
    torch.testing.assert_close(_blend(x, _gray(x).mean((1, 2, 3), keepdim=True), f)[1],
                               tvf.adjust_contrast(x[1], 0.7), atol=1e-4, rtol=0)
    torch.testing.assert_close(_blend(x, _gray(x), f)[0], tvf.adjust_saturation(x[0], 1.3), atol=1e-4, rtol=0)
    y = _hue(x, torch.tensor([0.1, -0.05]))
    torch.testing.assert_close(y[0], tvf.adjust_hue(x[0], 0.1), atol=1e-5, rtol=0)
    torch.testing.assert_close(y[1], tvf.adjust_hue(x[1], -0.05), atol=1e-5, rtol=0)


def test_crop_and_rotation_match_torchvision():
    tvf = pytest.importorskip("torchvision.transforms.v2.functional")
    from torchvision.transforms import InterpolationMode

    from fedclust.data.views import _affine

    x, t = _images(3, b=1), torch.tensor
    no = t([False])
    crop = _affine(x, t([12.0]), t([16.0]), t([12.0]), t([12.0]), t([0.0]), no)  # box top 4, left 6, 16x12
    ref = tvf.resized_crop(x, 4, 6, 16, 12, [28, 28], interpolation=InterpolationMode.BILINEAR,
                           antialias=False)
    # the crop's border pixels differ: we read the neighbours outside the box, torchvision clamps
    torch.testing.assert_close(crop[..., 2:-2, 2:-2], ref[..., 2:-2, 2:-2], atol=1e-5, rtol=0)
    rot = _affine(x, t([28.0]), t([28.0]), t([14.0]), t([14.0]), t([10.0]), no)
    ref = tvf.rotate(x, 10.0, interpolation=InterpolationMode.BILINEAR)
    torch.testing.assert_close(rot, ref, atol=1e-5, rtol=0)


@pytest.mark.parametrize("sigma", [0.5, 1.0, 2.0])
def test_simsiam_blur_matches_pil_gaussian_blur(sigma):
    """CCFC's code blurs PIL images with ImageFilter.GaussianBlur(radius=sigma): the default kernel follows sigma."""
    import numpy as np
    from PIL import Image, ImageFilter

    img = np.zeros((28, 28), np.uint8)
    img[8:20, 10:14] = 255
    img[5, 5] = 255
    pil = np.asarray(Image.fromarray(img).filter(ImageFilter.GaussianBlur(radius=sigma)), dtype=np.float32) / 255
    x = torch.tensor(img, dtype=torch.float32)[None, None] / 255
    ours = gaussian_blur(x, torch.tensor([sigma]), SimSiamViews28().kernel_size)[0, 0].numpy()
    assert np.abs(ours - pil).max() < 0.03


@pytest.mark.parametrize("sigma", [0.5, 2.0])
def test_colour_views_blur_is_ccs_23_tap_gaussian(sigma):
    """CC's ImageNet-10 views end with cv2.GaussianBlur(ksize 23, sigma ~ U[0.1, 2]) on half the images, border
    reflect-101: scipy's gaussian_filter in "mirror" mode with the same 11-pixel radius is that filter."""
    import numpy as np
    from scipy.ndimage import gaussian_filter

    x = _images(3, b=4, size=32)
    aug = ColorViews(scale=(1.0, 1.0), flip_p=0.0, jitter_p=0.0, gray_p=0.0, blur_p=1.0, blur_sigma=(sigma, sigma))
    ref = gaussian_filter(x.numpy(), sigma=(0, 0, sigma, sigma), mode="mirror", truncate=11 / sigma)
    np.testing.assert_allclose(aug(x, generator(0, 1)).numpy(), ref, atol=1e-5)


def test_colour_views_blur_half_of_the_images_and_strength():
    x = _images(3, b=200, size=16)
    plain = ColorViews(scale=(1.0, 1.0), flip_p=0.0, jitter_p=0.0, gray_p=0.0)
    aug = ColorViews(scale=(1.0, 1.0), flip_p=0.0, jitter_p=0.0, gray_p=0.0, blur_p=0.5)
    blurred = (aug(x, generator(0, 1)) - x).abs().flatten(1).amax(1) > 1e-6
    assert 70 < int(blurred.sum()) < 130  # p 0.5
    torch.testing.assert_close(plain(x, generator(0, 1)), x)  # no blur: no blur draw either
    s1 = ColorViews.strength(1.0)  # SimCLR's s = 1 (EasyFL's BYOL, CC's STL-10 / ImageNet-10)
    assert (s1.brightness, s1.contrast, s1.saturation, s1.hue) == (0.8, 0.8, 0.8, 0.2)
    half = ColorViews.strength(0.5)
    assert (half.brightness, half.hue) == (ColorViews().brightness, ColorViews().hue)  # CC's CIFAR default


def test_colour_views_blur_scales_with_the_view_size_when_given_a_reference():
    """CC blurs 224-pixel views: at 112 pixels the same blur has half the sigma and a 13-tap kernel."""
    import numpy as np
    from scipy.ndimage import gaussian_filter

    x = _images(3, b=2, size=112)
    aug = ColorViews(scale=(1.0, 1.0), flip_p=0.0, jitter_p=0.0, gray_p=0.0, blur_p=1.0, blur_sigma=(2.0, 2.0),
                     blur_reference=224)
    ref = gaussian_filter(x.numpy(), sigma=(0, 0, 1.0, 1.0), mode="mirror", truncate=6.0)
    np.testing.assert_allclose(aug(x, generator(0, 1)).numpy(), ref, atol=1e-5)


def test_simsiam28_jitter_is_off_by_default_and_changes_brightness_when_on():
    """jitter 0 (the official views) draws nothing extra: the same generator gives the same views as before the
    option existed; jitter > 0 moves each view's mean brightness and keeps pixels in [0, 1]."""
    x = torch.rand(64, 1, 28, 28)
    plain = SimSiamViews28()(x, torch.Generator().manual_seed(0))
    off = SimSiamViews28(jitter=0.0)(x, torch.Generator().manual_seed(0))
    assert torch.equal(plain, off)
    on = SimSiamViews28(jitter=0.4, jitter_p=1.0)(x, torch.Generator().manual_seed(0))
    assert on.min() >= 0 and on.max() <= 1
    shift = (on.mean((1, 2, 3)) - plain.mean((1, 2, 3))).abs()
    assert shift.max() > 0.05  # brightness factors in U[0.6, 1.4] on every view


def test_simsiam28_flip_mirrors_every_view_at_1_and_some_at_half():
    """flip_p 1 with no crop, rotation, blur or jitter gives the mirror image; 0.5 mirrors some views, not all."""
    x = torch.rand(16, 1, 28, 28)
    mirror = SimSiamViews28(scale=(1.0, 1.0), degrees=0.0, blur_p=0.0, flip_p=1.0)
    torch.testing.assert_close(mirror(x, generator(0, 1)), x.flip(-1))
    half = SimSiamViews28(scale=(1.0, 1.0), degrees=0.0, blur_p=0.0, flip_p=0.5)(x, generator(0, 1))
    mirrored = torch.tensor([torch.allclose(h, m.flip(-1), atol=1e-5) for h, m in zip(half, x)])
    assert 0 < int(mirrored.sum()) < len(x)

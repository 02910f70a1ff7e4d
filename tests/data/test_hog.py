"""The HOG descriptor: where an edge's votes land, what it ignores, its shape and its refusals."""

import pytest
import torch

from fedclust.data.hog import hog


def _edge(horizontal: bool, side: int = 8) -> torch.Tensor:
    """One grey image, dark on one half and bright on the other: a horizontal or a vertical edge."""
    image = torch.zeros(1, 1, side, side)
    if horizontal:
        image[..., side // 2:, :] = 1.0
    else:
        image[..., side // 2:] = 1.0
    return image


def _bins(features: torch.Tensor, bins: int) -> torch.Tensor:
    """The squared votes summed over cells, per bin (features are square-rooted histograms laid out bin-major)."""
    return features.pow(2).view(bins, -1).sum(1)


def test_a_horizontal_edge_votes_into_the_bin_of_a_vertical_gradient():
    votes = _bins(hog(_edge(horizontal=True), cell=4, bins=9)[0], 9)
    assert votes[4] == pytest.approx(1.0)  # pi / 2 is bin 4's centre, (4 + 0.5) * pi / 9
    assert votes.sum() == pytest.approx(1.0)


def test_a_vertical_edge_splits_its_votes_between_the_two_bins_around_angle_zero():
    votes = _bins(hog(_edge(horizontal=False), cell=4, bins=9)[0], 9)
    assert votes[0] == pytest.approx(0.5) and votes[8] == pytest.approx(0.5)  # orientations wrap at pi
    assert votes[1:8].sum() == pytest.approx(0.0)


def test_brightness_and_contrast_do_not_move_it():
    torch.manual_seed(0)
    images = torch.rand(5, 1, 28, 28)
    torch.testing.assert_close(hog(3.0 * images + 0.7), hog(images))


def test_shape_unit_norm_and_a_blank_image():
    torch.manual_seed(0)
    images = torch.cat([torch.rand(3, 1, 28, 28), torch.zeros(1, 1, 28, 28)])
    features = hog(images, cell=4, bins=9)
    assert features.shape == (4, 9 * 7 * 7)
    torch.testing.assert_close(features[:3].norm(dim=1), torch.ones(3))
    assert torch.equal(features[3], torch.zeros(9 * 7 * 7))
    assert hog(torch.rand(2, 1, 30, 30), cell=4).shape == (2, 9 * 7 * 7)  # pixels past the last whole cell left out


def test_a_colour_pixel_takes_its_strongest_channels_gradient():
    grey = _edge(horizontal=True)
    colour = torch.cat([0.2 * grey.flip(-2), grey, torch.zeros_like(grey)], 1)  # green's edge is the strongest
    torch.testing.assert_close(hog(colour), hog(grey))


@pytest.mark.parametrize("bad", [dict(images=torch.rand(2, 28, 28)), dict(cell=0), dict(cell=29), dict(bins=1)])
def test_bad_arguments_are_one_sentence(bad):
    args = dict(images=torch.rand(2, 1, 28, 28), cell=4, bins=9) | bad
    with pytest.raises(ValueError, match="hog"):
        hog(**args)

"""The optional DP noise on summaries (fedclust/federation/privacy.py): calibration by dp-accounting, the
mechanism's sums and counts, and the refusal for a method whose summaries have no norm bound."""

import pytest
import torch

from fedclust.errors import ConfigError
from fedclust.federation.config import FederationConfig
from fedclust.federation.privacy import add_summary_noise, calibrate, spent_epsilon
from fedclust.methods import KFED


def test_calibration_meets_the_asked_epsilon_and_more_releases_need_more_noise():
    few, many = calibrate(4.0, 1e-5, 10, 1.0), calibrate(4.0, 1e-5, 100, 1.0)
    assert few.epsilon == pytest.approx(4.0, rel=0.01) and many.epsilon == pytest.approx(4.0, rel=0.01)
    assert many.noise_multiplier > few.noise_multiplier > 0
    assert spent_epsilon(few.noise_multiplier, 10, 1e-5) <= 4.0 + 1e-6
    assert spent_epsilon(few.noise_multiplier * 2, 10, 1e-5) < 4.0  # more noise, less spent


def test_the_mechanism_noises_sums_and_counts_and_clips_rows_to_the_bound():
    noise = calibrate(1.0, 1e-5, 5, 1.0)
    means = torch.tensor([[3.0, 4.0], [0.6, 0.0]])  # the first row breaks the bound (norm 5): clipped to 1
    payload = {"means": means, "counts": torch.tensor([1000.0, 1000.0]), "other": torch.ones(2)}
    sent = add_summary_noise(payload, {"means": "counts"}, noise, torch.Generator().manual_seed(0))
    assert torch.equal(sent["other"], payload["other"]) and not torch.equal(sent["counts"], payload["counts"])
    # with 1,000 samples a row the noise on a mean is about sigma * sqrt(2) / 1000: the rows stay close
    torch.testing.assert_close(sent["means"], torch.tensor([[0.6, 0.8], [0.6, 0.0]]), atol=0.1, rtol=0)
    flat = add_summary_noise({"s": torch.ones(3), "c": torch.full((3,), 50.0)}, {"s": "c"}, noise,
                             torch.Generator().manual_seed(1))
    assert flat["s"].shape == (3,)


def test_a_method_without_a_norm_bound_is_refused_in_one_sentence(run_fit):
    with pytest.raises(ConfigError, match="federation.dp_epsilon.*summary_norm_bound"):
        run_fit(KFED(), federation=FederationConfig(dp_epsilon=1.0))

import pytest
import torch

from fedclust.errors import ConfigError
from fedclust.federation.aggregate import ServerStep, WeightedSum, is_finite


def test_weighted_average_by_sample_count():
    # Prepare: two clients, 1 and 3 samples
    total = WeightedSum()
    total.add({"w": torch.tensor([0.0, 4.0])}, weight=1)
    total.add({"w": torch.tensor([4.0, 0.0])}, weight=3)
    # Execute
    avg = total.average()
    # Assert: (1*[0,4] + 3*[4,0]) / 4 = [3, 1]
    assert torch.allclose(avg["w"], torch.tensor([3.0, 1.0]))


def test_integer_buffers_are_rounded_back_to_their_dtype():
    total = WeightedSum()
    total.add({"n": torch.tensor(10)}, weight=1)
    total.add({"n": torch.tensor(13)}, weight=1)
    avg = total.average()
    assert avg["n"].dtype == torch.int64 and avg["n"].item() == 12  # 11.5 rounds to even 12


def test_key_weights_override_per_prefix():
    # UIFCA-style: model 0 weighted by 1 and 0 assigned samples, model 1 by 0 and 2
    total = WeightedSum()
    total.add({"m0.w": torch.tensor(2.0), "m1.w": torch.tensor(5.0)}, weight=1, key_weights={"m0.": 1, "m1.": 0})
    total.add({"m0.w": torch.tensor(8.0), "m1.w": torch.tensor(7.0)}, weight=1, key_weights={"m0.": 0, "m1.": 2})
    avg = total.average()
    assert avg["m0.w"].item() == 2.0 and avg["m1.w"].item() == 7.0


def test_empty_sum_is_false_and_finite_check():
    assert not WeightedSum()
    assert is_finite({"a": torch.ones(2), "b": torch.tensor([1, 2])})
    assert not is_finite({"a": torch.tensor([1.0, float("nan")])})
    assert not is_finite({"a": torch.tensor([float("inf")])})
    assert not is_finite({"w": torch.ones(2)}, {"centroids": torch.tensor([[float("nan")]])})  # payload checked too
    assert is_finite({}, {"labels": torch.tensor([1, 2])})


def test_server_step_is_fedavg_by_default_and_fedavgm_otherwise():
    """lr 1 / momentum 0 hands the average back untouched; otherwise global + lr * m, m = momentum * m + change,
    on trainable keys only (a buffer keeps the plain average)."""
    start = {"w": torch.tensor([1.0, 2.0]), "running_mean": torch.tensor([0.0])}
    averaged = {"w": torch.tensor([2.0, 2.0]), "running_mean": torch.tensor([4.0])}
    assert ServerStep()(averaged, start, {"w"}) is averaged

    step = ServerStep(lr=2.0, momentum=0.5)
    first = step(averaged, start, {"w"})
    assert torch.equal(first["w"], torch.tensor([3.0, 2.0])) and torch.equal(first["running_mean"], torch.tensor([4.0]))
    second = step({"w": torch.tensor([4.0, 2.0])}, first, {"w"})  # change (1, 0); m = 0.5 * (1, 0) + (1, 0)
    assert torch.equal(second["w"], torch.tensor([6.0, 2.0]))


def test_server_momentum_from_a_checkpoint_is_checked_before_use():
    step = ServerStep(momentum=0.9)
    step.load_state_dict({"w": torch.ones(2)}, {"w": torch.Size([2])})
    assert torch.equal(step.state_dict()["w"], torch.ones(2, dtype=torch.float64))
    for bad in ([1, 2], {"w": torch.ones(3)}, {"other": torch.ones(2)}, {"w": "text"}):
        with pytest.raises(ConfigError, match="server_step"):
            step.load_state_dict(bad, {"w": torch.Size([2])})

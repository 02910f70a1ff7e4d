import pytest
import torch

from fedclust.clustering.kept_state import kept_or_made, valid_indices


def test_valid_indices_accepts_only_int64_of_the_shape_with_every_entry_in_range():
    good = torch.tensor([0, 2, 1])
    assert valid_indices(good, (3,), 3)
    assert not valid_indices(good, (3,), 2)  # 2 is out of [0, 2)
    assert not valid_indices(good, (4,), 3)
    assert not valid_indices(good.int(), (3,), 3)
    assert not valid_indices(torch.tensor([0, -1, 1]), (3,), 3)
    assert not valid_indices(torch.zeros(0, dtype=torch.long), (0,), 3)
    assert not valid_indices([0, 2, 1], (3,), 3)


def test_a_valid_kept_value_is_used_without_making_one():
    state = {"groups": torch.tensor([1, 0, 1])}
    kept = kept_or_made(state, "groups", (3,), 2, lambda: pytest.fail("made again"))
    assert kept is state["groups"]


@pytest.mark.parametrize("bad", [None, "nonsense", torch.tensor([0, 5, 1]), torch.tensor([[0, 1, 1]])])
def test_an_invalid_or_missing_value_is_made_again_and_kept_on_the_cpu(bad):
    state = {} if bad is None else {"groups": bad}
    made = kept_or_made(state, "groups", (3,), 2, lambda: torch.tensor([0, 1, 1]))
    assert torch.equal(made, torch.tensor([0, 1, 1])) and state["groups"] is made and made.device.type == "cpu"

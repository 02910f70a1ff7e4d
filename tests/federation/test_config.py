import pytest

from fedclust.contract import Stage
from fedclust.errors import ConfigError
from fedclust.federation.config import FederationConfig

CCFC = [Stage("pretrain", 100, 1), Stage("cluster", 30, 1)]


def test_schedule_kept_without_overrides():
    assert FederationConfig().schedule(CCFC) == CCFC


def test_rounds_rescale_every_stage_in_proportion():
    assert [s.rounds for s in FederationConfig(rounds=5).schedule(CCFC)] == [4, 1]
    assert [s.rounds for s in FederationConfig(rounds=13).schedule(CCFC)] == [10, 3]
    assert [s.rounds for s in FederationConfig(rounds=2).schedule(CCFC)] == [1, 1]


def test_local_epochs_override_leaves_no_training_stages_alone():
    stages = FederationConfig(local_epochs=3).schedule([Stage("a", 2, 1), Stage("b", 1, 0)])
    assert [s.local_epochs for s in stages] == [3, 0]


@pytest.mark.parametrize("field,value", [("fraction", 0.0), ("disconnect_rate", 1.0), ("rounds", 0),
                                         ("eval_every", 0), ("server_lr", 0.0), ("server_lr", float("inf")),
                                         ("server_momentum", 1.0), ("server_momentum", -0.1)])
def test_bad_values_name_the_field(field, value):
    with pytest.raises(ConfigError, match=f"federation.{field}"):
        FederationConfig(**{field: value}).validate()

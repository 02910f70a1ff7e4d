import pytest

from fedclust.data.config import DataConfig
from fedclust.errors import ConfigError
from fedclust.federation.config import FederationConfig
from fedclust.methods import KFED


def test_two_clients_one_round_smoke(run_fit):
    metrics = run_fit(KFED(k_local=10))
    assert metrics["nmi"] > 0.5


@pytest.mark.parametrize("labelling", ["local", "nearest"])
def test_recovers_separated_gaussians_both_labellings(run_fit, labelling):
    data = DataConfig(name="gaussian", num_clients=4, partition="pshift", p=1.0)
    metrics = run_fit(KFED(k_local=1, labelling=labelling), data=data, folder=labelling)
    assert metrics["nmi"] == pytest.approx(1.0)


def test_too_few_local_centres_is_a_config_error(run_fit):
    with pytest.raises(ConfigError, match="method.init_args.k_local"):
        run_fit(KFED(k_local=2), data=DataConfig(name="digits", num_clients=2, partition="iid"))


def test_default_central_start_is_the_first_client(run_fit):
    """Pins the official central start (client 0's centres) as the default: the same run as naming client 0,
    a different one from starting at client 1."""
    data = DataConfig(name="digits", num_clients=10, partition="pshift", p=0.5)
    first = run_fit(KFED(k_local=3), data=data, folder="default")
    named = run_fit(KFED(k_local=3, central_start=0), data=data, folder="zero")
    other = run_fit(KFED(k_local=3, central_start=1), data=data, folder="one")
    assert first == named and other != first


@pytest.mark.parametrize("start", [10, -1, "last"])
def test_bad_central_start_is_a_config_error(run_fit, start):
    with pytest.raises(ConfigError, match="method.init_args.central_start"):
        run_fit(KFED(k_local=10, central_start=start))


def test_local_clusters_below_the_privacy_floor_merge_into_their_nearest(run_fit, server_inputs):
    """k-FED adapts to federation.min_summary_size: with k' = 40 on ~900 digits a client, some local clusters hold
    fewer than 30 samples; they join their nearest, so every centre sent holds at least 30 and says so."""
    run_fit(KFED(k_local=40), federation=FederationConfig(min_summary_size=30))
    (_, _, updates), = server_inputs
    for update in updates:
        counts = update.payload["centre_counts"]
        assert len(update.payload["centres"]) == len(counts) < 40
        assert float(counts.min()) >= 30 and float(counts.sum()) == update.num_samples

import pytest
import torch

from fedclust.data.config import DataConfig
from fedclust.errors import ConfigError
from fedclust.methods import FCM

ONE_CLIENT = DataConfig(name="digits", num_clients=1, partition="iid")


def test_centralized_fcm_on_digits(run_fit):
    # m = 1.1 is nearly k-means (measured NMI 0.77; centralized k-means reaches about 0.74); Bezdek's m = 2
    # leaves the 64-dimensional digits almost uniformly fuzzy (NMI 0.37), hence the smaller bound below.
    assert run_fit(FCM(m=1.1), data=ONE_CLIENT, folder="sharp")["nmi"] > 0.70
    assert run_fit(FCM(m=2.0, init="random"), data=ONE_CLIENT, folder="fuzzy")["nmi"] > 0.25


def test_more_than_one_client_is_refused(run_fit):
    with pytest.raises(ConfigError, match="data.num_clients"):
        run_fit(FCM())


def test_a_fuzzifier_of_one_is_refused(run_fit):
    with pytest.raises(ConfigError, match="method.init_args.m"):
        run_fit(FCM(m=1.0), data=ONE_CLIENT)


def test_more_starts_never_end_higher(run_fit, tmp_path):
    objective = {}
    for starts in (1, 4):
        run_fit(FCM(m=1.1, init="random", n_init=starts), data=ONE_CLIENT, folder=f"n{starts}")
        state = torch.load(tmp_path / f"n{starts}" / "checkpoints" / "last.ckpt", weights_only=False)
        objective[starts] = state["clients"][0]["objective"]
    assert objective[4] <= objective[1]

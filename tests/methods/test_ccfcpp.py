"""CCFC++: CCFC's training with FedDecorr's term on z, in the stages asked for."""

import pytest
import torch

from fedclust.contract import ClientContext, ClientSession, Stage
from fedclust.data.config import build_federated_data
from fedclust.errors import ConfigError
from fedclust.losses.decorrelation import decorrelation_loss
from fedclust.methods import CCFC, CCFCPlusPlus
from tests.conftest import tiny_ccfc, tiny_data


def _loss(method, data, stage: str, seed: int = 0) -> float:
    """training_step's loss on the first client's first batch, in a fresh copy of the same network."""
    torch.manual_seed(seed)
    method.build(data.info)
    if stage == "cluster":
        method.centroids = torch.randn(10, 16)
    ctx = ClientContext(0, Stage(stage, 1), 0 if stage == "pretrain" else 1, 0, data.client(0, 64), {}, 0)
    method.session = ClientSession(ctx)
    method.on_client_start(ctx)
    method.train()
    batch = next(ctx.data.batches(torch.Generator().manual_seed(0)))
    loss = float(method.training_step(batch, 0))
    method.session = None
    return loss


@pytest.mark.parametrize("stage", ["pretrain", "cluster"])
def test_adds_the_weighted_decorrelation_of_z_to_ccfcs_loss(stage, monkeypatch):
    data = build_federated_data(tiny_data(), torch.device("cpu"), 0)
    seen = []

    def spy(z):
        seen.append(z.detach().clone())
        return decorrelation_loss(z)

    monkeypatch.setattr("fedclust.methods.ccfcpp.decorrelation_loss", spy)
    base = _loss(tiny_ccfc(), data, stage)
    plus = _loss(tiny_ccfc(cls=CCFCPlusPlus, decorrelation_weight=2.0), data, stage)
    views = 2 if stage == "pretrain" else 1
    assert len(seen) == views and all(z.shape == (64, 16) for z in seen)
    expected = 2.0 * sum(float(decorrelation_loss(z)) for z in seen) / views
    assert expected > 0
    assert plus == pytest.approx(base + expected, rel=1e-5)


def test_stage_choice_and_zero_weight_give_ccfc():
    data = build_federated_data(tiny_data(), torch.device("cpu"), 0)
    base = _loss(tiny_ccfc(), data, "pretrain")
    assert _loss(tiny_ccfc(cls=CCFCPlusPlus, decorrelation_weight=0.0), data, "pretrain") == pytest.approx(base)
    only_cluster = tiny_ccfc(cls=CCFCPlusPlus, decorrelation_weight=5.0, decorrelation_stages="cluster")
    assert _loss(only_cluster, data, "pretrain") == pytest.approx(base)
    assert _loss(only_cluster, data, "cluster") > _loss(tiny_ccfc(), data, "cluster")


def test_negative_weight_is_refused():
    with pytest.raises(ConfigError, match="decorrelation_weight"):
        tiny_ccfc(cls=CCFCPlusPlus, decorrelation_weight=-1.0)


def test_is_its_own_method_with_ccfcs_arguments():
    method = tiny_ccfc(cls=CCFCPlusPlus, latent_dim=8, decorrelation_weight=0.5)
    assert not isinstance(method, CCFC)
    assert method.hparams.latent_dim == 8 and method.hparams.decorrelation_weight == 0.5

import pytest
import torch

from fedclust.data.config import DataConfig
from fedclust.errors import ConfigError
from fedclust.methods import DCN

DIGITS = DataConfig(name="digits", num_clients=1, partition="iid")


def test_centralized_dcn_on_digits_clusters_in_its_embedding(run_fit):
    metrics = run_fit(DCN(latent_dim=8, ae_hidden=(64,), pretrain_epochs=15, cluster_epochs=5), data=DIGITS)
    assert metrics["nmi"] > 0.5  # k-means on the raw digits reaches about 0.74; a small DCN a few epochs long less


def test_the_client_trained_autoencoder_is_the_global_model_and_predicts(run_fit):
    from tests.helpers.tiny import build

    method = DCN(latent_dim=4, ae_hidden=(16,), pretrain_epochs=1, cluster_epochs=1)
    orch = build(method, data_cfg=DIGITS)
    before = {k: v.clone() for k, v in method.state_dict().items()}
    orch.run()
    assert any(not torch.equal(before[k], v) for k, v in method.state_dict().items())  # trained, then kept
    x = orch.data.client(0, 64).all_x()
    assert torch.equal(method.assign(x), torch.cdist(method.embed(x), method.centroids).argmin(1))


def test_more_than_one_client_is_refused(run_fit):
    with pytest.raises(ConfigError, match="data.num_clients"):
        run_fit(DCN())

import pytest
import torch

from fedclust.data.config import DataConfig, build_federated_data
from fedclust.errors import ConfigError
from tests.conftest import tiny_ccfc, tiny_data


def test_batches_cover_the_client_once_in_a_seeded_order():
    data = build_federated_data(tiny_data(), torch.device("cpu"), 0)
    client = data.client(0, batch_size=64)
    seen = torch.cat([b["index"] for b in client.batches(torch.Generator().manual_seed(1))])
    assert torch.equal(seen.sort().values, client.indices)
    again = torch.cat([b["index"] for b in client.batches(torch.Generator().manual_seed(1))])
    assert torch.equal(seen, again)
    assert all(b["x"].dtype == torch.float32 and b["x"].max() <= 1 for b in client.batches(torch.Generator()))


def test_l2_normalisation_gives_unit_samples():
    data = build_federated_data(tiny_data(normalize="l2"), torch.device("cpu"), 0)
    x = next(data.iter_all())
    assert torch.allclose(x.flatten(1).norm(dim=1), torch.ones(len(x)), atol=1e-5)


def test_host_dataloader_path_gives_the_same_run_as_the_device_path(run_fit, monkeypatch):
    from fedclust.data.client_data import ClientData

    used = []
    real = ClientData._loader_batches
    monkeypatch.setattr(ClientData, "_loader_batches", lambda self, order: used.append(1) or real(self, order))
    on_device = run_fit(tiny_ccfc(), data=tiny_data(placement="device"), folder="a")
    on_host = run_fit(tiny_ccfc(), data=tiny_data(placement="host", num_workers=1), folder="b")
    assert used and on_host == on_device


def test_a_client_left_empty_is_a_config_error():
    with pytest.raises(ConfigError, match="data.num_clients"):
        build_federated_data(DataConfig(name="digits", num_clients=2000, partition="iid"), torch.device("cpu"), 0)


def test_num_clients_left_unset_is_ten_for_a_simulated_partition():
    data = build_federated_data(DataConfig(name="digits", partition="iid"), torch.device("cpu"), 0)
    assert data.num_clients == 10 and DataConfig().num_clients is None
    assert data.info.has_labels

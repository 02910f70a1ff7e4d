"""DESIGN.md's privacy boundary: nothing sample-shaped leaves a client through a ClientUpdate."""

import pytest

from fedclust.data.config import DataConfig
from fedclust.federation.orchestrator import Orchestrator
from fedclust.methods import KFED, KMeans
from tests.conftest import tiny_ccfc
from tests.methods.test_clustergan_fedavg import tiny_clustergan, tiny_mnist28
from tests.methods.test_ppfc_gan import tiny_ppfc
from tests.methods.test_sdafc import tiny_sdafc


@pytest.mark.parametrize("make,data", [
    (tiny_ccfc, None),
    (lambda: KFED(k_local=10), None),
    (KMeans, DataConfig(name="digits", num_clients=1, partition="iid")),
    (tiny_clustergan, tiny_mnist28),  # data: a function of a folder to write 28x28 images in
    (tiny_sdafc, None),  # shares synthetic images, under "synthetic" only
    (tiny_ppfc, None),
])
def test_payloads_are_summaries_not_samples(run_fit, monkeypatch, tmp_path, make, data):
    data = data(tmp_path / "data") if callable(data) else data
    seen = []
    real = Orchestrator.run_round

    def spy(self, ctx):
        original = self.method.aggregate

        def capture(averaged, updates, rctx):
            seen.extend(updates)
            return original(averaged, updates, rctx)

        self.method.aggregate = capture
        try:
            return real(self, ctx)
        finally:
            del self.method.aggregate

    monkeypatch.setattr(Orchestrator, "run_round", spy)
    run_fit(make(), data=data)
    assert seen
    for update in seen:
        for name, tensor in update.payload.items():
            if name == "synthetic" and type(make()).shares_synthetic_data:
                continue  # generated samples, named as such by methods whose paper shares them
            assert tensor.shape[0] < update.num_samples, f"{name} is shaped like the client's samples"

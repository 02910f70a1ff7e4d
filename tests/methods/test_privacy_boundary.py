"""DESIGN.md's privacy boundary, for every registered method: nothing sample-shaped leaves a client through a
ClientUpdate (but the synthetic samples of the methods whose paper shares them), and every checkpoint loads
with the safe loader."""

import pytest

from fedclust.callbacks.checkpoint import load_checkpoint
from fedclust.federation.config import FederationConfig
from fedclust.registry import METHODS
from fedclust.run_folder import CHECKPOINT
from tests.helpers.tiny import tiny_method_and_data


@pytest.mark.parametrize("name", list(METHODS))
def test_payloads_are_summaries_not_samples(run_fit, server_inputs, tmp_path, name):
    method, data = tiny_method_and_data(name, tmp_path / "data")
    floor = FederationConfig().min_summary_size
    run_fit(method, data=data)
    assert server_inputs
    for update in (u for _, _, updates in server_inputs for u in updates):
        for key, tensor in update.payload.items():
            if key == "synthetic" and method.shares_synthetic_data:
                continue  # generated samples, named as such by methods whose paper shares them
            assert tensor.shape[0] < update.num_samples, f"{key} is shaped like the client's samples"
        for key, count_key in method.summary_keys.items():  # every summary row says how many samples it holds
            if key in update.payload:
                counts = update.payload[count_key]
                assert len(counts) == len(update.payload[key])
                assert bool(((counts >= floor) | (counts == 0)).all()), (name, key, counts.min())

    # checkpoints are read with torch.load(weights_only=True) (issue 11): plain tensors, numbers, strings
    # and containers only, or resume and evaluate would refuse this method's runs
    assert load_checkpoint(tmp_path / "run" / CHECKPOINT)["done"] >= 1

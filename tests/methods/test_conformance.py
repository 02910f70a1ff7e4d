"""Every registered method, run the same way (issue 12): 2 rounds on 2 tiny clients through fit().

Asserted for each: the weights of a method that trains moved; only the method's communicated keys and its
declared payload keys (small summaries) reached the server; a second run with the same seed repeats the first
exactly; a run stopped after round 1 and resumed ends exactly like the uninterrupted one."""

import pytest
import torch

from fedclust.callbacks.checkpoint import load_checkpoint
from fedclust.contract import LOCAL_WEIGHTS, sendable_keys
from fedclust.federation.config import FederationConfig
from fedclust.registry import METHODS
from fedclust.run_folder import CHECKPOINT
from tests.helpers.tiny import interrupted_after_round, tiny_method_and_data

TWO_ROUNDS = FederationConfig(rounds=2, checkpoint_every=1)


def _final_model(folder):
    return load_checkpoint(folder / CHECKPOINT)["model"]


@pytest.mark.parametrize("name", list(METHODS))
def test_method_conforms(name, run_fit, server_inputs, tmp_path, monkeypatch):
    method, data = tiny_method_and_data(name, tmp_path / "data")
    torch.manual_seed(0)
    full = run_fit(method, data=data, federation=TWO_ROUNDS, folder="full", seed=3)

    # weights moved where the method trains (a stage with local epochs and parameters that train)
    trains = any(s.local_epochs for s in method.stages()) and any(p.requires_grad for p in method.parameters())
    if trains:
        again, _ = tiny_method_and_data(name, tmp_path / "data")
        from fedclust.data.config import build_federated_data
        from fedclust.federation.setup import setup_method

        setup_method(again, build_federated_data(data, torch.device("cpu"), 3), 3)  # the run's initialisation
        start, saved = again.state_dict(), load_checkpoint(tmp_path / "full" / CHECKPOINT)
        # global weights, or the local weights a client keeps (SDA-FC's GANs never leave the client)
        ends = [saved["model"], *(s[LOCAL_WEIGHTS] for s in saved["clients"].values() if LOCAL_WEIGHTS in s)]
        assert any(not torch.equal(start[k].cpu(), end[k]) for end in ends for k in end
                   if start[k].is_floating_point()), f"{name} trained but no weight moved"

    # only communicated keys are averaged; payloads are summaries (or named synthetic samples)
    communicated = set(method.communicated())
    for _, averaged, updates in server_inputs:
        assert set(averaged or {}) <= communicated
        for update in updates:
            assert set(update.payload) <= sendable_keys(method), (name, sorted(update.payload))
            for key, value in update.payload.items():
                sample_shaped = value.dim() > 0 and value.shape[0] >= update.num_samples
                assert not sample_shaped or (key == "synthetic" and method.shares_synthetic_data), (name, key)

    # the same seed repeats exactly
    repeat_method, _ = tiny_method_and_data(name, tmp_path / "data")
    repeat = run_fit(repeat_method, data=data, federation=TWO_ROUNDS, folder="repeat", seed=3)
    assert repeat == pytest.approx(full, nan_ok=True, abs=1e-6)
    model_a, model_b = _final_model(tmp_path / "full"), _final_model(tmp_path / "repeat")
    assert all(torch.allclose(model_a[k].float(), model_b[k].float(), atol=1e-6) for k in model_a)

    # stopped after round 1 and resumed == uninterrupted
    cut_method, _ = tiny_method_and_data(name, tmp_path / "data")
    with interrupted_after_round(1):
        run_fit(cut_method, data=data, federation=TWO_ROUNDS, folder="cut", seed=3)
    resumed_method, _ = tiny_method_and_data(name, tmp_path / "data")
    resumed = run_fit(resumed_method, data=data, federation=TWO_ROUNDS, folder="resumed", seed=3,
                      resume=str(tmp_path / "cut"))
    assert resumed == pytest.approx(full, nan_ok=True, abs=1e-6)

import json
import math

import pytest
import torch

from fedclust.callbacks.csv_metrics import read_metrics
from fedclust.contract import LOCAL_WEIGHTS, OPTIMIZER
from fedclust.federation import orchestrator as orch_module
from fedclust.federation.config import FederationConfig
from fedclust.run import fit
from tests.conftest import tiny_ccfc, tiny_data
from tests.helpers.tiny import build, interrupted_after_round


def test_result_does_not_depend_on_client_order(monkeypatch):
    forward = build(tiny_ccfc())
    forward.run()
    real = orch_module.participants
    monkeypatch.setattr(orch_module, "participants", lambda *a, **k: (real(*a, **k)[0][::-1], []))
    backward = build(tiny_ccfc())
    backward.run()
    for key, value in forward.method.state_dict().items():
        assert torch.allclose(value.float(), backward.method.state_dict()[key].float(), atol=1e-5), key
    assert forward.progress.last_metrics == pytest.approx(backward.progress.last_metrics, abs=1e-6)


def test_client_state_persists_optimizer_and_local_bn_buffers():
    orch = build(tiny_ccfc(), federation=FederationConfig(average_bn_buffers=False))
    orch.run()
    state = orch.client_states[0]
    assert OPTIMIZER in state and state[OPTIMIZER]["states"][0]["state"]  # Adam moments kept for the next round
    assert any(k.endswith("running_mean") for k in state[LOCAL_WEIGHTS])
    assert not any(k.endswith("running_mean") for k in orch.communicated)


def _adam_steps(orch, client=0) -> int:
    saved = orch.client_states[client][OPTIMIZER]
    return int(next(iter(saved["states"][0]["state"].values()))["step"])


@pytest.mark.parametrize(("mode", "rounds_counted"), [("persist", 1), ("persist_across_stages", 3)])
def test_optimizer_state_starts_fresh_at_each_stage_unless_asked(mode, rounds_counted):
    """CCFC's code creates a new Adam for the cluster stage: its moments count that stage's steps only."""
    orch = build(tiny_ccfc(pretrain_rounds=2, cluster_rounds=1), federation=FederationConfig(optimizer_state=mode))
    orch.run()
    assert orch.client_states[0][OPTIMIZER]["stage"] == 1
    n = len(orch.data.parts[0])
    steps_per_round = n // 64 + (n % 64 > 1)  # batches of 64; a last batch of one sample is dropped
    assert _adam_steps(orch) == rounds_counted * steps_per_round


def test_optimizer_reset_keeps_no_state():
    orch = build(tiny_ccfc(), federation=FederationConfig(optimizer_state="reset"))
    orch.run()
    assert OPTIMIZER not in orch.client_states[0]


def test_non_finite_client_update_is_left_out_and_the_run_goes_on(monkeypatch):
    method = tiny_ccfc()
    real_end = type(method).on_client_end

    def poisoned(self, ctx):
        payload = real_end(self, ctx)
        if ctx.client_id == 1:
            with torch.no_grad():
                next(self.parameters()).fill_(float("nan"))
        return payload

    monkeypatch.setattr(type(method), "on_client_end", poisoned)
    orch = build(method)
    orch.run()
    assert all(r["rejected"] == 1 and r["clients"] == 2 for r in orch.progress.history)
    assert all(torch.isfinite(p).all() for p in method.parameters())
    assert not math.isnan(orch.progress.last_metrics["nmi"])


def test_failed_clients_do_not_train():
    orch = build(tiny_ccfc(), federation=FederationConfig(disconnect_rate=0.34, disconnect_mode="fixed"))
    orch.run()
    assert all(r["clients"] == 2 and r["failed"] == 1 for r in orch.progress.history)
    assert sum(OPTIMIZER in s for s in orch.client_states.values()) == 2


def test_stopped_and_resumed_run_ends_like_the_uninterrupted_run(tmp_path, monkeypatch):
    method_args = dict(pretrain_rounds=2, cluster_rounds=2)
    fed = FederationConfig(checkpoint_every=2)
    common = dict(data=tiny_data(num_clients=3), federation=fed, seed=5, progress=False)
    full = fit(tiny_ccfc(**method_args), run_dir=str(tmp_path / "full"), **common)

    with interrupted_after_round(2):
        fit(tiny_ccfc(**method_args), run_dir=str(tmp_path / "cut"), **common)
    resumed = fit(tiny_ccfc(**method_args), resume=str(tmp_path / "cut"), **common)

    assert resumed == pytest.approx(full, abs=1e-6)
    rows_full, rows_cut = read_metrics(tmp_path / "full/metrics.csv"), read_metrics(tmp_path / "cut/metrics.csv")
    assert [r["round"] for r in rows_cut] == [1, 2, 3, 4]
    for a, b in zip(rows_full, rows_cut):
        assert a["nmi"] == pytest.approx(b["nmi"], abs=1e-6) and a["loss"] == pytest.approx(b["loss"], abs=1e-5)
    assert json.loads((tmp_path / "cut/final.json").read_text())["metrics"] == pytest.approx(full, abs=1e-6)


def test_rounds_without_any_client_keep_the_global_state_and_the_run_goes_on(monkeypatch):
    """Every client fails every round: CCFC never gets centroids, rounds score nan, nothing crashes (issue 11)."""
    monkeypatch.setattr(orch_module, "participants", lambda n, **k: ([], list(range(n))))
    method = tiny_ccfc()
    orch = build(method)
    before = {k: v.clone() for k, v in method.state_dict().items()}
    orch.run()
    assert all(r["clients"] == 0 for r in orch.progress.history)
    assert all(torch.equal(before[k], v) for k, v in method.state_dict().items())
    assert math.isnan(orch.progress.last_metrics["nmi"])
    assert (orch.predict() == -1).all()


def test_a_diverged_client_is_left_out_before_its_payload_is_computed(monkeypatch):
    """A client whose loss is not finite never reaches its local k-means (on NaN features it would crash)."""
    method = tiny_ccfc()
    real_step, real_end = type(method).training_step, type(method).on_client_end
    ended = []

    def diverging(self, batch, batch_idx):
        loss = real_step(self, batch, batch_idx)
        return loss * float("nan") if self.ctx.client_id == 1 else loss

    def spy(self, ctx):
        ended.append(ctx.client_id)
        return real_end(self, ctx)

    monkeypatch.setattr(type(method), "training_step", diverging)
    monkeypatch.setattr(type(method), "on_client_end", spy)
    orch = build(method)
    orch.run()
    assert 1 not in ended and {0, 2} <= set(ended)
    assert all(r["rejected"] == 1 for r in orch.progress.history)
    assert not math.isnan(orch.progress.last_metrics["nmi"])


def test_server_momentum_changes_training_and_survives_a_resume(tmp_path):
    """FedAvgM (federation.server_momentum) moves the global model beyond FedAvg's average, and a run stopped and
    resumed from its checkpoint ends as the uninterrupted one: the momentum is saved with the server's state."""
    method_args = dict(pretrain_rounds=3, cluster_rounds=1)
    fed = FederationConfig(checkpoint_every=2, server_momentum=0.9)
    common = dict(data=tiny_data(num_clients=3), seed=5, progress=False)
    fit(tiny_ccfc(**method_args), run_dir=str(tmp_path / "plain"), federation=FederationConfig(), **common)
    full = fit(tiny_ccfc(**method_args), run_dir=str(tmp_path / "full"), federation=fed, **common)
    loss = [r["loss"] for r in read_metrics(tmp_path / "full/metrics.csv")]
    assert loss[1:] != pytest.approx([r["loss"] for r in read_metrics(tmp_path / "plain/metrics.csv")][1:])

    with interrupted_after_round(2):
        fit(tiny_ccfc(**method_args), run_dir=str(tmp_path / "cut"), federation=fed, **common)
    resumed = fit(tiny_ccfc(**method_args), resume=str(tmp_path / "cut"), federation=fed, **common)
    assert resumed == pytest.approx(full, abs=1e-6)
    cut = read_metrics(tmp_path / "cut/metrics.csv")
    assert [r["loss"] for r in cut] == pytest.approx(loss, abs=1e-5)

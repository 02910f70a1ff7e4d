import math

import pytest
import torch

from fedclust.callbacks.checkpoint import load_checkpoint
from fedclust.contract import ClientContext, ClientUpdate
from fedclust.data.config import DataConfig
from fedclust.errors import ConfigError
from fedclust.federation.config import FederationConfig
from fedclust.methods import UIFCA
from fedclust.nn.affine_stack import AffineBatchNLL, affine_log_probs
from fedclust.nn.flow_starts import log_probs
from fedclust.nn.flows import AffineFlow
from fedclust.run_folder import CHECKPOINT
from tests.helpers.tiny import build, interrupted_after_round, tiny_uifca

SMALL = {"num_clusters": 2, "points_per_cluster": 200, "dim": 8}


def restarting(**kw) -> UIFCA:
    """Three starts, two cluster rounds: a run of about a second."""
    args = dict(restarts=3, cluster_rounds=2, communication_rounds=1, local_steps=5, flow="affine_triangular")
    return tiny_uifca(**{**args, **kw})


def small_gaussian(p: float = 1.0, name: str = "gaussian") -> DataConfig:
    return DataConfig(name=name, num_clients=2, partition="pshift", p=p, options=SMALL)


def test_two_clients_one_round_smoke(run_fit):
    metrics = run_fit(tiny_uifca(), data=small_gaussian(p=0.5))
    assert set(metrics) >= {"nmi", "acc", "purity"}


def test_realnvp_on_rotated_images_smoke(run_fit):
    data = DataConfig(name="rotated", num_clients=4, partition="pshift", p=1.0,
                      options={"source": "digits", "label": 3})
    method = tiny_uifca(flow="realnvp", num_couplings=2, hidden_channels=4, num_blocks=1, local_steps=1)
    assert 0 <= run_fit(method, data=data)["purity"] <= 1


def test_each_model_is_averaged_with_the_clients_counts_of_its_samples(monkeypatch):
    orch = build(tiny_uifca(init="random"), data_cfg=small_gaussian(p=0.5))
    seen = []
    real = UIFCA.aggregation_weights

    def spy(self, ctx):
        weights = real(self, ctx)
        seen.append((ctx.state["assignment"][0].bincount(minlength=2).tolist(), weights))
        return weights

    monkeypatch.setattr(UIFCA, "aggregation_weights", spy)
    orch.run()
    for counts, weights in seen:
        assert weights == {"flows.0.": counts[0], "flows.1.": counts[1]}
        assert sum(counts) == 200  # each client holds 200 of the 400 points


def test_recovers_separated_gaussians():
    method = tiny_uifca(cluster_rounds=4, communication_rounds=2, local_steps=10)
    orch = build(method, data_cfg=small_gaussian(p=0.5), federation=FederationConfig(eval_every=100))
    assert orch.run()["purity"] == 1.0


def test_assignment_is_kept_within_a_cluster_round_and_redone_after(monkeypatch):
    method = tiny_uifca(cluster_rounds=2, communication_rounds=2, init="random")
    orch = build(method, data_cfg=small_gaussian(p=0.5))
    history = []
    real = UIFCA.on_client_start

    def spy(self, ctx):
        real(self, ctx)
        if ctx.client_id == 0:
            history.append((ctx.state["cluster_round"], ctx.state["assignment"].clone()))

    monkeypatch.setattr(UIFCA, "on_client_start", spy)
    orch.run()
    assert [t for t, _ in history] == [0, 0, 1, 1]
    assert torch.equal(history[0][1], history[1][1]) and torch.equal(history[2][1], history[3][1])


def test_kfed_initialisation_starts_from_kfeds_clusters():
    method = tiny_uifca(init="kfed", communication_rounds=1, cluster_rounds=1, local_steps=1)
    orch = build(method, data_cfg=small_gaussian(p=1.0))
    assert [s.name for s in orch.stages] == ["kfed-init", "uifca"]
    orch.run()
    first = torch.cat([orch.client_states[c]["assignment"][0] for c in range(2)])
    truth = torch.cat([orch.data.labels[orch.data.parts[c]].cpu() for c in range(2)])
    assert len(set(zip(first.tolist(), truth.tolist()))) == 2  # a one-to-one labelling of the two clusters


def test_copies_start_as_one_model_plus_small_noise():
    orch = build(tiny_uifca(init_noise=0.01), data_cfg=small_gaussian())
    w0, w1 = (f.matrix() for f in orch.method.flows)
    assert 0 < (w0 - w1).abs().max() < 0.1


@pytest.mark.parametrize("kw,data,field", [
    ({"flow": "realnvp"}, None, "method.init_args.flow"),
    ({"flow": "affine"}, DataConfig(name="rotated", num_clients=4, options={"source": "digits"}),
     "method.init_args.flow"),
    ({"local_steps": 0}, None, "method.init_args.local_steps"),
])
def test_bad_settings_are_config_errors(run_fit, kw, data, field):
    with pytest.raises(ConfigError, match=field):
        run_fit(tiny_uifca(**kw), data=data or small_gaussian())


def test_reinit_models_redraws_them_at_each_cluster_round_reproducibly():
    def final_weights(reinit):
        method = tiny_uifca(cluster_rounds=2, communication_rounds=1, reinit_models=reinit)
        build(method, data_cfg=small_gaussian(p=0.5)).run()
        return torch.cat([p.detach().flatten() for p in method.flows.parameters()])

    once, again, kept = final_weights(True), final_weights(True), final_weights(False)
    assert torch.equal(once, again)
    assert not torch.allclose(once, kept)


def every_start_total(orch) -> torch.Tensor:
    """Per start, the sum over every client's samples of its best model's log-likelihood, from the final models."""
    x = torch.cat([orch.data.client(c, 32).all_x() for c in range(orch.data.num_clients)])
    method = orch.method
    return log_probs(method.flows, x).unflatten(0, (method.hparams.restarts, -1)).max(1).values.double().sum(1)


def test_the_kept_start_has_the_highest_total_log_likelihood_of_the_final_models(server_inputs):
    orch = build(restarting(), data_cfg=small_gaussian(p=0.5))
    orch.run()
    stage, _, updates = server_inputs[-1]
    assert stage == "select"  # one last round scores the final models
    for update in updates:  # one total per start, each counted as all of the client's samples (the floor)
        assert update.payload["log_likelihood_counts"].tolist() == [200.0] * 3
    totals = every_start_total(orch)
    assert torch.allclose(orch.method.restart_log_likelihood, totals, rtol=1e-5)
    assert orch.method.best_restart == int(totals.argmax())
    assert len(set(totals.tolist())) == 3  # three different starts, not three copies


def test_predict_uses_the_kept_start():
    orch = build(restarting(), data_cfg=small_gaussian(p=0.5))
    orch.run()
    method, x = orch.method, orch.data.client(0, 32).all_x()
    for start in range(3):
        method.best_restart = start
        assert torch.equal(method.assign(x), log_probs(method.flows, x)[2 * start:2 * start + 2].argmax(0))


def test_no_label_reaches_training_or_the_choice_of_start():
    def run(scramble):
        orch = build(restarting(init="random"), data_cfg=small_gaussian(p=0.5))
        if scramble:  # every label replaced: nothing the method computes may change
            orch.data.labels = orch.data.dataset.y = torch.randint(2, orch.data.labels.shape)
        orch.run()
        return orch.method.best_restart, torch.cat([p.detach().flatten() for p in orch.method.flows.parameters()])

    (kept, weights), (kept_scrambled, weights_scrambled) = run(False), run(True)
    assert kept == kept_scrambled and torch.equal(weights, weights_scrambled)


def test_a_start_whose_total_is_not_a_number_is_never_kept():
    method = restarting()
    updates = [ClientUpdate(c, 200, {"log_likelihood": torch.tensor([math.nan, -5.0, -9.0], dtype=torch.float64)})
               for c in range(2)]
    method._keep_best_start(updates)
    assert method.best_restart == 1


def test_a_client_below_the_floor_sends_no_total():
    orch = build(restarting(), data_cfg=small_gaussian())
    method, select = orch.method, orch.stages[-1]
    for floor, sends in ((200, True), (201, False)):  # each client holds 200 samples
        ctx = ClientContext(0, select, len(orch.stages) - 1, 0, orch.data.client(0, 32), {}, 3, floor)
        method.on_client_start(ctx)
        assert ("log_likelihood" in method.on_client_end(ctx)) == sends


def test_random_start_draws_uniform_labels_for_each_start_reproducibly():
    def first_assignments(seed):
        orch = build(restarting(init="random", cluster_rounds=1), data_cfg=small_gaussian(p=1.0), seed=seed)
        orch.run()
        return torch.stack([orch.client_states[c]["assignment"] for c in range(2)])  # (clients, R, n)

    first, again, other = first_assignments(3), first_assignments(3), first_assignments(4)
    assert torch.equal(first, again) and not torch.equal(first, other)
    assert not torch.equal(first[:, 0], first[:, 1])  # each start draws its own
    share = first.float().mean()  # p = 1: every client holds one true cluster, so models would give one label
    assert 0.4 < share < 0.6 and 0.3 < first.float().mean(2).min() and first.float().mean(2).max() < 0.7


def test_restarted_runs_repeat_exactly():
    def final(seed):
        orch = build(restarting(init="random"), data_cfg=small_gaussian(p=0.5), seed=seed)
        orch.run()
        return orch.method.best_restart, orch.method.restart_log_likelihood

    (kept, totals), (kept_again, totals_again), (_, other) = final(3), final(3), final(5)
    assert kept == kept_again and torch.equal(totals, totals_again) and not torch.equal(totals, other)


@pytest.mark.parametrize("triangular", [True, False])
def test_stacked_affine_gradient_and_scores_equal_autograd_through_each_flow(triangular):
    torch.manual_seed(0)
    flows = [AffineFlow(5, init_std=0.5, triangular=triangular) for _ in range(3)]
    names = tuple(name for name, _ in flows[0].named_parameters())
    x = 2 * torch.randn(3, 7, 5) + 1
    weights = torch.rand(3, 7)
    weights[1, 3:] = 0  # padding
    weights = weights / weights.sum(1, keepdim=True)
    sum((flow.nll(x[j]) * weights[j]).sum() for j, flow in enumerate(flows)).backward()
    stacked = [torch.stack([getattr(f, n).detach() for f in flows]).requires_grad_() for n in names]
    centred = x - stacked[names.index("bias")].detach()[:, None]
    weighted = centred * weights[..., None]
    loss = AffineBatchNLL.apply(weights.sum(1), weighted.sum(1), weighted.transpose(1, 2) @ centred, names, *stacked)
    expected = sum((flow.nll(x[j]) * weights[j]).sum() for j, flow in enumerate(flows))
    assert torch.allclose(loss, expected.detach(), rtol=1e-5)
    loss.backward()
    for name, tensor in zip(names, stacked):
        assert torch.allclose(tensor.grad, torch.stack([getattr(f, name).grad for f in flows]), atol=1e-4)
    scores = affine_log_probs(dict(zip(names, stacked)), x[0])
    assert torch.allclose(scores, torch.stack([f.log_prob(x[0]) for f in flows]).detach(), atol=1e-4)


def test_the_optimizer_steps_the_flows_own_weights():
    orch = build(restarting(), data_cfg=small_gaussian(p=0.5))
    before = {k: v.clone() for k, v in orch.method.state_dict().items()}
    orch.run()
    moved = [k for k, v in orch.method.state_dict().items() if not torch.equal(v, before[k])]
    assert {k.split(".")[1] for k in moved} == {str(j) for j in range(6)}  # every flow of every start trained


def test_after_restart_rounds_the_kept_start_alone_trains_on(monkeypatch):
    orch = build(restarting(restart_rounds=1, cluster_rounds=3), data_cfg=small_gaussian(p=0.5))
    assert [s.name for s in orch.stages] == ["uifca"]  # chosen during training: no scoring round at the end
    seen = []
    real = UIFCA.aggregation_weights

    def spy(self, ctx):
        weights = real(self, ctx)
        seen.append((ctx.round, self.best_restart, weights))
        return weights

    monkeypatch.setattr(UIFCA, "aggregation_weights", spy)
    orch.run()
    assert orch.method.start_fixed
    for rnd, kept, weights in seen:
        trained = {int(key.split(".")[1]) // 2 for key, n in weights.items() if n}
        assert trained == ({kept} if rnd >= 2 else {0, 1, 2})  # round 1 brings the totals after cluster round 1


@pytest.mark.parametrize("stop_after", [1, 2])  # inside the training stage; between it and the scoring round
def test_restarted_run_resumed_ends_as_the_uninterrupted_one(run_fit, tmp_path, stop_after):
    every_round = FederationConfig(checkpoint_every=1)
    full = run_fit(restarting(), data=small_gaussian(p=0.5), federation=every_round, folder="full", seed=3)
    with interrupted_after_round(stop_after):
        run_fit(restarting(), data=small_gaussian(p=0.5), federation=every_round, folder="cut", seed=3)
    resumed = run_fit(restarting(), data=small_gaussian(p=0.5), federation=every_round, folder="resumed", seed=3,
                      resume=str(tmp_path / "cut"))
    assert resumed == pytest.approx(full, abs=1e-6)
    ends = [load_checkpoint(tmp_path / folder / CHECKPOINT) for folder in ("full", "cut")]  # resumed in place
    assert ends[0]["server"]["best_restart"] == ends[1]["server"]["best_restart"]
    assert all(torch.equal(ends[0]["model"][k], ends[1]["model"][k]) for k in ends[0]["model"])


@pytest.mark.parametrize("k_local", [1, 2])  # k' = the clusters a client holds at p = 1, or K
def test_each_start_takes_its_own_kfed_clusters_as_first_assignment(k_local):
    method = restarting(init="kfed", kfed_k_local=k_local, cluster_rounds=1, communication_rounds=1, local_steps=1)
    orch = build(method, data_cfg=small_gaussian(p=1.0))
    orch.run()
    truth = torch.cat([orch.data.labels[orch.data.parts[c]].cpu() for c in range(2)])
    for start in range(3):
        first = torch.cat([orch.client_states[c]["assignment"][start] for c in range(2)])
        assert len(set(zip(first.tolist(), truth.tolist()))) == 2  # a one-to-one labelling of the two clusters
    assert len(orch.method.client_maps) == 3

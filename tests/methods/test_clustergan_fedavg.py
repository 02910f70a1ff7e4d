import pytest
import torch

from fedclust.contract import DataInfo
from fedclust.errors import ConfigError
from fedclust.federation import orchestrator as orch_module
from fedclust.federation.orchestrator import Orchestrator
from fedclust.methods import ClusterGANFedAvg
from tests.helpers.tiny import build, tiny_clustergan, tiny_mnist28


@pytest.fixture
def data28(tmp_path):
    return tiny_mnist28(tmp_path / "mnist28")


def test_two_clients_one_round_smoke(run_fit, data28, tmp_path):
    metrics = run_fit(tiny_clustergan(), data=data28)
    assert set(metrics) >= {"nmi", "acc", "ari", "kappa"} and 0 <= metrics["nmi"] <= 1
    for name in ("config.yaml", "metrics.csv", "checkpoints/last.ckpt", "assignments.csv"):
        assert (tmp_path / "run" / name).exists(), name


@pytest.mark.parametrize("variant", [dict(gan_loss="vanilla"), dict(optimizer="adam"), dict(assignment="kmeans"),
                                     dict(local_steps=5)])
def test_variants_run_end_to_end(run_fit, data28, variant):
    assert 0 <= run_fit(tiny_clustergan(**variant), data=data28)["nmi"] <= 1


def test_the_server_model_is_the_sample_weighted_mean_of_the_clients_models(data28, monkeypatch):
    sent = []
    real = Orchestrator.train_client

    def spy(self, client_id, ctx, global_state):
        update, state, loss = real(self, client_id, ctx, global_state)
        sent.append((update.num_samples, {k: v.clone() for k, v in state.items()}))
        return update, state, loss

    monkeypatch.setattr(Orchestrator, "train_client", spy)
    orch = build(tiny_clustergan(), data_cfg=data28)
    before = {k: v.clone() for k, v in orch.method.state_dict().items()}
    orch.run()
    (n0, s0), (n1, s1) = sent
    assert n0 + n1 == 50 and s0.keys() == before.keys()  # everything is communicated
    after = orch.method.state_dict()
    for key, value in after.items():
        mean = (n0 * s0[key].double() + n1 * s1[key].double()) / (n0 + n1)
        expected = mean if value.is_floating_point() else mean.round()
        assert torch.allclose(value.double(), expected, atol=1e-6), key
    moved = [k for k in after if k.endswith("weight") and not torch.equal(s0[k], s1[k])]
    assert {p for k in moved for p in ("generator", "discriminator", "encoder") if k.startswith(p)} == {
        "generator", "discriminator", "encoder"}  # all three networks trained on both clients
    assert not torch.equal(before["encoder.head.weight"], after["encoder.head.weight"])


def test_same_seed_same_result_and_client_order_is_irrelevant(data28, monkeypatch):
    first, second = build(tiny_clustergan(), data_cfg=data28), build(tiny_clustergan(), data_cfg=data28)
    first.run()
    second.run()
    for key, value in first.method.state_dict().items():
        assert torch.equal(value, second.method.state_dict()[key]), key
    assert torch.equal(first.predict(), second.predict())
    real = orch_module.participants
    monkeypatch.setattr(orch_module, "participants", lambda *a, **k: (real(*a, **k)[0][::-1], []))
    backward = build(tiny_clustergan(), data_cfg=data28)
    backward.run()
    for key, value in first.method.state_dict().items():
        assert torch.allclose(value.float(), backward.method.state_dict()[key].float(), atol=1e-6), key


def test_generator_and_encoder_step_once_per_n_critic_critic_steps(data28, monkeypatch):
    method = tiny_clustergan(local_steps=7, n_critic=3)
    calls = []
    real = ClusterGANFedAvg.generator_loss
    monkeypatch.setattr(ClusterGANFedAvg, "generator_loss", lambda self, z, ids: calls.append(1) or real(self, z, ids))
    build(method, data_cfg=data28).run()
    assert len(calls) == 2 * 3  # critic steps 1, 4, 7 on each of the two clients


def test_assignment_is_the_argmax_of_the_cluster_logits():
    torch.manual_seed(0)
    method = tiny_clustergan()
    method.build(DataInfo(10, 1, 28, 784, True))
    x = torch.rand(6, 1, 28, 28)
    z_n, logits = method.encoder(x)
    assert torch.equal(method.assign(x), logits.argmax(1))
    emb = method.embed(x)
    assert emb.shape == (6, 4 + 10) and torch.allclose(emb[:, 4:].sum(1), torch.ones(6))
    assert [(s.name, s.rounds, s.local_epochs) for s in ClusterGANFedAvg().stages()] == [("train", 100, 1)]


def test_paper_defaults():
    hp = ClusterGANFedAvg().hparams
    assert (hp.noise_dim, hp.noise_std, hp.beta_n, hp.beta_c, hp.n_critic, hp.batch_size) == (30, 0.1, 10, 10, 5, 64)
    method = ClusterGANFedAvg(channels=4, hidden=16)
    method.build(DataInfo(10, 1, 28, 784, True))
    opt_d, opt_ge = method.configure_optimizers()
    assert isinstance(opt_d, torch.optim.SGD) and opt_d.param_groups[0]["lr"] == 5e-3  # the UIFCA paper
    assert sum(p.numel() for p in opt_ge.param_groups[0]["params"]) == sum(
        p.numel() for p in [*method.generator.parameters(), *method.encoder.parameters()])


def test_non_28x28_data_is_refused_before_any_work(run_fit):
    with pytest.raises(ConfigError, match="data.name.*1x28x28"):
        run_fit(tiny_clustergan())  # the 8x8 digits
    with pytest.raises(ConfigError, match="method.init_args.n_critic"):
        ClusterGANFedAvg(n_critic=0)

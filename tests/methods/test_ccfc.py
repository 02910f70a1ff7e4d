import pytest
import torch

from fedclust.contract import ClientSession, DataInfo
from fedclust.methods import CCFC
from tests.conftest import tiny_ccfc, tiny_data

INFO = DataInfo(num_classes=10, in_channels=1, input_size=8, num_features=64, is_image=True)


def test_two_clients_one_round_per_stage_smoke(run_fit, tmp_path):
    metrics = run_fit(tiny_ccfc())
    assert set(metrics) == {"nmi", "acc", "ari", "kappa", "purity"}
    assert 0 <= metrics["nmi"] <= 1
    for name in ("config.yaml", "metrics.csv", "checkpoints/last.ckpt", "assignments.csv", "partition.txt"):
        assert (tmp_path / "run" / name).exists(), name


@pytest.mark.parametrize("variant", [dict(scfc=True), dict(lam=0.0), dict(exclude_self=True),
                                     dict(backbone="convnet28")])
def test_variants_run_end_to_end(run_fit, variant):
    assert 0 <= run_fit(tiny_ccfc(**variant))["nmi"] <= 1


def cluster_stage_context(method, data):
    from fedclust.contract import ClientContext, Stage

    return ClientContext(0, Stage("cluster", 1), 1, 0, data.client(0, 64), {}, 0)


def test_scfc_keeps_simsiam_in_the_cluster_stage():
    from fedclust.data.config import build_federated_data

    data = build_federated_data(tiny_data(), torch.device("cpu"), 0)
    for scfc, expect_pseudo in ((False, True), (True, False)):
        method = tiny_ccfc(scfc=scfc)
        method.build(data.info)
        method.centroids = torch.randn(10, 16)
        ctx = cluster_stage_context(method, data)
        method.session = ClientSession(ctx)
        method.on_client_start(ctx)
        assert (method._pseudo is not None) == expect_pseudo


def test_standalone_never_moves_the_global_model_and_keeps_a_model_per_client():
    from fedclust.contract import LOCAL_WEIGHTS
    from tests.helpers.tiny import build

    orch = build(tiny_ccfc(standalone=True))
    before = {k: v.clone() for k, v in orch.method.state_dict().items()}
    orch.run()
    assert all(torch.equal(before[k], v) for k, v in orch.method.state_dict().items())
    local = [s[LOCAL_WEIGHTS] for s in orch.client_states.values()]
    assert len(local) == 3 and all("centroids" in s for s in orch.client_states.values())
    key = next(k for k in local[0] if k.endswith("weight"))
    assert not torch.equal(local[0][key], local[1][key])  # each client trained its own model


def test_paper_architecture_for_28x28():
    method = CCFC(latent_dim=64)
    method.build(DataInfo(10, 1, 28, 784, True))
    out = method.encoder(torch.rand(4, 1, 28, 28))
    assert out.shape == (4, 64)
    assert method.encoder[0].out_dim == 2304  # 256 x 3 x 3, REFERENCE.md
    assert method.predictor(out).shape == (4, 64)
    assert [s.rounds for s in method.stages()] == [100, 30]


def test_standalone_communicates_nothing():
    method = tiny_ccfc(standalone=True)
    method.build(INFO)
    assert method.communicated() == []


def test_model_contrastive_term_uses_the_frozen_global_model(monkeypatch):
    # With lam > 0 the loss differs from plain SimSiam by lam * D(p, p_global); with lam = 0 it does not.
    from fedclust.losses import simsiam

    torch.manual_seed(0)
    method = tiny_ccfc(lam=1.0)
    method.build(INFO)
    method.on_round_start(None)
    calls = []
    monkeypatch.setattr("fedclust.methods.families.cluster_contrastive.model_contrastive_loss",
                        lambda p, g: calls.append(1) or simsiam.model_contrastive_loss(p, g))
    method._augment_gen, method._pseudo = torch.Generator().manual_seed(0), None
    method.training_step({"x": torch.rand(8, 1, 8, 8), "index": torch.arange(8)}, 0)
    assert len(calls) == 2  # one per view
    method.hparams.lam = 0.0
    method.training_step({"x": torch.rand(8, 1, 8, 8), "index": torch.arange(8)}, 0)
    assert len(calls) == 2


def test_pseudo_labels_come_from_global_centroids():
    from fedclust.contract import ClientContext, Stage
    from fedclust.data.config import build_federated_data

    data = build_federated_data(tiny_data(), torch.device("cpu"), 0)
    method = tiny_ccfc()
    method.build(data.info)
    method.centroids = torch.eye(16)[:10]
    client = data.client(0, 64)
    ctx = ClientContext(0, Stage("cluster", 1), 1, 0, client, {}, 0)
    method.session = ClientSession(ctx)
    method.on_client_start(ctx)
    with torch.no_grad():
        z = torch.cat([method.embed(x) for x in client.iter_all()])
    assert torch.equal(method._pseudo, z[:, :10].argmax(1))

import math

import pytest
import torch

from fedclust.errors import ConfigError
from fedclust.methods.base import LOCAL_WEIGHTS, ClientContext, DataInfo, Stage
from fedclust.methods.fedu import FedU, FedUKMeans, FedUMCC, divergence
from tests.conftest import tiny_data

INFO = DataInfo(num_classes=10, in_channels=1, input_size=8, num_features=64, is_image=True)
TINY = dict(backbone="mlp", projector_hidden=32, projection_dim=16, predictor_hidden=32, rounds=1, local_epochs=1,
            batch_size=64, crop_scale=(0.5, 1.0))


def test_fedu_kmeans_two_clients_one_round_smoke(run_fit):
    metrics = run_fit(FedUKMeans(**TINY, kmeans_niter=10, kmeans_redo=1))
    assert 0 <= metrics["nmi"] <= 1


def test_fedu_mcc_two_clients_smoke_freezes_the_encoder_in_the_cluster_stage():
    from tests.federation.test_orchestrator import build

    orch = build(FedUMCC(**TINY, cluster_rounds=1, cluster_local_epochs=1, head_hidden=32), tiny_data(num_clients=2))
    assert [s.name for s in orch.stages] == ["byol", "cluster"]
    snapshot = {}
    real = orch.run_round

    def spy(ctx):
        if ctx.stage.name == "cluster":
            snapshot.update({k: v.clone() for k, v in orch.method.state_dict().items()})
        return real(ctx)

    orch.run_round = spy
    orch.run()
    after = orch.method.state_dict()
    for prefix in ("encoder.", "projector.", "predictor."):  # frozen and not averaged in stage 2
        assert all(torch.equal(v, after[k]) for k, v in snapshot.items() if k.startswith(prefix)), prefix
    assert not torch.equal(snapshot["cluster_head.2.weight"], after["cluster_head.2.weight"])
    local = [orch.client_states[c][LOCAL_WEIGHTS] for c in (0, 1)]
    assert not torch.equal(local[0]["target_encoder.net.1.weight"], local[1]["target_encoder.net.1.weight"])
    assert not any(k.startswith("target_") for k in orch.communicated)


def test_divergence_is_the_mean_l2_distance_of_the_compared_weights():
    a = {"w1": torch.zeros(2, 2), "w2": torch.zeros(3)}
    b = {"w1": torch.full((2, 2), 1.0), "w2": torch.tensor([3.0, 4.0, 0.0])}
    assert divergence(a, b) == pytest.approx((2.0 + 5.0) / 2)  # ||1_{2x2}|| = 2, ||(3, 4, 0)|| = 5


@pytest.mark.parametrize("shift, takes_global", [(0.01, True), (1.0, False)])
def test_divergence_aware_predictor_update(shift, takes_global):
    from fedclust.data.config import build_federated_data

    torch.manual_seed(0)
    method = FedU(**TINY)
    method.build(INFO)
    data = build_federated_data(tiny_data(), torch.device("cpu"), 0)
    weights = method.state_dict()
    # the client's own model of its last round: the global encoder shifted by `shift` per weight tensor
    own = {k: weights[k] + shift / math.sqrt(weights[k].numel()) for k in method._dapu_keys}
    own_predictor = {k: v + 1.0 if v.is_floating_point() else v for k, v in method.predictor.state_dict().items()}
    state = {"own_encoder": own, "own_predictor": own_predictor}
    ctx = ClientContext(0, Stage("byol", 1), 0, 0, data.client(0, 64), state, 0)
    global_predictor = {k: v.clone() for k, v in method.predictor.state_dict().items()}
    method.on_client_start(ctx)
    assert state["divergence"] == pytest.approx(shift, rel=1e-4)
    assert state["global_predictor"] is takes_global  # threshold 0.4
    expected = global_predictor if takes_global else own_predictor
    assert all(torch.equal(v, expected[k]) for k, v in method.predictor.state_dict().items())


def test_first_round_takes_the_global_predictor_and_clients_remember_their_model(run_fit):
    from tests.federation.test_orchestrator import build

    orch = build(FedU(**{**TINY, "rounds": 2}), tiny_data(num_clients=2))
    orch.method.assign = lambda x: torch.zeros(len(x), dtype=torch.long)  # FedU alone does not cluster
    orch.run()
    state = orch.client_states[0]
    assert not math.isnan(state["divergence"])  # round 2 compared the client's round-1 model
    assert set(state["own_encoder"]) == set(orch.method._dapu_keys)


def test_cosine_learning_rate_and_bad_options():
    from fedclust.data.config import build_federated_data

    method = FedU(**{**TINY, "rounds": 4})
    method.build(INFO)
    data = build_federated_data(tiny_data(), torch.device("cpu"), 0)
    method.on_client_start(ClientContext(0, Stage("byol", 4), 0, 2, data.client(0, 64), {}, 0))
    assert method._lr == pytest.approx(0.032 * 0.5)  # round 2 of 4: half way down the cosine
    with pytest.raises(ConfigError, match="method.divergence_threshold"):
        FedU(divergence_threshold=-1.0)
    with pytest.raises(ConfigError, match="method.optimizer"):
        FedU(optimizer="lamb")
    with pytest.raises(ConfigError, match="method.class_path"):
        method.validate(INFO, 2)  # FedU alone does not cluster
    FedUKMeans(**TINY).validate(INFO, 2)


def test_kmeans_is_fitted_once_per_global_encoder_so_scores_and_assignments_agree():
    from tests.federation.test_orchestrator import build

    orch = build(FedUKMeans(**TINY, kmeans_niter=10, kmeans_redo=1), tiny_data(num_clients=2))
    orch.run()
    centroids = orch.method.centroids.clone()
    first, second = orch.predict(), orch.predict()
    assert torch.equal(first, second) and torch.equal(orch.method.centroids, centroids)
    state = orch.method.server_state()
    fresh = FedUKMeans(**TINY)
    fresh.build(INFO)
    fresh.load_server_state(state)  # a saved run re-scored keeps its centroids
    assert torch.equal(fresh.centroids, centroids)

import math

import pytest
import torch

from fedclust.contract import LOCAL_WEIGHTS, ClientContext, ClientSession, DataInfo, Stage
from fedclust.errors import ConfigError
from fedclust.methods import FedUKMeans, FedUMCC
from fedclust.methods.families.dapu import divergence, divergence_weights
from fedclust.methods.families.fedu import FedU
from tests.conftest import tiny_data
from tests.helpers.tiny import FEDU_TINY as TINY

INFO = DataInfo(num_classes=10, in_channels=1, input_size=8, num_features=64, is_image=True)


def test_fedu_kmeans_two_clients_one_round_smoke(run_fit):
    metrics = run_fit(FedUKMeans(**TINY, kmeans_niter=10, kmeans_redo=1))
    assert 0 <= metrics["nmi"] <= 1


def test_fedu_mcc_two_clients_smoke_freezes_the_encoder_in_the_cluster_stage():
    from tests.helpers.tiny import build

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


def client_ctx(state, round_=0, stage="byol"):
    from fedclust.data.config import build_federated_data

    data = build_federated_data(tiny_data(), torch.device("cpu"), 0)
    return ClientContext(0, Stage(stage, 2), 0 if stage == "byol" else 1, round_, data.client(0, 64), state, 0)


@pytest.mark.parametrize("shift, takes_global", [(0.01, True), (1.0, False)])
def test_dapu_measures_how_far_local_training_moved_the_encoder_and_decides_the_next_round(shift, takes_global):
    """EasyFL's DAPU (fedssl client.py): d = mean over the encoder's conv (here: Linear) weights of
    ||w_end - w_start|| after local training, vs 0.4; the client's NEXT round starts from its own predictor
    when d >= 0.4. (Before, d compared last round's local encoder with the next global one.)"""
    torch.manual_seed(0)
    method = FedU(**TINY)
    method.build(INFO)
    global_weights = {k: v.clone() for k, v in method.state_dict().items()}
    state: dict = {}
    method.on_client_start(client_ctx(state, 0))
    assert state["global_predictor"] is True and "divergence" not in state  # round 1: the global predictor
    with torch.no_grad():  # "local training": every compared weight moves by `shift` in L2 norm
        for k in method._dapu_keys:
            method.state_dict()[k].add_(shift / math.sqrt(method.state_dict()[k].numel()))
        for p in method.predictor.parameters():
            p.add_(1.0)
    trained_predictor = {k: v.clone() for k, v in method.predictor.state_dict().items()}
    method.on_client_end(client_ctx(state, 0))
    assert state["divergence"] == pytest.approx(shift, rel=1e-4)
    assert state["global_predictor"] is takes_global
    assert ("own_predictor" in state) is not takes_global  # kept only when the next round needs it

    method.load_state_dict(global_weights)  # the next round's global model
    method.on_client_start(client_ctx(state, 1))
    expected = global_weights if takes_global else {f"predictor.{k}": v for k, v in trained_predictor.items()}
    assert all(torch.equal(v, expected[f"predictor.{k}"]) for k, v in method.predictor.state_dict().items())


def test_dapu_compares_the_conv_weights_easyfl_names_conv():
    """EasyFL sums over parameters named "conv" and "weight": a ResNet's shortcut convolutions (EasyFL:
    shortcut.0, torchvision: downsample.0) are left out; 17 of ResNet-18's 20 convolutions."""
    from fedclust.nn.backbones import build_backbone

    names = divergence_weights(build_backbone("resnet18_cifar", 3, 32))
    assert len(names) == 17 and all("conv" in n for n in names) and not any("downsample" in n for n in names)
    assert divergence_weights(build_backbone("convnet28", 1, 28)) == ["net.0.weight", "net.3.weight", "net.6.weight"]


def test_clients_remember_what_the_next_round_needs():
    from tests.helpers.tiny import build

    class FedUAlone(FedU):  # FedU is a family, not a method: it does not cluster
        def assign(self, x):
            return torch.zeros(len(x), dtype=torch.long)

    orch = build(FedUAlone(**{**TINY, "rounds": 2}), tiny_data(num_clients=2))
    orch.run()
    state = orch.client_states[0]
    assert not math.isnan(state["divergence"]) and isinstance(state["global_predictor"], bool)
    assert "own_encoder" not in state  # EasyFL keeps no encoder copy between rounds


def test_views_are_easyfls_simclr_transform_with_s_1():
    """EasyFL's BYOL views: ColorJitter(0.8, 0.8, 0.8, 0.2) (s = 1), twice CC's CIFAR strength used before."""
    method = FedU(**TINY)
    method.build(INFO)
    v = method.views
    assert (v.brightness, v.contrast, v.saturation, v.hue, v.jitter_p, v.gray_p) == (0.8, 0.8, 0.8, 0.2, 0.8, 0.2)
    assert v.blur_p == 0 and v.scale == (0.5, 1.0)
    with pytest.raises(ConfigError, match="method.init_args.color_strength"):
        FedU(color_strength=2.0)


def test_fedu_mcc_cluster_stage_trains_g_c_with_fedmccs_adam():
    """FedMCC's stage 2 optimizer is Adam 3e-4 (Section IV-A); FedU + MCC used to keep FedU's SGD."""
    torch.manual_seed(0)
    method = FedUMCC(**TINY, cluster_rounds=1, cluster_local_epochs=1, head_hidden=32)
    method.build(INFO)
    byol, cluster = method.configure_optimizers()
    assert isinstance(byol, torch.optim.SGD) and isinstance(cluster, torch.optim.Adam)
    head = {id(p) for p in method.cluster_head.parameters()}
    assert {id(p) for g in cluster.param_groups for p in g["params"]} == head
    assert not head & {id(p) for g in byol.param_groups for p in g["params"]}
    ctx = client_ctx({}, 0, stage="cluster")
    method.session = ClientSession(ctx, [byol, cluster])  # as the engine lends it while a client trains
    method.on_client_start(ctx)
    assert method._lr == pytest.approx(3e-4)
    before = [p.clone() for p in method.cluster_head.parameters()]
    method.training_step(next(iter(ctx.data.batches(torch.Generator().manual_seed(0)))), 0)
    method.session = None
    assert cluster.state and not byol.state and cluster.param_groups[0]["lr"] == pytest.approx(3e-4)
    assert not all(torch.equal(a, b) for a, b in zip(before, method.cluster_head.parameters()))
    old = FedUMCC(**TINY, cluster_optimizer="sgd")
    old.build(INFO)
    assert isinstance(old.configure_optimizers()[1], torch.optim.SGD)
    with pytest.raises(ConfigError, match="method.init_args.cluster_optimizer"):
        FedUMCC(**TINY, cluster_optimizer="lamb")


def test_cosine_learning_rate_and_bad_options():
    from fedclust.data.config import build_federated_data

    method = FedU(**{**TINY, "rounds": 4})
    method.build(INFO)
    data = build_federated_data(tiny_data(), torch.device("cpu"), 0)
    method.on_client_start(ClientContext(0, Stage("byol", 4), 0, 2, data.client(0, 64), {}, 0))
    assert method._lr == pytest.approx(0.032 * 0.5)  # round 2 of 4: half way down the cosine
    with pytest.raises(ConfigError, match="method.init_args.divergence_threshold"):
        FedU(divergence_threshold=-1.0)
    with pytest.raises(ConfigError, match="method.init_args.optimizer"):
        FedU(optimizer="lamb")
    with pytest.raises(ConfigError, match="method.class_path"):
        method.validate(INFO, 2)  # FedU alone does not cluster
    FedUKMeans(**TINY).validate(INFO, 2)


def test_kmeans_is_fitted_once_per_global_encoder_so_scores_and_assignments_agree():
    from tests.helpers.tiny import build

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

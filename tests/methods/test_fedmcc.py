from pathlib import Path

import pytest
import torch
from torch import nn

from fedclust.contract import LOCAL_WEIGHTS, ClientContext, ClientSession, DataInfo, Stage
from fedclust.errors import ConfigError
from fedclust.methods import FedMCC
from fedclust.nn.ema import ema_update
from tests.conftest import tiny_data
from tests.helpers.tiny import tiny_fedmcc

INFO = DataInfo(num_classes=10, in_channels=1, input_size=8, num_features=64, is_image=True)




def test_two_clients_one_round_per_stage_smoke_and_what_reaches_the_server(run_fit, server_inputs):
    metrics = run_fit(tiny_fedmcc())
    assert 0 <= metrics["nmi"] <= 1 and 0 <= metrics["acc"] <= 1
    sent = {stage: set(averaged) for stage, averaged, _ in server_inputs}
    assert not any(k.startswith("target_") for keys in sent.values() for k in keys)  # targets never leave
    assert sent["cluster"] and all(k.startswith("cluster_head.") for k in sent["cluster"])  # Algorithm 2: g_C
    assert not any(k.startswith("cluster_head.") for k in sent["representation"])  # Algorithm 1: f and g_I
    assert all(not u.payload for _, _, updates in server_inputs for u in updates)  # weights only, no samples


def test_targets_stay_on_each_client_and_differ_after_a_round():
    from tests.helpers.tiny import build

    orch = build(tiny_fedmcc(), tiny_data(num_clients=2))
    assert not any(k.startswith("target_") for k in orch.communicated)
    before = {k: v.clone() for k, v in orch.method.state_dict().items()}
    orch.run()
    local = [orch.client_states[c][LOCAL_WEIGHTS] for c in (0, 1)]
    key = "target_encoder.net.1.weight"
    assert not torch.equal(local[0][key], local[1][key])  # each client's own EMA, never averaged
    assert torch.equal(orch.method.state_dict()[key], before[key])  # the server's copy never moved
    # stage 1 left g_C out of the average, stage 2 left the encoder out: the encoder is what stage 1 made
    assert not torch.equal(orch.method.state_dict()["encoder.net.1.weight"], before["encoder.net.1.weight"])


def test_ema_update_is_m_target_plus_one_minus_m_online():
    target, online = nn.Linear(3, 2), nn.Linear(3, 2)
    expected = [0.99 * t.detach() + 0.01 * o.detach() for t, o in zip(target.parameters(), online.parameters())]
    ema_update(target, online, 0.99)
    for t, e in zip(target.parameters(), expected):
        assert torch.allclose(t, e)


def one_client(method, stage: str, data=None):
    from fedclust.data.config import build_federated_data

    data = data or build_federated_data(tiny_data(), torch.device("cpu"), 0)
    ctx = ClientContext(0, Stage(stage, 1), 1 if stage == "cluster" else 0, 0, data.client(0, 64), {}, 0)
    method.session = ClientSession(ctx)  # as the engine lends it while a client trains
    method.on_client_start(ctx)
    return ctx, next(iter(ctx.data.batches(torch.Generator().manual_seed(0))))


def step_with_engine_optimizer(method, batch):
    optimizer = method.configure_optimizers()
    method.session.optimizers = [optimizer]
    try:
        return method.training_step(batch, 0)
    finally:
        method.session.optimizers = []


def test_representation_step_moves_the_target_by_ema_of_the_new_online_weights():
    torch.manual_seed(0)
    method = tiny_fedmcc()
    method.build(INFO)
    method.train()
    _, batch = one_client(method, "representation")
    old_target = [p.clone() for p in method.target_instance_head.parameters()]
    head_before = [p.clone() for p in method.cluster_head.parameters()]
    step_with_engine_optimizer(method, batch)
    for t_old, t_new, o in zip(old_target, method.target_instance_head.parameters(), method.instance_head.parameters()):
        assert torch.allclose(t_new, 0.99 * t_old + 0.01 * o.detach(), atol=1e-6)
    assert all(torch.equal(a, b) for a, b in zip(head_before, method.cluster_head.parameters()))  # g_C idle


def test_cluster_stage_freezes_the_encoders_and_trains_the_cluster_projector():
    torch.manual_seed(0)
    method = tiny_fedmcc()
    method.build(INFO)
    method.train()
    _, batch = one_client(method, "cluster")
    frozen = {k: v.clone() for k, v in method.state_dict().items() if k.startswith(("encoder.", "instance_head.",
                                                                                     "target_encoder."))}
    head_before = [p.clone() for p in method.cluster_head.parameters()]
    step_with_engine_optimizer(method, batch)
    state = method.state_dict()
    assert all(torch.equal(v, state[k]) for k, v in frozen.items())  # weights and BN statistics
    assert not all(torch.equal(a, b) for a, b in zip(head_before, method.cluster_head.parameters()))
    weights = method.aggregation_weights(method.ctx)  # stage 2 communicates g_C only (g_C^T with average_target)
    assert weights == dict.fromkeys(("encoder.", "instance_head.", "target_encoder.", "target_instance_head."), 0.0)


@pytest.mark.parametrize("choice", ["own", "global"])
def test_cluster_target_encoder_picks_what_the_target_path_of_eq_9_encodes_with(choice):
    torch.manual_seed(0)
    method = tiny_fedmcc(cluster_target_encoder=choice)
    method.build(INFO)
    method.train()
    _, batch = one_client(method, "cluster")
    seen = {"encoder": 0, "target_encoder": 0}
    for name in seen:
        getattr(method, name).register_forward_hook(lambda *_, name=name: seen.__setitem__(name, seen[name] + 1))
    step_with_engine_optimizer(method, batch)
    # the online path encodes both views with f*; the target path with f_k^T ("own") or with f* too ("global")
    assert seen == ({"encoder": 2, "target_encoder": 2} if choice == "own" else {"encoder": 4, "target_encoder": 0})


@pytest.mark.parametrize("cluster_ema_decay", [None, 0.0, 0.5])
def test_cluster_ema_decay_sets_how_fast_the_cluster_target_follows(cluster_ema_decay):
    torch.manual_seed(0)
    method = tiny_fedmcc(ema_decay=0.9, cluster_ema_decay=cluster_ema_decay)
    method.build(INFO)
    method.train()
    _, batch = one_client(method, "cluster")
    target_before = [p.clone() for p in method.target_cluster_head.parameters()]
    step_with_engine_optimizer(method, batch)
    m = 0.9 if cluster_ema_decay is None else cluster_ema_decay  # None: the paper's one m for every target
    for before, target, online in zip(target_before, method.target_cluster_head.parameters(),
                                      method.cluster_head.parameters()):
        torch.testing.assert_close(target, m * before + (1 - m) * online)


def test_cluster_loss_is_equation_9():
    from fedclust.losses.contrastive import cluster_entropy, nt_xent

    method = tiny_fedmcc()
    c = [torch.softmax(torch.randn(6, 4), 1) for _ in range(4)]
    expected = 0.5 * (nt_xent(c[0].T, c[3].T, 1.0) + nt_xent(c[2].T, c[1].T, 1.0)) + sum(map(cluster_entropy, c))
    assert method.cluster_loss(*c).item() == pytest.approx(expected.item())
    z = [torch.randn(6, 5) for _ in range(4)]
    expected = 0.5 * (nt_xent(z[0], z[3], 0.5) + nt_xent(z[2], z[1], 0.5))
    assert method.instance_loss(*z).item() == pytest.approx(expected.item())


@pytest.mark.parametrize("weight", [0.0, 0.5])
def test_entropy_weight_scales_equation_9s_entropy_terms_only(weight):
    from fedclust.losses.contrastive import cluster_entropy, nt_xent

    c = [torch.softmax(torch.randn(6, 4), 1) for _ in range(4)]
    contrast = 0.5 * (nt_xent(c[0].T, c[3].T, 1.0) + nt_xent(c[2].T, c[1].T, 1.0))
    expected = contrast + weight * sum(map(cluster_entropy, c))
    assert tiny_fedmcc(entropy_weight=weight).cluster_loss(*c).item() == pytest.approx(expected.item())


def bn_free(method):
    """Swap the BatchNorm encoders for per-sample ones: chunked gradients must then equal the ordinary ones."""
    torch.manual_seed(1)
    net = nn.Sequential(nn.Flatten(), nn.Linear(64, 512), nn.ReLU())
    net.out_dim = 512
    method.encoder = net
    method.target_encoder = nn.Sequential(nn.Flatten(), nn.Linear(64, 512), nn.ReLU()).requires_grad_(False)
    method.target_encoder.load_state_dict(net.state_dict())


def gradients_of_one_step(stage: str, chunk: int | None) -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    method = tiny_fedmcc(memory_efficient_chunk=chunk, head_hidden=32)
    method.build(DataInfo(10, 1, 8, 64, True))
    bn_free(method)
    method.train()
    _, batch = one_client(method, stage)
    seen = {}
    optimizer = torch.optim.SGD(method.online_parameters(), lr=0.0)  # lr 0: keep the weights, read .grad
    real_step = optimizer.step

    def step():
        seen.update({n: p.grad.clone() for n, p in method.named_parameters() if p.grad is not None})
        real_step()

    optimizer.step = step
    method.session.optimizers = [optimizer]
    method.training_step(batch, 0)
    return seen


@pytest.mark.parametrize("stage", ["representation", "cluster"])
def test_memory_efficient_chunks_give_the_ordinary_gradients_without_batchnorm(stage):
    # Exact only for per-sample networks: the MLP backbone's BatchNorm is swapped out (bn_free); with
    # BatchNorm in training mode each chunk would be normalised by its own statistics.
    ordinary, chunked = gradients_of_one_step(stage, None), gradients_of_one_step(stage, 7)
    assert ordinary.keys() == chunked.keys() and ordinary
    for name, g in ordinary.items():
        assert torch.allclose(g, chunked[name], atol=1e-5), name


def test_bad_options_name_the_field():
    with pytest.raises(ConfigError, match="method.init_args.ema_decay"):
        FedMCC(ema_decay=1.0)
    with pytest.raises(ConfigError, match="method.init_args.cluster_ema_decay"):
        FedMCC(cluster_ema_decay=1.0)
    with pytest.raises(ConfigError, match="method.init_args.entropy_weight"):
        FedMCC(entropy_weight=-1.0)
    with pytest.raises(ConfigError, match="method.init_args.memory_efficient_chunk"):
        FedMCC(memory_efficient_chunk=0)
    with pytest.raises(ConfigError, match="method.init_args.augment"):
        tiny_fedmcc(augment="jitter").build(INFO)
    with pytest.raises(ConfigError, match="data.name"):
        FedMCC().validate(DataInfo(3, 0, 0, 5, False), 2)


def test_average_target_is_table_vii_update_both(run_fit, server_inputs):
    """Table VII ("Update Both"): the targets are averaged too, each in its online twin's stage: f^T and g_I^T
    in stage 1, g_C^T in stage 2. Before, the targets could only stay on the clients."""
    run_fit(tiny_fedmcc(average_target=True))
    sent = {stage: set(averaged) for stage, averaged, _ in server_inputs}
    prefixes = {stage: {k.split(".")[0] for k in keys} for stage, keys in sent.items()}
    assert prefixes["representation"] == {"encoder", "instance_head", "target_encoder", "target_instance_head"}
    assert prefixes["cluster"] == {"cluster_head", "target_cluster_head"}


def test_views_follow_ccs_code_per_data_set():
    """CC's code: jitter s = 0.5 for CIFAR (default), s = 1 for STL-10 and ImageNet-10, plus a Gaussian blur
    (p 0.5) for ImageNet-10; FedMCC's STL-10 / ImageNet-10 configs used CC's CIFAR views before."""
    import yaml

    cifar = tiny_fedmcc()
    cifar.build(INFO)
    assert (cifar.views.brightness, cifar.views.hue, cifar.views.blur_p) == (0.4, 0.1, 0.0)
    strong = tiny_fedmcc(color_strength=1.0, blur=True)
    strong.build(INFO)
    assert (strong.views.brightness, strong.views.hue, strong.views.blur_p) == (0.8, 0.2, 0.5)
    root = Path(__file__).parents[2] / "configs"
    checked = 0
    for data_set, blur in (("stl10", False), ("imagenet10", True)):
        for path in sorted(root.glob(f"*_{data_set}_*.yaml")):
            if path.name.startswith(("fedmcc_", "fedu_")):
                args = yaml.safe_load(path.read_text())["method"]["init_args"]
                assert args["color_strength"] == 1.0 and args.get("blur", False) is blur, path.name
                checked += 1
    assert checked == 12  # FedMCC, FedU + K-means, FedU + MCC x IID, non-IID x STL-10, ImageNet-10

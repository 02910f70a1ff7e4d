import math

import pytest
import torch

from fedclust.contract import ClientContext, Stage
from fedclust.errors import ConfigError
from fedclust.losses.contrastive import cluster_contrastive_loss, instance_contrastive_loss
from fedclust.methods import FedPNP
from fedclust.methods.fedpnp import PAST, gaussian_similarity, pnp_contrastive_loss, pnp_pool
from tests.conftest import tiny_data
from tests.helpers.tiny import INFO
from tests.helpers.tiny import tiny_cc_family as tiny


def loop_pnp(u: torch.Tensor, v: torch.Tensor, pool: torch.Tensor, tau: float) -> float:
    """Eq. (5) anchor by anchor: anchor u_i (then v_i), positive the other view of i, negatives u_j and v_j
    for j in pool[i]; the positive is kept in the denominator."""
    u, v = [r / r.norm() for r in u], [r / r.norm() for r in v]
    n, total = len(u), 0.0
    for anchors, others in ((u, v), (v, u)):
        for i in range(n):
            def e(a, b):
                return math.exp(float(a @ b) / tau)
            pos = e(anchors[i], others[i])
            neg = sum(e(anchors[i], u[j]) + e(anchors[i], v[j]) for j in range(n) if pool[i, j])
            total += -math.log(pos / (pos + neg))
    return total / (2 * n)


def test_gaussian_similarity_by_hand():
    y = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.5, 0.5]])
    s = gaussian_similarity(y)
    assert s[0, 1].item() == pytest.approx(math.exp(-2.0))
    assert s[0, 2].item() == pytest.approx(math.exp(-0.5))
    assert torch.allclose(s.diagonal(), torch.ones(3))


def test_pool_threshold_needs_both_views_and_excludes_self():
    base = torch.tensor([[0.9, 0.1], [0.9, 0.1], [0.1, 0.9], [0.9, 0.1]])
    y_a = base.clone()
    y_a[1] += torch.tensor([0.0158, -0.0158])  # ||.||^2 = 5e-4: s = 0.9995 >= 0.999, a potential positive
    y_a[3] += torch.tensor([0.0316, -0.0316])  # ||.||^2 = 2e-3: s = 0.998 < 0.999, far enough in view a
    y_b = base.clone()  # ... but identical to row 0 in view b: sample 3 is not a negative of sample 0
    pool = pnp_pool(y_a, y_b, 0.999)
    assert not pool.diagonal().any()
    assert pool[0].tolist() == [False, False, True, False]
    assert torch.equal(pool, pool.T)
    y_b[3] += torch.tensor([0.0316, -0.0316])  # now far in both views
    assert pnp_pool(y_a, y_b, 0.999)[0].tolist() == [False, False, True, True]


def test_pnp_loss_matches_the_explicit_loop():
    torch.manual_seed(0)
    u, v = torch.randn(5, 4), torch.randn(5, 4)
    pool = torch.rand(5, 5) < 0.5
    pool = (pool | pool.T) & ~torch.eye(5, dtype=torch.bool)
    pool[2] = False  # an anchor with an empty pool: its term is log 1 = 0
    pool[:, 2] = False
    assert pnp_contrastive_loss(u, v, pool, 0.5).item() == pytest.approx(loop_pnp(u, v, pool, 0.5), rel=1e-5)


def test_full_pool_is_cc_instance_loss():
    torch.manual_seed(1)
    u, v = torch.randn(6, 4), torch.randn(6, 4)
    full = ~torch.eye(6, dtype=torch.bool)
    assert pnp_contrastive_loss(u, v, full, 0.5).item() == pytest.approx(
        instance_contrastive_loss(u, v, 0.5).item(), rel=1e-6)


def client_context(method, round_, state, data=None):
    from fedclust.data.config import build_federated_data

    data = data or build_federated_data(tiny_data(), torch.device("cpu"), 0)
    return ClientContext(0, Stage("train", 3, 1), 0, round_, data.client(0, 64), state, 0)


def test_alpha_is_two_in_round_one_then_point_one():
    method = tiny(FedPNP)
    method.build(INFO)
    method.on_client_start(client_context(method, 0, {}))
    assert method._alpha == 2.0
    method.on_client_start(client_context(method, 1, {}))
    assert method._alpha == 0.1  # a client with no past model yet still uses the later alpha


def test_round_one_pool_comes_from_the_current_soft_labels():
    torch.manual_seed(0)
    method = tiny(FedPNP)
    method.build(INFO)
    method.on_client_start(client_context(method, 0, {}))
    method.before_loss(torch.rand(8, 1, 8, 8), torch.rand(8, 1, 8, 8))
    assert method._past_soft is None
    z_a, z_b = torch.randn(8, 5), torch.randn(8, 5)
    c_a = torch.softmax(3 * torch.randn(8, 4), 1)
    c_b = torch.softmax(3 * torch.randn(8, 4), 1)
    pool = pnp_pool(c_a, c_b, 0.999)
    expected = pnp_contrastive_loss(z_a, z_b, pool, 0.5) + 2.0 * cluster_contrastive_loss(c_a, c_b, 1.0)
    assert method.batch_loss(z_a, c_a, z_b, c_b).item() == pytest.approx(expected.item(), rel=1e-6)


def test_past_model_is_the_clients_own_last_local_model_on_cpu(monkeypatch):
    torch.manual_seed(0)
    method = tiny(FedPNP)
    method.build(INFO)
    state: dict = {}
    method.on_client_end(client_context(method, 0, state))
    saved = state[PAST]
    assert all(v.device.type == "cpu" for v in saved.values())
    n_backbone_cluster = sum(k.startswith(("backbone.", "cluster_head.")) for k in method.state_dict())
    assert len(saved) == n_backbone_cluster  # the instance head is not kept
    local_net = [method.backbone, method.cluster_head]
    x_a, x_b = torch.rand(8, 1, 8, 8), torch.rand(8, 1, 8, 8)
    with torch.no_grad():
        method.eval()
        expected = (local_net[1](local_net[0](x_a)), local_net[1](local_net[0](x_b)))
        for p in method.parameters():  # the server's aggregate replaces the working model
            p.add_(torch.randn_like(p))
    method.train()
    method.on_client_start(client_context(method, 1, state))
    method.before_loss(x_a, x_b)
    assert torch.allclose(method._past_soft[0], expected[0]) and torch.allclose(method._past_soft[1], expected[1])
    seen = {}

    def spy(y_a, y_b, threshold):
        seen["y"] = (y_a, y_b, threshold)
        return pnp_pool(y_a, y_b, threshold)

    monkeypatch.setattr("fedclust.methods.fedpnp.pnp_pool", spy)
    c = torch.softmax(torch.randn(8, 10), 1)
    method.batch_loss(torch.randn(8, 5), c, torch.randn(8, 5), c)
    assert seen["y"][0] is method._past_soft[0] and seen["y"][2] == 0.999


def test_past_cluster_loss_option_adds_the_past_current_cluster_contrast():
    torch.manual_seed(0)
    z_a, z_b = torch.randn(8, 5), torch.randn(8, 5)
    c_a, c_b = torch.softmax(torch.randn(8, 4), 1), torch.softmax(torch.randn(8, 4), 1)
    past = (torch.softmax(torch.randn(8, 4), 1), torch.softmax(torch.randn(8, 4), 1))
    losses = {}
    for flag in (False, True):
        method = tiny(FedPNP, past_cluster_loss=flag)
        method._past_soft, method._alpha = past, 0.1
        losses[flag] = method.batch_loss(z_a, c_a, z_b, c_b).item()
    from fedclust.losses.contrastive import nt_xent

    extra = 0.5 * (nt_xent(c_a.T, past[1].T, 1.0) + nt_xent(c_b.T, past[0].T, 1.0)).item()
    assert losses[True] - losses[False] == pytest.approx(0.1 * extra, rel=1e-5)


def test_two_clients_two_rounds_smoke_keeps_a_past_model_per_client(run_fit, tmp_path):
    metrics = run_fit(tiny(FedPNP, rounds=2))
    assert 0 <= metrics["nmi"] <= 1
    state = torch.load(tmp_path / "run" / "checkpoints" / "last.ckpt", weights_only=False)
    assert all(PAST in s for s in state["clients"].values())


@pytest.mark.parametrize(("option", "value"), [("pool_threshold", 0.0), ("pool_threshold", 1.5), ("alpha", -1.0)])
def test_bad_pool_options(option, value):
    with pytest.raises(ConfigError, match=f"method.init_args.{option}"):
        tiny(FedPNP, **{option: value})


def test_result_does_not_depend_on_client_order(monkeypatch):
    from fedclust.federation import orchestrator as orch_module
    from tests.helpers.tiny import build

    forward = build(tiny(FedPNP, rounds=2))
    forward.run()
    real = orch_module.participants
    monkeypatch.setattr(orch_module, "participants", lambda *a, **k: (real(*a, **k)[0][::-1], []))
    backward = build(tiny(FedPNP, rounds=2))
    backward.run()
    for key, value in forward.method.state_dict().items():
        assert torch.allclose(value.float(), backward.method.state_dict()[key].float(), atol=1e-5), key

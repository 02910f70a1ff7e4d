import copy
import math

import pytest
import torch
from torch import nn

from fedclust.contract import ClientSession, DataInfo
from fedclust.errors import ConfigError
from fedclust.methods import FedCC, FedPNP
from tests.helpers.tiny import INFO
from tests.helpers.tiny import tiny_cc_family as tiny


def loop_nt_xent(a: torch.Tensor, b: torch.Tensor, tau: float) -> float:
    """NT-Xent written out anchor by anchor: -log(e(i, pos) / sum_{k != i} e(i, k)), mean over 2n anchors."""
    z = [row / row.norm() for row in torch.cat([a, b])]
    n, total = len(a), 0.0
    for i in range(2 * n):
        pos = (i + n) % (2 * n)
        den = sum(math.exp(float(z[i] @ z[k]) / tau) for k in range(2 * n) if k != i)
        total += -math.log(math.exp(float(z[i] @ z[pos]) / tau) / den)
    return total / (2 * n)


def loop_entropy(c: torch.Tensor) -> float:
    p = (c.sum(0) / c.sum()).tolist()
    return math.log(len(p)) + sum(q * math.log(q) for q in p)


def test_two_clients_one_round_smoke(run_fit):
    metrics = run_fit(tiny())
    assert set(metrics) == {"nmi", "acc", "ari", "kappa", "purity"}
    assert 0 <= metrics["nmi"] <= 1


def test_cc_network_heads_are_batchnorm_free_and_everything_is_communicated():
    method = tiny()
    method.build(INFO)
    for head in (method.instance_head, method.cluster_head):
        assert not any(isinstance(m, nn.BatchNorm1d) for m in head.modules())
    h = method.backbone(torch.rand(5, 1, 8, 8))
    assert method.instance_head(h).shape == (5, 128)
    c = method.cluster_head(h)
    assert c.shape == (5, 10) and torch.allclose(c.sum(1), torch.ones(5))
    assert method.communicated() == list(method.state_dict())  # FedAvg of every weight and BN buffer
    assert [(s.name, s.rounds, s.local_epochs) for s in FedCC().stages()] == [("train", 100, 5)]


def test_loss_is_cc_instance_plus_cluster_plus_entropy_by_hand():
    torch.manual_seed(0)
    method = tiny()
    z_a, z_b = torch.randn(4, 3), torch.randn(4, 3)
    c_a, c_b = torch.softmax(torch.randn(4, 3), 1), torch.softmax(torch.randn(4, 3), 1)
    expected = (loop_nt_xent(z_a, z_b, 0.5) + loop_nt_xent(c_a.T, c_b.T, 1.0)
                + loop_entropy(c_a) + loop_entropy(c_b))
    assert method.batch_loss(z_a, c_a, z_b, c_b).item() == pytest.approx(expected, rel=1e-5)


def test_assign_is_the_cluster_head_argmax_and_embed_the_backbone():
    torch.manual_seed(0)
    method = tiny()
    method.build(INFO)
    method.eval()
    x = torch.rand(6, 1, 8, 8)
    with torch.no_grad():
        h = method.backbone(x)
        assert torch.equal(method.embed(x), h)
        assert torch.equal(method.assign(x), method.cluster_head(h).argmax(1))


def grads_after_one_step(method, x: torch.Tensor, train: bool) -> dict[str, torch.Tensor]:
    """Gradients of one training_step; an SGD step of lr 0 lets the chunked path step without moving."""
    method.train(train)
    method._augment_gen = torch.Generator().manual_seed(1)
    optimizer = torch.optim.SGD(method.parameters(), lr=0.0)
    method.session = ClientSession(ctx=None, optimizers=[optimizer])  # the engine's optimizer, no client
    optimizer.zero_grad()
    loss = method.training_step({"x": x}, 0)
    if method.automatic_optimization:
        loss.backward()
    method.session = None
    return {n: p.grad.clone() for n, p in method.named_parameters()}


# The mlp backbone has BatchNorm: chunks of a batch see other BN statistics in training mode. Equality
# must hold (1) in training mode when one chunk holds a whole view (the ordinary path also encodes each
# view on its own), (2) with smaller chunks in eval mode, where BN uses its running statistics.
@pytest.mark.parametrize("cls", [FedCC, FedPNP])
@pytest.mark.parametrize(("chunk", "train"), [(64, True), (5, False)])
def test_memory_efficient_chunks_give_the_ordinary_gradients(cls, chunk, train):
    torch.manual_seed(0)
    plain = tiny(cls)
    plain.build(INFO)
    chunked = tiny(cls, memory_efficient_chunk=chunk)
    chunked.build(INFO)
    chunked.load_state_dict(plain.state_dict())
    assert plain.automatic_optimization and not chunked.automatic_optimization
    x = torch.rand(16, 1, 8, 8)
    expected, got = grads_after_one_step(plain, x, train), grads_after_one_step(chunked, x, train)
    for name, grad in expected.items():
        assert torch.allclose(got[name], grad, atol=1e-5, rtol=1e-4), name


def test_memory_efficient_chunks_under_batchnorm_training_differ_as_documented():
    torch.manual_seed(0)
    plain = tiny()
    plain.build(INFO)
    chunked = copy.deepcopy(plain)
    chunked.hparams.memory_efficient_chunk = 4
    chunked.automatic_optimization = False
    x = torch.rand(16, 1, 8, 8)
    expected, got = grads_after_one_step(plain, x, True), grads_after_one_step(chunked, x, True)
    assert not all(torch.allclose(got[n], g, atol=1e-5) for n, g in expected.items())


@pytest.mark.parametrize(("option", "value"), [("memory_efficient_chunk", 0), ("crop_scale", (0.5, 0.2)),
                                               ("instance_temperature", 0.0), ("local_epochs", 0),
                                               ("num_clusters", 1)])
def test_bad_options_name_the_field(option, value):
    with pytest.raises(ConfigError, match=f"method.init_args.{option}"):
        tiny(**{option: value})


def test_vector_data_is_refused():
    with pytest.raises(ConfigError, match="data.name"):
        tiny().validate(DataInfo(3, 0, 0, 5, False), 2)

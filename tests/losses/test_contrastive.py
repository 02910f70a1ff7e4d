import math

import pytest
import torch
import torch.nn.functional as F

from fedclust.losses.contrastive import (
    cluster_contrastive_loss,
    cluster_entropy,
    instance_contrastive_loss,
    nt_xent,
    supervised_nt_xent,
)
from fedclust.seeding import generator


def test_nt_xent_hand_computed():
    # two orthogonal samples seen identically in both views, temperature 1: each anchor sees its positive
    # at cosine 1 and two negatives at cosine 0
    a = torch.tensor([[1.0, 0.0], [0.0, 3.0]])
    expected = math.log((math.e + 2) / math.e)
    assert nt_xent(a, a, 1.0).item() == pytest.approx(expected)
    # temperature 0.5 doubles the logits
    assert nt_xent(a, a, 0.5).item() == pytest.approx(math.log((math.e**2 + 2) / math.e**2))


def test_instance_loss_matches_a_loop_over_anchors():
    g = generator(0, "x")
    z1, z2 = torch.randn(6, 4, generator=g), torch.randn(6, 4, generator=g)
    z = F.normalize(torch.cat([z1, z2]), dim=1)
    total = 0.0
    for i in range(12):
        pos = (i + 6) % 12
        logits = torch.stack([z[i] @ z[j] / 0.5 for j in range(12) if j != i])
        others = [j for j in range(12) if j != i]
        total += -(logits[others.index(pos)] - torch.logsumexp(logits, 0))
    assert instance_contrastive_loss(z1, z2).item() == pytest.approx(total.item() / 12, rel=1e-5)


def test_supervised_contrast_averages_over_every_same_label_row_and_is_nt_xent_without_shared_labels():
    g = generator(0, "supcon")
    z1, z2 = torch.randn(6, 4, generator=g), torch.randn(6, 4, generator=g)
    assert supervised_nt_xent(z1, z2, torch.arange(6), 0.5).item() == pytest.approx(nt_xent(z1, z2, 0.5).item(),
                                                                                     rel=1e-6)
    labels = torch.tensor([0, 1, 0, 2, 1, 0])
    z = F.normalize(torch.cat([z1, z2]), dim=1)
    y = torch.cat([labels, labels])
    total = 0.0
    for i in range(12):
        others = [j for j in range(12) if j != i]
        logits = torch.stack([z[i] @ z[j] / 0.5 for j in others])
        log_prob = logits - torch.logsumexp(logits, 0)
        positives = [others.index(j) for j in others if y[j] == y[i]]
        total += -log_prob[positives].mean()
    assert supervised_nt_xent(z1, z2, labels, 0.5).item() == pytest.approx(total.item() / 12, rel=1e-5)


def test_cluster_entropy_bounds():
    assert cluster_entropy(torch.full((8, 4), 0.25)).item() == pytest.approx(0.0, abs=1e-6)
    collapsed = torch.zeros(8, 4)
    collapsed[:, 0] = 1.0
    assert cluster_entropy(collapsed).item() == pytest.approx(math.log(4))


def test_cluster_loss_is_contrast_over_columns_plus_entropy():
    c = torch.softmax(torch.randn(16, 3, generator=generator(1, "c")), dim=1)
    expected = nt_xent(c.T, c.T, 1.0) + 2 * cluster_entropy(c)
    assert cluster_contrastive_loss(c, c).item() == pytest.approx(expected.item())
    assert cluster_contrastive_loss(c, c, entropy_weight=0).item() == pytest.approx(nt_xent(c.T, c.T, 1.0).item())


def test_cluster_loss_prefers_confident_distinct_clusters():
    eye = torch.eye(4).repeat(4, 1)  # 16 samples, 4 per cluster, one-hot and balanced
    mush = torch.full((16, 4), 0.25) + 0.01 * torch.randn(16, 4, generator=generator(2, "m"))
    assert cluster_contrastive_loss(eye, eye) < cluster_contrastive_loss(mush.softmax(1), mush.softmax(1))


def test_losses_backpropagate():
    c1 = torch.randn(8, 3, requires_grad=True)
    cluster_contrastive_loss(c1.softmax(1), c1.detach().softmax(1)).backward()
    assert torch.isfinite(c1.grad).all() and c1.grad.abs().sum() > 0

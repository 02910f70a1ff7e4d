"""Balanced (Sinkhorn) k-means and spectral clustering of summaries, on inputs whose answer is known."""

import math

import torch

from fedclust.clustering.balanced import balanced_assignment, balanced_kmeans, sinkhorn
from fedclust.clustering.metrics import nmi
from fedclust.clustering.spectral import knn_affinity, spectral_clustering, spectral_embedding


def test_sinkhorn_plan_has_unit_rows_and_equal_columns():
    scores = torch.randn(40, 4, generator=torch.Generator().manual_seed(0))
    plan = sinkhorn(scores, epsilon=0.5, iterations=50)
    assert torch.allclose(plan.sum(1), torch.ones(40), atol=1e-5)
    assert torch.allclose(plan.sum(0), torch.full((4,), 10.0), atol=1e-3)


def test_balanced_assignment_is_exactly_balanced_even_when_one_cluster_is_preferred():
    scores = torch.zeros(10, 3)
    scores[:, 0] = 5.0  # every point prefers cluster 0
    sizes = torch.bincount(balanced_assignment(scores), minlength=3)
    assert sizes.max() - sizes.min() <= 1 and sizes.sum() == 10


def test_balanced_kmeans_splits_equal_groups_and_keeps_sizes_equal():
    g = torch.Generator().manual_seed(1)
    centres = torch.eye(4)[:, :4] * 5
    x = torch.cat([c + 0.1 * torch.randn(25, 4, generator=g) for c in centres])
    truth = torch.arange(4).repeat_interleave(25)
    centroids, labels = balanced_kmeans(x, 4, generator=torch.Generator().manual_seed(0))
    assert torch.bincount(labels, minlength=4).tolist() == [25, 25, 25, 25]
    assert nmi(labels, truth) > 0.99
    assert torch.allclose(centroids.norm(dim=1), torch.ones(4), atol=1e-5)
    # unequal groups: sizes stay equal anyway (the point of it: every summary stands for n / k samples)
    _, labels = balanced_kmeans(x[:70], 4, generator=torch.Generator().manual_seed(0))
    sizes = torch.bincount(labels, minlength=4)
    assert sizes.max() - sizes.min() <= 1


def _rings(n: int, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Two concentric circles in the plane, lifted away from the origin so cosine geometry sees their shape."""
    angle = 2 * math.pi * torch.rand(2 * n, generator=g)
    radius = torch.cat([torch.full((n,), 1.0), torch.full((n,), 3.0)]) + 0.05 * torch.randn(2 * n, generator=g)
    xy = torch.stack([radius * angle.cos(), radius * angle.sin()], 1)
    return torch.cat([xy, torch.full((2 * n, 1), 10.0)], 1), torch.arange(2).repeat_interleave(n)


def test_spectral_separates_rings_where_kmeans_cannot():
    from fedclust.clustering.kmeans import kmeans

    x, truth = _rings(150, torch.Generator().manual_seed(2))
    assert nmi(spectral_clustering(x, 2, neighbors=8), truth) > 0.95
    assert nmi(kmeans(x, 2, nredo=5, cosine=True).labels, truth) < 0.2


def test_self_tuning_kernel_separates_rings_and_weighs_near_neighbours_more():
    import pytest

    from fedclust.clustering.spectral import knn_affinity

    x, truth = _rings(150, torch.Generator().manual_seed(2))
    assert nmi(spectral_clustering(x, 2, neighbors=8, kernel="self_tuning"), truth) > 0.95
    line = torch.tensor([[1.0, 0.0], [1.0, 0.1], [1.0, 0.3], [1.0, 0.6]])
    a = knn_affinity(line, 2, kernel="self_tuning")
    assert torch.allclose(a, a.T) and a[0, 1] > a[0, 2] > 0 and (a.diagonal() == 0).all()
    with pytest.raises(ValueError, match="kernel"):
        knn_affinity(line, 2, kernel="gaussian")


def test_spectral_weights_and_degenerate_sizes():
    x, truth = _rings(100, torch.Generator().manual_seed(3))
    labels = spectral_clustering(x, 2, neighbors=8, weights=torch.full((200,), 7.0))
    assert nmi(labels, truth) > 0.95
    assert spectral_clustering(x[:3], 5).tolist() == [0, 1, 2]  # k >= n: each point its own cluster


def test_the_in_place_affinity_is_symmetric_sparse_and_leaves_its_inputs_alone():
    g = torch.Generator().manual_seed(0)
    points = torch.randn(60, 5, generator=g)
    kept = points.clone()
    for kernel in ("cosine", "self_tuning"):
        a = knn_affinity(points, 4, kernel)
        assert torch.equal(points, kept) and torch.equal(a, a.T) and torch.all(a.diagonal() == 0)
        assert torch.all((a > 0).sum(1) >= 4) and torch.all(a <= 1) and torch.all(a >= 0)
        before = a.clone()
        spectral_embedding(a, 3, torch.full((60,), 7.0))
        assert torch.equal(a, before)  # the embedding works on its own copy


def test_local_summaries_never_average_fewer_than_min_size_samples():
    from fedclust.clustering.summaries import dissolve_small_groups, local_summaries

    g = torch.Generator().manual_seed(4)
    x = torch.cat([torch.randn(40, 6, generator=g) + 5 * torch.eye(6)[0], torch.randn(3, 6, generator=g)])
    means, member, sizes = local_summaries(x, size=5, min_size=4)
    assert sizes.min() >= 4 and int(sizes.sum()) == len(x) and len(means) == len(sizes)
    assert torch.equal(torch.bincount(member).float(), sizes)
    assert torch.allclose(means.norm(dim=1), torch.ones(len(means)), atol=1e-5)
    # hand-made: groups of 3, 1 and 2 points with min size 2 -> the lone point joins its nearest group
    pts = torch.tensor([[1.0, 0], [1, 0.1], [1, -0.1], [0.9, 0.5], [0, 1], [0.1, 1]])
    out = dissolve_small_groups(pts, torch.tensor([0, 0, 0, 1, 2, 2]), 2)
    assert out.tolist() == [0, 0, 0, 0, 1, 1]
    assert dissolve_small_groups(pts, torch.tensor([0, 1, 2, 3, 4, 5]), 2).tolist() == [0] * 6


def test_balanced_summaries_have_equal_sizes():
    from fedclust.clustering.summaries import local_summaries

    x = torch.randn(60, 4, generator=torch.Generator().manual_seed(5))
    _, _, sizes = local_summaries(x, size=10, mode="balanced")
    assert sizes.tolist() == [10.0] * 6

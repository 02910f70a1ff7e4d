"""Equal-size groups, the floor's local clusters and spectral clustering, on inputs whose answer is known."""

import math

import pytest
import torch

from fedclust.clustering.balanced import balanced_assignment, balanced_groups, equal_sizes
from fedclust.clustering.floor import dissolve_small_groups, effective_counts, floored_groups, zero_below_floor
from fedclust.clustering.knn_vote import nearest_neighbors
from fedclust.clustering.label_spreading import label_spreading
from fedclust.clustering.metrics import nmi
from fedclust.clustering.spectral import DENSE_BELOW, knn_affinity, spectral_clustering, spectral_embedding
from fedclust.clustering.summaries import fixed_groups, group_summaries, label_by_summaries


def test_balanced_assignment_fills_every_group_exactly_even_when_one_is_preferred():
    scores = torch.zeros(10, 3)
    scores[:, 0] = 5.0  # every point prefers group 0
    scores[:4, 0] += torch.arange(4.0)  # and these four most of all
    labels = balanced_assignment(scores, equal_sizes(10, 3))
    assert torch.bincount(labels, minlength=3).tolist() == [4, 3, 3]
    assert labels[:4].tolist() == [0, 0, 0, 0]  # the most confident proposers win the contested room


def test_balanced_groups_split_equal_clusters_and_keep_sizes_equal():
    g = torch.Generator().manual_seed(1)
    centres = torch.eye(4) * 5
    x = torch.cat([c + 0.1 * torch.randn(25, 4, generator=g) for c in centres])
    truth = torch.arange(4).repeat_interleave(25)
    labels = balanced_groups(x, 4, seed=0)
    assert torch.bincount(labels, minlength=4).tolist() == [25, 25, 25, 25]
    assert nmi(labels, truth) > 0.99
    sizes = torch.bincount(balanced_groups(x[:70], 4, seed=0), minlength=4)  # unequal clusters: sizes stay equal
    assert sizes.max() - sizes.min() <= 1
    with pytest.raises(ValueError, match="1 <= k <= n"):
        balanced_groups(x[:3], 4)


def test_fixed_groups_hold_at_least_size_samples_and_summaries_are_plain_means_of_unit_rows():
    x = torch.randn(103, 6, generator=torch.Generator().manual_seed(5))
    groups = fixed_groups(x, size=20)
    sizes = torch.bincount(groups)
    assert len(sizes) == 5 and sizes.min() >= 20 and int(sizes.sum()) == 103
    means, counts = group_summaries(x, groups)
    unit = torch.nn.functional.normalize(x, dim=1)
    torch.testing.assert_close(means[2], unit[groups == 2].mean(0))
    assert torch.equal(counts, sizes.float())
    assert fixed_groups(x[:7], size=20).tolist() == [0] * 7  # fewer than size: one group (the engine judges it)


def test_small_groups_dissolve_into_their_nearest_and_a_client_below_the_floor_sends_nothing():
    pts = torch.tensor([[1.0, 0], [1, 0.1], [1, -0.1], [0.9, 0.5], [0, 1], [0.1, 1]])
    assert dissolve_small_groups(pts, torch.tensor([0, 0, 0, 1, 2, 2]), 2).tolist() == [0, 0, 0, 0, 1, 1]
    assert dissolve_small_groups(pts, torch.tensor([0, 1, 2, 3, 4, 5]), 2).tolist() == [0] * 6
    # Euclidean geometry (k-FED): the lone point at (0.9, 0.5) is nearer the first group's mean
    means, counts, member = floored_groups(pts, torch.tensor([0, 0, 0, 1, 2, 2]), 2)
    assert member.tolist() == [0, 0, 0, 0, 1, 1] and counts.tolist() == [4.0, 2.0]
    torch.testing.assert_close(means[1], pts[4:].mean(0))
    means, counts, member = floored_groups(pts, torch.zeros(6, dtype=torch.long), 10)
    assert means.shape == (0, 2) and len(counts) == 0 and member.tolist() == [-1] * 6


def test_a_fuzzy_centre_counts_its_effective_samples_and_is_zeroed_below_the_floor():
    hard = torch.eye(3).repeat_interleave(torch.tensor([5, 1, 4]), dim=0)  # crisp memberships: 5, 1, 4 samples
    assert effective_counts(hard, m=2.0).tolist() == pytest.approx([5, 1, 4])
    even = torch.full((12, 2), 0.5)  # every sample weighs both centres alike: 12 each
    assert effective_counts(even, m=2.0).tolist() == pytest.approx([12, 12])
    centres, counts = zero_below_floor(torch.ones(3, 2), torch.tensor([5.0, 1.0, 4.0]), 4)
    assert counts.tolist() == [5.0, 0.0, 4.0] and centres[1].abs().sum() == 0 and centres[0].sum() == 2


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
    a = torch.from_numpy(knn_affinity(line, 2, kernel="self_tuning").toarray())
    assert torch.allclose(a, a.T) and a[0, 1] > a[0, 2] > 0 and (a.diagonal() == 0).all()
    with pytest.raises(ValueError, match="kernel"):
        knn_affinity(line, 2, kernel="gaussian")


def test_spectral_weights_and_degenerate_sizes():
    x, truth = _rings(100, torch.Generator().manual_seed(3))
    labels = spectral_clustering(x, 2, neighbors=8, weights=torch.full((200,), 7.0))
    assert nmi(labels, truth) > 0.95
    assert spectral_clustering(x[:3], 5).tolist() == [0, 1, 2]  # k >= n: each point its own cluster


def test_the_sparse_affinity_is_symmetric_and_holds_about_n_times_neighbors_entries():
    g = torch.Generator().manual_seed(0)
    points = torch.randn(60, 5, generator=g)
    kept = points.clone()
    for kernel in ("cosine", "self_tuning"):
        a = knn_affinity(points, 4, kernel)
        dense = torch.from_numpy(a.toarray())
        assert torch.equal(points, kept) and torch.equal(dense, dense.T) and torch.all(dense.diagonal() == 0)
        assert torch.all((dense > 0).sum(1) >= 4) and torch.all(dense <= 1) and torch.all(dense >= 0)
        assert 60 * 4 <= a.nnz <= 2 * 60 * 4


def test_the_sparse_solver_finds_every_component_where_single_vector_lanczos_did_not():
    """Above DENSE_BELOW points LOBPCG gives the same clustering as the dense solver would: ten far-apart clusters
    make ten components, every one of which the embedding separates."""
    g = torch.Generator().manual_seed(0)
    centres = torch.randn(10, 32, generator=g) * 4
    truth = torch.randint(10, (DENSE_BELOW + 500,), generator=g)
    x = centres[truth] + torch.randn(len(truth), 32, generator=g)
    labels = spectral_clustering(x, 10, neighbors=10, weights=torch.full((len(x),), 30.0), kernel="self_tuning")
    assert nmi(labels, truth) > 0.99
    embedding = spectral_embedding(knn_affinity(x[:300], 10), 10)
    assert embedding.shape == (300, 10) and torch.allclose(embedding.norm(dim=1), torch.ones(300, dtype=torch.float64))


def test_a_row_takes_its_nearest_summarys_label_then_spreads_over_the_rows_own_graph():
    x = torch.tensor([[1.0, 0.1], [1.0, -0.1], [0.1, 1.0], [-0.1, 1.0], [0.9, 0.8]])
    summaries, summary_labels = torch.tensor([[1.0, 0.0], [0.0, 1.0]]), torch.tensor([1, 0])
    nearest = label_by_summaries(x, summaries, summary_labels, 2)
    assert torch.equal(nearest, torch.tensor([1, 1, 0, 0, 1]))  # cosine: row 4 is nearer the first summary
    spread = label_by_summaries(x, summaries, summary_labels, 2, spread_neighbors=2, spread_alpha=0.9)
    assert torch.equal(spread, label_spreading(nearest_neighbors(x, 2), nearest, 2, 0.9))

import pytest
import torch
import torch.nn.functional as F

from fedclust.clustering.graph_smoothing import propagate
from fedclust.clustering.knn_vote import nearest_neighbors


def test_one_step_with_alpha_one_is_the_mean_over_each_row_and_its_neighbours():
    x = torch.randn(30, 4, generator=torch.Generator().manual_seed(0))
    graph = nearest_neighbors(x, 3)
    expected = F.normalize(x[graph].mean(1), dim=1)
    torch.testing.assert_close(propagate(x, graph, 1, 1.0), expected)


def test_steps_follow_the_personalised_pagerank_recursion():
    x = torch.randn(25, 5, generator=torch.Generator().manual_seed(1))
    graph = nearest_neighbors(x, 4)
    g = x
    for _ in range(3):
        g = 0.25 * x + 0.75 * g[graph].mean(1)
    torch.testing.assert_close(propagate(x, graph, 3, 0.75), F.normalize(g, dim=1))
    torch.testing.assert_close(propagate(x, graph, 0, 0.75), F.normalize(x, dim=1))  # no step: the rows themselves
    torch.testing.assert_close(propagate(x, graph, 5, 0.0), F.normalize(x, dim=1))  # alpha 0: never leaves them


def test_propagation_pulls_the_rows_of_one_cluster_together():
    gen = torch.Generator().manual_seed(2)
    centres = torch.eye(3, 8) * 3
    labels = torch.arange(3).repeat_interleave(40)
    x = centres[labels] + torch.randn(120, 8, generator=gen)
    smoothed = propagate(x, nearest_neighbors(x, 8), 4, 0.9)

    def spread(rows):  # mean cosine distance of each row to its cluster's mean direction
        unit = F.normalize(rows, dim=1)
        means = F.normalize(torch.stack([unit[labels == c].mean(0) for c in range(3)]), dim=1)
        return float((1 - (unit * means[labels]).sum(1)).mean())

    assert spread(smoothed) < 0.5 * spread(x)


@pytest.mark.parametrize("steps, alpha", [(-1, 0.5), (2, 1.5), (2, -0.1)])
def test_impossible_settings_are_refused(steps, alpha):
    x = torch.randn(5, 2)
    with pytest.raises(ValueError):
        propagate(x, nearest_neighbors(x, 2), steps, alpha)

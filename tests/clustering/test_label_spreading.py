"""Label spreading over a kNN graph (fedclust.clustering.label_spreading)."""

import pytest
import torch

from fedclust.clustering.knn_vote import nearest_neighbors
from fedclust.clustering.label_spreading import label_spreading


def _two_groups():
    g = torch.Generator().manual_seed(0)
    z = torch.cat([torch.tensor([5.0, 0, 0]) + torch.randn(30, 3, generator=g),  # two groups apart in angle
                   torch.tensor([0, 5.0, 0]) + torch.randn(30, 3, generator=g)])
    return z, torch.tensor([0] * 30 + [1] * 30)


def test_spreading_corrects_a_few_wrong_labels_inside_a_group_and_keeps_the_groups_apart():
    z, truth = _two_groups()
    noisy = truth.clone()
    noisy[[0, 7, 14]] = 1  # three of the first group carry the other group's label
    assert torch.equal(label_spreading(nearest_neighbors(z, 5), noisy, 2, alpha=0.9), truth)


CHAIN = torch.tensor([[i, max(i - 1, 0), min(i + 1, 9)] for i in range(10)])  # 0 - 1 - ... - 9, each row with itself


def test_alpha_zero_keeps_the_labels_and_a_label_travels_further_as_alpha_grows():
    end = torch.tensor([1, 1] + [0] * 8)  # the chain's first two nodes hold label 1
    assert torch.equal(label_spreading(CHAIN, end, 2, alpha=0.0), end)
    assert torch.equal(label_spreading(CHAIN, end, 2, alpha=0.3), end)  # a short reach: the pair keeps its label
    assert label_spreading(CHAIN, end, 2, alpha=0.9).sum() == 1  # further: the rest of the chain wears it down
    assert label_spreading(CHAIN, end, 2, alpha=0.99).sum() == 0


def test_an_even_split_of_the_chain_stays_split():
    half = torch.tensor([1] * 5 + [0] * 5)
    assert torch.equal(label_spreading(CHAIN, half, 2, alpha=0.99), half)


def test_spreading_refuses_an_alpha_outside_zero_one():
    with pytest.raises(ValueError, match="alpha"):
        label_spreading(torch.zeros(3, 2, dtype=torch.long), torch.zeros(3, dtype=torch.long), 2, alpha=1.0)


def test_a_start_of_scores_spreads_as_its_labels_do_and_a_split_vote_follows_the_graph():
    z, truth = _two_groups()
    graph = nearest_neighbors(z, 5)
    noisy = truth.clone()
    noisy[[0, 7, 14]] = 1
    one_hot = torch.nn.functional.one_hot(noisy, 2).float()
    assert torch.equal(label_spreading(graph, one_hot, 2, alpha=0.9), label_spreading(graph, noisy, 2, alpha=0.9))
    assert torch.equal(label_spreading(graph, one_hot, 2, alpha=0.0), noisy)
    undecided = one_hot.clone()
    undecided[[3, 40]] = 0.5  # two nodes whose labellings disagreed: their neighbours decide
    assert torch.equal(label_spreading(graph, undecided, 2, alpha=0.9), truth)

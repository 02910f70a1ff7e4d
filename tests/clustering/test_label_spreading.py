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
    near = nearest_neighbors(z, 5)
    assert torch.equal(label_spreading(near, noisy, 2, alpha=0.9), truth)
    similarity = (torch.nn.functional.normalize(z, dim=1).unsqueeze(1)
                  * torch.nn.functional.normalize(z, dim=1)[near]).sum(-1).clamp_min(0)
    assert torch.equal(label_spreading(near, noisy, 2, alpha=0.9, weights=similarity), truth)


def test_alpha_zero_keeps_the_labels_and_a_label_travels_further_as_alpha_grows():
    # a chain 0 - 1 - 2 - ... - 9: node 0 is labelled 1, every other 0
    near = torch.tensor([[i, max(i - 1, 0), min(i + 1, 9)] for i in range(10)])
    labels = torch.zeros(10, dtype=torch.long)
    labels[0] = 1
    assert torch.equal(label_spreading(near, labels, 2, alpha=0.0), labels)
    # a lone dissenting end of a chain is outvoted by its neighbour at any alpha: the chain agrees on 0
    assert label_spreading(near, labels, 2, alpha=0.99).sum() == 0
    # half the chain labelled 1: the labels stay split at the middle, whichever alpha
    half = torch.tensor([1] * 5 + [0] * 5)
    assert torch.equal(label_spreading(near, half, 2, alpha=0.9), half)


def test_spreading_refuses_an_alpha_outside_zero_one():
    with pytest.raises(ValueError, match="alpha"):
        label_spreading(torch.zeros(3, 2, dtype=torch.long), torch.zeros(3, dtype=torch.long), 2, alpha=1.0)

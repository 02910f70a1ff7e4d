"""Consensus among clusterings from their contingency tables (clustering/consensus.py): the NMI equals
scikit-learn's on the labels, tables add across clients, and the clustering most starts agree with scores highest."""

import torch
from sklearn.metrics import normalized_mutual_info_score

from fedclust.clustering.consensus import consensus_scores, contingency_tables, pairwise_nmi


def test_nmi_from_tables_equals_scikit_learns_on_the_labels_degenerate_ones_included():
    g = torch.Generator().manual_seed(0)
    labels = torch.randint(4, (5, 300), generator=g)
    labels[1] = (labels[0] + 1) % 4  # the same partition, relabelled
    labels[2] = 0  # one cluster only
    nmi = pairwise_nmi(contingency_tables(labels, 4))
    for r in range(5):
        for s in range(5):
            assert abs(float(nmi[r, s]) - normalized_mutual_info_score(labels[r], labels[s])) < 1e-9


def test_clients_tables_add_up_to_the_pooled_samples_table():
    g = torch.Generator().manual_seed(1)
    labels = torch.randint(3, (4, 90), generator=g)
    split = contingency_tables(labels[:, :40], 3) + contingency_tables(labels[:, 40:], 3)
    assert torch.equal(split, contingency_tables(labels, 3))
    assert split[0, 0].trace() == 90 and split.sum() == 4 * 4 * 90


def test_the_partition_most_starts_found_scores_highest():
    g = torch.Generator().manual_seed(2)
    truth = torch.arange(400) % 4
    merged = truth.clone()
    merged[merged == 1] = 0  # a local optimum: two clusters in one model,
    merged[(merged == 3) & (torch.rand(400, generator=g) < 0.5)] = 1  # another model holding half of one
    starts = torch.stack([(truth + 1) % 4, merged, truth, (truth * 3) % 4, torch.randint(4, (400,), generator=g)])
    scores = consensus_scores(contingency_tables(starts, 4))
    assert scores.argmax() in (0, 2, 3) and scores[[0, 2, 3]].min() > scores[[1, 4]].max()

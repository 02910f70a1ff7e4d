"""Clustering metrics: hand-worked cases, agreement with scikit-learn, degenerate inputs."""

import itertools
import math

import numpy as np
import pytest
import torch
from scipy.optimize import linear_sum_assignment
from sklearn import metrics as skm

from fedclust.clustering.metrics import (
    LABEL_FREE_METRICS,
    LABEL_METRICS,
    acc,
    ari,
    calinski_harabasz,
    cluster_metrics,
    grouped_cluster_metrics,
    kappa,
    kappa_mapping,
    label_free_metrics,
    nmi,
    purity,
)

T = torch.tensor


def _noisy_labels(n: int, kp: int, kt: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    target = torch.randint(0, kt, (n,), generator=g)
    noise = torch.randint(0, kp, (n,), generator=g)
    pred = torch.where(torch.rand(n, generator=g) < 0.6, (target * 7 + 3) % kp, noise)
    return pred, target


def test_permuted_perfect_clustering_scores_one():
    m = cluster_metrics(T([0, 0, 1, 1, 2, 2]), T([1, 1, 0, 0, 2, 2]))
    assert m == pytest.approx({"nmi": 1.0, "acc": 1.0, "ari": 1.0, "kappa": 1.0, "purity": 1.0})


def test_hand_computed_imperfect_case():
    # target 0 0 0 1 1 1, pred 5 5 2 2 2 2 -> best map 5->0, 2->1 (mapped 0 0 1 1 1 1)
    # ACC = 5/6.  Kappa: p_o = 5/6; marginals target (1/2, 1/2), mapped (1/3, 2/3)
    #   p_e = 1/2*1/3 + 1/2*2/3 = 1/2 -> kappa = (5/6 - 1/2) / (1 - 1/2) = 2/3
    pred, target = T([5, 5, 2, 2, 2, 2]), T([0, 0, 0, 1, 1, 1])
    assert acc(pred, target) == pytest.approx(5 / 6)
    assert kappa(pred, target) == pytest.approx(2 / 3)
    assert kappa_mapping(pred, target).tolist() == [0, 0, 1, 1, 1, 1]


def test_hand_computed_more_clusters_than_classes():
    # target 0 0 0 0 1 1 (sizes 4, 2), pred 0 0 1 1 2 2 (sizes 2, 2, 2).
    # Symmetric differences |P|+|T|-2|P&T|: P0-T0 = 2, P1-T0 = 2, P2-T1 = 0, others 4 or 6; the
    # zero-padded dummy class costs 0. Optimum: P2->T1, P0 or P1 -> T0, the other -> dummy (id 2).
    # p_o = 4/6; marginals target (4/6, 2/6, 0), mapped (2/6, 2/6, 2/6)
    #   p_e = 4/6*2/6 + 2/6*2/6 = 1/3 -> kappa = (2/3 - 1/3) / (1 - 1/3) = 1/2.  ACC = (2+2)/6.
    pred, target = T([0, 0, 1, 1, 2, 2]), T([0, 0, 0, 0, 1, 1])
    mapped = kappa_mapping(pred, target).tolist()
    assert mapped[4:] == [1, 1] and sorted(mapped[:4]) == [0, 0, 2, 2]
    assert kappa(pred, target) == pytest.approx(0.5)
    assert acc(pred, target) == pytest.approx(4 / 6)


@pytest.mark.parametrize("kp,kt", [(10, 10), (13, 10), (6, 10)])
def test_agreement_with_sklearn(kp, kt):
    pred, target = _noisy_labels(4000, kp, kt, seed=kp)
    p, t = pred.numpy(), target.numpy()
    assert nmi(pred, target) == pytest.approx(skm.normalized_mutual_info_score(t, p), abs=1e-5)
    assert ari(pred, target) == pytest.approx(skm.adjusted_rand_score(t, p), abs=1e-5)
    assert kappa(pred, target) == pytest.approx(skm.cohen_kappa_score(t, kappa_mapping(pred, target).numpy()), abs=1e-5)
    c = skm.confusion_matrix(t, p)  # (kt, kp) once both sides use ids 0..K-1
    rows, cols = linear_sum_assignment(c[:kt, :kp], maximize=True)
    assert acc(pred, target) == pytest.approx(c[rows, cols].sum() / len(t))


def test_kappa_with_equal_counts_is_max_overlap_mapping():
    pred, target = _noisy_labels(3000, 8, 8, seed=1)
    c = skm.confusion_matrix(target.numpy(), pred.numpy())
    rows, cols = linear_sum_assignment(c, maximize=True)  # rows: classes, cols: clusters
    to_class = dict(zip(cols, rows))
    mapped = np.array([to_class[i] for i in pred.numpy()])
    assert kappa(pred, target) == pytest.approx(skm.cohen_kappa_score(target.numpy(), mapped), abs=1e-5)


@pytest.mark.parametrize("kp,kt", [(4, 3), (3, 4), (4, 4)])
def test_kappa_mapping_is_optimal_by_brute_force(kp, kt):
    pred, target = _noisy_labels(60, kp, kt, seed=7)
    n = max(kp, kt)
    sizes_p = torch.bincount(pred, minlength=n).tolist()
    sizes_t = torch.bincount(target, minlength=n).tolist()

    def cost(i: int, j: int) -> int:  # symmetric difference, 0 against a padding row/column
        if i >= kp or j >= kt:
            return 0
        both = int(((pred == i) & (target == j)).sum())
        return sizes_p[i] + sizes_t[j] - 2 * both

    best = min(sum(cost(i, perm[i]) for i in range(n)) for perm in itertools.permutations(range(n)))
    mapped = kappa_mapping(pred, target)
    got = sum(cost(i, int(mapped[pred == i][0])) for i in range(kp) if (pred == i).any())
    assert got == best


def test_single_predicted_cluster_is_zero_not_nan():
    target = T([0, 0, 1, 1, 2, 2, 2])
    m = cluster_metrics(torch.zeros(7, dtype=torch.long), target)
    assert all(math.isfinite(v) for v in m.values())
    assert m["nmi"] == 0.0 and m["kappa"] == 0.0 and m["ari"] == 0.0
    assert m["acc"] == pytest.approx(3 / 7)
    assert all(math.isfinite(v) for v in cluster_metrics(T([4, 4, 4]), T([1, 1, 1])).values())


def test_arbitrary_ids_and_dtypes():
    pred, target = _noisy_labels(500, 5, 5, seed=3)
    ref = cluster_metrics(pred, target)
    shifted = cluster_metrics((pred * 1_000_003 - 17).to(torch.int64), (target + 40).to(torch.int32))
    assert shifted == pytest.approx(ref)
    with pytest.raises(TypeError):
        nmi(pred.float(), target)


def test_calinski_harabasz_matches_sklearn():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(400, 6, generator=g) + torch.arange(4).repeat_interleave(100)[:, None]
    labels = torch.arange(4).repeat_interleave(100) * 11
    expected = skm.calinski_harabasz_score(x.numpy(), labels.numpy())
    assert calinski_harabasz(x, labels) == pytest.approx(expected, rel=1e-5)
    assert calinski_harabasz(x, torch.zeros(400, dtype=torch.long)) == 0.0


def test_purity_lets_two_clusters_claim_one_class_unlike_acc():
    # clusters 0 and 1 are both mostly class 0: purity counts 2 + 2 + 1, ACC can match class 0 only once
    pred = torch.tensor([0, 0, 0, 1, 1, 2])
    target = torch.tensor([0, 0, 1, 0, 0, 1])
    assert purity(pred, target) == pytest.approx(5 / 6)
    assert acc(pred, target) == pytest.approx(3 / 6)
    assert cluster_metrics(pred, target)["purity"] == pytest.approx(5 / 6)


def test_ari_is_exact_on_a_large_unbalanced_clustering():
    # 70,000 points, 97% of them in one cluster: torchmetrics' ARI drifts here, the exact value does not
    g = torch.Generator().manual_seed(0)
    target = torch.randint(10, (70000,), generator=g)
    pred = torch.where(torch.rand(70000, generator=g) < 0.97, 0, target)
    assert ari(pred, target) == pytest.approx(skm.adjusted_rand_score(target.numpy(), pred.numpy()), abs=1e-9)


def test_grouped_metrics_average_each_groups_metrics_and_skip_unscored():
    from fedclust.clustering.metrics import cluster_metrics, grouped_cluster_metrics

    pred = torch.tensor([0, 0, 1, 1, 5, 5, 6, 7, 9])
    target = torch.tensor([1, 1, 0, 0, 2, 2, 2, 3, 4])
    groups = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1, -1])
    a = cluster_metrics(pred[:4], target[:4])
    b = cluster_metrics(pred[4:8], target[4:8])
    out = grouped_cluster_metrics(pred, target, groups)
    assert out == pytest.approx({k: (a[k] + b[k]) / 2 for k in a})
    assert a["acc"] == 1.0 and b["acc"] == 0.75  # hand-checked: group 1 maps 5->2, 7->3, 6 wrong
    assert grouped_cluster_metrics(pred, target, None) == cluster_metrics(pred, target)


def test_label_free_metrics_score_the_clusters_in_the_representation_space():
    g = torch.Generator().manual_seed(0)
    z = torch.cat([torch.randn(30, 4, generator=g), torch.randn(10, 4, generator=g) + 8])
    pred = torch.tensor([5] * 30 + [9] * 10)  # any ids

    scores = label_free_metrics(pred, z)

    assert scores["calinski_harabasz"] == pytest.approx(skm.calinski_harabasz_score(z.numpy(), pred.numpy()),
                                                          rel=1e-5)
    assert (scores["cluster_size_min"], scores["cluster_size_max"], scores["clusters_found"]) == (10, 30, 2)
    assert set(scores) == set(LABEL_FREE_METRICS) and not set(scores) & set(LABEL_METRICS)
    groups = torch.tensor([0] * 20 + [1] * 20)  # grouped as the labelled scores: the mean over groups
    per_group = [label_free_metrics(pred[groups == g], z[groups == g]) for g in (0, 1)]
    grouped = grouped_cluster_metrics(pred, z, groups, score=label_free_metrics)
    assert grouped["cluster_size_max"] == (per_group[0]["cluster_size_max"] + per_group[1]["cluster_size_max"]) / 2


def test_nmi_of_a_perfect_clustering_is_exactly_one():
    import torch

    from fedclust.clustering.metrics import nmi

    labels = torch.arange(3).repeat_interleave(60)
    assert nmi(labels, labels) == 1.0 and nmi((labels + 1) % 3, labels) == 1.0

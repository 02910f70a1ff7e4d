"""Clustering metrics: NMI, ACC, ARI, Kappa (as CCFC / SDA-FC report them) and Calinski-Harabasz.

Inputs are integer label tensors on any device; ids may be arbitrary (they are relabelled to 0..K-1
first) and the numbers of clusters and classes may differ. Outputs are python floats, never NaN:
a degenerate score (a single predicted cluster) is 0.

Data without labels (a user's own) are scored without them (`label_free_metrics`): the Calinski-Harabasz index
of the clusters in the method's representation space and the cluster sizes; never NMI or ACC against stand-in
labels.

ACC and Kappa both map clusters to classes with the Hungarian algorithm but, following the reference
code, with different costs (REFERENCE.md "Kappa"):
- ACC maximises the overlap (the matched counts of the contingency matrix).
- Kappa minimises the summed symmetric differences |P_i| + |T_j| - 2|P_i & T_j| on the cost matrix
  padded with zeros to a square. Equal to maximum overlap when there are as many clusters as classes;
  otherwise it is the reference code's quirk, kept for comparable numbers. Clusters left unmatched get
  a class id absent from the target, so their points count as disagreements.
"""

from __future__ import annotations

import numpy as np
import torch
from scipy.optimize import linear_sum_assignment
from sklearn.metrics import adjusted_rand_score as sk_adjusted_rand_score
from torch import Tensor
from torchmetrics.functional.classification import multiclass_cohen_kappa
from torchmetrics.functional.clustering import (
    calinski_harabasz_score,
    normalized_mutual_info_score,
)


def _dense(labels: Tensor) -> tuple[Tensor, int]:
    """Labels relabelled to 0..K-1 (int64, same device) and K."""
    if labels.is_floating_point() or labels.is_complex():
        raise TypeError(f"cluster labels must be an integer tensor, got {labels.dtype}")
    uniq, inv = torch.unique(labels.reshape(-1), return_inverse=True)
    return inv, int(uniq.numel())


def _prepare(pred: Tensor, target: Tensor) -> tuple[Tensor, int, Tensor, int]:
    if pred.numel() != target.numel():
        raise ValueError(f"pred has {pred.numel()} labels but target has {target.numel()}")
    if pred.numel() == 0:
        raise ValueError("cannot score an empty clustering")
    p, kp = _dense(pred)
    t, kt = _dense(target.to(pred.device))
    return p, kp, t, kt


def _contingency(p: Tensor, kp: int, t: Tensor, kt: int) -> np.ndarray:
    """(kt, kp) counts of points with class j and cluster i, as int64 numpy."""
    flat = torch.bincount(t * kp + p, minlength=kt * kp)
    return flat.reshape(kt, kp).cpu().numpy()


def _finite(v: Tensor | float) -> float:
    v = float(v)
    return v if np.isfinite(v) else 0.0


def nmi(pred: Tensor, target: Tensor) -> float:
    """Normalised mutual information, arithmetic-mean normalisation (sklearn's default).

    0 when either side has a single cluster (also when both do, where sklearn says 1). Clipped to [0, 1]: torchmetrics
    computes in float32, and a perfect clustering can come out as 1.0000005."""
    p, kp, t, kt = _prepare(pred, target)
    if kp == 1 or kt == 1:
        return 0.0
    with torch.sparse.check_sparse_tensor_invariants(False):  # torchmetrics builds a sparse matrix
        return min(1.0, max(0.0, _finite(normalized_mutual_info_score(p, t, "arithmetic"))))


def acc(pred: Tensor, target: Tensor) -> float:
    """Clustering accuracy: the fraction of points on the best one-to-one cluster->class matching
    (Hungarian on the contingency matrix; extra clusters or classes stay unmatched)."""
    p, kp, t, kt = _prepare(pred, target)
    c = _contingency(p, kp, t, kt)
    rows, cols = linear_sum_assignment(c, maximize=True)
    return float(c[rows, cols].sum()) / p.numel()


def purity(pred: Tensor, target: Tensor) -> float:
    """Cluster purity, (1/m) sum_c max_y |S_c & S_y| (UIFCA's "cluster accuracy"): each cluster counts
    its majority class, so unlike `acc` two clusters may claim the same class."""
    p, kp, t, kt = _prepare(pred, target)
    return float(_contingency(p, kp, t, kt).max(axis=0).sum()) / p.numel()


def ari(pred: Tensor, target: Tensor) -> float:
    """Adjusted Rand index (0 for a single predicted cluster against several classes)."""
    p, kp, t, kt = _prepare(pred, target)
    if kp == 1 and kt > 1:
        return 0.0
    # scikit-learn's, not torchmetrics': the latter loses precision in its pair counts on large unbalanced
    # clusterings (70,000 points: -0.318 where the exact value is 0.158).
    return _finite(sk_adjusted_rand_score(t.cpu().numpy(), p.cpu().numpy()))


def kappa_mapping(pred: Tensor, target: Tensor) -> Tensor:
    """Predictions mapped to class ids by the reference code's Hungarian matching (module docstring).

    Returns int64 labels in the dense class numbering 0..kt-1 of `target` (sorted ids); a cluster left
    unmatched maps to an id >= kt."""
    p, kp, t, kt = _prepare(pred, target)
    c = _contingency(p, kp, t, kt)  # (kt, kp)
    n = max(kp, kt)
    cost = np.zeros((n, n), dtype=np.int64)  # rows: clusters, cols: classes; zero padding as reference
    cost[:kp, :kt] = c.sum(0)[:, None] + c.sum(1)[None, :] - 2 * c.T
    rows, cols = linear_sum_assignment(cost)
    mapping = torch.empty(n, dtype=torch.long)
    mapping[torch.as_tensor(rows)] = torch.as_tensor(cols, dtype=torch.long)
    return mapping.to(p.device)[p]


def kappa(pred: Tensor, target: Tensor) -> float:
    """Cohen's kappa (unweighted) between the true labels and the Hungarian-mapped predictions."""
    mapped = kappa_mapping(pred, target)
    t, kt = _dense(target.to(mapped.device))
    num = max(kt, int(mapped.max()) + 1)
    if num < 2:
        return 0.0
    return _finite(multiclass_cohen_kappa(mapped, t, num_classes=num, validate_args=False))


def calinski_harabasz(x: Tensor, labels: Tensor) -> float:
    """Calinski-Harabasz variance ratio of the clustering `labels` of the rows of `x` (float64).

    0 when it is undefined: one cluster, or as many clusters as points."""
    lab, k = _dense(labels.to(x.device))
    if x.shape[0] != lab.numel():
        raise ValueError(f"x has {x.shape[0]} rows but labels has {lab.numel()}")
    if k < 2 or k >= x.shape[0]:
        return 0.0
    return _finite(calinski_harabasz_score(x.detach().double(), lab))


LABEL_METRICS = ("nmi", "acc", "ari", "kappa", "purity")
LABEL_FREE_METRICS = ("calinski_harabasz", "cluster_size_min", "cluster_size_max", "clusters_found")


def label_free_metrics(pred: Tensor, z: Tensor) -> dict[str, float]:
    """Scores of the clustering `pred` of the representations `z` (N, d) that need no labels (the argument
    order of cluster_metrics, so grouped_cluster_metrics takes it as `score`): the
    Calinski-Harabasz variance ratio (higher: tighter, better separated clusters; 0 for one cluster), the sizes
    of the smallest and largest cluster, and the number of clusters holding a sample."""
    if pred.numel() == 0:
        raise ValueError("cannot score an empty clustering")
    dense, found = _dense(pred.cpu())
    sizes = torch.bincount(dense)
    return {"calinski_harabasz": calinski_harabasz(z.flatten(1).cpu(), dense), "cluster_size_min": float(sizes.min()),
            "cluster_size_max": float(sizes.max()), "clusters_found": float(found)}


def cluster_metrics(pred: Tensor, target: Tensor) -> dict[str, float]:
    """{"nmi", "acc", "ari", "kappa", "purity"} of the clustering `pred` against the classes `target`."""
    return {
        "nmi": nmi(pred, target),
        "acc": acc(pred, target),
        "ari": ari(pred, target),
        "kappa": kappa(pred, target),
        "purity": purity(pred, target),
    }


def grouped_cluster_metrics(pred: Tensor, target: Tensor, groups: Tensor | None,
                            score=cluster_metrics) -> dict[str, float]:
    """cluster_metrics of the whole labelling (groups None), or the mean over groups of each group's
    metrics (group id per sample; -1 marks samples that are not scored). `score(pred, target)` may be another
    scorer of the same form: label_free_metrics with the representations as `target`."""
    if groups is None:
        return score(pred, target)
    groups = groups.cpu()
    per_group = [score(pred[groups == g], target[groups == g])
                 for g in torch.unique(groups).tolist() if g >= 0]
    if not per_group:
        raise ValueError("metric_groups marked every sample -1: nothing to score")
    return {k: sum(m[k] for m in per_group) / len(per_group) for k in per_group[0]}

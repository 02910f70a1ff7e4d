"""kNN classification accuracy in a representation space (CCFC, Yan et al., Section 4.3.1 and Table 3).

CCFC runs "the k-nearest neighbors (KNN) classifier" on MNIST's train representations and reports test
accuracy for k = 3, 5, 7, 9, 100, 1000, 7000, reading it as a measure of "the fewer samples from different
categories among the k neighbors". The paper names neither a weighting nor a metric, so we take the plain
classifier that this reading describes and that scikit-learn's KNeighborsClassifier defaults to:

- **majority vote** (uniform weights): each of the k nearest train samples casts one vote for its label;
  a distance-weighted vote would no longer count "samples from different categories among the k neighbors";
- **Euclidean distance** on the representations exactly as ``method.embed`` returns them. Methods whose
  paper works in cosine geometry normalise there already (CCFC's embed is L2-normalised, where Euclidean
  and cosine rank neighbours identically), and raw-pixel baselines (the "Raw pixels" row) stay Euclidean;
- **ties** between labels with the same vote count go to the smallest label (scikit-learn's rule, through
  scipy's mode; here torch.argmax, which returns the first maximum). Train samples at exactly the same
  distance from a query are ranked in an unspecified order (as in scikit-learn and FAISS).

Exact search with torch (distances of a chunk of queries to every train sample, then top-k) rather than
FAISS: it runs on whichever device holds the representations (the GPU in `fedclust evaluate`) and has no
cap on k (FAISS's GPU index caps k at 2048; Table 3 goes to 7000). Queries are processed in chunks, so the
memory is O(chunk x (N + k)), never O(N x M): MNIST's 60,000 x 10,000 takes ~128 MB of distances at a time.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from fedclust.run_checks import check_ks  # the rule is torch-free there (fedclust.precheck uses it too)

DISTANCE_BUDGET = 2**25  # float32 entries of one chunk's distance matrix (128 MB)


@torch.no_grad()
def knn_predict(train_x: Tensor, train_y: Tensor, test_x: Tensor, ks: Sequence[int],
                chunk_size: int | None = None) -> dict[int, Tensor]:
    """Majority-vote kNN labels of every row of ``test_x`` for each k in ``ks`` (Euclidean distance).

    ``train_y`` holds non-negative integer labels. One top-max(ks) search per query chunk serves every k.
    ``chunk_size`` (queries per chunk) defaults to what keeps a chunk's distances within DISTANCE_BUDGET.
    """
    ks = check_ks(ks, len(train_x))
    train_x, test_x = train_x.flatten(1).float(), test_x.flatten(1).float().to(train_x.device)
    train_y = train_y.to(train_x.device).long()
    num_classes = int(train_y.max()) + 1
    k_max = max(ks)
    step = chunk_size or max(1, DISTANCE_BUDGET // len(train_x))
    # |q - t|^2 = |q|^2 - 2 q.t + |t|^2; |q|^2 is the same for every t of a query, so it does not change the ranking
    train_sq = (train_x * train_x).sum(1)
    out = {k: torch.empty(len(test_x), dtype=torch.long, device=train_x.device) for k in ks}
    for start in range(0, len(test_x), step):
        q = test_x[start:start + step]
        dist = torch.addmm(train_sq.unsqueeze(0), q, train_x.T, alpha=-2.0)
        nearest = dist.topk(k_max, dim=1, largest=False, sorted=True).indices
        del dist
        labels = train_y[nearest]  # (chunk, k_max), nearest first
        for k in ks:
            votes = torch.zeros(len(q), num_classes, device=q.device)
            votes.scatter_add_(1, labels[:, :k], torch.ones(labels[:, :k].shape, device=q.device))
            out[k][start:start + len(q)] = votes.argmax(1)  # first maximum: ties go to the smallest label
    return out


def knn_accuracy(train_x: Tensor, train_y: Tensor, test_x: Tensor, test_y: Tensor, ks: Sequence[int],
                 chunk_size: int | None = None) -> dict[int, float]:
    """Test accuracy (share in [0, 1]) of the majority-vote kNN classifier for each k (see the module doc)."""
    predictions = knn_predict(train_x, train_y, test_x, ks, chunk_size)
    truth = test_y.to(train_x.device).long()
    return {k: (pred == truth).float().mean().item() for k, pred in predictions.items()}

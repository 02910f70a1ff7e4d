"""Relabel each sample by the majority label of its nearest neighbours (a local kNN vote)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from fedclust.clustering.kmeans import _faiss, backend_in_use

# Above this many rows the FAISS search is an inverted-file index (approximate, about n^1.5 work) instead of exact.
EXACT_SEARCH_ROWS = 50_000


def nearest_neighbors(x: Tensor, neighbors: int, chunk: int = 4096) -> Tensor:
    """Indices (n, neighbors + 1) of each row itself and its ``neighbors`` nearest rows by cosine similarity (fewer
    when there are fewer rows); memory O(n * neighbors). On the CPU with FAISS installed, FAISS's search (exact up to
    EXACT_SEARCH_ROWS rows, an IVF index above); otherwise exact top-k in torch on the rows' device, in chunks of
    ``chunk`` rows."""
    k = min(neighbors + 1, len(x))
    unit = F.normalize(x.detach().float(), dim=1)
    if unit.device.type == "cpu" and _faiss() is not None and backend_in_use("cpu") == "faiss-cpu":
        found = _faiss_search(unit, k)  # an IVF search that found fewer than k: the row itself stands in
        return torch.where(found < 0, torch.arange(len(found))[:, None].expand_as(found), found)
    return _exact_top(unit, unit, k, chunk)[1]


def nearest_rows(queries: Tensor, base: Tensor, chunk: int = 4096) -> Tensor:
    """Index (m,) of each query row's most cosine-similar row of ``base``: FAISS's search on the CPU when installed
    (an IVF index above EXACT_SEARCH_ROWS base rows, so labelling N samples by N / M summaries is not N^2 / M work),
    else exact chunked torch on the rows' device."""
    q, b = F.normalize(queries.detach().float(), dim=1), F.normalize(base.detach().float(), dim=1)
    if q.device.type == "cpu" and _faiss() is not None and backend_in_use("cpu") == "faiss-cpu":
        found = _faiss_search(b, 1, q)[:, 0]
        lost = (found < 0).nonzero().squeeze(1)  # an IVF search that found nothing: exact for those
        found[lost] = (q[lost] @ b.T).argmax(1)
        return found
    return torch.cat([(q[s:s + chunk] @ b.T).argmax(1) for s in range(0, len(q), chunk)])


def similar_rows_search(base: Tensor, k: int, exact_rows: int = EXACT_SEARCH_ROWS, chunk: int = 4096
                        ) -> Callable[[Tensor], tuple[Tensor, Tensor]]:
    """A search, built once for many batches of queries, for each unit query row's ``k`` most similar unit rows of
    ``base`` by inner product: query -> (similarities (m, k), indices (m, k)). Up to ``exact_rows`` base rows (or
    without FAISS) exact top-k in torch, in chunks of ``chunk`` queries; above, FAISS's inverted-file index over
    ``base``, trained once (16 of 4 sqrt(n) cells, at most n / 39, searched per query: a query costs about sqrt(n),
    not n), and a query it finds fewer than k rows for answered exactly."""
    def exact(queries: Tensor) -> tuple[Tensor, Tensor]:
        return _exact_top(queries, base, k, chunk)

    if len(base) <= exact_rows or _faiss() is None or base.device.type != "cpu" or backend_in_use("cpu") != "faiss-cpu":
        return exact
    index = _ivf_index(np.ascontiguousarray(base.numpy()))

    def approximate(queries: Tensor) -> tuple[Tensor, Tensor]:
        similarity, found = (torch.from_numpy(a) for a in index.search(np.ascontiguousarray(queries.numpy()), k))
        found = found.long()
        lost = (found < 0).any(1).nonzero().squeeze(1)
        if len(lost):
            similarity[lost], found[lost] = exact(queries[lost])
        return similarity, found

    return approximate


def _faiss_search(unit: Tensor, k: int, queries: Tensor | None = None) -> Tensor:
    """The k most similar rows of ``unit`` to each query (default: to each row of ``unit`` itself); -1 where an IVF
    search found fewer than k."""
    rows = np.ascontiguousarray(unit.numpy())
    if len(rows) > EXACT_SEARCH_ROWS:
        index = _ivf_index(rows)
    else:
        index = _faiss().IndexFlatIP(rows.shape[1])
        index.add(rows)
    _, found = index.search(rows if queries is None else np.ascontiguousarray(queries.numpy()), k)
    return torch.from_numpy(found).long()


def _ivf_index(rows: np.ndarray):
    """A FAISS inverted-file index over unit ``rows`` (inner product), trained and filled: 4 sqrt(n) k-means cells
    (at most n / 39, the fewest rows FAISS trains a cell on), 16 of them searched per query."""
    faiss, (n, d) = _faiss(), rows.shape
    index = faiss.IndexIVFFlat(faiss.IndexFlatIP(d), d, max(1, min(int(4 * n ** 0.5), n // 39)),
                               faiss.METRIC_INNER_PRODUCT)
    index.train(rows)
    index.add(rows)
    index.nprobe = 16
    return index


def _exact_top(queries: Tensor, base: Tensor, k: int, chunk: int) -> tuple[Tensor, Tensor]:
    """Exact top-k inner products (values, indices) of each query row with ``base``, ``chunk`` queries at a time so
    memory is O(chunk * len(base))."""
    found = [(queries[i:i + chunk] @ base.T).topk(k, dim=1) for i in range(0, len(queries), chunk)]
    return torch.cat([f.values for f in found]), torch.cat([f.indices for f in found])


def vote(labels: Tensor, neighbors_of: Tensor, num_labels: int | None = None) -> Tensor:
    """Each row's most frequent label among the rows ``neighbors_of`` names for it; ties go to the smallest."""
    num_labels = int(labels.max()) + 1 if num_labels is None else num_labels
    return F.one_hot(labels[neighbors_of], num_labels).sum(1).argmax(1)


def knn_vote(x: Tensor, labels: Tensor, neighbors: int, num_labels: int | None = None, chunk: int = 4096) -> Tensor:
    """Each row's most frequent label among itself and its ``neighbors`` nearest rows (cosine).

    A clustering made on groups of samples (FedSpectral's summaries) gives every member its group's label, so
    the minority of a mixed group is wrong together; its nearest samples mostly are not in the same group and
    outvote it. ``neighbors`` 0 returns a copy of ``labels``.
    """
    if neighbors <= 0 or len(x) <= 1:
        return labels.clone()
    return vote(labels, nearest_neighbors(x, neighbors, chunk), num_labels)

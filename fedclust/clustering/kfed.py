"""The maths of k-FED (Dennis, Li & Smith 2021, "Heterogeneity for the win: one-shot federated
clustering"), following the official code (REFERENCE.md "k-FED").

Local step, per client (`local_kfed`, Awasthi & Sheffet 2012): project the data on its top-k'
right singular vectors, seed k' centres with k-means++ in the projection, keep the points at least 3x
closer to their own seed than to any other, average them, and run Lloyd's k-means on the
full-dimensional local data from there. The client sends its k' centres.

Central step (`central_kfed`): start from one client's k' centres, add the local centre farthest from
the chosen ones until there are k, then run Lloyd's k-means on all local centres, unweighted.

Several independent starts side by side (UIFCA's k-FED initialisation with restarts): `local_kfed_starts` runs the
client step once per start under the privacy floor, in a fixed-shape block of rows per start, and
`central_kfed_starts` the server step once per start on those blocks.

Labelling a data point, two ways (the method wrapper picks one):
- paper: a point takes the global cluster of its local centre, i.e.
  `global_of_local[c][local_labels[c]]` -- the client needs only the server's small index map.
- alternative: the nearest global centre, `assign_nearest(x, global_centres)`.
On well-separated data they agree; they differ where a local cluster straddles two global ones.

As the official code (its Lloyd steps are scikit-learn's KMeans(init=...)):
- An empty cluster is moved, within the Lloyd iteration, to the point farthest from its own centre
  (scikit-learn's relocation; the point leaves its old cluster's sums), so k clusters stay k clusters.
- The central step starts from the first client's k' centres (`start="first"`, the official
  `local_estimators[:dev_k]`); `start="random"` picks the client with the generator, `start=c` names one.

Differences from the official code, on purpose:
- The kept points are averaged in full dimension, as in Awasthi & Sheffet; the official code averages
  their projections and lifts the mean back. A seed whose kept set is empty (a NaN in the official
  code) falls back to its whole Voronoi cell.
- Lloyd stops once the assignment is stable (scikit-learn's tol 0; the official code's default tol 1e-4 also
  stops when the centres move less than 1e-4 x the mean feature variance). On the CPU it is scikit-learn's
  KMeans; on a GPU a torch loop taking the same steps, since scikit-learn is CPU-only.
- If k' > k, k of the start client's centres are picked farthest-first (the official code fails there).
- Every draw comes from the given torch.Generator; the official code uses numpy's global RNG and a
  randomized SVD. Here the top-k' right singular vectors are exact, so they need no randomness: the top
  eigenvectors of the d x d Gram matrix X^T X (eigh in float64) when d <= n, which is ~5x faster than a full
  SVD of a 7,000 x 784 client and spans the same subspace (measured |cos| > 0.99999); a full SVD otherwise.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from fedclust.clustering.floor import floored_groups
from fedclust.clustering.kmeans import assign_nearest, kmeans_plusplus_indices
from fedclust.errors import ConfigError, MethodArgError

_MARGIN = 3.0  # Awasthi-Sheffet: keep points >= 3x closer to their own seed than to any other


def _relocate_empty(x: Tensor, centres: Tensor, labels: Tensor, sums: Tensor, counts: Tensor) -> None:
    """scikit-learn's rule for empty clusters (its `_relocate_empty_clusters_dense`), in place on `sums` and
    `counts`: the i-th empty cluster (by index) becomes the i-th farthest point from its own centre, which
    leaves its old cluster. Nothing moves when every point sits on its centre."""
    empty = (counts == 0).nonzero().squeeze(1)
    if len(empty) == 0:
        return
    dist = (x - centres[labels]).pow(2).sum(1)
    if not dist.max() > 0:
        return
    far = dist.topk(len(empty)).indices
    for e, f in zip(empty.tolist(), far.tolist()):
        old = int(labels[f])
        sums[old] -= x[f]
        counts[old] -= 1
        sums[e], counts[e] = x[f], 1


def lloyd(x: Tensor, centres: Tensor, niter: int = 300) -> tuple[Tensor, Tensor]:
    """Lloyd's k-means of the rows of `x` from `centres` (k, d); returns (centres, labels), the
    labels being the assignment to the returned centres. An empty cluster is re-seeded at the point
    farthest from its centre, as scikit-learn's KMeans (the official code's Lloyd) does; iterations stop
    once the assignment is stable or after `niter`.

    On the CPU this is scikit-learn's KMeans(init=centres, n_init=1, tol=0) itself (its fused Cython pass is
    ~5x faster than the torch loop on a 7,000 x 784 client, benchmarks/results/classic_speed_fmnist.md);
    elsewhere (CUDA) the torch loop `lloyd_torch`, which takes the same steps (tests/clustering/test_kfed.py)."""
    if x.device.type != "cpu" or niter < 1:
        return lloyd_torch(x, centres, niter)
    from sklearn.cluster import KMeans

    xn = x.detach().contiguous().numpy()
    start = centres.detach().to("cpu", x.dtype).numpy()
    km = KMeans(start.shape[0], init=start, n_init=1, max_iter=niter, tol=0.0, algorithm="lloyd").fit(xn)
    return torch.from_numpy(km.cluster_centers_).to(x.dtype), torch.from_numpy(km.labels_.astype("int64"))


def lloyd_torch(x: Tensor, centres: Tensor, niter: int = 300) -> tuple[Tensor, Tensor]:
    """`lloyd` as a torch loop on x's device (no randomness): the path for data on a GPU."""
    centres = centres.to(device=x.device, dtype=x.dtype).clone()
    k = centres.shape[0]
    labels = assign_nearest(x, centres)
    for _ in range(niter):
        sums = torch.zeros_like(centres).index_add_(0, labels, x)
        counts = torch.bincount(labels, minlength=k).to(x.dtype)
        _relocate_empty(x, centres, labels, sums, counts)
        centres = torch.where(counts[:, None] > 0, sums / counts.clamp_min(1)[:, None], centres)
        new = assign_nearest(x, centres)
        if torch.equal(new, labels):
            break  # assignment stable, so the centres are the means of their clusters: converged
        labels = new
    return centres, labels


def top_right_singular_vectors(x: Tensor, k: int) -> Tensor:
    """The top-k right singular vectors of `x` (n, d) as rows (k, d), in x's dtype (signs arbitrary)."""
    n, d = x.shape
    if d > n:
        return torch.linalg.svd(x, full_matrices=False).Vh[:k]
    _, vectors = torch.linalg.eigh((x.T @ x).double())  # ascending eigenvalues = squared singular values
    return vectors[:, -k:].flip(1).T.to(x.dtype).contiguous()


def local_kfed(x: Tensor, k_local: int, generator: torch.Generator, niter: int = 300) -> tuple[Tensor, Tensor]:
    """The client step of k-FED on local data `x` (n, d): returns (centres (k', d), labels (n,)).

    With n <= k' the points themselves are the centres (as the official code), so fewer than k'
    centres come back when n < k'."""
    if k_local < 1:
        raise MethodArgError("k_local", k_local, "a positive number of local clusters")
    n = x.shape[0]
    if n <= k_local:
        return x.detach().clone(), torch.arange(n, device=x.device)
    x = x.detach()
    vh = top_right_singular_vectors(x.float(), k_local)
    # distances in x @ V equal distances between the projected points, so we work in k' coordinates
    xp = x.float() @ vh.T
    seeds = kmeans_plusplus_indices(xp, k_local, generator)
    dist = torch.cdist(xp, xp[seeds])  # (n, k'), small
    if k_local > 1:
        two = dist.topk(2, dim=1, largest=False)
        own, nearest, second = two.indices[:, 0], two.values[:, 0], two.values[:, 1]
        keep = second >= _MARGIN * nearest
    else:
        own = torch.zeros(n, dtype=torch.long, device=x.device)
        keep = torch.ones(n, dtype=torch.bool, device=x.device)
    start = torch.empty(k_local, x.shape[1], dtype=x.dtype, device=x.device)
    for r in range(k_local):
        members = (own == r) & keep
        if not members.any():
            members = own == r  # no point is 3x closer: fall back to the seed's Voronoi cell
        # A seed duplicated by another one can have an empty cell: start from the seed point.
        start[r] = x[members].mean(0) if members.any() else x[seeds[r]]
    return lloyd(x, start, niter)


def _farthest_first(points: Tensor, chosen: list[int], k: int) -> list[int]:
    """Extend `chosen` (indices into points) to k by repeatedly adding the point whose distance to the
    nearest chosen one is largest."""
    mind = torch.cdist(points, points[chosen]).min(1).values
    mind[chosen] = -1.0
    while len(chosen) < k:
        nxt = int(mind.argmax())
        chosen.append(nxt)
        mind = torch.minimum(mind, torch.cdist(points, points[nxt : nxt + 1])[:, 0])
        mind[chosen] = -1.0  # never re-pick a chosen centre, even when duplicates sit at distance 0
    return chosen


def central_kfed(
    local_centres: list[Tensor], k: int, generator: torch.Generator, niter: int = 300,
    start: str | int = "first",
) -> tuple[Tensor, list[Tensor]]:
    """The server step of k-FED: returns the k global centres (k, d) and, per client, the global
    cluster (int64) of each of its local centres.

    start: whose k' centres seed the central step: "first" (the first list entry holding centres, as the
    official code), "random" (drawn from `generator`), or a list position.
    Raises ConfigError when the clients hold fewer than k local centres in total (k' * m < k)."""
    if k < 1:
        raise ConfigError("num_clusters", k, "a positive number of clusters")
    sizes = [int(c.shape[0]) for c in local_centres]
    total = sum(sizes)
    if total < k:
        k_local = max(sizes, default=0)
        raise MethodArgError(
            "k_local",
            k_local,
            f"k_local x clients must be at least k = {k}, but the {len(sizes)} clients sent only {total} local centres",
        )
    points = torch.cat([c.detach() for c in local_centres]).float()
    offsets = [sum(sizes[:i]) for i in range(len(sizes))]
    # Start from one client's centres: they lie in different true clusters under k-FED's assumption.
    c = _start_client(sizes, start, generator)
    own = list(range(offsets[c], offsets[c] + sizes[c]))
    if len(own) > k:
        first = int(torch.randint(len(own), (1,), generator=generator, device=generator.device))
        start_idx = _farthest_first(points[own], [first], k)
        chosen = [own[i] for i in start_idx]
    else:
        chosen = _farthest_first(points, own, k)
    centres, labels = lloyd(points, points[chosen], niter)
    return centres, list(labels.split(sizes))


def local_kfed_starts(x: Tensor, k_local: int, generators: Sequence[torch.Generator],
                      floor: int) -> tuple[Tensor, Tensor, Tensor]:
    """k-FED's client step once per start (one generator each) on x (n, ...), flattened, under the privacy floor
    (fedclust/clustering/floor.py). Returns the centres (R * k', d) and their counts (R * k',), start r's in rows
    r * k' ... (r + 1) * k' - 1 so every client sends the same shape, a row the floor dissolved (or k' above n) sent
    as zeros counted 0; and each start's local labels (R, n) on the CPU, -1 everywhere on a client below the floor."""
    flat = x.flatten(1)
    centres, counts, labels = [], [], []
    for g in generators:
        _, local = local_kfed(flat, min(k_local, len(flat)), g)
        means, sizes, local = floored_groups(flat, local, floor)
        centres.append(torch.cat([means, means.new_zeros(k_local - len(means), flat.shape[1])]))
        counts.append(torch.cat([sizes, sizes.new_zeros(k_local - len(sizes))]))
        labels.append(local.cpu())
    return torch.cat(centres), torch.cat(counts), torch.stack(labels)


def central_kfed_starts(centres: Sequence[Tensor], counts: Sequence[Tensor], k: int, k_local: int,
                        generators: Sequence[torch.Generator]) -> list[list[Tensor | None]]:
    """k-FED's server step once per start (one generator each) on the clients' `local_kfed_starts` centres and
    counts. Returns, per start and per client (in the given order), the global cluster of each of its start's rows
    counted above 0 (those its local labels number), or None where that start's rows are all counted 0 (a client
    below the floor sent nothing to cluster)."""
    per_start = []
    for r, g in enumerate(generators):
        rows = slice(r * k_local, (r + 1) * k_local)
        sent = [c[rows][n[rows] > 0] if bool((n[rows] > 0).any()) else None for c, n in zip(centres, counts)]
        _, maps = central_kfed([c for c in sent if c is not None], k, g)
        kept = iter(maps)
        per_start.append([None if c is None else next(kept) for c in sent])
    return per_start


def _start_client(sizes: list[int], start: str | int, generator: torch.Generator) -> int:
    candidates = [i for i, s in enumerate(sizes) if s > 0]
    if start == "first":
        return candidates[0]
    if start == "random":
        return candidates[int(torch.randint(len(candidates), (1,), generator=generator, device=generator.device))]
    if isinstance(start, int) and not isinstance(start, bool) and start in candidates:
        return start
    raise MethodArgError("central_start", start, f'"first", "random" or one of the clients {candidates}')

"""Labels under the privacy floor from a two-level random walk over every client's samples and all summaries:
FedSpectral's `labelling: walk` (fedclust/methods/families/summary_spectral.py).

The walk's states are the samples of every client and the summaries the server holds. From a sample it steps, with
probability 1 - restart, to a neighbour on its own client's nearest-neighbour graph, else to one of its ``links``
nearest summaries of any client; from a summary it steps, with probability 1 - server, to one of its own group's
members, else to a neighbour on the server's graph of summaries (self-tuning weights throughout, Zelnik-Manor &
Perona, NIPS 2004). Spectral clustering of a random walk (Shi & Malik 2000; Meila & Shi, AISTATS 2001) takes its
leading k right eigenvectors: a sample is placed by its own client's fine structure and by where that structure leads
among all clients' summaries, where labelling by the nearest summary sees one summary of 50 mixed samples.

The eigenvectors come from a block power iteration whose messages are those of a federated run, simulated here for every
client at once (`walk_rows`): the server broadcasts the summaries' rows; a client updates its samples' rows from its own
graph and links (they never leave it) and sends, per group of its own, the mean of its members' rows (an aggregate of
the group's samples, at least the floor) and the k x k Gram of its rows (an aggregate of all of them); the server
orthonormalises every row with the summed Gram. Labels (`walk_labels`): the server k-means the summaries' rows and
broadcasts the centres; a sample takes its nearest centre. Work and memory per step are linear in the samples (sparse n
x (neighbours + links) matrices), never n x n; finding the links is exact against every summary up to
EXACT_LINK_SUMMARIES of them and an inverted-file search above (`summary_links_search`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
import torch
import torch.nn.functional as F
from torch import Tensor

from fedclust.clustering.kmeans import kmeans
from fedclust.clustering.knn_vote import nearest_neighbors, similar_rows_search
from fedclust.clustering.spectral import knn_affinity

# Above this many summaries a sample's links come from an inverted-file index: up to it exact (every Fashion-MNIST
# run's ~200-1,400), beyond it a client's exact search against every summary would grow with the whole federation.
EXACT_LINK_SUMMARIES = 10_000


@dataclass
class ClientWalk:
    """One client's part of the walk; it stays on the client."""

    local: sp.csr_matrix  # (n, n) row-stochastic: the client's own graph
    links: sp.csr_matrix  # (n, S) row-stochastic: each sample to its nearest summaries of any client
    members: sp.csr_matrix  # (g, n) each own group's members, rows averaging (what the client's message averages)
    own: np.ndarray  # (g,) the server's rows that are this client's groups, in group order


def _row_stochastic(a: sp.spmatrix) -> sp.csr_matrix:
    total = np.asarray(a.sum(axis=1)).ravel()
    return (sp.diags(1.0 / np.maximum(total, 1e-300)) @ a).tocsr()


def _chord2(similarity: Tensor) -> Tensor:
    return (2 - 2 * similarity.double().clamp(-1, 1)).clamp_min(0)


def summary_scales(summaries: Tensor, neighbors: int) -> Tensor:
    """Each summary's chord distance to its ``neighbors``-th nearest other summary (its self-tuning scale), (S,)."""
    unit = F.normalize(summaries.float(), dim=1)
    if len(unit) < 2:
        return torch.ones(len(unit), dtype=torch.float64)
    found = nearest_neighbors(unit, min(neighbors, len(unit) - 1))[:, -1]  # sparse search, never S x S
    return _chord2((unit * unit[found]).sum(1)).sqrt().clamp_min(1e-6)


def server_walk(summaries: Tensor, neighbors: int) -> sp.csr_matrix:
    """The server's step between summaries: its self-tuning `neighbors`-NN graph, row-stochastic (S, S)."""
    return _row_stochastic(knn_affinity(summaries, neighbors, kernel="self_tuning"))


def summary_links_search(summaries: Tensor, links: int) -> Callable[[Tensor], tuple[Tensor, Tensor]]:
    """Each unit sample row's ``links`` most similar summaries (chord-ranked), built once for every client's search:
    exact up to EXACT_LINK_SUMMARIES summaries; above, an inverted-file index, so that a client's search grows with
    the square root of the summaries, not with them (and the simulated federation's with n sqrt(S), not n S)."""
    return similar_rows_search(F.normalize(summaries.float(), dim=1), min(links, len(summaries)),
                               EXACT_LINK_SUMMARIES)


def client_walk(h: Tensor, neighbors_of: Tensor, summaries: Tensor, scales: Tensor, groups: Tensor, own: Tensor,
                links: int, search: Callable[[Tensor], tuple[Tensor, Tensor]] | None = None) -> ClientWalk:
    """A client's graph, links and groups for the walk.

    Args:
        h: The client's rows (n, d) in the summaries' space.
        neighbors_of: Each row's own index and its nearest rows (n, m + 1), as nearest_neighbors returns them.
        summaries: Every summary the server holds (S, d); scales: their `summary_scales`.
        groups: Each row's group (n,) in 0..g-1; own: the server's row of each of those groups (g,), empty when
            the client sent no summary this round (it then walks to the summaries but no summary walks to it).
        links: How many nearest summaries each sample steps to.
        search: `summary_links_search(summaries, links)`, built once for all clients (built here if not given).
    """
    n = len(h)
    unit = F.normalize(h.detach().float(), dim=1)
    cols = neighbors_of.cpu()
    rows = torch.arange(n)[:, None].expand_as(cols)
    chord2 = _chord2((unit[:, None] * unit[cols]).sum(-1))
    scale = chord2[:, -1].sqrt().clamp_min(1e-6)  # the distance to the farthest listed neighbour
    weight = torch.exp(-chord2 / (scale[:, None] * scale[cols])) * (cols != rows)
    graph = sp.csr_matrix((weight.flatten().numpy(), (rows.flatten().numpy(), cols.flatten().numpy())), shape=(n, n))
    m = min(links, len(summaries))
    similarity, nearest = (search or summary_links_search(summaries, links))(unit)  # never all n x S at once
    link_weight = torch.exp(-_chord2(similarity) / (scale[:, None] * scales.double()[nearest]))
    link_rows = np.repeat(np.arange(n), m)
    to_summaries = sp.csr_matrix((link_weight.flatten().numpy(), (link_rows, nearest.flatten().numpy())),
                                 shape=(n, len(summaries)))
    own = own.cpu().numpy().astype(np.int64)
    kept = groups.cpu().numpy() if len(own) else np.zeros(0, dtype=np.int64)
    members = sp.csr_matrix((np.ones(len(kept)), (kept, np.arange(len(kept)))), shape=(len(own), n))
    return ClientWalk(_row_stochastic(graph.maximum(graph.T)), _row_stochastic(to_summaries),
                      _row_stochastic(members), own)


def _orthonormalising(gram: np.ndarray) -> np.ndarray:
    """The k x k map that makes rows with this Gram orthonormal (eigh rather than Cholesky: a rank-deficient start
    must not fail)."""
    values, vectors = np.linalg.eigh(gram)
    return vectors / np.sqrt(np.maximum(values, 1e-12 * max(values.max(), 1e-300)))


def walk_rows(clients: list[ClientWalk], server: sp.csr_matrix, k: int, restart: float, server_share: float,
              iterations: int, seed: int = 0) -> tuple[Tensor, list[Tensor]]:
    """The leading k right eigenvectors of the walk by `iterations` block power steps: the summaries' rows (S, k)
    and each client's samples' rows (n_c, k), float64. Each step is one exchange (module docstring).

    Every client's step is taken at once on their stacked rows: a block-diagonal graph, stacked links and one
    member matrix whose rows are the clients' own groups. Each client's rows still depend only on its own blocks
    and each summary's on its own client's members, so the messages are those of the client-by-client exchange;
    stacking is one sparse product per step instead of three per client (at 1,000 clients, 900,000 scipy calls
    over 300 steps). The Gram is still summed client by client, in the same order."""
    rng = np.random.default_rng(seed)
    summary_rows = rng.standard_normal((server.shape[0], k))
    sizes = [c.local.shape[0] for c in clients]
    samples = np.concatenate([rng.standard_normal((n, k)) for n in sizes]) if clients else np.zeros((0, k))
    bounds = np.cumsum([0, *sizes])
    local = _stacked([c.local for c in clients], bounds[:-1], int(bounds[-1]))  # block-diagonal
    links = _stacked([c.links for c in clients], np.zeros(len(clients), dtype=np.int64), server.shape[0])
    own = np.concatenate([c.own for c in clients]) if clients else np.zeros(0, dtype=np.int64)
    members = _placed(_stacked([c.members for c in clients], bounds[:-1], int(bounds[-1])), own, server.shape[0])
    owned = np.zeros(server.shape[0], dtype=bool)
    owned[own] = True
    share = np.where(owned, server_share, 1.0)[:, None]  # a summary no client claims walks on the server's graph
    for _ in range(iterations):
        from_members = members @ samples  # each client's message: one mean of its members per own group
        samples = (1 - restart) * (local @ samples) + restart * (links @ summary_rows)
        summary_rows = share * (server @ summary_rows) + (1 - share) * from_members
        gram = summary_rows.T @ summary_rows + sum(samples[a:b].T @ samples[a:b]  # each client's k x k, summed
                                                   for a, b in zip(bounds[:-1], bounds[1:]))
        transform = _orthonormalising(gram)
        summary_rows = summary_rows @ transform
        samples = samples @ transform
    return torch.from_numpy(summary_rows), [torch.from_numpy(samples[a:b]) for a, b in zip(bounds[:-1], bounds[1:])]


def _stacked(blocks: list[sp.csr_matrix], column_offsets: np.ndarray, columns: int) -> sp.csr_matrix:
    """The blocks' rows one after another, each block's columns shifted by its offset. Each row keeps its block's
    entry order (scipy's block_diag re-sorts), so a product sums in the same order as the block's own product."""
    if not blocks:
        return sp.csr_matrix((0, columns))
    starts = np.cumsum([0] + [b.nnz for b in blocks])
    indptr = np.concatenate([[0]] + [b.indptr[1:] + start for b, start in zip(blocks, starts)])
    indices = np.concatenate([b.indices.astype(np.int64) + offset for b, offset in zip(blocks, column_offsets)])
    return sp.csr_matrix((np.concatenate([b.data for b in blocks]), indices, indptr),
                         shape=(sum(b.shape[0] for b in blocks), columns))


def _placed(rows: sp.csr_matrix, at: np.ndarray, height: int) -> sp.csr_matrix:
    """A (height, columns) matrix whose row at[i] is row i of ``rows`` (entry order kept) and whose other rows are
    empty: every client's group rows placed at the server's rows of those groups. A summary is one client's group,
    so ``at`` is distinct; a repeat would misalign every later row, hence the check."""
    if len(np.unique(at)) != len(at):
        raise ValueError("two clients claim the same summary row")
    order = np.argsort(at, kind="stable")
    picked = rows[order]  # csr row indexing copies each row's entries in order
    lengths = np.zeros(height, dtype=np.int64)
    lengths[at[order]] = np.diff(picked.indptr)
    return sp.csr_matrix((picked.data, picked.indices, np.concatenate([[0], np.cumsum(lengths)])),
                         shape=(height, rows.shape[1]))


def walk_labels(summary_rows: Tensor, sample_rows: list[Tensor], k: int, seed: int = 0) -> list[Tensor]:
    """Each client's labels: its samples' nearest centre of the server's k-means of the summaries' unit rows."""
    centres = kmeans(F.normalize(summary_rows.float(), dim=1), k, niter=100, nredo=10, seed=seed).centroids
    centres = F.normalize(centres.float(), dim=1)
    return [(F.normalize(x.float(), dim=1) @ centres.T).argmax(1) for x in sample_rows]

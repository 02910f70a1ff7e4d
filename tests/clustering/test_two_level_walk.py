"""The two-level walk (fedclust/clustering/two_level_walk.py): its power steps find the walk's leading eigenvectors,
each client's message is one mean per own group, and its labels find clusters that span clients."""

import numpy as np
import pytest
import scipy.sparse as sp
import torch
import torch.nn.functional as F
from scipy.sparse.linalg import eigs
from sklearn.metrics import normalized_mutual_info_score

from fedclust.clustering.knn_vote import nearest_neighbors
from fedclust.clustering.summaries import fixed_groups, group_summaries
from fedclust.clustering.two_level_walk import (
    client_walk,
    server_walk,
    summary_scales,
    walk_labels,
    walk_rows,
)

K, GROUP = 3, 10


def _clients(num_clients=3, per_cluster=40, seed=0):
    """Three tight directions in R^8, every client holding some of each; its fixed groups of GROUP samples."""
    g = torch.Generator().manual_seed(seed)
    centres = F.normalize(torch.randn(K, 8, generator=g), dim=1) * 4
    rows, truth, groups = [], [], []
    for _ in range(num_clients):
        y = torch.arange(K).repeat_interleave(per_cluster)
        x = centres[y] + 0.5 * torch.randn(len(y), 8, generator=g)
        rows.append(x), truth.append(y), groups.append(fixed_groups(x, GROUP, seed))
    return rows, truth, groups


def _walks(rows, groups, links=3):
    summaries, owners = [], []
    for cid, (x, member) in enumerate(zip(rows, groups)):
        means, _ = group_summaries(x, member)
        summaries.append(means), owners.append(torch.full((len(means),), cid))
    summaries, owners = torch.cat(summaries), torch.cat(owners)
    scales = summary_scales(summaries, 3)
    walks = [client_walk(x, nearest_neighbors(x, 5), summaries, scales, member, (owners == cid).nonzero().squeeze(1),
                         links) for cid, (x, member) in enumerate(zip(rows, groups))]
    return walks, server_walk(summaries, 3), summaries


def test_each_clients_message_is_one_mean_of_its_own_groups_members():
    rows, _, groups = _clients()
    walks, _, _ = _walks(rows, groups)
    for walk, member in zip(walks, groups):
        m = walk.members.toarray()
        sizes = torch.bincount(member)
        assert m.shape == (len(sizes), len(member))
        for g, size in enumerate(sizes.tolist()):  # row g: 1 / size on exactly group g's members
            assert size >= GROUP
            np.testing.assert_allclose(m[g], (member == g).double().numpy() / size)
        for step in (walk.local, walk.links):  # both of a sample's steps are distributions
            np.testing.assert_allclose(np.asarray(step.sum(1)).ravel(), 1.0)
    owned = np.concatenate([w.own for w in walks])
    assert sorted(owned.tolist()) == list(range(len(owned)))  # every summary is one client's group


def test_the_power_steps_find_the_walks_leading_eigenvectors():
    rows, _, groups = _clients(seed=1)
    walks, server, _ = _walks(rows, groups)
    restart, share = 0.2, 0.5
    local = sp.block_diag([w.local for w in walks])
    links = sp.vstack([w.links for w in walks])
    members = sp.lil_matrix((server.shape[0], local.shape[0]))
    start = 0
    for w in walks:
        members[w.own, start:start + w.local.shape[0]] = w.members.toarray()
        start += w.local.shape[0]
    walk = sp.bmat([[(1 - restart) * local, restart * links], [(1 - share) * members.tocsr(), share * server]])
    values, vectors = eigs(walk.tocsc(), k=K, which="LR")
    assert np.abs(values.imag).max() < 1e-8
    exact = np.linalg.qr(vectors.real)[0]
    summary_rows, sample_rows = walk_rows(walks, server, K, restart, share, iterations=400, seed=0)
    found = np.linalg.qr(np.vstack([*(x.numpy() for x in sample_rows), summary_rows.numpy()]))[0]
    # the same subspace: every principal angle's cosine near 1
    assert np.linalg.svd(exact.T @ found, compute_uv=False).min() > 0.999


def _exchange_client_by_client(walks, server, k, restart, share, iterations, seed):
    """The power steps as the federated exchange runs them, one client at a time (the reference for walk_rows)."""
    rng = np.random.default_rng(seed)
    summary_rows = rng.standard_normal((server.shape[0], k))
    sample_rows = [rng.standard_normal((w.local.shape[0], k)) for w in walks]
    owned = np.zeros(server.shape[0], dtype=bool)
    owned[np.concatenate([w.own for w in walks])] = True
    shares = np.where(owned, share, 1.0)[:, None]
    for _ in range(iterations):
        from_members = np.zeros_like(summary_rows)
        for w, x in zip(walks, sample_rows):
            from_members[w.own] = w.members @ x  # the client's message
        sample_rows = [(1 - restart) * (w.local @ x) + restart * (w.links @ summary_rows)
                       for w, x in zip(walks, sample_rows)]
        summary_rows = shares * (server @ summary_rows) + (1 - shares) * from_members
        gram = summary_rows.T @ summary_rows + sum(x.T @ x for x in sample_rows)
        values, vectors = np.linalg.eigh(gram)
        transform = vectors / np.sqrt(np.maximum(values, 1e-12 * max(values.max(), 1e-300)))
        summary_rows, sample_rows = summary_rows @ transform, [x @ transform for x in sample_rows]
    return summary_rows, sample_rows


def test_the_stacked_steps_are_the_client_by_client_exchange_bit_for_bit():
    rows, _, groups = _clients(num_clients=5, per_cluster=50, seed=5)
    walks, server, summaries = _walks(rows[:4], groups[:4])
    guest = client_walk(rows[4], nearest_neighbors(rows[4], 5), summaries, summary_scales(summaries, 3),
                        torch.zeros(len(rows[4]), dtype=torch.long), torch.zeros(0, dtype=torch.long), 3)
    walks = [walks[0], guest, *walks[1:]]  # a client without groups among the others
    summary_rows, sample_rows = walk_rows(walks, server, K, 0.1, 0.5, iterations=50, seed=3)
    expected_summaries, expected_samples = _exchange_client_by_client(walks, server, K, 0.1, 0.5, 50, seed=3)
    assert np.array_equal(summary_rows.numpy(), expected_summaries)
    assert all(np.array_equal(x.numpy(), y) for x, y in zip(sample_rows, expected_samples, strict=True))


def test_labels_find_clusters_that_span_the_clients():
    rows, truth, groups = _clients(seed=2)
    walks, server, _ = _walks(rows, groups)
    summary_rows, sample_rows = walk_rows(walks, server, K, 0.1, 0.5, iterations=300, seed=0)
    labels = walk_labels(summary_rows, sample_rows, K, seed=0)
    assert [len(x) for x in labels] == [len(x) for x in rows]
    assert normalized_mutual_info_score(torch.cat(truth), torch.cat(labels)) == 1.0


def test_a_client_without_groups_this_round_still_walks_to_the_summaries():
    rows, truth, groups = _clients(seed=3)
    walks, server, summaries = _walks(rows[:2], groups[:2])
    scales = summary_scales(summaries, 3)
    guest = client_walk(rows[2], nearest_neighbors(rows[2], 5), summaries, scales, torch.zeros(len(rows[2]),
                        dtype=torch.long), torch.zeros(0, dtype=torch.long), 3)
    assert guest.members.shape == (0, len(rows[2])) and len(guest.own) == 0
    summary_rows, sample_rows = walk_rows([*walks, guest], server, K, 0.1, 0.5, iterations=300, seed=0)
    labels = walk_labels(summary_rows, sample_rows, K, seed=0)
    assert normalized_mutual_info_score(truth[2], labels[2]) == 1.0


def test_links_from_the_index_above_the_exact_size_are_a_samples_nearest_summaries(monkeypatch):
    pytest.importorskip("faiss")
    from fedclust.clustering import kmeans, two_level_walk

    if kmeans.backend_in_use("cpu") != "faiss-cpu":
        pytest.skip("the FAISS backend is not the one in use")
    rows, truth, groups = _clients(num_clients=8, per_cluster=120, seed=4)
    exact, server, summaries = _walks(rows, groups)
    monkeypatch.setattr(two_level_walk, "EXACT_LINK_SUMMARIES", len(summaries) // 2)  # the inverted file now
    indexed, _, _ = _walks(rows, groups)
    # Few summaries: the index has fewer cells than it probes, so this checks the wiring; the index's recall where
    # it is approximate is test_knn_vote's.
    for a, b in zip(exact, indexed):
        assert np.array_equal(a.links.indices, b.links.indices)
        np.testing.assert_allclose(a.links.data, b.links.data, rtol=1e-4)
    for walk in indexed:
        assert (walk.links.getnnz(axis=1) == 3).all()
    summary_rows, sample_rows = walk_rows(indexed, server, K, 0.1, 0.5, iterations=300, seed=0)
    labels = walk_labels(summary_rows, sample_rows, K, seed=0)
    assert normalized_mutual_info_score(torch.cat(truth), torch.cat(labels)) == 1.0

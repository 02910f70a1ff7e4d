"""k-FED on data it is built for: clients holding a few of many well-separated clusters."""

import pytest
import torch
from scipy.optimize import linear_sum_assignment

from fedclust.clustering.floor import floored_groups
from fedclust.clustering.kfed import (
    central_kfed,
    central_kfed_starts,
    lloyd,
    lloyd_torch,
    local_kfed,
    local_kfed_starts,
    top_right_singular_vectors,
)
from fedclust.clustering.kmeans import assign_nearest
from fedclust.clustering.metrics import nmi
from fedclust.errors import ConfigError
from fedclust.seeding import SERVER, generator

D, PER_BLOB = 10, 200
MEANS = 10.0 * torch.eye(4, D)  # 4 blobs, pairwise 14 apart, std 0.5


def _clients(seed: int = 0) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """4 clients; client c holds half of blob c and half of blob c+1 (mod 4)."""
    g = torch.Generator().manual_seed(seed)
    blobs = [MEANS[b] + 0.5 * torch.randn(PER_BLOB, D, generator=g) for b in range(4)]
    xs, ys = [], []
    for c in range(4):
        b1, b2 = c, (c + 1) % 4
        xs.append(torch.cat([blobs[b1][: PER_BLOB // 2], blobs[b2][PER_BLOB // 2 :]]))
        ys.append(torch.tensor([b1] * (PER_BLOB // 2) + [b2] * (PER_BLOB // 2)))
    return xs, ys


def _run(seed: int = 0):
    xs, _ = _clients()
    local = [local_kfed(x, 2, generator(seed, "kfed-local", c)) for c, x in enumerate(xs)]
    centres, global_of_local = central_kfed([c for c, _ in local], 4, generator(seed, "kfed", SERVER))
    return local, centres, global_of_local


def test_recovers_blob_means_and_both_labellings_are_perfect():
    xs, ys = _clients()
    local, centres, global_of_local = _run()
    assert centres.shape == (4, D)
    dist = torch.cdist(centres, MEANS)
    rows, cols = linear_sum_assignment(dist.numpy())
    assert dist[rows, cols].max() < 0.2  # 100-point means of std-0.5 blobs: error ~0.05 per coordinate
    paper = torch.cat([g[lab] for g, (_, lab) in zip(global_of_local, local)])
    nearest = torch.cat([assign_nearest(x, centres) for x in xs])
    truth = torch.cat(ys)
    assert nmi(paper, truth) == pytest.approx(1.0)
    assert nmi(nearest, truth) == pytest.approx(1.0)


def test_local_step_finds_each_clients_two_blobs():
    xs, ys = _clients()
    centres, labels = local_kfed(xs[0], 2, generator(0, "kfed-local", 0))
    assert centres.shape == (2, D) and labels.shape == (PER_BLOB,)
    assert nmi(labels, ys[0]) == pytest.approx(1.0)
    assert torch.allclose(centres[labels[0]], xs[0][: PER_BLOB // 2].mean(0), atol=1e-5)


def test_deterministic_given_the_generators():
    (l1, c1, g1), (l2, c2, g2) = _run(3), _run(3)
    assert torch.equal(c1, c2)
    assert all(torch.equal(a, b) for a, b in zip(g1, g2))
    assert all(torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) for a, b in zip(l1, l2))


def test_too_few_local_centres_is_a_config_error():
    with pytest.raises(ConfigError, match="method.init_args.k_local"):
        central_kfed([torch.randn(2, 3), torch.randn(1, 3)], 4, torch.Generator().manual_seed(0))


def test_k_local_larger_than_k():
    g = torch.Generator().manual_seed(0)
    local = [torch.randn(5, 3, generator=g) for _ in range(3)]
    centres, global_of_local = central_kfed(local, 3, torch.Generator().manual_seed(1))
    assert centres.shape == (3, 3)
    assert [t.shape[0] for t in global_of_local] == [5, 5, 5]
    assert all(int(t.min()) >= 0 and int(t.max()) < 3 for t in global_of_local)


def test_small_and_high_dimensional_clients():
    x = torch.randn(3, 4)
    centres, labels = local_kfed(x, 5, torch.Generator().manual_seed(0))
    assert torch.equal(centres, x) and labels.tolist() == [0, 1, 2]
    # d > n: the SVD has only n components
    g = torch.Generator().manual_seed(0)
    means = 20.0 * torch.randn(3, 50, generator=g)
    y = torch.arange(3).repeat_interleave(20)
    x = means[y] + torch.randn(60, 50, generator=g)
    centres, labels = local_kfed(x, 3, torch.Generator().manual_seed(1))
    assert nmi(labels, y) == pytest.approx(1.0)


@pytest.mark.parametrize("run", [lloyd, lloyd_torch], ids=["cpu-scikit-learn", "torch"])
def test_lloyd_reseeds_an_empty_cluster_at_the_farthest_point_like_scikit_learn(run):
    """Pins the official code's empty-cluster rule (its Lloyd is scikit-learn's KMeans(init=...)): the centre at
    100 gets no point, so it moves to 12, the point farthest from its own centre. The old loop kept it at 100
    (one k-FED run on Fashion-MNIST at p = 1 ended with 9 clusters that way)."""
    from sklearn.cluster import KMeans

    x = torch.tensor([[0.0], [1.0], [10.0], [12.0]])
    init = torch.tensor([[0.0], [10.0], [100.0]])
    centres, labels = run(x, init)
    assert centres[:, 0].tolist() == [0.5, 10.0, 12.0]
    assert labels.tolist() == [0, 0, 1, 2]
    ref = KMeans(3, init=init.numpy(), n_init=1, tol=0.0, algorithm="lloyd").fit(x.numpy())
    assert centres[:, 0].tolist() == ref.cluster_centers_[:, 0].tolist()


@pytest.mark.parametrize("run", [lloyd, lloyd_torch], ids=["cpu-scikit-learn", "torch"])
def test_lloyd_matches_scikit_learn_with_several_empty_clusters(run):
    """From a start with 4 of 8 centres far off (all empty at the first step), the iterates equal scikit-learn's
    Lloyd with tol 0 (which also stops only when the assignment is stable): the torch loop (the GPU path) takes
    the same steps as the CPU path."""
    from sklearn.cluster import KMeans

    g = torch.Generator().manual_seed(0)
    x = (MEANS[torch.arange(4).repeat(50)] + torch.randn(200, D, generator=g)).double()
    init = torch.cat([x[:4], 100.0 + torch.randn(4, D, generator=g, dtype=torch.float64)])
    centres, labels = run(x, init)
    ref = KMeans(8, init=init.numpy(), n_init=1, tol=0.0, algorithm="lloyd").fit(x.numpy())
    assert torch.bincount(labels, minlength=8).min() > 0
    assert labels.tolist() == ref.labels_.tolist()
    assert torch.allclose(centres, torch.from_numpy(ref.cluster_centers_), atol=1e-9)


def _client_centres(seed: int = 0) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(3, D, generator=g) + 5.0 * c for c in range(4)]


@pytest.mark.parametrize("start,client", [("first", 0), (2, 2), (3, 3)])
def test_central_step_starts_from_the_named_client(start, client):
    """Pins the official start (`local_estimators[:dev_k]`: the first client's centres) as the default, and that a
    client can be named; niter 0 returns the seeds, whose first k' rows are that client's centres."""
    local = _client_centres()
    seeds, _ = central_kfed(local, 5, torch.Generator().manual_seed(0), niter=0, start=start)
    assert torch.equal(seeds[:3], local[client])
    default, _ = central_kfed(local, 5, torch.Generator().manual_seed(0), niter=0)
    assert torch.equal(default[:3], local[0])


def test_central_random_start_draws_from_the_generator():
    local = _client_centres()
    starts = set()
    for seed in range(12):
        seeds, _ = central_kfed(local, 5, torch.Generator().manual_seed(seed), niter=0, start="random")
        starts.add(next(c for c in range(4) if torch.equal(seeds[:3], local[c])))
    assert len(starts) > 1


def test_central_start_outside_the_clients_is_a_config_error():
    with pytest.raises(ConfigError, match="method.init_args.central_start"):
        central_kfed(_client_centres(), 5, torch.Generator().manual_seed(0), start=4)


@pytest.mark.parametrize("n,d", [(300, 20), (15, 40)])
def test_top_right_singular_vectors_span_the_svd_subspace(n, d):
    """The Gram-matrix path (d <= n) and the SVD path (d > n) give the top-k right singular vectors of the SVD."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, d, generator=g) * torch.linspace(5.0, 0.1, d)  # distinct singular values
    ours = top_right_singular_vectors(x, 4)
    ref = torch.linalg.svd(x.double(), full_matrices=False).Vh[:4]
    assert ours.shape == (4, d)
    assert torch.allclose((ours.double() @ ref.T).abs(), torch.eye(4, dtype=torch.float64), atol=1e-4)


def _starts(r: int) -> list[torch.Generator]:
    return [torch.Generator().manual_seed(10 + i) for i in range(r)]


def test_each_start_sends_its_own_block_of_k_local_rows_from_its_own_generator():
    xs, _ = _clients()
    x = xs[0].view(-1, 2, D // 2)  # any shape: the samples are flattened
    centres, counts, labels = local_kfed_starts(x, 3, _starts(2), floor=1)
    assert centres.shape == (6, D) and counts.shape == (6,) and labels.shape == (2, len(x))
    for r, g in enumerate(_starts(2)):  # start r's rows r * 3 ... r * 3 + 2 are local k-FED with generator r
        means, sizes, local = floored_groups(xs[0], local_kfed(xs[0], 3, g)[1], 1)
        assert torch.equal(centres[3 * r:3 * r + 3], means) and torch.equal(counts[3 * r:3 * r + 3], sizes)
        assert torch.equal(labels[r], local)
    assert not torch.equal(labels[0], labels[1])  # two starts, two different draws


def test_a_row_the_floor_dissolved_or_k_local_above_n_is_sent_as_zeros_counted_0():
    x = torch.cat([torch.zeros(10, 2), torch.full((10, 2), 10.0), torch.full((2, 2), 50.0)])  # a cluster of 2
    centres, counts, labels = local_kfed_starts(x, 3, _starts(2), floor=5)
    for block in range(2):
        rows = slice(3 * block, 3 * block + 3)
        assert counts[rows].tolist()[2] == 0 and counts[rows].sum() == 22  # the 2 joined a kept cluster
        assert torch.equal(centres[3 * block + 2], torch.zeros(2))
        assert set(labels[block].tolist()) == {0, 1}
    few, few_counts, _ = local_kfed_starts(x[9:11], 4, _starts(1), floor=1)  # 2 samples, k' = 4: they are the centres
    assert few_counts.tolist() == [1, 1, 0, 0] and few.tolist() == [[0, 0], [10, 10], [0, 0], [0, 0]]
    none, none_counts, none_labels = local_kfed_starts(x[:4], 2, _starts(2), floor=5)  # below the floor
    assert not none.any() and not none_counts.any() and (none_labels == -1).all()


def test_the_server_clusters_each_starts_counted_rows_and_skips_a_client_that_sent_none():
    xs, _ = _clients()
    sent = [local_kfed_starts(x, 2, _starts(2), floor=1) for x in xs]
    empty = local_kfed_starts(xs[0][:3], 2, _starts(2), floor=5)  # below the floor: all rows counted 0
    payloads = [sent[0], empty, *sent[1:]]
    per_start = central_kfed_starts([c for c, _, _ in payloads], [n for _, n, _ in payloads], 4, 2,
                                    _starts(2))
    assert len(per_start) == 2
    for r, maps in enumerate(per_start):
        assert maps[1] is None and all(m is not None for i, m in enumerate(maps) if i != 1)
        _, direct = central_kfed([c[2 * r:2 * r + 2] for c, _, _ in sent], 4, _starts(2)[r])
        assert all(torch.equal(m, d) for m, d in zip([maps[0], *maps[2:]], direct))
        # the paper's labelling through each start's maps: every blob is one global cluster
        truth = torch.cat([y for y in _clients()[1]])
        pred = torch.cat([maps[i + (i > 0)][labels[r]] for i, (_, _, labels) in enumerate(sent)])
        assert nmi(truth, pred) == pytest.approx(1.0)

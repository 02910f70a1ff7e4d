"""Fuzzy c-means against hand-computed memberships and centre updates, the on-a-centre guard, blobs, and
the agreement of dtypes, chunk sizes and devices."""

import math

import pytest
import torch
from sklearn.datasets import make_blobs
from sklearn.metrics import normalized_mutual_info_score

from fedclust.clustering.fcm import fcm, memberships
from fedclust.errors import ConfigError

X1 = torch.tensor([[0.0], [2.0], [4.0]])
C1 = torch.tensor([[1.0], [5.0]])


def test_memberships_match_the_formula_by_hand():
    # m = 2: u_ik = 1 / sum_j (d_ik / d_ij)^2. Distances to (1, 5): x=0 -> (1, 5), x=2 -> (1, 3), x=4 -> (3, 1).
    expected = torch.tensor([[1 / (1 + 1 / 25), 1 / (1 + 25)],
                             [1 / (1 + 1 / 9), 1 / (1 + 9)],
                             [1 / (1 + 9), 1 / (1 + 1 / 9)]])
    assert torch.allclose(memberships(X1, C1, m=2.0), expected, atol=1e-6)
    # m = 3: exponent 2 / (m - 1) = 1, so u = 1 / sum_j d_ik / d_ij: x=0 -> 5/6 and 1/6.
    u3 = memberships(X1, C1, m=3.0)
    assert u3[0].tolist() == pytest.approx([5 / 6, 1 / 6], abs=1e-6)
    assert u3[1].tolist() == pytest.approx([3 / 4, 1 / 4], abs=1e-6)


def test_one_centre_update_by_hand():
    u = [[25 / 26, 1 / 26], [9 / 10, 1 / 10], [1 / 10, 9 / 10]]  # memberships to C1, from the test above
    xs = [0.0, 2.0, 4.0]
    by_hand = [sum(u[i][k] ** 2 * xs[i] for i in range(3)) / sum(u[i][k] ** 2 for i in range(3)) for k in range(2)]
    result = fcm(X1, 2, m=2.0, max_iter=1, tol=0.0, init_centres=C1)
    assert result.n_iter == 1
    assert result.centres.squeeze(1).tolist() == pytest.approx(by_hand, abs=1e-6)
    # what comes back belongs to the returned centres
    u_new = memberships(X1, result.centres)
    assert torch.allclose(result.memberships, u_new, atol=1e-6)
    assert torch.allclose(result.supports, u_new.sum(0), atol=1e-6)
    assert result.labels.tolist() == [0, 0, 1]
    d2 = (X1 - result.centres.T) ** 2
    assert result.objective == pytest.approx(float((u_new**2 * d2).sum()), rel=1e-5)


def test_a_point_on_a_centre_gets_full_membership_and_no_nan():
    x = torch.tensor([[1.0], [3.0], [5.0]])
    u = memberships(x, torch.tensor([[1.0], [1.0], [5.0]]))
    assert torch.isfinite(u).all()
    assert u[0].tolist() == [0.5, 0.5, 0.0]  # on two centres: split equally
    assert u[2].tolist() == [0.0, 0.0, 1.0]
    assert u.sum(1).tolist() == pytest.approx([1.0, 1.0, 1.0])
    # a whole run whose start sits on data points (and on each other) stays finite
    result = fcm(torch.tensor([[0.0], [0.0], [1.0], [9.0], [10.0]]), 2, init_centres=torch.tensor([[0.0], [0.0]]))
    assert torch.isfinite(result.centres).all() and torch.isfinite(result.memberships).all()


def test_m_close_to_one_neither_overflows_nor_loses_a_centre():
    x = torch.tensor([[0.0], [1e-3], [50.0], [50.001]])
    result = fcm(x, 2, m=1.01, init_centres=torch.tensor([[10.0], [40.0]]))
    assert torch.isfinite(result.memberships).all()
    assert sorted(result.centres.squeeze(1).tolist()) == pytest.approx([5e-4, 50.0005], abs=1e-3)


def test_objective_never_increases():
    x = torch.from_numpy(make_blobs(600, 5, centers=4, cluster_std=2.0, random_state=1)[0]).double()
    start = x[:4].clone()
    objectives = [fcm(x, 4, max_iter=t, tol=0.0, init_centres=start).objective for t in range(1, 15)]
    assert all(b <= a * (1 + 1e-12) for a, b in zip(objectives, objectives[1:]))


@pytest.mark.parametrize("init", ["kmeans++", "random"])
def test_recovers_separated_blobs(init):
    x, y = make_blobs(3000, 8, centers=5, cluster_std=0.5, random_state=0)
    result = fcm(torch.from_numpy(x).float(), 5, generator=torch.Generator().manual_seed(0), init=init)
    assert normalized_mutual_info_score(y, result.labels.numpy()) == pytest.approx(1.0)
    assert result.supports.sum().item() == pytest.approx(3000, rel=1e-5)
    assert result.n_iter < 1000  # converged, not stopped by max_iter


def test_float64_and_chunked_paths_agree_with_float32():
    x = torch.from_numpy(make_blobs(2000, 6, centers=3, cluster_std=1.5, random_state=2)[0]).float()
    kw = dict(m=2.0, max_iter=30, tol=0.0, init_centres=x[:3].clone())
    ref = fcm(x, 3, **kw)
    chunked = fcm(x, 3, chunk_size=333, **kw)
    double = fcm(x.double(), 3, chunk_size=128, **kw)
    assert double.centres.dtype == torch.float64 and ref.centres.dtype == torch.float32
    assert torch.allclose(chunked.centres, ref.centres, atol=1e-5)
    assert torch.allclose(double.centres.float(), ref.centres, atol=1e-4)
    assert torch.equal(chunked.labels, ref.labels) and torch.equal(double.labels, ref.labels)
    assert math.isclose(double.objective, ref.objective, rel_tol=1e-5)
    assert torch.allclose(memberships(x, ref.centres, chunk_size=7), memberships(x, ref.centres), atol=1e-6)


def test_the_same_generator_gives_the_same_result():
    x = torch.from_numpy(make_blobs(500, 4, centers=3, random_state=3)[0]).float()
    a = fcm(x, 3, generator=torch.Generator().manual_seed(5), init="random")
    b = fcm(x, 3, generator=torch.Generator().manual_seed(5), init="random")
    assert torch.equal(a.centres, b.centres)


def test_bad_requests():
    with pytest.raises(ConfigError, match="m = 1.0"):
        fcm(X1, 2, m=1.0, init_centres=C1)
    with pytest.raises(ConfigError, match="num_clusters"):
        fcm(X1, 4, init_centres=C1)
    with pytest.raises(ValueError, match="generator"):
        fcm(X1, 2)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_matches_cpu():
    x = torch.from_numpy(make_blobs(5000, 16, centers=6, cluster_std=2.0, random_state=4)[0]).float()
    kw = dict(max_iter=50, tol=0.0, init_centres=x[:6].clone())
    cpu, gpu = fcm(x, 6, **kw), fcm(x.cuda(), 6, **kw)
    assert gpu.centres.is_cuda
    assert torch.allclose(gpu.centres.cpu(), cpu.centres, atol=1e-3)

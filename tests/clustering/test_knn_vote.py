import torch

from fedclust.clustering.knn_vote import knn_vote


def _two_blobs(n=50, seed=0):
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(n, 8, generator=g) * 0.1 + torch.tensor([1.0] + [0.0] * 7)
    b = torch.randn(n, 8, generator=g) * 0.1 + torch.tensor([0.0, 1.0] + [0.0] * 6)
    return torch.cat([a, b]), torch.cat([torch.zeros(n, dtype=torch.long), torch.ones(n, dtype=torch.long)])


def test_a_minority_mislabelled_inside_a_blob_takes_its_neighbours_label():
    x, truth = _two_blobs()
    noisy = truth.clone()
    noisy[[3, 7, 60]] = 1 - noisy[[3, 7, 60]]  # three samples carry the other blob's label
    assert torch.equal(knn_vote(x, noisy, neighbors=5), truth)


def test_zero_neighbours_keeps_the_labels_and_does_not_alias_them():
    x, truth = _two_blobs()
    out = knn_vote(x, truth, neighbors=0)
    assert torch.equal(out, truth) and out.data_ptr() != truth.data_ptr()


def test_labels_that_agree_with_the_geometry_are_kept_whatever_the_chunk():
    x, truth = _two_blobs(n=30)
    assert torch.equal(knn_vote(x, truth, neighbors=10, chunk=7), truth)

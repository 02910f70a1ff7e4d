import pytest
import torch

from fedclust.clustering.knn_vote import knn_vote, similar_rows_search


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


def _unit_rows(n, d=16, seed=0):
    return torch.nn.functional.normalize(torch.randn(n, d, generator=torch.Generator().manual_seed(seed)), dim=1)


def test_the_exact_search_is_each_querys_top_k_by_inner_product_whatever_the_chunk():
    base, queries = _unit_rows(300), _unit_rows(70, seed=1)
    similarity, found = similar_rows_search(base, 4, chunk=16)(queries)
    full = queries @ base.T
    assert found.shape == (70, 4) and torch.equal(found, full.topk(4, dim=1).indices)
    assert torch.allclose(similarity, full.gather(1, found))


def test_above_the_exact_size_the_index_finds_nearly_every_true_neighbour_and_reports_their_similarities():
    pytest.importorskip("faiss")
    from fedclust.clustering import kmeans

    if kmeans.backend_in_use("cpu") != "faiss-cpu":
        pytest.skip("the FAISS backend is not the one in use")
    centres = _unit_rows(20, seed=2) * 3  # clustered rows, as summaries are: an inverted file's cells fit them
    g = torch.Generator().manual_seed(3)
    base = torch.nn.functional.normalize(centres[torch.arange(4000) % 20] + torch.randn(4000, 16, generator=g), dim=1)
    queries = torch.nn.functional.normalize(centres[torch.arange(500) % 20] + torch.randn(500, 16, generator=g), dim=1)
    similarity, found = similar_rows_search(base, 5, exact_rows=1000)(queries)
    truth = (queries @ base.T).topk(5, dim=1).indices
    recall = sum(len(set(a) & set(b)) for a, b in zip(found.tolist(), truth.tolist())) / truth.numel()
    assert recall > 0.9 and (found >= 0).all()
    assert torch.allclose(similarity, (queries[:, None] * base[found]).sum(-1), atol=1e-5)
    assert torch.equal(similarity, similarity.sort(1, descending=True).values)  # best first, as topk gives them

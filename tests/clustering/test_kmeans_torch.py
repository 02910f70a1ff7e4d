"""The torch k-means backend (fedclust/clustering/torch_kmeans.py), backend selection, and FAISS being optional.

Inertia against scikit-learn on blobs and digits, in both geometries, runs for both backends in
test_kmeans.py; here: what only the torch backend promises (restarts, chunking, empty clusters, seeding from
the given seed only, CUDA) and that fedclust works with FAISS absent."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
from sklearn.cluster import KMeans
from sklearn.datasets import load_digits, make_blobs

from fedclust.clustering import kmeans as km_mod
from fedclust.clustering import torch_kmeans as tk
from fedclust.clustering.kmeans import backend_in_use, kmeans, set_backend
from fedclust.errors import ConfigError
from tests.conftest import tiny_ccfc


@pytest.fixture
def torch_backend():
    previous = set_backend("torch")
    yield
    set_backend(previous)


@pytest.fixture
def no_faiss(monkeypatch):
    """FAISS absent: `import faiss` raises ImportError, as on a machine without it."""
    monkeypatch.setitem(sys.modules, "faiss", None)
    km_mod._faiss.cache_clear()
    yield
    km_mod._faiss.cache_clear()


@pytest.fixture(scope="module")
def digits() -> torch.Tensor:
    return torch.from_numpy(load_digits().data.astype(np.float32))


def test_fedclust_imports_and_clusters_without_faiss():
    """Pins FAISS as optional: with `faiss` unimportable every fedclust module imports (the old kmeans.py
    imported faiss at module level and failed here) and kmeans runs on torch, within 1% of sklearn."""
    code = textwrap.dedent("""
        import importlib, pkgutil, sys
        sys.modules["faiss"] = None
        import numpy as np, torch, fedclust
        from sklearn.cluster import KMeans
        from sklearn.datasets import load_digits
        for m in pkgutil.walk_packages(fedclust.__path__, "fedclust."):
            if not m.name.endswith(".__main__"):  # a command (fedclust, fedclust.cli_schema), not a module
                importlib.import_module(m.name)
        from fedclust.clustering.kmeans import backend_in_use, kmeans
        assert backend_in_use("cpu") == "torch-cpu", backend_in_use("cpu")
        x = load_digits().data.astype(np.float32)
        sk = KMeans(10, n_init=10, random_state=0).fit(x)
        ratio = kmeans(torch.from_numpy(x), 10, nredo=10).inertia / sk.inertia_
        assert ratio <= 1.01, ratio
        print("ok", ratio)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.startswith("ok")


def test_ccfc_run_without_faiss(no_faiss, run_fit):
    """A whole CCFC run (local and server k-means every round) completes on the torch backend alone."""
    assert backend_in_use("cpu") == "torch-cpu"
    assert 0 <= run_fit(tiny_ccfc())["nmi"] <= 1


def test_backend_selection_and_names(monkeypatch):
    """Pins the documented dispatch: auto = FAISS on the CPU when installed, torch on CUDA without a FAISS
    GPU build; a forced backend wins; unknown names and a forced FAISS without FAISS are ConfigErrors."""
    previous = set_backend("auto")
    try:
        if km_mod._faiss() is not None:
            assert backend_in_use("cpu") == "faiss-cpu"
        monkeypatch.setattr(km_mod, "_faiss_gpu_available", lambda: False)
        assert backend_in_use("cuda") == "torch-cuda"
        assert set_backend("torch") == "auto" and km_mod.get_backend() == "torch"
        assert backend_in_use("cpu") == "torch-cpu"
        with pytest.raises(ConfigError, match="kmeans_backend"):
            set_backend("sklearn")
        monkeypatch.setitem(sys.modules, "faiss", None)
        km_mod._faiss.cache_clear()
        set_backend("faiss")
        with pytest.raises(ConfigError, match="FAISS is not installed"):
            kmeans(torch.randn(20, 2), 2)
        set_backend("auto")
        assert backend_in_use("cpu") == "torch-cpu"
    finally:
        km_mod._faiss.cache_clear()
        set_backend(previous)


def test_backend_from_environment():
    code = "from fedclust.clustering.kmeans import get_backend; print(get_backend())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "FEDCLUST_KMEANS_BACKEND": "torch"})
    assert out.stdout.strip() == "torch", out.stderr[-1000:]


def test_restarts_keep_the_lowest_inertia(torch_backend, digits):
    """Restarts draw in turn from one generator, so nredo = r starts with the nredo = r - 1 runs: the kept
    inertia can only go down with r, and on digits more restarts find a strictly better solution."""
    improved = False
    for seed in range(4):
        inertias = [kmeans(digits, 10, nredo=r, seed=seed).inertia for r in (1, 2, 5)]
        assert inertias[0] >= inertias[1] >= inertias[2]
        improved |= inertias[2] < inertias[0]
    assert improved


def test_seeding_draws_only_from_the_given_seed(torch_backend, digits):
    """Same seed, same result; the global torch RNG is neither read nor advanced."""
    torch.manual_seed(123)
    state = torch.get_rng_state()
    a = kmeans(digits, 10, nredo=2, seed=7)
    assert torch.equal(torch.get_rng_state(), state)
    torch.manual_seed(999)
    b = kmeans(digits, 10, nredo=2, seed=7)
    assert torch.equal(a.labels, b.labels) and torch.equal(a.centroids, b.centroids)


@pytest.mark.parametrize("cosine", [False, True])
def test_chunking_does_not_change_the_result(torch_backend, monkeypatch, digits, cosine):
    """Pins bounded memory without a different answer: 50-row distance chunks and 64-row sum blocks give
    the labels of one-chunk passes and centroids equal to float rounding."""
    whole = kmeans(digits, 10, nredo=2, seed=1, cosine=cosine)
    monkeypatch.setattr(tk, "CHUNK_BYTES", 4 * (10 + 64) * 50)
    monkeypatch.setattr(tk, "SUM_BLOCK", 64)
    assert tk._chunks(len(digits), 10, 64)[1] == 50
    chunked = kmeans(digits, 10, nredo=2, seed=1, cosine=cosine)
    assert torch.equal(whole.labels, chunked.labels)
    assert torch.allclose(whole.centroids, chunked.centroids, atol=1e-4)


def test_empty_cluster_moves_to_the_farthest_point():
    """A centroid that wins no point takes the point farthest from its centroid; Lloyd then splits the
    two-blob data into three non-empty clusters with lower inertia than two clusters."""
    x = torch.cat([torch.zeros(20, 2), torch.full((20, 2), 10.0)]) + torch.linspace(0, 1, 40)[:, None]
    init = torch.tensor([[0.0, 0.0], [10.0, 10.0], [1000.0, 1000.0]])
    xs = x.pow(2).sum(1)
    labels, dist = tk.assign(x, xs, init)
    assert torch.bincount(labels, minlength=3)[2] == 0
    moved = tk._update(x, labels, dist, 3, cosine=False)
    assert torch.equal(moved[2], x[int(dist.argmax())])
    c, labels, dist = tk.lloyd(x, xs, init, 20, cosine=False)
    assert (torch.bincount(labels, minlength=3) > 0).all()
    two = float(tk.lloyd(x, xs, init[:2], 20, cosine=False)[2].sum())
    assert float(dist.sum()) < two


def test_cosine_centroids_are_unit_and_assignment_is_argmax_cosine(torch_backend, digits):
    res = kmeans(digits * torch.rand(len(digits), 1) * 5, 10, nredo=2, seed=0, cosine=True)  # norms must not matter
    assert torch.allclose(res.centroids.norm(dim=1), torch.ones(10), atol=1e-5)
    cos = torch.nn.functional.normalize(digits, dim=1) @ res.centroids.T
    assert torch.equal(res.labels, cos.argmax(1))


def test_k_one_is_the_mean(torch_backend):
    x = torch.randn(5000, 3, dtype=torch.float64) + 1000.0
    res = kmeans(x, 1)
    assert torch.allclose(res.centroids.double(), x.mean(0, keepdim=True), rtol=0, atol=1e-3)
    assert (res.labels == 0).all()


@pytest.mark.gpu
def test_cuda_backend_matches_sklearn_and_cpu():
    """On CUDA (no FAISS GPU needed): results on the data's device, inertia within 1% of sklearn, and the
    same seeding draws as on the CPU (one CPU generator), hence the same partition of well-separated blobs."""
    previous = set_backend("torch")
    try:
        x, _ = make_blobs(20_000, 16, centers=10, cluster_std=1.0, random_state=0)
        x = torch.from_numpy(x.astype(np.float32))
        sk = KMeans(10, n_init=10, random_state=0).fit(x.numpy())
        gpu = kmeans(x.cuda(), 10, nredo=3, seed=0)
        cpu = kmeans(x, 10, nredo=3, seed=0)
        assert gpu.labels.is_cuda and gpu.centroids.is_cuda
        assert gpu.inertia / sk.inertia_ <= 1.01
        assert torch.equal(gpu.labels.cpu(), cpu.labels)
        assert gpu.inertia == pytest.approx(cpu.inertia, rel=1e-4)
        assert backend_in_use("cuda") in ("torch-cuda",)
    finally:
        set_backend(previous)


def test_backend_chosen_holds_for_the_block_and_gives_the_earlier_choice_back():
    from fedclust.clustering.kmeans import backend_chosen

    previous = set_backend("faiss")
    try:
        with backend_chosen("torch"):
            assert backend_in_use("cpu") == "torch-cpu"
        with backend_chosen("auto"):  # auto names no choice: the earlier one stays
            assert set_backend("faiss") == "faiss"
        with pytest.raises(RuntimeError), backend_chosen("torch"):
            raise RuntimeError("a run that fails")
        assert set_backend("faiss") == "faiss"  # given back after the failure too
    finally:
        set_backend(previous)

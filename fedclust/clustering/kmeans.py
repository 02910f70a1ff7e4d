"""k-means with two backends (FAISS, or exact Lloyd on torch), plus the torch pieces the methods build on.

`kmeans` trains on every point (FAISS subsamples to 256*k by default, REFERENCE.md "Library facts"),
works in squared Euclidean or cosine geometry, and returns tensors on the input's device.
`assign_nearest` and `kmeans_plusplus_init` are plain torch, so they run on any device and draw only
from the generator they are given (never a global RNG).

Backends (`set_backend`, or the environment variable FEDCLUST_KMEANS_BACKEND read at import):
- "auto" (default): FAISS-GPU when the data is on CUDA and FAISS was built with GPU support, else torch on
  CUDA; on the CPU FAISS when it is installed, else torch. FAISS is optional: it is imported on first use
  only, and without it everything runs on the torch backend (fedclust/clustering/torch_kmeans.py).
- "faiss": always FAISS (GPU index when the data is on CUDA and FAISS has GPUs); a ConfigError without it.
- "torch": always the torch backend, on the data's device.
The two backends seed differently (FAISS's k-means++ or uniform seeding vs greedy k-means++ from a torch
generator), so the same seed gives different, equally valid clusterings; each is deterministic per seed.
`backend_in_use(device)` names the one a call on that device runs, for the run's log.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Iterator
from dataclasses import dataclass
from types import ModuleType

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from fedclust.clustering.torch_kmeans import torch_kmeans
from fedclust.errors import ConfigError

_CHUNK_BYTES = 256 * 2**20  # bound on the temporary (rows x k) score matrices
BACKENDS = ("auto", "faiss", "torch")


@dataclass
class KMeansResult:
    """Centroids (k, d) float32, labels (N,) int64, and the inertia: the sum of squared distances of
    every point to its assigned centroid in the geometry used (unit-normalised points when cosine)."""

    centroids: Tensor
    labels: Tensor
    inertia: float


def _check_k(k: int, n: int) -> None:
    if k < 1 or k > n:
        raise ConfigError("num_clusters", k, f"at least 1 and at most the {n} points being clustered")


def _rows_per_chunk(k: int, d: int, itemsize: int = 4) -> int:
    return max(1, _CHUNK_BYTES // (itemsize * (k + d)))


def _check_backend(name: str) -> str:
    if name not in BACKENDS:
        raise ConfigError("kmeans_backend", name, f"one of {', '.join(BACKENDS)}")
    return name


_backend = os.environ.get("FEDCLUST_KMEANS_BACKEND", "auto")


def set_backend(name: str) -> str:
    """Select the k-means backend for every later `kmeans` call ("auto", "faiss" or "torch"); returns the
    previous choice so a caller can restore it."""
    global _backend
    previous, _backend = _backend, _check_backend(name)
    return previous


def get_backend() -> str:
    """The selected backend name ("auto", "faiss" or "torch")."""
    return _backend


@functools.cache
def _faiss() -> ModuleType | None:
    """FAISS if it imports, else None (looked up once; a module set to None in sys.modules counts as absent)."""
    try:
        import faiss
    except ImportError:
        return None
    return faiss


def _faiss_gpu_available() -> bool:
    faiss = _faiss()
    return (faiss is not None and torch.cuda.is_available() and hasattr(faiss, "get_num_gpus")
            and faiss.get_num_gpus() > 0)


@contextlib.contextmanager
def backend_chosen(name: str) -> Iterator[None]:
    """`name` as the backend while the block runs, the previous choice after it; "auto" leaves the choice
    as it is (FEDCLUST_KMEANS_BACKEND or an earlier set_backend)."""
    previous = set_backend(name) if name != "auto" else None
    try:
        yield
    finally:
        if previous is not None:
            set_backend(previous)


def backend_in_use(device: torch.device | str = "cpu") -> str:
    """What `kmeans` runs on data on `device`: "faiss-gpu", "faiss-cpu", "torch-cuda" or "torch-cpu"."""
    name, on_gpu = _check_backend(_backend), torch.device(device).type == "cuda"
    if name == "faiss" and _faiss() is None:
        raise ConfigError("kmeans_backend", name, '"auto" or "torch" (FAISS is not installed: pip install faiss-cpu)')
    if name == "torch" or _faiss() is None or (on_gpu and name == "auto" and not _faiss_gpu_available()):
        return "torch-cuda" if on_gpu else "torch-cpu"
    return "faiss-gpu" if on_gpu and _faiss_gpu_available() else "faiss-cpu"


def _init_method(faiss: ModuleType) -> dict:
    # k-means++ seeding like scikit-learn (which the papers' baselines ran): FAISS's default uniform
    # seeding often merges two well-separated blobs (measured: 1.3-7x sklearn's inertia on blobs).
    kpp = getattr(faiss, "ClusteringInitMethod_KMEANS_PLUS_PLUS", None)  # FAISS >= 1.13
    return {} if kpp is None else {"init_method": kpp}


def kmeans(
    x: Tensor,
    k: int,
    *,
    niter: int = 100,
    nredo: int = 1,
    seed: int = 0,
    cosine: bool = False,
    use_gpu: bool | None = None,
    init_centroids: Tensor | None = None,
) -> KMeansResult:
    """Lloyd's k-means of the rows of `x` (N, d) into `k` clusters on the selected backend (module docstring).

    cosine: L2-normalise the rows and run spherical k-means (unit centroids, argmax cosine assignment).
    nredo: restarts from different k-means++ seedings (uniform seeding on FAISS < 1.13); the one with the
    lowest inertia is kept.
    init_centroids: (k, d) warm start; it replaces the seeding, so `nredo` is ignored with it.
    use_gpu: None runs where `x` is (CUDA or CPU); True on the GPU (FAISS-GPU, or torch on CUDA), False on
    the CPU. Results come back on x's device either way.
    Raises ConfigError when k > N. With k == N every point becomes a centroid.
    """
    if x.ndim != 2:
        raise ValueError(f"kmeans expects a 2-D tensor (N, d), got shape {tuple(x.shape)}")
    n, d = x.shape
    _check_k(k, n)
    if use_gpu and not torch.cuda.is_available():
        raise ConfigError("use_gpu", True, "a CUDA GPU visible to torch, or use_gpu None/False")
    device = torch.device("cuda") if use_gpu else torch.device("cpu") if use_gpu is False else x.device
    backend = backend_in_use(device)
    if use_gpu and backend == "faiss-cpu":
        raise ConfigError("use_gpu", True, "a FAISS build with GPU support (faiss-gpu), or kmeans backend torch")
    init = None
    if init_centroids is not None:
        if tuple(init_centroids.shape) != (k, d):
            raise ValueError(f"init_centroids must have shape {(k, d)}, got {tuple(init_centroids.shape)}")
        init = init_centroids.detach().to(device, torch.float32)

    if backend.startswith("torch"):
        xt = x.detach().to(device, torch.float32)
        centroids, labels = torch_kmeans(xt, k, niter=niter, nredo=nredo, seed=seed, cosine=cosine,
                                         init_centroids=init)
        if cosine:
            xt = F.normalize(xt, dim=1)
    else:
        xt, centroids, labels = _faiss_kmeans(x, k, niter, nredo, seed, cosine, backend == "faiss-gpu", init)
    inertia = _inertia(xt, centroids, labels)
    return KMeansResult(centroids.to(x.device), labels.to(x.device), inertia)


def _faiss_kmeans(x: Tensor, k: int, niter: int, nredo: int, seed: int, cosine: bool, gpu: bool,
                  init: Tensor | None) -> tuple[Tensor, Tensor, Tensor]:
    """faiss.Kmeans on every point: (the CPU float32 points clustered, centroids, labels)."""
    faiss = _faiss()
    n, d = x.shape
    xt = x.detach().to("cpu", torch.float32)
    if cosine:
        xt = F.normalize(xt, dim=1)
    xn = np.ascontiguousarray(xt.numpy())
    if init is not None:
        it = init.cpu()
        init = np.ascontiguousarray((F.normalize(it, dim=1) if cosine else it).numpy())
        nredo = 1  # every redo would start from the given centroids again: pointless work
    km = faiss.Kmeans(
        d,
        k,
        niter=niter,
        nredo=nredo,
        seed=seed,
        spherical=cosine,
        gpu=gpu,
        # Train on every point (default 256*k subsample), and no "provide at least 39*k points"
        # warning on small sets: k <= N is all Lloyd's algorithm needs.
        max_points_per_centroid=-(-n // k),
        min_points_per_centroid=1,
        verbose=False,
        **_init_method(faiss),
    )
    km.train(xn, init_centroids=init)
    # One more assignment to the final centroids, so labels and inertia match what we return.
    _, idx = km.assign(xn)
    return xt, torch.from_numpy(km.centroids.copy()), torch.from_numpy(idx.astype(np.int64))


def _inertia(x: Tensor, centroids: Tensor, labels: Tensor) -> float:
    """Exact sum of squared distances to the assigned centroid, accumulated in float64, chunked."""
    total = 0.0
    step = _rows_per_chunk(1, x.shape[1], 8)
    for s in range(0, x.shape[0], step):
        diff = x[s : s + step].double() - centroids[labels[s : s + step]].double()
        total += float(diff.pow(2).sum())
    return total


def assign_nearest(x: Tensor, centroids: Tensor, cosine: bool = False) -> Tensor:
    """Index of the nearest centroid of each row of `x`: argmax cosine similarity when `cosine`,
    else argmin squared Euclidean distance. Runs in torch on `x`'s device in chunks of <= ~256 MB."""
    c = centroids.to(device=x.device, dtype=x.dtype)
    if cosine:
        c = F.normalize(c, dim=1)
    else:
        c_sq = c.pow(2).sum(1)  # ||x||^2 is the same for every centroid, so argmin needs only this
    out = torch.empty(x.shape[0], dtype=torch.long, device=x.device)
    step = _rows_per_chunk(c.shape[0], x.shape[1], x.element_size())
    for s in range(0, x.shape[0], step):
        xc = x[s : s + step]
        if cosine:
            out[s : s + step] = (F.normalize(xc, dim=1) @ c.T).argmax(1)
        else:
            out[s : s + step] = (c_sq - 2.0 * (xc @ c.T)).argmin(1)
    return out


def kmeans_plusplus_init(x: Tensor, k: int, generator: torch.Generator) -> Tensor:
    """k-means++ seeding (Arthur & Vassilvitskii 2007): k rows of `x` (a copy), the first uniform, each
    next one drawn with probability proportional to its squared distance to the nearest chosen row.

    All draws come from `generator` (on any device; the probabilities are moved to it). When every
    remaining point coincides with a chosen one (duplicates), the next is drawn uniformly."""
    return x[kmeans_plusplus_indices(x, k, generator)].clone()


def kmeans_plusplus_indices(x: Tensor, k: int, generator: torch.Generator) -> Tensor:
    """The row indices (k,) int64 on `x`'s device that `kmeans_plusplus_init` picks."""
    n = x.shape[0]
    _check_k(k, n)
    gdev = generator.device
    xf = x.detach().float()
    x_sq = xf.pow(2).sum(1)

    def sq_dist_to(row: Tensor) -> Tensor:
        return (x_sq - 2.0 * (xf @ row) + row.pow(2).sum()).clamp_min_(0.0)

    chosen = [int(torch.randint(n, (1,), generator=generator, device=gdev))]
    d2 = sq_dist_to(xf[chosen[0]])
    for _ in range(1, k):
        p = d2.to(device=gdev, dtype=torch.float64)
        p[torch.tensor(chosen, device=gdev)] = 0.0  # rounding can leave a chosen row slightly > 0
        if not p.sum() > 0:
            p = torch.ones(n, dtype=torch.float64, device=gdev)
            p[torch.tensor(chosen, device=gdev)] = 0.0  # k <= n, so some row is left
        chosen.append(int(torch.multinomial(p, 1, generator=generator)))
        d2 = torch.minimum(d2, sq_dist_to(xf[chosen[-1]]))
    return torch.tensor(chosen, dtype=torch.long, device=x.device)

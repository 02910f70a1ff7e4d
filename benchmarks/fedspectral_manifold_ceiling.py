"""Would another central clustering of FedSpectral's space beat spectral clustering? N2D's recipe (McConville et al.,
ICPR 2020: a manifold embedding by UMAP, then k-means or a Gaussian mixture on it; 0.684 NMI on Fashion-MNIST)
against the recluster script's ceiling (spectral clustering of every sample on a 5-nearest-neighbour graph), on the
trained model's space (unit pixels beside unit trunk features) and on the unit pixels alone (issue 22).

If a manifold step scored clearly above spectral clustering in the same space, the server's spectral step would be
the part to replace; if it ties, the limit is the space itself (what the trunk learns), as the earlier passes say.
Labels are read only to score, and the run must be a TRAINING-split run (the recluster script's ``load`` refuses a
test-split one).

UMAP is not a fedclust dependency (it needs numba): ``pip install umap-learn`` in a separate environment
(``python -m venv --system-site-packages ENV``) before running this.

Usage: python -m benchmarks.fedspectral_manifold_ceiling RUN_FOLDER... [--umap-neighbors 15 30] [--dims 10]
Results: benchmarks/results/fedspectral_recluster.md ("Fourteenth pass").
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from sklearn.cluster import KMeans
from sklearn.metrics import normalized_mutual_info_score
from sklearn.mixture import GaussianMixture

from benchmarks.fedspectral_recluster import central_spectral_nmi, embed, load


def manifold_nmi(space: np.ndarray, labels: np.ndarray, k: int, neighbors: int, dims: int, seed: int = 0) -> dict:
    """NMI of k-means and of a full-covariance Gaussian mixture on a ``dims``-dimensional UMAP embedding (cosine
    metric, min_dist 0: N2D's settings for clustering) of ``space``."""
    try:
        import umap  # optional (module docstring); imported here so that --help works without it
    except ImportError:
        raise SystemExit("UMAP is not installed: pip install umap-learn (in a separate environment: it is not a "
                         "fedclust dependency)") from None

    found = umap.UMAP(n_components=dims, n_neighbors=neighbors, min_dist=0.0, metric="cosine", n_jobs=1,
                      random_state=seed).fit_transform(space)
    return {"kmeans": normalized_mutual_info_score(labels, KMeans(k, n_init=10, random_state=seed).fit_predict(found)),
            "gmm": normalized_mutual_info_score(labels, GaussianMixture(k, random_state=seed).fit_predict(found))}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", type=Path, nargs="+", help="training-split FedSpectral run folders")
    ap.add_argument("--umap-neighbors", type=int, nargs="+", default=[15, 30])
    ap.add_argument("--dims", type=int, default=10, help="UMAP's output dimensions (N2D: the number of clusters)")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    for run in args.runs:
        data, method = load(run)
        labels, k = np.asarray(data.labels), method.num_clusters
        joined = embed(data, method)
        pixels = F.normalize(torch.cat([x.flatten(1) for x in data.iter_all()]), dim=1)
        print(f"{run}: {len(labels)} samples, cluster space {method.hparams.cluster_space}", flush=True)
        for name, space in (("input+backbone", joined), ("pixels", pixels)):
            print(f"  {name:15s} spectral (5 neighbours)      NMI {central_spectral_nmi(space, labels, k, 5):.4f}",
                  flush=True)
            for neighbors in args.umap_neighbors:
                start = time.perf_counter()
                scores = manifold_nmi(space.numpy(), labels, k, neighbors, args.dims)
                print(f"  {name:15s} UMAP {neighbors:2d} neighbours: k-means NMI {scores['kmeans']:.4f}, "
                      f"Gaussian mixture NMI {scores['gmm']:.4f}  ({time.perf_counter() - start:.0f} s)", flush=True)


if __name__ == "__main__":
    main()

"""How good could FedSpectral's clustering space be made without retraining? Central spectral clustering of every
sample (the recluster script's ceiling: no federated method does better in the same space) under other input blocks
and with the trunk's features averaged over test-time views (issue 22).

FedSpectral clusters in [unit pixels, unit trunk features]. Two cheap ways to change that space, tried here on one
trained model before any federated run is spent on them:
- the pixel block: raw (shipped), each image centred (its brightness removed: the project's probes found brightness
  dominating contrastive features), centred and scaled to unit standard deviation, or square-rooted;
- the trunk block: the features of the image alone (shipped), or averaged with those of its mirror image and/or
  of ``--views`` of the training views (test-time augmentation).
Each space is scored alone (pixels or trunk) and joined (pixels beside trunk), by sklearn's spectral clustering of
a symmetric 5-nearest-neighbour graph. Labels are read only to score, and the run must be a TRAINING-split run
(the recluster script's `load` refuses a test-split one).

With `--blocks`, it also scores other learned blocks beside the shipped two (convnet28 trunks): the second
convolution block's maps averaged to 3 x 3 (`mid`, 1,152 numbers: a lower layer's view of the image) and the
projector's hidden layer (`hidden`, after its ReLU), each alone and beside raw pixels and the trunk.

With `--hog`, it scores the images' histograms of oriented gradients (fedclust/nn/hog.py, `--hog-cell`, `--hog-bins`)
instead: alone, beside the trunk (FedSpectral's `cluster_space: hog+backbone`) and beside the pixels and the trunk;
then k-means(10) on the HOG vectors and on the unit pixels at three seeds, to tell whether the descriptor alone is
a better baseline or only a better graph.

Usage: python -m benchmarks.fedspectral_space_ceiling RUN_FOLDER [--views 4] [--neighbors 5] [--blocks-only | --hog]
Results: benchmarks/results/fedspectral_recluster.md ("Fourth pass"; `--hog`: "Sixteenth pass").
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from sklearn.cluster import KMeans
from sklearn.metrics import normalized_mutual_info_score

from benchmarks.fedspectral_recluster import central_spectral_nmi, load
from fedclust.nn.hog import hog

PIXELS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {  # (n, d) flattened images -> the block, before unit norm
    "raw": lambda x: x,
    "centred": lambda x: x - x.mean(1, keepdim=True),
    "standardised": lambda x: (x - x.mean(1, keepdim=True)) / x.std(1, keepdim=True).clamp_min(1e-8),
    "sqrt": lambda x: x.clamp_min(0).sqrt(),
}


def pixel_block(images: torch.Tensor, transform: str) -> torch.Tensor:
    """The unit-normalised pixel block of ``images`` (n, C, H, W) under one of PIXELS."""
    return F.normalize(PIXELS[transform](images.flatten(1).float()), dim=1)


def joined(*blocks: torch.Tensor) -> torch.Tensor:
    """Unit blocks side by side, normalised again (FedSpectral's input+backbone with backbone_weight 1)."""
    return F.normalize(torch.cat([F.normalize(b, dim=1) for b in blocks], 1), dim=1)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path)
    ap.add_argument("--views", type=int, default=4, help="training views averaged in the test-time-view spaces")
    ap.add_argument("--neighbors", type=int, default=5)
    ap.add_argument("--blocks-only", action="store_true",
                    help="score only the other learned blocks (mid, hidden) beside the shipped space")
    ap.add_argument("--hog", action="store_true", help="score the HOG block (alone, beside the trunk, k-means on it)")
    ap.add_argument("--hog-cell", type=int, default=4)
    ap.add_argument("--hog-bins", type=int, default=9)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    data, method = load(args.run)
    images, y, k = torch.cat(list(data.iter_all())), data.labels.numpy(), method.num_clusters
    generator = torch.Generator().manual_seed(0)

    def trunk(x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return torch.cat([F.normalize(method.trunk(c), dim=1) for c in x.split(1000)])

    plain = trunk(images)
    if args.blocks_only:
        return score_blocks(method, images, plain, y, k, args.neighbors)
    if args.hog:
        return score_hog(images, plain, y, k, args.neighbors, args.hog_cell, args.hog_bins)
    mirrored = trunk(images.flip(-1))
    views = sum(trunk(torch.cat([method.views(c, generator) for c in images.split(1000)]))
                for _ in range(args.views)) / args.views
    trunks = {"image": plain, "image+mirror": plain + mirrored, f"image+{args.views} views": plain + views,
              f"image+mirror+{args.views} views": plain + mirrored + views}
    print(f"{args.run}: {len(y)} samples, spectral clustering of every sample, {args.neighbors} neighbours (NMI)")
    for name in PIXELS:
        pixels = pixel_block(images, name)
        print(f"pixels {name:13s} alone {central_spectral_nmi(pixels, y, k, args.neighbors):.4f}  beside the trunk "
              f"{central_spectral_nmi(joined(pixels, plain), y, k, args.neighbors):.4f}", flush=True)
    raw = pixel_block(images, "raw")
    for name, features in trunks.items():
        print(f"trunk {name:22s} alone {central_spectral_nmi(F.normalize(features, dim=1), y, k, args.neighbors):.4f}  "
              f"beside raw pixels {central_spectral_nmi(joined(raw, features), y, k, args.neighbors):.4f}", flush=True)


def score_blocks(method, images: torch.Tensor, plain: torch.Tensor, y, k: int, neighbors: int) -> None:
    """The other learned blocks of the module's docstring, alone and beside the shipped [pixels, trunk]."""
    with torch.no_grad():
        mid = torch.cat([F.adaptive_avg_pool2d(method.trunk.net[:6](c), 3).flatten(1) for c in images.split(1000)])
        raw_trunk = torch.cat([method.trunk(c) for c in images.split(1000)])
        hidden = torch.cat([method.projector[:-1](h) for h in raw_trunk.split(1000)])
    raw = pixel_block(images, "raw")
    print(f"shipped [pixels, trunk] {central_spectral_nmi(joined(raw, plain), y, k, neighbors):.4f}", flush=True)
    for name, block in (("mid", mid), ("hidden", hidden)):
        print(f"block {name:6s} alone {central_spectral_nmi(F.normalize(block, dim=1), y, k, neighbors):.4f}  "
              f"beside pixels and trunk {central_spectral_nmi(joined(raw, plain, block), y, k, neighbors):.4f}  "
              f"instead of the trunk {central_spectral_nmi(joined(raw, block), y, k, neighbors):.4f}", flush=True)


def score_hog(images: torch.Tensor, plain: torch.Tensor, y, k: int, neighbors: int, cell: int, bins: int) -> None:
    """The HOG block of the module's docstring: its ceilings beside the shipped space's, then k-means on it."""
    descriptors = torch.cat([hog(c, cell, bins) for c in images.split(1000)])
    raw = pixel_block(images, "raw")
    print(f"HOG, cells of {cell} pixels, {bins} bins: {descriptors.shape[1]} numbers an image; spectral clustering of "
          f"every sample, {neighbors} neighbours (NMI)")
    print(f"pixels beside the trunk {central_spectral_nmi(joined(raw, plain), y, k, neighbors):.4f}", flush=True)
    print(f"HOG alone {central_spectral_nmi(descriptors, y, k, neighbors):.4f}  beside the trunk "
          f"{central_spectral_nmi(joined(descriptors, plain), y, k, neighbors):.4f}  beside the pixels and the trunk "
          f"{central_spectral_nmi(joined(raw, descriptors, plain), y, k, neighbors):.4f}", flush=True)
    for name, block in (("HOG", descriptors), ("unit pixels", raw)):
        scores = [normalized_mutual_info_score(y, KMeans(k, n_init=10, random_state=seed).fit_predict(block.numpy()))
                  for seed in range(3)]
        print(f"k-means({k}) on the {name}, seeds 0-2: " + " / ".join(f"{s:.3f}" for s in scores), flush=True)


if __name__ == "__main__":
    main()

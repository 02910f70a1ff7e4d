"""Data sets built from other data sets: UIFCA's rotated images and its "representations" setting, and an image set's
histograms of oriented gradients (the descriptor FedSpectral clusters beside its trunk, as every baseline's input).

Registered in fedclust.data.datasets.DATASETS as ``rotated``, ``representations`` and ``hog``; the registry hands each
loader its own `load` (load_dataset) as the first argument, so this module needs no registry and no federated
view of the data: it stands below both.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch

from fedclust.data.dataset import Dataset, prepare, to_float
from fedclust.data.hog import hog
from fedclust.errors import ConfigError

ROTATIONS = (0, 90, 180, 270)

Load = Callable[..., Dataset]  # load_dataset(name, root, split, **options)


def rotated(load: Load, root: str | None, split: str, source: str = "mnist", label: int = 2) -> Dataset:
    """UIFCA's "cluster by rotation": every image of one class of a square image set, at 0, 90, 180 and
    270 degrees; the rotation is the cluster label (4 clusters, about 4 x 6,000 = 24,000 images for an
    MNIST digit plus its test images with split "all").

    Args:
        source: The image set to rotate (mnist as the paper; fmnist or digits offline).
        label: The class kept (the paper reports digits 2, 3, 4 and 5, which no rotation maps onto another).
    """
    if source in ("rotated", "representations"):
        raise ConfigError("data.options.source", source, "an image data set such as mnist, fmnist or digits")
    base = load(source, root, split)
    if not base.is_image or base.x.shape[-1] != base.x.shape[-2]:
        raise ConfigError("data.options.source", source, "a data set of square images")
    if not 0 <= label < base.num_classes:
        raise ConfigError("data.options.label", label, f"a class of {source}: 0 .. {base.num_classes - 1}")
    keep = base.y == label
    x, marks = base.x[keep], base.split[keep]
    # cluster by cluster, like the synthetic sets, so the pshift partition gives client k rotation k
    xs = torch.cat([torch.rot90(x, k=r // 90, dims=(-2, -1)) for r in ROTATIONS])
    y = torch.arange(len(ROTATIONS)).repeat_interleave(len(x))
    return Dataset(f"rotated-{source}-{label}", xs.contiguous(), y, len(ROTATIONS), True, marks.repeat(len(ROTATIONS)))


def hog_vectors(load: Load, root: str | None, split: str, source: str = "fmnist", cell: int = 4,
                batch: int = 4096) -> Dataset:
    """Every image of ``source`` as its unit HOG vector (fedclust/data/hog.py: cells of ``cell`` pixels, 9 bins):
    the fixed descriptor FedSpectral's "hog+backbone" space holds, given to a baseline (k-FED, k-means, central
    spectral clustering) so that a table compares methods on the same inputs. Labels, order and split marks are the
    source's, so every partition is the same as on the images."""
    if source in ("hog", "representations"):
        raise ConfigError("data.options.source", source, "an image data set such as fmnist, mnist or digits")
    base = load(source, root, split)
    if not base.is_image:
        raise ConfigError("data.options.source", source, "a data set of images (HOG describes images)")
    if not 1 <= cell <= min(base.x.shape[-2:]):
        raise ConfigError("data.options.cell", cell, f"an integer from 1 to the images' side, {base.x.shape[-1]}")
    x = torch.cat([hog(to_float(base.x[i:i + batch]), cell) for i in range(0, len(base), batch)])
    return Dataset(f"hog-{source}", x, base.y.clone(), base.num_classes, False, base.split.clone(),
                   has_labels=base.has_labels, clients=base.clients)


# Reading a saved run needs the run level (fit's config parser, every method); the data layer cannot import
# upward, so fedclust.run hands its load_run down here when it is imported (evaluate imports it too).
_run_loader = None


def use_run_loader(loader) -> None:
    global _run_loader
    _run_loader = loader


def representations(load: Load, root: str | None, split: str, run: str = "", normalize: bool = False) -> Dataset:
    """UIFCA's third setting, "clustering representations": the embeddings a saved fedclust run's global
    model gives every sample of that run's data set (the paper embeds MNIST with a pre-trained RotNet;
    here any run whose method has an `embed`, e.g. a CCFC run, is the pre-trained network).

    Args:
        run: The run folder (holds config.yaml and checkpoints/last.ckpt).
        normalize: L2-normalise each representation.
    """
    if not run:
        raise ConfigError("data.options.run", run, "the folder of a finished fedclust run")
    if _run_loader is None:
        raise ConfigError("data.name", "representations", "a data set built through `fedclust fit` or `evaluate` "
                          "(they load the saved run)")
    method, data_cfg = _run_loader(Path(run), torch.device("cpu"))[:2]
    base = load(data_cfg.name, root or data_cfg.root, split, **data_cfg.options)
    step = data_cfg.eval_batch_size  # batches prepared as the run fed its model (FederatedData.iter_all)
    method.eval()
    with torch.no_grad():
        z = torch.cat([method.embed(prepare(base.x[start:start + step], data_cfg.normalize))
                       for start in range(0, len(base), step)]).float()
    if normalize:
        z = torch.nn.functional.normalize(z, dim=1)
    return Dataset(f"representations-{Path(run).name}", z, base.y.clone(), base.num_classes, False, base.split.clone(),
                   has_labels=base.has_labels, clients=base.clients)

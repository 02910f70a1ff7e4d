"""The data set registry: every data set loads into one in-memory :class:`~fedclust.data.dataset.Dataset`
(images uint8, vectors float32; see dataset.py). The sets built from other sets (rotated, representations) are
derived.py's: this registry hands them its own loader, so that module imports no registry.

Where files live: ``root`` if given, else the environment variable ``FEDCLUST_DATA_ROOT``, else
``./data``. IDX sets are read from ``root`` itself or ``root/<MNIST|FashionMNIST>/raw``; without an
explicit root, from ``<data root>/<MNIST|FashionMNIST>/raw`` or ``<data root>/<mnist|fmnist>``, and
Fashion-MNIST also from ``/usr/share/datasets/fashion-mnist`` (Debian ``dataset-fashion-mnist``).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import numpy as np
import torch
from torch import Tensor

from fedclust.data import catalog, derived, features, folder, hf, image_files
from fedclust.data.catalog import DEBIAN_FASHION_MNIST  # noqa: F401  (where tests and users look for it)
from fedclust.data.checks import check_data_name, check_data_options, loader_options
from fedclust.data.dataset import Dataset
from fedclust.errors import ConfigError, DataFileError
from fedclust.seeding import generator

SPLITS = ("all", "train", "test")
_base = catalog.data_base  # root, else $FEDCLUST_DATA_ROOT, else ./data (the precheck looks there too)


def _check_no_test(name: str, split: str) -> None:
    if split == "test":
        raise ConfigError("data.split", split, f"'all' or 'train' ({name} has no test part)")


def _assemble(
    name: str,
    split: str,
    load_part: Callable[[str], tuple[Tensor, Tensor]],
    num_classes: int,
    is_image: bool,
    has_test: bool = True,
) -> Dataset:
    """Load the parts `split` asks for (train first) and mark where each sample came from."""
    if not has_test:
        _check_no_test(name, split)
    parts = [p for p in ("train", "test") if split in ("all", p) and (has_test or p == "train")]
    xs, ys, marks = [], [], []
    for part in parts:
        x, y = load_part(part)
        xs.append(x)
        ys.append(y)
        marks.append(torch.full((len(y),), 0 if part == "train" else 1, dtype=torch.int8))
    x, y, marks = (torch.cat(t) if len(t) > 1 else t[0] for t in (xs, ys, marks))
    return Dataset(name, x, y, num_classes, is_image, marks)


# ---------------------------------------------------------------- real data sets


def _digits(root: str | None, split: str) -> Dataset:
    """scikit-learn's 8x8 digits (1,797 images, values 0..16 scaled to 0..255).

    It has no official split; fedclust calls the first 1,500 images "train" and the last 297 "test".
    """
    from sklearn.datasets import load_digits

    bunch = load_digits()
    x = torch.from_numpy(np.rint(bunch.images * (255.0 / 16.0)).astype(np.uint8)).unsqueeze(1)
    y = torch.from_numpy(bunch.target.astype(np.int64))
    cut = {"train": slice(0, 1500), "test": slice(1500, None)}
    return _assemble("digits", split, lambda p: (x[cut[p]], y[cut[p]]), 10, True)


def _idx_set(root: str | None, split: str, name: str) -> Dataset:
    entry, folders = catalog.IDX_SETS[name], catalog.idx_folders(name, root)
    load = lambda p: image_files.load_idx_part(folders, p, entry.title, entry.hint)
    return _assemble(name, split, load, 10, True)


def _mnist(root: str | None, split: str) -> Dataset:
    """MNIST from its four IDX files (gzipped or not) in root or root/MNIST/raw (torchvision layout)."""
    return _idx_set(root, split, "mnist")


def _fmnist(root: str | None, split: str) -> Dataset:
    """Fashion-MNIST from its four IDX files in root, root/FashionMNIST/raw or the Debian folder."""
    return _idx_set(root, split, "fmnist")


def _cifar10(root: str | None, split: str) -> Dataset:
    """CIFAR-10 (50,000 train + 10,000 test, 3x32x32) from root/cifar-10-batches-py."""
    load = lambda p: image_files.load_cifar_part(_base(root), p, hundred=False)
    return _assemble("cifar10", split, load, 10, True)


def _cifar100(root: str | None, split: str) -> Dataset:
    """CIFAR-100 with its 100 fine labels (50,000 train + 10,000 test, 3x32x32) from root/cifar-100-python:
    the task FedPNP (Sec. 3.1) and FedMCC (Sec. IV-A) cluster, into 100 clusters."""
    load = lambda p: image_files.load_cifar_part(_base(root), p, hundred=True)
    return _assemble("cifar100", split, load, 100, True)


def _cifar100_20(root: str | None, split: str) -> Dataset:
    """CIFAR-100 with its 100 fine labels mapped to the 20 standard super-classes (CC's CIFAR-100 task;
    FedPNP's NCC row)."""
    coarse = torch.tensor(image_files.CIFAR100_COARSE, dtype=torch.int64)

    def load(part: str) -> tuple[Tensor, Tensor]:
        x, fine = image_files.load_cifar_part(_base(root), part, hundred=True)
        return x, coarse[fine]

    return _assemble("cifar100_20", split, load, 20, True)


def _stl10(root: str | None, split: str) -> Dataset:
    """STL-10's labelled images (5,000 train + 8,000 test, 3x96x96) from root/stl10_binary."""
    load = lambda p: image_files.load_stl10_part(_base(root), p)
    return _assemble("stl10", split, load, 10, True)


def _imagenet10(root: str | None, split: str, image_size: int = 96) -> Dataset:
    """ImageNet-10 as an image folder (one sub-folder per class), resized to image_size x image_size.

    Looked for in root/imagenet-10, else (only when root is given) in root itself. No test part.
    """
    if image_size < 1:
        raise ConfigError("data.options.image_size", image_size, "a positive integer")
    _check_no_test("imagenet10", split)
    base = _base(root)
    folder = base / "imagenet-10" if (base / "imagenet-10").is_dir() or root is None else base
    x, y, num_classes = image_files.load_image_folder(folder, image_size, "ImageNet-10")
    return _assemble("imagenet10", split, lambda p: (x, y), num_classes, True, has_test=False)


# ---------------------------------------------------------------- synthetic sets (UIFCA)


def _cluster_sizes(num_clusters: int, points_per_cluster: int | list[int], dim: int) -> list[int]:
    """Points in each cluster: one number for all, or one per cluster (unequal sizes)."""
    if not isinstance(num_clusters, int) or num_clusters < 1:
        raise ConfigError("data.options.num_clusters", num_clusters, "a positive integer")
    if not isinstance(dim, int) or dim < 1:
        raise ConfigError("data.options.dim", dim, "a positive integer")
    sizes = points_per_cluster if isinstance(points_per_cluster, (list, tuple)) else [points_per_cluster] * num_clusters
    if len(sizes) != num_clusters or not all(isinstance(n, int) and n >= 1 for n in sizes):
        raise ConfigError("data.options.points_per_cluster", points_per_cluster,
                          f"a positive integer, or a list of {num_clusters} positive integers (one per cluster)")
    return list(sizes)


def _gaussian(
    root: str | None,
    split: str,
    num_clusters: int = 4,
    points_per_cluster: int | list[int] = 1000,
    dim: int = 32,
    radius: float = 5.0,
    noise_std: float = 1.0,
    seed: int = 0,
) -> Dataset:
    """UIFCA's Gaussian clusters: x = radius * b_k + noise_std * N(0, I), b_k ~ Bernoulli(0.5)^dim.

    Our reading of the paper: sigma = 1 in every coordinate; centres drawn coordinate-wise and scaled
    by R = radius = 5, redrawn until distinct, so any two are at least R apart (the paper's "minimum
    separation"). Samples are ordered cluster by cluster; label = cluster id. ``points_per_cluster`` as a list
    gives each cluster its own size (clusters of unequal sizes).
    """
    sizes = _cluster_sizes(num_clusters, points_per_cluster, dim)
    if dim < 63 and num_clusters > 2**dim:
        valid = f"at most 2**dim = {2**dim} (the number of distinct centres)"
        raise ConfigError("data.options.num_clusters", num_clusters, valid)
    g = generator(seed, "gaussian")
    while True:
        bits = torch.bernoulli(torch.full((num_clusters, dim), 0.5), generator=g)
        if len(torch.unique(bits, dim=0)) == num_clusters:
            break
    y = torch.arange(num_clusters).repeat_interleave(torch.tensor(sizes))
    x = radius * bits[y] + noise_std * torch.randn(len(y), dim, generator=g)
    return _assemble("gaussian", split, lambda p: (x.float(), y), num_clusters, False, has_test=False)


def _subspace(
    root: str | None,
    split: str,
    num_clusters: int = 4,
    points_per_cluster: int | list[int] = 1000,
    dim: int = 32,
    subspace_dim: int = 16,
    seed: int = 0,
) -> Dataset:
    """UIFCA's subspace clusters: x = B_k c, B_k a random orthonormal dim x subspace_dim basis, c ~ N(0, I).

    Our reading of the paper: one basis per cluster (QR of a Gaussian matrix), no offset and no
    extra noise, so every cluster is centred at the origin (k-means cannot separate them, by design).
    ``points_per_cluster`` as a list gives each cluster its own size.
    """
    sizes = _cluster_sizes(num_clusters, points_per_cluster, dim)
    if not 1 <= subspace_dim <= dim:
        raise ConfigError("data.options.subspace_dim", subspace_dim, f"an integer in [1, dim = {dim}]")
    g = generator(seed, "subspace")
    bases = torch.linalg.qr(torch.randn(num_clusters, dim, subspace_dim, generator=g, dtype=torch.float64))[0]
    x = torch.cat([torch.randn(n, subspace_dim, generator=g, dtype=torch.float64) @ bases[k].T
                   for k, n in enumerate(sizes)]).float()
    y = torch.arange(num_clusters).repeat_interleave(torch.tensor(sizes))
    return _assemble("subspace", split, lambda p: (x, y), num_clusters, False, has_test=False)


DATASETS: dict[str, Callable[..., Dataset]] = {
    "digits": _digits,
    "mnist": _mnist,
    "fmnist": _fmnist,
    "cifar10": _cifar10,
    "cifar100": _cifar100,
    "cifar100_20": _cifar100_20,
    "stl10": _stl10,
    "imagenet10": _imagenet10,
    "gaussian": _gaussian,
    "subspace": _subspace,
    "folder": folder.folder,  # a user's own data (docs/own_data.md)
    "features": features.features,
    "hf": hf.hf,
}


def load_dataset(name: str, root: str | None = None, split: str = "all", **options) -> Dataset:
    """Load data set `name`; split "all" = train then test concatenated (as the papers train and score).

    `options` are the loader's keyword settings (image_size for imagenet10 and folder; num_clusters,
    points_per_cluster, dim, seed, ... for the synthetic sets; label_column, client_column, ... for features and hf).
    """
    check_data_name(name, DATASETS)  # also in fedclust.precheck, through cli_schema.json
    if split not in SPLITS:
        raise ConfigError("data.split", split, "one of " + ", ".join(SPLITS))
    loader = DATASETS[name]
    check_data_options(name, options, loader_options(loader))
    dataset = loader(str(root) if root is not None else None, split, **options)
    check_finite(dataset)
    return dataset


FINITE_CHECK_ELEMENTS = 1 << 24  # values checked at a time: the check's temporary mask stays small (16 MiB)


def check_finite(dataset: Dataset) -> None:
    """Every data set, whichever loader made it, holds only finite values: a NaN or infinity would reach the models
    and k-means and fail there with a library's traceback (or silently give NaN scores). Integer data (images)
    cannot hold them; float data are checked a chunk of samples at a time."""
    x = dataset.x
    if not x.is_floating_point() or len(x) == 0:
        return
    rows = max(1, FINITE_CHECK_ELEMENTS // max(1, x[0].numel()))
    bad, first = 0, None
    for start in range(0, len(x), rows):
        finite = torch.isfinite(x[start:start + rows].flatten(1)).all(dim=1)
        if not finite.all():
            where = torch.nonzero(~finite).flatten()
            bad += len(where)
            first = start + int(where[0]) if first is None else first
    if bad:
        raise DataFileError(f"data set {dataset.name!r} holds {bad} of {len(x)} samples with non-finite values "
                            f"(NaN or infinite; the first is sample {first}): fedclust needs finite numbers, so drop "
                            "or fill those samples")


# Sets built from other sets of this registry: they get its loader from here (derived.py imports no registry).
DATASETS["rotated"] = partial(derived.rotated, load_dataset)
DATASETS["representations"] = partial(derived.representations, load_dataset)
DATASETS["hog"] = partial(derived.hog_vectors, load_dataset)

"""Readers for image data sets stored on disk: IDX files (MNIST, Fashion-MNIST) and torchvision layouts.

Every reader returns ``(x, y)`` for one official part ("train" or "test"): ``x`` uint8 (N, C, H, W),
``y`` int64 (N,). A missing data set raises :class:`DataNotFoundError` with one sentence that says
where it was looked for and how to get it.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from fedclust.data import catalog
from fedclust.data.idx import read_idx  # noqa: F401  (torch-free, beside the header rules the precheck shares)
from fedclust.errors import DataFileError, DataNotFoundError

# CIFAR-100 fine label -> the 20 standard super-classes (the `coarse_labels` of the official files)
CIFAR100_COARSE = (
    4, 1, 14, 8, 0, 6, 7, 7, 18, 3, 3, 14, 9, 18, 7, 11, 3, 9, 7, 11,
    6, 11, 5, 10, 7, 6, 13, 15, 3, 15, 0, 11, 1, 10, 12, 14, 16, 9, 11, 5,
    5, 19, 8, 8, 15, 13, 14, 17, 18, 10, 16, 4, 17, 4, 2, 0, 17, 4, 18, 17,
    10, 3, 2, 12, 12, 16, 12, 1, 9, 19, 2, 10, 0, 1, 16, 12, 9, 13, 15, 13,
    16, 19, 2, 4, 6, 19, 5, 5, 8, 19, 18, 1, 2, 15, 6, 0, 17, 8, 14, 13,
)  # fmt: skip


def load_idx_part(folders: list[Path], part: str, title: str, hint: str) -> tuple[Tensor, Tensor]:
    """Images (N, 1, H, W) and labels of one part from the first folder that holds both IDX files."""
    files = catalog.find_idx_pair(folders, part)
    if files is None:
        raise catalog.idx_not_found(folders, title, hint)
    images, labels = read_idx(files[0]), read_idx(files[1])
    catalog.check_idx_pair(files, images.shape, labels.shape)
    x = torch.from_numpy(images.astype(np.uint8, copy=False)).unsqueeze(1)
    return x, torch.from_numpy(labels.astype(np.int64))


def load_cifar_part(root: Path, part: str, hundred: bool) -> tuple[Tensor, Tensor]:
    """CIFAR-10, or CIFAR-100 with fine labels, from torchvision's pickled batches."""
    from torchvision.datasets import CIFAR10, CIFAR100

    cls = CIFAR100 if hundred else CIFAR10
    try:
        ds = cls(str(root), train=part == "train", download=False)
    except RuntimeError as e:
        title = "CIFAR-100" if hundred else "CIFAR-10"
        raise catalog.torchvision_missing(title, root, cls.base_folder, cls.__name__) from e
    x = torch.from_numpy(np.ascontiguousarray(ds.data.transpose(0, 3, 1, 2)))  # NHWC -> NCHW
    return x, torch.as_tensor(ds.targets, dtype=torch.int64)


def load_stl10_part(root: Path, part: str) -> tuple[Tensor, Tensor]:
    """The labelled STL-10 images of one part (5,000 train, 8,000 test); the unlabelled set is unused."""
    from torchvision.datasets import STL10

    try:
        ds = STL10(str(root), split=part, download=False)
    except RuntimeError as e:
        raise catalog.torchvision_missing("STL-10", root, STL10.base_folder, "STL10") from e
    return torch.from_numpy(np.ascontiguousarray(ds.data)), torch.from_numpy(ds.labels.astype(np.int64))


def load_image_folder(folder: Path, image_size: int, title: str) -> tuple[Tensor, Tensor, int]:
    """Every image of a class-per-subfolder tree, RGB, squashed to image_size x image_size (as CC does)."""
    from PIL import Image
    from torchvision.datasets import ImageFolder

    try:
        ds = ImageFolder(str(folder))
    except FileNotFoundError as e:
        raise DataNotFoundError(
            f"{title} not found in {folder}; pass data.root=DIR holding one sub-folder of images per class."
        ) from e

    def load(path: str) -> np.ndarray:
        try:
            with Image.open(path) as img:
                img = img.convert("RGB").resize((image_size, image_size), Image.Resampling.BILINEAR)
                return np.asarray(img).transpose(2, 0, 1)
        except (OSError, ValueError, Image.DecompressionBombError) as error:  # untrusted files
            raise DataFileError(f"{path} is not a readable image ({type(error).__name__}); "
                                "remove or replace it") from None

    x = np.empty((len(ds.samples), 3, image_size, image_size), dtype=np.uint8)
    with ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 1)) as pool:  # PIL decodes without the GIL
        for i, img in enumerate(pool.map(load, [path for path, _ in ds.samples])):
            x[i] = img
    y = torch.as_tensor([label for _, label in ds.samples], dtype=torch.int64)
    return torch.from_numpy(x), y, len(ds.classes)

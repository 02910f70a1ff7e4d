"""Readers for image data sets stored on disk: IDX files (MNIST, Fashion-MNIST), torchvision layouts, and image
folders (ImageNet-10, a user's own `folder`; `read_images` also decodes a Hugging Face image column).

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
from fedclust.errors import ConfigError, DataFileError, DataNotFoundError, FedclustError

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


# PIL modes decoded to one channel when data.options.channels is left to the images
GRAY_MODES = frozenset({"1", "L", "LA", "I", "I;16", "I;16B", "I;16L", "I;16N", "F"})


def image_extensions() -> tuple[str, ...]:
    from torchvision.datasets.folder import IMG_EXTENSIONS

    return IMG_EXTENSIONS


def image_tree(folder: Path, title: str) -> tuple[list[str], list[int] | None, list[str]]:
    """The images under `folder` and their labels: one sub-folder per class (torchvision ImageFolder's layout,
    classes in sorted order, images found recursively), or the images directly in it (labels None).

    Returns (paths, labels or None, class names)."""
    from torchvision.datasets.folder import find_classes, make_dataset

    hint = "data.root must be a folder of images, or of one sub-folder of images per class"
    if not folder.is_dir():
        raise DataNotFoundError(f"{title} not found: {folder} is not a folder; {hint}.")
    extensions = image_extensions()
    flat = sorted(str(p) for p in folder.iterdir() if p.is_file() and p.suffix.lower() in extensions)
    classes = find_classes(str(folder))[0] if any(p.is_dir() for p in folder.iterdir()) else []
    if flat and classes:
        raise DataFileError(f"{folder} holds both images and sub-folders ({classes[0]}, ...); put every image in a "
                            "class sub-folder, or remove the sub-folders for a folder of unlabelled images")
    if flat:
        return flat, None, []
    if not classes:
        raise DataFileError(f"{folder} holds no image ({', '.join(extensions)}) and no sub-folder of images; {hint}")
    samples = make_dataset(str(folder), {c: i for i, c in enumerate(classes)}, extensions, allow_empty=True)
    held = set(label for _, label in samples)
    empty = [c for i, c in enumerate(classes) if i not in held]
    if empty:
        raise DataFileError(f"{folder / empty[0]} holds no image ({', '.join(extensions)}); add images to it or "
                            "remove it (every sub-folder is a class)")
    return [path for path, _ in samples], [label for _, label in samples], classes


def _unreadable(where: str, error: BaseException) -> DataFileError:
    return DataFileError(f"{where} is not a readable image ({type(error).__name__}); remove or replace it")


def read_images(sources: list, image_size: int | None = None, channels: int | None = None,
                opener=None, where=str) -> np.ndarray:
    """Decode images into one uint8 (N, C, S, S) array, squashed to S x S (as CC does for ImageNet-10).

    `opener(source)` gives a PIL image (default: PIL.Image.open on a path); `where(source)` names a source in
    messages. image_size None takes the images' own side (they must all share one square size); channels None
    takes 1 when every image is greyscale, else 3. Every source is untrusted: a file PIL cannot decode is one
    sentence naming it (DataFileError)."""
    from PIL import Image

    opener = opener or Image.open
    errors = (OSError, ValueError, TypeError, SyntaxError, Image.DecompressionBombError)
    if image_size is not None and (isinstance(image_size, bool) or not isinstance(image_size, int) or image_size < 1):
        raise ConfigError("data.options.image_size", image_size, "a positive integer (the side to resize to)")
    if channels is not None and (isinstance(channels, bool) or channels not in (1, 3)):
        raise ConfigError("data.options.channels", channels, "1 (greyscale) or 3 (RGB)")
    workers = min(8, os.cpu_count() or 1)

    def header(source) -> tuple[tuple[int, int], str]:  # PIL reads only the header until pixels are asked for
        try:
            with opener(source) as img:
                return img.size, img.mode
        except FedclustError:  # the opener's own sentence
            raise
        except errors as error:
            raise _unreadable(where(source), error) from None

    if image_size is None or channels is None:
        with ThreadPoolExecutor(max_workers=workers) as pool:
            heads = list(pool.map(header, sources))
        if channels is None:
            channels = 1 if all(mode in GRAY_MODES for _, mode in heads) else 3
        if image_size is None:
            (w, h), _ = heads[0]
            other = next((i for i, (size, _) in enumerate(heads) if size != (w, h)), None)
            if other is not None:
                ow, oh = heads[other][0]
                sizes = f"{where(sources[0])} is {w}x{h}, {where(sources[other])} is {ow}x{oh}"
                raise ConfigError("data.options.image_size", None, "a side to resize every image to: the images "
                                  f"differ in size ({sizes})")
            if w != h:
                raise ConfigError("data.options.image_size", None, f"a side to resize the images to: they are {w}x{h}, "
                                  "not square")
            image_size = w
    mode = "L" if channels == 1 else "RGB"

    def load(source) -> np.ndarray:
        try:
            with opener(source) as img:
                img = img.convert(mode).resize((image_size, image_size), Image.Resampling.BILINEAR)
                pixels = np.asarray(img)
        except FedclustError:
            raise
        except errors as error:
            raise _unreadable(where(source), error) from None
        return pixels[None] if channels == 1 else pixels.transpose(2, 0, 1)

    x = np.empty((len(sources), channels, image_size, image_size), dtype=np.uint8)
    with ThreadPoolExecutor(max_workers=workers) as pool:  # PIL decodes without the GIL
        for i, img in enumerate(pool.map(load, sources)):
            x[i] = img
    return x


def load_image_folder(folder: Path, image_size: int, title: str) -> tuple[Tensor, Tensor, int]:
    """Every image of a class-per-subfolder tree, RGB, squashed to image_size x image_size (ImageNet-10)."""
    paths, labels, classes = image_tree(folder, title)
    if labels is None:
        raise DataFileError(f"{folder} holds images but no class sub-folder; {title} keeps one sub-folder per class")
    x = read_images(paths, image_size, channels=3)
    return torch.from_numpy(x), torch.as_tensor(labels, dtype=torch.int64), len(classes)

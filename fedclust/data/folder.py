"""`data.name: folder`: a user's own images, from a folder of one sub-folder per class (torchvision ImageFolder's
layout: the sub-folder names are the classes, in sorted order) or a flat folder of images (no labels).

Images become uint8 (N, C, S, S): `image_size` S defaults to the images' own side when they all share one
square size (else the run asks for it by name), `channels` to 1 when every image is greyscale, else 3.
ImageNet-10 (`imagenet10`) is this reader with RGB images squashed to 96 x 96.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from fedclust.data.image_files import image_tree, read_images
from fedclust.data.own_data import check_no_test, own_dataset
from fedclust.errors import ConfigError

if TYPE_CHECKING:
    from fedclust.data.dataset import Dataset


def folder(root: str | None, split: str, image_size: int | None = None, channels: int | None = None) -> Dataset:
    """Every image under data.root (see the module docstring).

    Args:
        image_size: Side to resize every image to (default: their own, when all share one square size).
        channels: 1 (greyscale) or 3 (RGB); default: 1 when every image is greyscale, else 3.
    """
    check_no_test("folder", split)
    if root is None:
        raise ConfigError("data.root", None, "the folder of images (one sub-folder per class, or the images "
                          "themselves)")
    path = Path(root).expanduser().absolute()
    paths, labels, _ = image_tree(path, "folder")
    return own_dataset("folder", read_images(paths, image_size, channels), labels, is_image=True, source=str(path))

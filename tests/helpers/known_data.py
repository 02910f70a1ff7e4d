"""Stand-ins for files the command line's first pass judges without loading them: a data root holding every
known data set's files where the loaders look (IDX files with the official shapes and label counts, gzipped so
that they stay small; torchvision's files present, though not their content), and a checkpoint that is a whole
archive."""

from __future__ import annotations

import gzip
import zipfile
from pathlib import Path

import numpy as np

from fedclust.data import catalog

MNIST_COUNTS = {"train": (5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949),
                "test": (980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009)}
FMNIST_COUNTS = {"train": (6000,) * 10, "test": (1000,) * 10}


def write_idx_gz(path: Path, shape: tuple[int, ...], data: bytes | None = None) -> None:
    header = bytes([0, 0, 0x08, len(shape)]) + np.asarray(shape, dtype=">i4").tobytes()
    body = data if data is not None else bytes(int(np.prod(shape)))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(header + body, compresslevel=1))


def write_known_data(root: Path) -> Path:
    """Every data set of fedclust/data/catalog.py, as the precheck finds it under this data root."""
    for name, counts in (("mnist", MNIST_COUNTS), ("fmnist", FMNIST_COUNTS)):
        folder = root / catalog.IDX_SETS[name].torchvision_folder / "raw"
        for part, per_class in counts.items():
            images, labels = catalog.IDX_NAMES[part]
            n = sum(per_class)
            write_idx_gz(folder / f"{images}.gz", (n, 28, 28))
            write_idx_gz(folder / f"{labels}.gz", (n,), np.repeat(np.arange(10, dtype=np.uint8), per_class).tobytes())
    for entry in catalog.TORCHVISION_SETS.values():
        for file in entry.files:
            (root / entry.folder).mkdir(parents=True, exist_ok=True)
            (root / entry.folder / file).touch()
    return root


def write_checkpoint_stub(path: Path) -> None:
    """A whole zip archive laid out as torch.save writes one (its content is not a checkpoint)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("last/data.pkl", b"")

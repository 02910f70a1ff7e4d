"""Tiny CIFAR-10 and STL-10 copies in torchvision's layouts, written by the tests (the real sets are not on the CI
machine): each image a flat colour of its class plus noise, so that a run has something to group."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np


def _images(rng: np.random.Generator, labels: np.ndarray, side: int) -> np.ndarray:
    colours = np.linspace(20, 235, 30).reshape(10, 3)  # class c: a colour of its own
    noise = rng.normal(0, 20, size=(len(labels), 3, side, side))
    return np.clip(colours[labels][:, :, None, None] + noise, 0, 255).astype(np.uint8)


def write_tiny_cifar10(root: Path, per_file: int = 12, seed: int = 0) -> Path:
    """root/cifar-10-batches-py with five training batches and a test batch of ``per_file`` images each."""
    rng = np.random.default_rng(seed)
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True, exist_ok=True)
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        labels = rng.permutation(np.arange(per_file) % 10)
        batch = {"data": _images(rng, labels, 32).reshape(per_file, -1), "labels": labels.tolist()}
        (folder / name).write_bytes(pickle.dumps(batch))
    (folder / "batches.meta").write_bytes(pickle.dumps({"label_names": [str(i) for i in range(10)]}))
    return root


def write_tiny_stl10(root: Path, train: int = 40, test: int = 20, seed: int = 0) -> Path:
    """root/stl10_binary with ``train`` and ``test`` labelled 96 x 96 images (labels 1-10 on disk) and an empty
    unlabeled_X.bin (fedclust reads the labelled images only, but a copy of the set holds that file)."""
    rng = np.random.default_rng(seed)
    folder = root / "stl10_binary"
    folder.mkdir(parents=True, exist_ok=True)
    for part, n in (("train", train), ("test", test)):
        labels = rng.permutation(np.arange(n) % 10)
        # the binary format stores each channel column-major
        (folder / f"{part}_X.bin").write_bytes(_images(rng, labels, 96).transpose(0, 1, 3, 2).tobytes())
        (folder / f"{part}_y.bin").write_bytes((labels + 1).astype(np.uint8).tobytes())
    (folder / "unlabeled_X.bin").touch()
    return root

"""What fedclust knows about the standard data sets without loading them: where their files are looked for,
which files each loader needs, and how many samples of each class each official part holds.

Torch-free, so the command line's first pass (fedclust/precheck/) can refuse a missing data set, a missing
or truncated file, or a partition the data cannot give in milliseconds, with the sentence the loader would
print after importing torch (datasets.py and image_files.py build their paths and messages here too).

`dataset_facts` is a lookup that skips what it does not know (a data set without an entry, a user's image
folder, a synthetic or derived set): None, and the run judges it once loaded. Known sizes:

- digits: scikit-learn's embedded 8x8 digits (fixed; fedclust's "train" is the first 1,500 images).
- cifar10, cifar100, cifar100_20, stl10: torchvision checks every official file's md5 before it loads one,
  so the files it accepts hold exactly the official counts below.
- mnist, fmnist: fedclust reads any pair of IDX files (a user's own or a subset), so their counts are read
  from the label files themselves (70 KB), never assumed.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from fedclust.errors import DataFileError, DataNotFoundError

DEBIAN_FASHION_MNIST = Path("/usr/share/datasets/fashion-mnist")

# per official part, the samples of each class (class 0 first)
_DIGITS = {"train": (151, 151, 150, 153, 148, 152, 151, 149, 146, 149),
           "test": (27, 31, 27, 30, 33, 30, 30, 30, 28, 31)}
CLASS_COUNTS: dict[str, dict[str, tuple[int, ...]]] = {
    "digits": _DIGITS,
    "cifar10": {"train": (5000,) * 10, "test": (1000,) * 10},
    "cifar100": {"train": (500,) * 100, "test": (100,) * 100},
    "cifar100_20": {"train": (2500,) * 20, "test": (500,) * 20},  # 5 fine classes per super-class
    "stl10": {"train": (500,) * 10, "test": (800,) * 10},  # the labelled images only
}


def data_base(root: str | None) -> Path:
    """The folder a data set is looked for in: root, else $FEDCLUST_DATA_ROOT, else ./data; absolute, so
    that "not found in ..." messages say exactly where it looked."""
    return Path(root or os.environ.get("FEDCLUST_DATA_ROOT") or "data").expanduser().absolute()


# ---------------------------------------------------------------- IDX sets (MNIST, Fashion-MNIST)


@dataclass(frozen=True)
class IdxSet:
    title: str
    torchvision_folder: str  # torchvision's layout: root/<folder>/raw
    hint: str  # how to get it


IDX_SETS = {
    "mnist": IdxSet("MNIST", "MNIST", "pass data.root=DIR holding the IDX files (or DIR/MNIST/raw); download them "
                    "with torchvision.datasets.MNIST(DIR, download=True) on a machine with internet"),
    "fmnist": IdxSet("Fashion-MNIST", "FashionMNIST", "install it with `apt-get install -y dataset-fashion-mnist` or "
                     "pass data.root=DIR holding the IDX files (or DIR/FashionMNIST/raw)"),
}
IDX_NAMES = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}


def idx_folders(name: str, root: str | None) -> list[Path]:
    """Where an IDX set's files are looked for, in order. An explicit root is the only place looked at;
    a shared data root only through sub-folders, since MNIST and Fashion-MNIST files have the same names."""
    base, entry = data_base(root), IDX_SETS[name]
    if root is not None:
        return [base, base / entry.torchvision_folder / "raw"]
    folders = [base / entry.torchvision_folder / "raw", base / name]
    if name == "fmnist":
        folders.append(DEBIAN_FASHION_MNIST)
    return folders


def find_idx_pair(folders: list[Path], part: str) -> tuple[Path, Path] | None:
    """(images, labels) of one part from the first folder that holds both, gzipped or not."""
    for folder in folders:
        files = [_idx_file(folder, stem) for stem in IDX_NAMES[part]]
        if None not in files:
            return files[0], files[1]
    return None


def _idx_file(folder: Path, stem: str) -> Path | None:
    for name in (stem, stem + ".gz"):
        if (folder / name).is_file():
            return folder / name
    return None


def idx_not_found(folders: list[Path], title: str, hint: str) -> DataNotFoundError:
    return DataNotFoundError(f"{title} not found in {' or '.join(str(f) for f in folders)}; {hint}.")


def check_idx_pair(files: tuple[Path, Path], images_shape: tuple[int, ...], labels_shape: tuple[int, ...]) -> None:
    """IDX images are (N, H, W), labels (N,), and the two files of a part hold the same N."""
    if len(images_shape) != 3 or len(labels_shape) != 1:
        raise DataFileError(f"{files[0]} and {files[1]} hold arrays shaped {images_shape} and {labels_shape}; "
                            "IDX images are (N, H, W) and labels (N,)")
    if images_shape[0] != labels_shape[0]:
        raise DataFileError(f"{files[0]} holds {images_shape[0]} images but {files[1]} holds {labels_shape[0]} "
                            "labels: the two files are not a pair")


# ---------------------------------------------------------------- torchvision's pickled / binary layouts


@dataclass(frozen=True)
class TorchvisionSet:
    title: str
    folder: str  # torchvision's base_folder
    files: tuple[str, ...]  # every file its constructor checks, whatever the part (train_list + test_list + meta)
    cls: str  # torchvision.datasets class


_CIFAR10 = TorchvisionSet("CIFAR-10", "cifar-10-batches-py",
                          (*(f"data_batch_{i}" for i in range(1, 6)), "test_batch", "batches.meta"), "CIFAR10")
_CIFAR100 = TorchvisionSet("CIFAR-100", "cifar-100-python", ("train", "test", "meta"), "CIFAR100")
TORCHVISION_SETS = {
    "cifar10": _CIFAR10,
    "cifar100": _CIFAR100,
    "cifar100_20": _CIFAR100,
    "stl10": TorchvisionSet("STL-10", "stl10_binary",
                            ("train_X.bin", "train_y.bin", "unlabeled_X.bin", "test_X.bin", "test_y.bin"), "STL10"),
}


def torchvision_missing(title: str, root: Path, folder: str, cls: str) -> DataNotFoundError:
    return DataNotFoundError(
        f"{title} not found (or corrupted) in {root / folder}; pass data.root=DIR holding {folder} "
        f"(torchvision layout); download it with torchvision.datasets.{cls}(DIR, download=True) "
        "on a machine with internet."
    )


# ---------------------------------------------------------------- what a data set holds, known before loading it


@dataclass(frozen=True)
class DataFacts:
    """What load_dataset would give, known without loading it."""

    num_classes: int
    class_counts: tuple[int, ...]  # samples of each label, label 0 first, up to the largest label present

    @property
    def num_samples(self) -> int:
        return sum(self.class_counts)


def dataset_facts(name: str, root: str | None, split: str) -> DataFacts | None:
    """The classes and per-class counts of a known data set's split ("all" = train + test), after
    checking that its files are where the loader looks (DataNotFoundError, DataFileError: the loader's
    sentences). None for a data set this catalogue does not know: the run judges it once loaded."""
    parts = ("train", "test") if split == "all" else (split,)
    if name in IDX_SETS:
        return _idx_facts(name, root, parts)
    if name in TORCHVISION_SETS:
        entry, base = TORCHVISION_SETS[name], data_base(root)
        if not all((base / entry.folder / file).is_file() for file in entry.files):
            raise torchvision_missing(entry.title, base, entry.folder, entry.cls)
    if name not in CLASS_COUNTS:
        return None
    counts = [CLASS_COUNTS[name][part] for part in parts]
    return DataFacts(len(counts[0]), tuple(map(sum, zip(*counts))))


def _idx_facts(name: str, root: str | None, parts: tuple[str, ...]) -> DataFacts | None:
    """As the loader reads an IDX set, part by part (train first): the pair of files, each file's header and
    size, the pair's shapes; then the label counts, read from the label files."""
    import numpy as np

    from fedclust.data.idx import idx_file_layout, read_idx

    entry, folders = IDX_SETS[name], idx_folders(name, root)
    labels = []
    for part in parts:
        files = find_idx_pair(folders, part)
        if files is None:
            raise idx_not_found(folders, entry.title, entry.hint)
        check_idx_pair(files, idx_file_layout(files[0]), idx_file_layout(files[1]))
        labels.append(read_idx(files[1]).astype(np.int64))
    y = np.concatenate(labels)
    if len(y) and y.min() < 0:
        return None  # not a labelling the partitions can count: left to the run
    return DataFacts(10, tuple(int(c) for c in np.bincount(y)))

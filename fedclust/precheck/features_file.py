"""A user's own feature file (`data.name: features`: .npy, .npz, .csv) judged before torch is imported: one that holds
NaN or infinite values is refused by the run's own function (fedclust/data/finite.py, which own_data.py's
feature_matrix calls), so with the very sentence the run gives.

The run's readers import torch with own_data.py, so this reads the file again with numpy alone, the way features.py
does; tests/precheck/test_features_file.py pins every sentence against the run's. It refuses only non-finite
values, and only where everything the run reads before them is plainly right: any other fault (a missing file, an
unknown column, text in a number column, a .parquet file, a file over MAX_BYTES) is left to the run.
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

from fedclust.data.finite import refuse_non_finite

MAX_BYTES = 256 << 20  # larger files are read once, by the run


def check_features_file(root, split, options: dict) -> None:
    """Refuse a features file holding non-finite values (DataFileError, the run's sentence); else return."""
    path, label, client, chosen = (options.get(k) for k in ("path", "label_column", "client_column",
                                                             "feature_columns"))
    if split == "test" or not _plain(root, path, label, client) or not (chosen is None or _names(chosen)):
        return
    if root is not None and path is not None and Path(root).expanduser() != Path(path).expanduser():
        return
    given = path if path is not None else root
    if given is None:
        return
    file = Path(given).expanduser().absolute()
    suffix = file.suffix.lower()
    try:
        if suffix not in (".npy", ".npz", ".csv") or not file.is_file() or file.stat().st_size > MAX_BYTES:
            return
        columns = _read(file, suffix, (label, client, chosen))
    except (OSError, ValueError, EOFError, UnicodeDecodeError, csv.Error):
        return  # a file the run calls damaged, in its own words
    if columns is None or any(name is not None and name not in columns for name in (label, client)):
        return
    if chosen is None:
        chosen = [c for c in columns if c not in (label, client)]
        if suffix == ".npz" and len(chosen) > 1:
            return
    elif not chosen or any(c not in columns for c in chosen):
        return
    blocks = {}
    for name in chosen:
        block = _numbers(columns[name], suffix)
        if block is None:
            return
        blocks[name] = block
    if not blocks or len({len(b) for b in blocks.values()}) != 1 or not len(next(iter(blocks.values()))):
        return
    refuse_non_finite(blocks, str(file))


def _read(file: Path, suffix: str, named: tuple) -> dict[str, np.ndarray] | None:
    """The file's columns as features.py reads them; None where it would refuse the file for something else."""
    if suffix == ".npy":
        if any(value is not None for value in named):
            return None  # options a .npy file cannot have: the run's own sentence
        array = np.load(file, allow_pickle=False)
        return {"features": array} if array.ndim == 2 else None
    if suffix == ".npz":
        with np.load(file, allow_pickle=False) as archive:
            return {key: archive[key] for key in archive.files}
    with file.open(newline="", encoding="utf-8-sig") as f:
        rows = list(csv.reader(f))
    if not rows:
        return None
    header, body = [name.strip() for name in rows[0]], [r for r in rows[1:] if r]
    if len(set(header)) != len(header) or any(len(r) != len(header) for r in body):
        return None
    cells = zip(*body) if body else [()] * len(header)
    return {name: np.array(column, dtype=str) for name, column in zip(header, cells)}


def _numbers(values: np.ndarray, suffix: str) -> np.ndarray | None:
    """One column as own_data._numeric makes it, (N, d) float64; None where the run refuses it for another reason."""
    if suffix == ".csv":
        try:
            values = values.astype(np.float64)
        except ValueError:
            return None
    if not (values.dtype.kind == "b" or values.dtype.kind in "iuf") or values.ndim not in (1, 2):
        return None
    array = values.astype(np.float64)
    return array[:, None] if array.ndim == 1 else array


def _plain(*values) -> bool:
    return all(value is None or isinstance(value, str) for value in values)


def _names(value) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)

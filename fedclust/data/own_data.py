"""A user's own data as a :class:`~fedclust.data.datasets.Dataset`: features, an optional label and an optional
client id per sample, checked and encoded once for every source (`features`, `hf`, `folder`).

- Labels are optional: without them y is -1 everywhere, num_classes 0 and ``has_labels`` False, so a run scores
  the clustering without labels instead of against made-up ones.
- Label and client ids may be any values (numbers, names); they become 0..m-1 in sorted order, numeric order
  when every id reads as a number (so clients "2" and "10" keep their order), text order otherwise.
- Everything read from disk is untrusted: non-numeric or non-finite features and missing ids are one sentence
  naming the file and the column (DataFileError).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np
import torch

from fedclust.data.finite import refuse_non_finite
from fedclust.errors import ConfigError, DataFileError

if TYPE_CHECKING:  # datasets.py imports the loaders that import this module
    from fedclust.data.dataset import Dataset


def check_no_test(name: str, split: str) -> None:
    """A user's data has no official test part: "all" and "train" are every sample."""
    if split == "test":
        raise ConfigError("data.split", split, f"'all' or 'train' ({name} data have no test part)")


def _missing(values: np.ndarray) -> np.ndarray:
    """Where an id is absent: None, NaN or an empty (blank) text."""
    if values.dtype.kind == "f":
        return np.isnan(values)
    if values.dtype.kind in "US":
        return np.char.strip(values.astype(str)) == ""
    if values.dtype.kind == "O":
        return np.array([v is None or v != v or (isinstance(v, str) and not v.strip()) for v in values], dtype=bool)
    return np.zeros(len(values), dtype=bool)


def encode_ids(values, option: str, source: str) -> np.ndarray:
    """Ids of any kind -> int64 codes 0..m-1 in sorted order (numeric when all ids read as numbers)."""
    values = np.asarray(values)
    if values.ndim != 1:
        raise DataFileError(f"{source}: the {option} column holds arrays shaped {values.shape[1:]} per sample; "
                            "it must hold one id per sample")
    missing = np.flatnonzero(_missing(values))
    if len(missing):
        raise DataFileError(f"{source}: the {option} column has no value in row {int(missing[0])}; every sample "
                            f"needs one (or leave data.options.{option} unset)")
    if values.dtype.kind in "USO":
        text = values.astype(str)
        try:
            numbers = text.astype(np.float64)
        except ValueError:
            numbers = None
        # numeric order unless two distinct texts are one number ("7" and "07"): then text order
        if numbers is not None and len(np.unique(numbers)) == len(np.unique(text)):
            values = numbers
        else:
            values = text
    return np.unique(values, return_inverse=True)[1].reshape(-1).astype(np.int64)


def _numeric(name: str, values: np.ndarray, source: str) -> np.ndarray:
    """One feature column (N,) or block (N, d) as float64; anything but numbers is refused by name."""
    if values.dtype.kind == "b" or values.dtype.kind in "iuf":
        array = values.astype(np.float64)
    else:
        kind = {"U": "text", "S": "text", "O": "text, missing or ragged"}.get(values.dtype.kind, str(values.dtype))
        raise DataFileError(f"{source}: column {name!r} holds {kind} values, not numbers; every feature "
                            "must be numeric (name the columns to use with data.options.feature_columns)")
    if array.ndim == 1:
        return array[:, None]
    if array.ndim == 2:
        return array
    raise DataFileError(f"{source}: column {name!r} holds arrays shaped {array.shape[1:]} per sample; a feature "
                        "column holds a number or a flat vector per sample (for images use data.name folder or hf "
                        "with image_column)")


def feature_matrix(columns: Mapping[str, np.ndarray], source: str) -> np.ndarray:
    """Numeric columns -> one float32 (N, d) matrix; NaN, infinities and values beyond float32 are refused."""
    if not columns:
        raise DataFileError(f"{source} has no feature column left besides the label and client columns")
    blocks = {name: _numeric(name, values, source) for name, values in columns.items()}
    x = np.concatenate(list(blocks.values()), axis=1)
    if len(x) == 0:
        raise DataFileError(f"{source} holds no sample (no row)")
    with np.errstate(over="ignore"):  # a value beyond float32 becomes inf, refused below by name
        x32 = x.astype(np.float32)
    if not np.isfinite(x32).all():
        refuse_non_finite(blocks, source)
    return x32


def own_dataset(name: str, x: np.ndarray, labels=None, clients=None, is_image: bool = False,
                source: str = "", label_option: str = "label_column", client_option: str = "client_column") -> Dataset:
    """A Dataset of the samples `x` with optional label and client ids (any values; None: the data have none)."""
    from fedclust.data.dataset import Dataset

    n = len(x)
    for option, ids in ((label_option, labels), (client_option, clients)):
        if ids is not None and len(ids) != n:
            raise DataFileError(f"{source}: the {option} column holds {len(ids)} values for {n} samples")
    if labels is None:
        y, num_classes = torch.full((n,), -1, dtype=torch.int64), 0
    else:
        codes = encode_ids(labels, label_option, source)
        y, num_classes = torch.from_numpy(codes), int(codes.max()) + 1 if n else 0
    client_ids = None if clients is None else torch.from_numpy(encode_ids(clients, client_option, source))
    return Dataset(name, torch.from_numpy(np.ascontiguousarray(x)), y, num_classes, is_image,
                   torch.zeros(n, dtype=torch.int8), has_labels=labels is not None, clients=client_ids)

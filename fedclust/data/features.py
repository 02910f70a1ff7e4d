"""`data.name: features`: a user's feature matrix from a .npy, .npz, .csv or .parquet file.

- .npy: one (N, d) array of numbers; features only.
- .npz: named arrays; `feature_columns` names the feature arrays ((N,) or (N, d) each, default: the one array
  that is neither the label nor the client array), `label_column` and `client_column` name (N,) arrays.
- .csv: comma-separated, the first line the column names; features are every column but the label and client
  columns unless `feature_columns` names them. Read with the standard library (no pandas needed), whole into
  memory: for millions of rows .npy or .parquet load faster.
- .parquet: as .csv; a column may also hold a list of numbers per row (an embedding). Needs pyarrow, the
  optional extra `fedclust[parquet]`.

Labels and client ids may be numbers or names (fedclust/data/own_data.py encodes them).
"""

from __future__ import annotations

import csv
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from fedclust.data.own_data import check_no_test, feature_matrix, own_dataset
from fedclust.errors import ConfigError, DataFileError, DataNotFoundError, FedclustError

if TYPE_CHECKING:
    from fedclust.data.dataset import Dataset

SUFFIXES = (".npy", ".npz", ".csv", ".parquet")


def features(root: str | None, split: str, path: str | None = None, label_column: str | None = None,
             client_column: str | None = None, feature_columns: list[str] | None = None) -> Dataset:
    """A feature matrix from a file: data.root (or data.options.path) is the file; see the module docstring.

    Args:
        path: The file, when data.root does not name it.
        label_column: The column (.npz: array) of labels; unset: the data have no labels.
        client_column: The column (.npz: array) naming each sample's client, for `partition: natural`.
        feature_columns: The feature columns (.npz: arrays); unset: every other column.
    """
    check_no_test("features", split)
    file = _file(root, path)
    suffix = file.suffix.lower()
    if suffix == ".npy":
        for option, value in (("label_column", label_column), ("client_column", client_column),
                              ("feature_columns", feature_columns)):
            if value is not None:
                raise ConfigError(f"data.options.{option}", value, f"unset: {file} is a .npy file, which holds "
                                  "features only (save labels and client ids as arrays of an .npz file)")
        columns = {"features": _read_npy(file)}
    else:
        read = {".npz": _read_npz, ".csv": _read_csv, ".parquet": _read_parquet}[suffix]
        columns = read(file, [c for c in (label_column, client_column) if c is not None])
    names = list(columns)
    for option, name in (("label_column", label_column), ("client_column", client_column)):
        if name is not None and name not in columns:
            raise ConfigError(f"data.options.{option}", name, f"a column of {file}: {', '.join(names)}")
    if feature_columns is not None:
        unknown = [c for c in feature_columns if c not in columns]
        if not feature_columns or unknown:
            raise ConfigError("data.options.feature_columns", feature_columns,
                              f"a list of columns of {file}: {', '.join(names)}")
        chosen = list(feature_columns)
    else:
        chosen = [c for c in names if c not in (label_column, client_column)]
        if suffix == ".npz" and len(chosen) > 1:
            raise ConfigError("data.options.feature_columns", None, f"the feature arrays of {file}, which holds "
                              f"several: {', '.join(chosen)}")
    source = str(file)
    x = feature_matrix({c: _as_numbers(columns[c], c, source, suffix) for c in chosen}, source)
    return own_dataset("features", x, None if label_column is None else columns[label_column],
                       None if client_column is None else columns[client_column], source=source)


def _file(root: str | None, path: str | None) -> Path:
    if root is not None and path is not None and Path(root).expanduser() != Path(path).expanduser():
        raise ConfigError("data.options.path", path, f"unset, or the same file as data.root ({root}): give the "
                          "file once")
    given = path if path is not None else root
    if given is None:
        raise ConfigError("data.root", None, "the path of a .npy, .npz, .csv or .parquet file (or set "
                          "data.options.path)")
    file = Path(given).expanduser().absolute()
    if file.suffix.lower() not in SUFFIXES:
        raise ConfigError("data.root", str(given), "a file ending in " + ", ".join(SUFFIXES))
    if not file.is_file():
        raise DataNotFoundError(f"{file} not found; data.root (or data.options.path) must be a .npy, .npz, .csv "
                                "or .parquet file.")
    return file


def _as_numbers(values: np.ndarray, name: str, source: str, suffix: str) -> np.ndarray:
    """csv cells are text: numbers are parsed, and the first cell that is not one is named."""
    if suffix != ".csv":
        return values
    try:
        return values.astype(np.float64)
    except ValueError:
        row = next(i for i, v in enumerate(values) if not _is_number(v))
        raise DataFileError(f"{source}: column {name!r} holds {str(values[row])!r} in row {row}, not a number; every "
                            "feature must be numeric (name the feature columns with data.options.feature_columns, the "
                            "label column with label_column)"
                            ) from None


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _damaged(file: Path, kind: str, error: BaseException) -> DataFileError:
    return DataFileError(f"{file} is not a readable {kind} file ({type(error).__name__}: "
                         f"{str(error).splitlines()[0] if str(error) else 'damaged'}); write it again")


def _read_npy(file: Path) -> np.ndarray:
    try:  # allow_pickle=False: a file from elsewhere must not run code when loaded
        array = np.load(file, allow_pickle=False)
    except (ValueError, OSError, EOFError) as error:
        raise _damaged(file, ".npy", error) from None
    if array.ndim != 2:
        raise DataFileError(f"{file} holds an array shaped {array.shape}; features are an (N, d) array")
    return array


def _read_npz(file: Path, id_columns: list[str]) -> dict[str, np.ndarray]:
    try:
        with np.load(file, allow_pickle=False) as archive:
            return {key: archive[key] for key in archive.files}
    except (ValueError, OSError, EOFError, zipfile.BadZipFile) as error:
        raise _damaged(file, ".npz", error) from None


def _read_csv(file: Path, id_columns: list[str]) -> dict[str, np.ndarray]:
    try:  # utf-8-sig: spreadsheet programs start the file with a byte-order mark
        with file.open(newline="", encoding="utf-8-sig") as f:
            rows = list(csv.reader(f))
    except (OSError, UnicodeDecodeError, csv.Error) as error:
        raise _damaged(file, ".csv", error) from None
    if not rows:
        raise DataFileError(f"{file} is empty; a .csv file starts with a line of column names")
    header, body = [name.strip() for name in rows[0]], [r for r in rows[1:] if r]  # blank lines are no samples
    if len(set(header)) != len(header):
        raise DataFileError(f"{file}: its first line names a column twice ({', '.join(header)}); column names "
                            "must be distinct")
    short = next((i for i, r in enumerate(body) if len(r) != len(header)), None)
    if short is not None:
        raise DataFileError(f"{file}: row {short} has {len(body[short])} cells where the first line names "
                            f"{len(header)} columns")
    columns = zip(*body) if body else [()] * len(header)
    return {name: np.array(cells, dtype=str) for name, cells in zip(header, columns)}


def _read_parquet(file: Path, id_columns: list[str]) -> dict[str, np.ndarray]:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise FedclustError(f"reading {file} needs pyarrow: install it with pip install 'fedclust[parquet]'."
                            ) from None
    try:
        table = pq.read_table(file)
    except (pa.ArrowException, OSError, ValueError) as error:
        raise _damaged(file, ".parquet", error) from None
    return {name: _parquet_column(table.column(name), name, file, name in id_columns, pa)
            for name in table.column_names}


def _parquet_column(column, name: str, file: Path, is_id: bool, pa) -> np.ndarray:
    if column.null_count and not is_id:
        raise DataFileError(f"{file}: column {name!r} has {column.null_count} missing values; features must be "
                            "finite numbers: drop or fill those rows")
    kind = column.type
    if pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind):
        rows = column.to_pylist()
        lengths = {len(r) for r in rows if r is not None}
        if len(lengths) > 1:
            raise DataFileError(f"{file}: column {name!r} holds lists of {min(lengths)} to {max(lengths)} values; "
                                "a vector feature column holds lists of one length")
        try:
            return np.array(rows, dtype=np.float64)
        except (TypeError, ValueError):
            raise DataFileError(f"{file}: column {name!r} holds lists of {kind.value_type}, not numbers") from None
    return column.to_numpy(zero_copy_only=False)

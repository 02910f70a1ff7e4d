"""`data.name: hf`: a Hugging Face data set, by hub name or local path, through the `datasets` library (the optional
extra `fedclust[hf]`).

Where it comes from (`data.options.path`, or data.root): a folder written by `Dataset.save_to_disk` or
`DatasetDict.save_to_disk` is read with `load_from_disk`; any other local folder or a hub name ("user/name") goes
to `load_dataset` (which downloads and caches a hub data set; offline, set HF_HUB_OFFLINE=1 to use the cache).

Which part: with `data.options.hf_split` unset, data.split picks the data set's own splits ("train", "test"; "all"
is every split, "train" first, and only "train" counts as the train part); a saved single Dataset has no
splits and is all "train". `data.options.hf_split` names one Hugging Face split instead (any name or slice the
library takes, e.g. "validation" or "train[:10%]"); data.split must then be "all" or "train".

What a sample is: `image_column` (decoded to uint8 images, resized by `image_size`, `channels` as for the
folder source) or `feature_columns` (numbers or equal-length lists of numbers). Left unset, the one image
column is used if there is one, else every column but the label and client columns.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from fedclust.data.image_files import read_images
from fedclust.data.own_data import feature_matrix, own_dataset
from fedclust.errors import ConfigError, DataFileError, DataNotFoundError, FedclustError

if TYPE_CHECKING:
    from fedclust.data.dataset import Dataset

EXTRA = "install it with pip install 'fedclust[hf]'"


def hf(root: str | None, data_split: str, path: str | None = None, hf_split: str | None = None,
       config_name: str | None = None, image_column: str | None = None, feature_columns: list[str] | None = None,
       label_column: str | None = None, client_column: str | None = None, image_size: int | None = None,
       channels: int | None = None) -> Dataset:
    """A Hugging Face data set (see the module docstring).

    Args:
        path: Hub name or local folder, when data.root does not give it.
        hf_split: One Hugging Face split (or slice) to use; unset: data.split picks the splits. (Not named
            `split`: data.split is the registry's own argument.)
        config_name: The data set's configuration, for hub data sets that have several.
        image_column: The column of images.
        feature_columns: The columns of numbers (or lists of numbers) that make a sample.
        label_column: The column of labels; unset: the data have no labels.
        client_column: The column naming each sample's client, for `partition: natural`.
        image_size: Side to resize the images to (default: their own, when all share one square size).
        channels: 1 or 3 (default: 1 when every image is greyscale).
    """
    try:
        import datasets
    except ImportError:
        raise FedclustError(f"data.name hf needs the Hugging Face datasets library: {EXTRA}.") from None
    if image_column is not None and feature_columns is not None:
        raise ConfigError("data.options.feature_columns", feature_columns, "unset when data.options.image_column "
                          "is set (a sample is an image or a vector of features, not both)")
    where = _where(root, path)
    field = "data.options.path" if path is not None else "data.root"  # the setting the user named it with
    table, marks = _parts(datasets, _load(datasets, where, hf_split, config_name, field), data_split, hf_split,
                          where)
    columns = list(table.column_names)
    for option, name in (("label_column", label_column), ("client_column", client_column),
                         ("image_column", image_column)):
        if name is not None and name not in columns:
            raise ConfigError(f"data.options.{option}", name, f"a column of {where}: {', '.join(columns)}")
    if feature_columns is not None:
        if not feature_columns or any(c not in columns for c in feature_columns):
            raise ConfigError("data.options.feature_columns", feature_columns,
                              f"a list of columns of {where}: {', '.join(columns)}")
    rest = [c for c in columns if c not in (label_column, client_column)]
    if image_column is None and feature_columns is None:
        images = [c for c in rest if isinstance(table.features[c], datasets.Image)]
        if len(images) > 1:
            raise ConfigError("data.options.image_column", None, f"one of the image columns of {where}: "
                              f"{', '.join(images)}")
        image_column = images[0] if images else None
        feature_columns = None if images else rest
    if image_column is not None:
        x = _images(datasets, table, image_column, image_size, channels, where)
    else:
        for option, value in (("image_size", image_size), ("channels", channels)):
            if value is not None:
                raise ConfigError(f"data.options.{option}", value, "unset: this data set's samples are features, "
                                  "not images")
        x = feature_matrix({c: _column(table, c) for c in feature_columns}, where)
    dataset = own_dataset("hf", x, None if label_column is None else _column(table, label_column),
                          None if client_column is None else _column(table, client_column),
                          is_image=image_column is not None, source=where)
    dataset.split = marks
    return dataset


def _where(root: str | None, path: str | None) -> str:
    if root is not None and path is not None and root != path:
        raise ConfigError("data.options.path", path, f"unset, or the same as data.root ({root}): give the data "
                          "set once")
    where = path if path is not None else root
    if not where:
        raise ConfigError("data.root", where, "a Hugging Face hub name (user/name) or a local folder (or set "
                          "data.options.path)")
    return str(where)


def _load(datasets, where: str, split: str | None, config_name: str | None, field: str = "data.options.path"):
    """A Dataset or DatasetDict: a saved folder through load_from_disk, anything else through load_dataset.
    `field`: the setting that named `where` (data.options.path, or data.root), which the messages name."""
    local = Path(where).expanduser()
    saved = (local / "state.json").is_file() or (local / "dataset_dict.json").is_file()
    if not local.exists() and where.startswith(("/", ".", "~")):
        raise DataNotFoundError(f"{local} not found; {field} must be a Hugging Face hub name (user/name) "
                                "or an existing folder.")
    try:
        if saved:
            if config_name is not None:
                raise ConfigError("data.options.config_name", config_name, f"unset: {local} is a saved data set, "
                                  "which has no configurations")
            return datasets.load_from_disk(str(local))
        return datasets.load_dataset(str(local) if local.exists() else where, config_name, split=split)
    except FedclustError:
        raise
    except Exception as error:  # noqa: BLE001  (the library raises many kinds: network, missing, bad files)
        message = str(error).strip().splitlines()[0] if str(error).strip() else "no message"
        raise DataFileError(f"the Hugging Face data set {where!r} could not be loaded ({type(error).__name__}: "
                            f"{message}); check {field} (offline, only a local folder or a cached hub data "
                            "set loads)") from None


def _parts(datasets, loaded, data_split: str, split: str | None, where: str):
    """The samples data.split asks for, as one Dataset, and their split marks (0 = train part, 1 = the rest)."""
    import torch

    if isinstance(loaded, datasets.Dataset):
        if data_split == "test":
            valid = "'all' or 'train' (" + ("data.options.hf_split picks the one Hugging Face split used)"
                                             if split is not None else f"{where} has no splits)")
            raise ConfigError("data.split", data_split, valid)
        return loaded, torch.zeros(len(loaded), dtype=torch.int8)
    names = list(loaded)
    if split is not None:
        if split not in names:
            raise ConfigError("data.options.hf_split", split, f"a split of {where}: {', '.join(names)}")
        if data_split == "test":
            raise ConfigError("data.split", data_split, "'all' or 'train' (data.options.hf_split picks the one "
                              "Hugging Face split used)")
        return loaded[split], torch.zeros(len(loaded[split]), dtype=torch.int8)
    if data_split != "all":
        if data_split not in names:
            raise ConfigError("data.split", data_split, f"'all' or a split of {where}: {', '.join(names)} (or pick "
                              "one with data.options.hf_split)")
        return loaded[data_split], torch.full((len(loaded[data_split]),), int(data_split != "train"), dtype=torch.int8)
    order = sorted(names, key=lambda n: (n != "train", n != "test", n))
    marks = torch.cat([torch.full((len(loaded[n]),), int(n != "train"), dtype=torch.int8) for n in order])
    return datasets.concatenate_datasets([loaded[n] for n in order]), marks


def _column(table, name: str) -> np.ndarray:
    return table.select_columns([name]).with_format("numpy")[:][name]


def _images(datasets, table, column: str, image_size: int | None, channels: int | None, where: str) -> np.ndarray:
    """A column of images (the datasets Image feature, kept as encoded bytes until our decoder reads them, or
    arrays of pixels) -> uint8 (N, C, S, S)."""
    from PIL import Image

    if isinstance(table.features[column], datasets.Image):
        values = list(table.select_columns([column]).cast_column(column, datasets.Image(decode=False))[column])
    else:
        values = list(_column(table, column))
    if not values:
        raise DataFileError(f"{where} holds no sample")

    def open_image(i: int):
        value = values[i]
        if isinstance(value, dict):  # the Image feature undecoded: bytes, or a path to a file
            if value.get("bytes"):
                return Image.open(io.BytesIO(value["bytes"]))
            if value.get("path"):
                return Image.open(value["path"])
            raise ValueError("no image")
        if value is None:
            raise ValueError("no image")
        pixels = np.asarray(value)
        if pixels.dtype.kind in "iu" and pixels.size and 0 <= pixels.min() and pixels.max() <= 255:
            pixels = pixels.astype(np.uint8)  # integer pixels as lists come back int64
        if pixels.dtype != np.uint8:  # floats: 0..1 or 0..255? PIL would guess; refuse instead
            raise DataFileError(f"{where}: row {i} of column {column!r} holds {pixels.dtype} pixels; an image "
                                "column holds encoded images or integer pixels 0..255")
        return Image.fromarray(pixels)

    return read_images(list(range(len(values))), image_size, channels, opener=open_image,
                       where=lambda i: f"{where}: row {i} of column {column!r}")

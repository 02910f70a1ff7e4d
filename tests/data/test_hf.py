"""`data.name: hf` (fedclust/data/hf.py) on tiny data sets saved to disk: this machine has no internet, so the hub
branch is checked by what it hands to `datasets.load_dataset`."""

from __future__ import annotations

import sys

import numpy as np
import pytest
import torch
from PIL import Image

from fedclust.data.datasets import load_dataset
from fedclust.errors import ConfigError, DataFileError, DataNotFoundError, FedclustError


@pytest.fixture
def hf_datasets():
    return pytest.importorskip("datasets", reason="data.name hf needs the optional extra fedclust[hf] (datasets)")


def _images(n):
    return [Image.fromarray(np.full((5, 5, 3), 20 * i, dtype=np.uint8)) for i in range(n)]


def test_saved_image_dataset_with_labels_and_clients(tmp_path, hf_datasets):
    features = hf_datasets.Features({"img": hf_datasets.Image(), "label": hf_datasets.ClassLabel(names=["a", "b"]),
                                     "site": hf_datasets.Value("string")})
    data = hf_datasets.Dataset.from_dict({"img": _images(6), "label": [0, 1] * 3, "site": ["s2", "s1", "s3"] * 2},
                                         features=features)
    data.save_to_disk(str(tmp_path / "saved"))

    ds = load_dataset("hf", root=str(tmp_path / "saved"), label_column="label", client_column="site")

    assert ds.is_image and ds.x.shape == (6, 3, 5, 5) and ds.x.dtype == torch.uint8
    assert int(ds.x[2, 0, 0, 0]) == 40  # pixels survive: encoded bytes, decoded by fedclust's reader
    assert ds.y.tolist() == [0, 1] * 3 and ds.num_classes == 2 and ds.has_labels
    assert ds.clients.tolist() == [1, 0, 2] * 2  # s1 < s2 < s3
    small = load_dataset("hf", path=str(tmp_path / "saved"), image_size=3, channels=1)
    assert small.x.shape == (6, 1, 3, 3) and not small.has_labels  # the one image column, found by itself


def test_image_column_of_pixel_arrays(tmp_path, hf_datasets):
    pixels = [np.full((4, 4), 30 * i).tolist() for i in range(3)]  # integer lists, as a plain column holds them
    hf_datasets.Dataset.from_dict({"px": pixels}).save_to_disk(str(tmp_path))

    ds = load_dataset("hf", root=str(tmp_path), image_column="px")

    assert ds.x.shape == (3, 1, 4, 4) and ds.x.dtype == torch.uint8 and int(ds.x[2, 0, 1, 1]) == 60
    hf_datasets.Dataset.from_dict({"px": [[[0.5]]]}).save_to_disk(str(tmp_path / "floats"))
    with pytest.raises(DataFileError, match="row 0 of column 'px' holds float(32|64) pixels"):
        load_dataset("hf", root=str(tmp_path / "floats"), image_column="px")


def test_saved_dataset_dict_splits_and_feature_columns(tmp_path, hf_datasets):
    def part(n, offset):
        return hf_datasets.Dataset.from_dict({"v": [[float(i + offset), 1.0] for i in range(n)],
                                              "w": [float(i) for i in range(n)], "y": [i % 2 for i in range(n)]})

    hf_datasets.DatasetDict({"test": part(3, 100), "train": part(4, 0)}).save_to_disk(str(tmp_path / "dd"))
    root = str(tmp_path / "dd")

    every = load_dataset("hf", root=root, label_column="y")
    assert every.x.shape == (7, 3) and every.x[0].tolist() == [0.0, 1.0, 0.0]  # train first, then test
    assert every.split.tolist() == [0] * 4 + [1] * 3 and every.num_classes == 2
    test = load_dataset("hf", root=root, split="test")
    assert len(test) == 3 and test.x[0, 0] == 100.0 and test.split.tolist() == [1] * 3
    assert load_dataset("hf", root=root, feature_columns=["w"]).x.shape == (7, 1)


def test_hf_split_option_picks_one_split(tmp_path, hf_datasets):
    hf_datasets.DatasetDict({"train": hf_datasets.Dataset.from_dict({"f": [1.0, 2.0, 3.0]}),
                             "validation": hf_datasets.Dataset.from_dict({"f": [9.0]})}).save_to_disk(str(tmp_path))

    assert load_dataset("hf", root=str(tmp_path), hf_split="validation").x.tolist() == [[9.0]]
    with pytest.raises(ConfigError, match="data.options.hf_split = 'dev'.*train, validation"):
        load_dataset("hf", root=str(tmp_path), hf_split="dev")
    with pytest.raises(ConfigError, match="data.split = 'test'.*train, validation"):
        load_dataset("hf", root=str(tmp_path), split="test")
    with pytest.raises(ConfigError, match="data.split = 'test'.*hf_split picks"):
        load_dataset("hf", root=str(tmp_path), split="test", hf_split="train")


def test_hub_names_go_to_load_dataset(monkeypatch, hf_datasets):
    calls = []

    def fake_load_dataset(path, name=None, split=None):
        calls.append((path, name, split))
        return hf_datasets.Dataset.from_dict({"f": [1.0, 2.0], "u": ["a", "b"]})

    monkeypatch.setattr(hf_datasets, "load_dataset", fake_load_dataset)
    ds = load_dataset("hf", root="someone/tiny", hf_split="train[:2]", config_name="cfg", client_column="u")
    assert calls == [("someone/tiny", "cfg", "train[:2]")] and ds.clients.tolist() == [0, 1]


def test_hf_refusals_are_one_sentence(tmp_path, hf_datasets, monkeypatch):
    hf_datasets.Dataset.from_dict({"f": [1.0, float("nan")], "t": ["x", "y"], "gap": [1.0, None]}).save_to_disk(
        str(tmp_path / "s"))
    root = str(tmp_path / "s")
    cases = [
        (dict(feature_columns=["f"]), DataFileError, "column 'f' holds NaN"),
        (dict(feature_columns=["t"]), DataFileError, "column 't' holds text values, not numbers"),
        (dict(feature_columns=["gap"]), DataFileError, "column 'gap' holds NaN \\(missing\\)"),
        (dict(label_column="nope"), ConfigError, "data.options.label_column = 'nope'.*f, t, gap"),
        (dict(image_column="f", feature_columns=["f"]), ConfigError, "data.options.feature_columns"),
        (dict(feature_columns=["f"], image_size=4), ConfigError, "data.options.image_size"),
    ]
    for options, error, match in cases:
        with pytest.raises(error, match=match) as raised:
            load_dataset("hf", root=root, **options)
        assert "\n" not in str(raised.value)
    with pytest.raises(DataNotFoundError, match="missing not found; data.root must be"):  # the setting given
        load_dataset("hf", root=str(tmp_path / "missing"))
    with pytest.raises(DataNotFoundError, match="missing not found; data.options.path must be"):
        load_dataset("hf", path=str(tmp_path / "missing"))

    def offline(*args, **kwargs):
        raise ConnectionError("Couldn't reach 'someone/tiny' on the Hub (LocalEntryNotFoundError)")

    monkeypatch.setattr(hf_datasets, "load_dataset", offline)
    with pytest.raises(DataFileError, match="'someone/tiny' could not be loaded \\(ConnectionError") as raised:
        load_dataset("hf", root="someone/tiny")
    assert "\n" not in str(raised.value) and "check data.root (" in str(raised.value)
    with pytest.raises(DataFileError, match="check data.options.path \\("):
        load_dataset("hf", path="someone/tiny")


def test_without_the_datasets_library_the_error_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "datasets", None)  # as if it were not installed
    with pytest.raises(FedclustError, match=r"pip install 'fedclust\[hf\]'") as raised:
        load_dataset("hf", root="someone/tiny")
    assert "\n" not in str(raised.value)

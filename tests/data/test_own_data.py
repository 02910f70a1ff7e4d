"""A user's own data (docs/own_data.md): the folder and features sources, optional labels, client ids, and bad
files as one sentence each."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from fedclust.data.datasets import load_dataset
from fedclust.data.own_data import encode_ids
from fedclust.errors import ConfigError, DataFileError, DataNotFoundError, FedclustError


def _png(path, value, size=(6, 6), mode="RGB"):
    path.parent.mkdir(parents=True, exist_ok=True)
    shape = (size[1], size[0], 3) if mode == "RGB" else (size[1], size[0])
    Image.fromarray(np.full(shape, value, dtype=np.uint8), mode).save(path)


def _one_sentence(error) -> str:
    text = str(error.value)
    assert "\n" not in text and "Traceback" not in text
    return text


# ---------------------------------------------------------------- folder


def test_folder_with_class_sub_folders_gives_labels(tmp_path):
    for c, name in enumerate(("cat", "dog")):
        for i in range(3):
            _png(tmp_path / name / f"{i}.png", 50 * c + i)

    ds = load_dataset("folder", root=str(tmp_path))

    assert ds.x.shape == (6, 3, 6, 6) and ds.x.dtype == torch.uint8  # the images' own size and channels
    assert ds.y.tolist() == [0, 0, 0, 1, 1, 1] and ds.num_classes == 2 and ds.has_labels
    assert int(ds.x[4, 2, 0, 0]) == 51 and ds.clients is None and ds.is_image


def test_flat_folder_has_no_labels(tmp_path):
    for i in range(4):
        _png(tmp_path / f"{i}.png", 10 * i, mode="L")

    ds = load_dataset("folder", root=str(tmp_path))

    assert ds.x.shape == (4, 1, 6, 6)  # every image greyscale: one channel
    assert not ds.has_labels and ds.num_classes == 0 and ds.y.tolist() == [-1] * 4
    assert load_dataset("folder", root=str(tmp_path), channels=3, image_size=4).x.shape == (4, 3, 4, 4)


def test_folder_image_size_is_needed_when_sizes_differ(tmp_path):
    _png(tmp_path / "a.png", 1, size=(6, 6))
    _png(tmp_path / "b.png", 1, size=(8, 6))
    with pytest.raises(ConfigError, match="data.options.image_size") as error:
        load_dataset("folder", root=str(tmp_path))
    assert "b.png is 8x6" in _one_sentence(error)
    assert load_dataset("folder", root=str(tmp_path), image_size=5).x.shape == (2, 3, 5, 5)


def test_folder_bad_requests_are_one_sentence(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataFileError, match="holds no image") as error:
        load_dataset("folder", root=str(tmp_path / "empty"))
    _one_sentence(error)
    with pytest.raises(DataNotFoundError, match="is not a folder"):
        load_dataset("folder", root=str(tmp_path / "nowhere"))
    _png(tmp_path / "mixed" / "a.png", 1)
    _png(tmp_path / "mixed" / "cls" / "b.png", 1)
    with pytest.raises(DataFileError, match="both images and sub-folders"):
        load_dataset("folder", root=str(tmp_path / "mixed"))
    _png(tmp_path / "tree" / "a" / "x.png", 1)
    (tmp_path / "tree" / "b").mkdir()
    with pytest.raises(DataFileError, match=r"tree/b holds no image"):
        load_dataset("folder", root=str(tmp_path / "tree"))
    _png(tmp_path / "ok" / "x.png", 1)
    for option, value in (("channels", 2), ("image_size", 0)):
        with pytest.raises(ConfigError, match=f"data.options.{option}"):
            load_dataset("folder", root=str(tmp_path / "ok"), **{option: value})
    with pytest.raises(ConfigError, match="data.split"):
        load_dataset("folder", root=str(tmp_path / "ok"), split="test")
    with pytest.raises(ConfigError, match="data.root"):
        load_dataset("folder")
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "a.png").write_bytes(b"\x89PNG not really")
    with pytest.raises(DataFileError, match="a.png is not a readable image"):
        load_dataset("folder", root=str(tmp_path / "broken"))


# ---------------------------------------------------------------- features


def _blobs(n=30, d=3, seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, d)).astype(np.float64)


def test_npy_is_features_only(tmp_path):
    x = _blobs()
    np.save(tmp_path / "x.npy", x)

    ds = load_dataset("features", root=str(tmp_path / "x.npy"))

    assert ds.x.dtype == torch.float32 and torch.allclose(ds.x, torch.from_numpy(x).float())
    assert not ds.has_labels and not ds.is_image and ds.clients is None
    assert len(load_dataset("features", path=str(tmp_path / "x.npy"))) == 30  # data.options.path works too
    with pytest.raises(ConfigError, match="data.options.label_column"):
        load_dataset("features", root=str(tmp_path / "x.npy"), label_column="y")


def test_npz_arrays_by_name(tmp_path):
    x = _blobs()
    y = np.array(["b", "a", "c"] * 10)
    writer = np.arange(30) % 4 * 10  # ids 0, 10, 20, 30
    np.savez(tmp_path / "d.npz", x=x, y=y, writer=writer)

    ds = load_dataset("features", root=str(tmp_path / "d.npz"), label_column="y", client_column="writer")

    assert ds.x.shape == (30, 3) and ds.has_labels and ds.num_classes == 3
    assert ds.y[:3].tolist() == [1, 0, 2]  # "a" < "b" < "c"
    assert ds.clients.tolist() == (np.arange(30) % 4).tolist()
    with pytest.raises(ConfigError, match="data.options.feature_columns") as error:
        load_dataset("features", root=str(tmp_path / "d.npz"))  # x, y and writer: which are the features?
    assert "x, y, writer" in _one_sentence(error)
    with pytest.raises(ConfigError, match="data.options.client_column") as error:
        load_dataset("features", root=str(tmp_path / "d.npz"), label_column="y", client_column="user")
    assert "x, y, writer" in str(error.value)


def test_csv_columns_with_names(tmp_path):
    rows = ["a,b,label,user"] + [f"{i},{2 * i},{'yes' if i % 2 else 'no'},u{i % 3}" for i in range(12)]
    (tmp_path / "d.csv").write_text("\n".join(rows) + "\n")

    ds = load_dataset("features", root=str(tmp_path / "d.csv"), label_column="label", client_column="user")

    assert ds.x[:, 1].tolist() == [2.0 * i for i in range(12)] and ds.x.shape == (12, 2)
    assert ds.y[:2].tolist() == [0, 1] and ds.clients[:4].tolist() == [0, 1, 2, 0]
    only_a = load_dataset("features", root=str(tmp_path / "d.csv"), feature_columns=["a"])
    assert only_a.x.shape == (12, 1) and not only_a.has_labels


def test_numeric_ids_keep_their_numeric_order():
    assert encode_ids(np.array(["10", "2", "2", "33"]), "client_column", "f").tolist() == [1, 0, 0, 2]
    assert encode_ids(np.array(["7", "07"]), "client_column", "f").tolist() == [1, 0]  # two ids, not one number
    with pytest.raises(DataFileError, match="no value in row 1"):
        encode_ids(np.array(["a", " ", "b"]), "client_column", "f.csv")


def test_parquet_with_a_list_column(tmp_path):
    pa = pytest.importorskip("pyarrow", reason="parquet needs the optional extra fedclust[parquet] (pyarrow)")
    import pyarrow.parquet as pq

    table = pa.table({"emb": [[float(i), float(-i)] for i in range(10)], "w": [1.5] * 10,
                      "site": ["x", "y"] * 5, "cls": [0, 1, 2, 3, 4] * 2})
    pq.write_table(table, tmp_path / "d.parquet")

    ds = load_dataset("features", root=str(tmp_path / "d.parquet"), label_column="cls", client_column="site")

    assert ds.x.shape == (10, 3) and ds.x[3].tolist() == [3.0, -3.0, 1.5]
    assert ds.num_classes == 5 and ds.clients.tolist() == [0, 1] * 5


def test_parquet_without_pyarrow_names_the_extra(tmp_path, monkeypatch):
    import sys

    (tmp_path / "d.parquet").write_bytes(b"PAR1")
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # as if it were not installed
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    with pytest.raises(FedclustError, match=r"fedclust\[parquet\]") as error:
        load_dataset("features", root=str(tmp_path / "d.parquet"))
    _one_sentence(error)


@pytest.mark.parametrize(
    ("file", "content", "options", "error", "match"),
    [
        ("x.npy", "truncated", {}, DataFileError, "not a readable .npy file"),
        ("x.npz", b"PK\x03\x04 broken zip", {}, DataFileError, "not a readable .npz file"),
        ("x.csv", "a,b\n1,2\n3,oops\n", {}, DataFileError, "column 'b' holds 'oops' in row 1, not a number"),
        ("x.csv", "a,b\n1,\n", {}, DataFileError, "column 'b' holds '' in row 0"),
        ("x.csv", "a,b\n1,nan\n2,3\n", {}, DataFileError, r"column 'b' holds NaN \(missing\), infinite or too large"),
        ("x.csv", "a,b\n1,inf\n", {}, DataFileError, "infinite"),
        ("x.csv", "a,b\n1,1e39\n", {}, DataFileError, "too large"),  # beyond float32
        ("x.csv", "a,b\n1,2,3\n", {}, DataFileError, "row 0 has 3 cells"),
        ("x.csv", "a,b\n1,2\n", {"label_column": "y"}, ConfigError, "data.options.label_column = 'y'.*a, b"),
        ("x.csv", "a,b\n1,2\n", {"feature_columns": ["c"]}, ConfigError, "data.options.feature_columns"),
        ("x.csv", "a,b\n", {}, DataFileError, "holds no sample"),
        ("x.csv", "", {}, DataFileError, "is empty"),
        ("x.txt", "1,2\n", {}, ConfigError, "data.root"),
        ("x.npy", "nan_array", {}, DataFileError, "NaN"),
        ("x.npy", "1d_array", {}, DataFileError, r"shaped \(5,\)"),
    ],
)
def test_bad_feature_files_are_one_sentence(tmp_path, file, content, options, error, match):
    path = tmp_path / file
    if content == "truncated":
        np.save(path, np.zeros((50, 4)))
        path.write_bytes(path.read_bytes()[:200])
    elif content == "nan_array":
        np.save(path, np.array([[1.0, np.nan], [2.0, 3.0]]))
    elif content == "1d_array":
        np.save(path, np.zeros(5))
    elif isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    with pytest.raises(error, match=match) as raised:
        load_dataset("features", root=str(path), **options)
    _one_sentence(raised)


def test_features_file_must_exist_and_be_given_once(tmp_path):
    with pytest.raises(DataNotFoundError, match="x.csv not found"):
        load_dataset("features", root=str(tmp_path / "x.csv"))
    with pytest.raises(ConfigError, match="data.root"):
        load_dataset("features")
    with pytest.raises(ConfigError, match="data.options.path"):
        load_dataset("features", root=str(tmp_path / "a.csv"), path=str(tmp_path / "b.csv"))

"""Data set loading: real embedded/installed sets, and tiny fake files in every on-disk format we read."""

from __future__ import annotations

import gzip
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch
import torchvision
from PIL import Image
from sklearn.cluster import KMeans
from sklearn.metrics import normalized_mutual_info_score

from fedclust.data import image_files
from fedclust.data.dataset import to_float
from fedclust.data.datasets import DEBIAN_FASHION_MNIST, load_dataset
from fedclust.errors import ConfigError, DataNotFoundError
from tests.helpers.tiny import write_idx


@pytest.fixture(autouse=True)
def _no_env_root(monkeypatch):
    monkeypatch.delenv("FEDCLUST_DATA_ROOT", raising=False)




def write_idx_set(folder: Path, gz: bool, n_train: int = 5, n_test: int = 3, seed: int = 0):
    rng = np.random.default_rng(seed)
    arrays = {}
    for stem, n in (("train", n_train), ("t10k", n_test)):
        images = rng.integers(0, 256, size=(n, 4, 6), dtype=np.uint8)
        labels = rng.integers(0, 10, size=n, dtype=np.uint8)
        suffix = ".gz" if gz else ""
        write_idx(folder / f"{stem}-images-idx3-ubyte{suffix}", images, gz)
        write_idx(folder / f"{stem}-labels-idx1-ubyte{suffix}", labels, gz)
        arrays[stem] = (images, labels)
    return arrays


# ---------------------------------------------------------------- embedded and installed sets


def test_digits_loads_as_uint8_images():
    ds = load_dataset("digits")
    assert ds.x.shape == (1797, 1, 8, 8) and ds.x.dtype == torch.uint8
    assert ds.y.dtype == torch.int64 and ds.num_classes == 10 and ds.is_image
    assert int(ds.x.max()) == 255 and int(ds.x.min()) == 0
    assert len(load_dataset("digits", split="train")) == 1500
    test = load_dataset("digits", split="test")
    assert len(test) == 297 and torch.equal(test.x, ds.x[1500:])
    assert torch.equal(ds.split, (torch.arange(1797) >= 1500).to(torch.int8))


@pytest.mark.skipif(not DEBIAN_FASHION_MNIST.is_dir(), reason="dataset-fashion-mnist is not installed")
def test_fmnist_from_debian_folder():
    ds = load_dataset("fmnist")
    assert ds.x.shape == (70000, 1, 28, 28) and ds.x.dtype == torch.uint8
    assert torch.equal(torch.bincount(ds.y), torch.full((10,), 7000))
    assert int(ds.split.sum()) == 10000 and int(ds.split[:60000].sum()) == 0
    assert len(load_dataset("fmnist", split="train")) == 60000


def test_to_float():
    x = torch.tensor([0, 51, 255], dtype=torch.uint8)
    assert torch.allclose(to_float(x), torch.tensor([0.0, 0.2, 1.0]))
    f = torch.randn(3)
    assert to_float(f) is f


# ---------------------------------------------------------------- IDX files (MNIST, Fashion-MNIST)


@pytest.mark.parametrize("gz", [False, True])
def test_read_idx(tmp_path, gz):
    array = np.arange(24, dtype=np.uint8).reshape(2, 3, 4)
    write_idx(tmp_path / "a", array, gz)
    assert np.array_equal(image_files.read_idx(tmp_path / "a"), array)


@pytest.mark.parametrize("gz", [False, True])
def test_mnist_from_plain_folder(tmp_path, gz):
    arrays = write_idx_set(tmp_path, gz)
    ds = load_dataset("mnist", root=str(tmp_path))
    assert ds.x.shape == (8, 1, 4, 6) and ds.x.dtype == torch.uint8
    assert np.array_equal(ds.x[:5, 0].numpy(), arrays["train"][0])
    assert np.array_equal(ds.x[5:, 0].numpy(), arrays["t10k"][0])
    assert ds.y.tolist() == [*arrays["train"][1].tolist(), *arrays["t10k"][1].tolist()]
    assert ds.split.tolist() == [0] * 5 + [1] * 3
    test = load_dataset("mnist", root=str(tmp_path), split="test")
    assert torch.equal(test.x, ds.x[5:]) and test.split.tolist() == [1] * 3


@pytest.mark.parametrize("gz", [False, True])
def test_fmnist_from_torchvision_layout(tmp_path, gz):
    arrays = write_idx_set(tmp_path / "FashionMNIST" / "raw", gz, seed=1)
    ds = load_dataset("fmnist", root=str(tmp_path), split="train")
    assert np.array_equal(ds.x[:, 0].numpy(), arrays["train"][0])
    assert ds.y.tolist() == arrays["train"][1].tolist()


def test_missing_idx_names_the_folder(tmp_path):
    where = tmp_path / "nowhere"
    with pytest.raises(DataNotFoundError, match=str(where)) as err:
        load_dataset("fmnist", root=str(where))
    assert "dataset-fashion-mnist" in str(err.value)
    with pytest.raises(DataNotFoundError, match="MNIST not found"):
        load_dataset("mnist", root=str(where))


# ---------------------------------------------------------------- torchvision layouts


def _pickle(path: Path, obj) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(pickle.dumps(obj))


@pytest.fixture
def skip_md5(monkeypatch):
    """torchvision checks the official files' md5 sums; our fake files cannot match them."""
    monkeypatch.setattr(torchvision.datasets.cifar, "check_integrity", lambda *a, **k: True)
    monkeypatch.setattr(torchvision.datasets.STL10, "_check_integrity", lambda self: True)


def test_cifar10(tmp_path, skip_md5):
    rng = np.random.default_rng(0)
    folder = tmp_path / "cifar-10-batches-py"
    batches = {}
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        batches[name] = rng.integers(0, 256, size=(2, 3072), dtype=np.uint8), [i % 10 for i in range(2)]
        _pickle(folder / name, {"data": batches[name][0], "labels": batches[name][1]})
    _pickle(folder / "batches.meta", {"label_names": [str(i) for i in range(10)]})

    ds = load_dataset("cifar10", root=str(tmp_path))

    assert ds.x.shape == (12, 3, 32, 32) and ds.x.dtype == torch.uint8 and ds.num_classes == 10
    assert np.array_equal(ds.x[0].numpy(), batches["data_batch_1"][0][0].reshape(3, 32, 32))
    assert np.array_equal(ds.x[-1].numpy(), batches["test_batch"][0][1].reshape(3, 32, 32))
    assert ds.split.tolist() == [0] * 10 + [1] * 2


def test_cifar100_20_maps_fine_to_coarse(tmp_path, skip_md5):
    folder = tmp_path / "cifar-100-python"
    fine = list(range(100))
    data = np.zeros((100, 3072), dtype=np.uint8)
    for name in ("train", "test"):
        _pickle(folder / name, {"data": data, "fine_labels": fine, "coarse_labels": [0] * 100})
    _pickle(folder / "meta", {"fine_label_names": [str(i) for i in range(100)]})

    ds = load_dataset("cifar100_20", root=str(tmp_path), split="train")

    assert ds.num_classes == 20 and len(ds) == 100
    # apple -> fruit_and_vegetables, aquarium_fish -> fish, lawn_mower -> vehicles_2, worm -> invertebrates
    assert [ds.y[i].item() for i in (0, 1, 41, 99)] == [4, 1, 19, 13]
    assert torch.equal(torch.bincount(ds.y), torch.full((20,), 5))


def test_cifar100_keeps_the_100_fine_labels(tmp_path, skip_md5):
    """`cifar100` is the task FedPNP and FedMCC cluster: the 100 fine classes in file order, train then test
    (before, only the 20 super-classes of `cifar100_20` existed)."""
    folder = tmp_path / "cifar-100-python"
    rng = np.random.default_rng(0)
    parts = {}
    for name, n in (("train", 100), ("test", 100)):
        fine = rng.permutation(100).tolist()
        parts[name] = rng.integers(0, 256, size=(n, 3072), dtype=np.uint8), fine
        _pickle(folder / name, {"data": parts[name][0], "fine_labels": fine, "coarse_labels": [0] * n})
    _pickle(folder / "meta", {"fine_label_names": [str(i) for i in range(100)]})

    ds = load_dataset("cifar100", root=str(tmp_path))

    assert ds.name == "cifar100" and ds.num_classes == 100 and len(ds) == 200
    assert ds.x.shape == (200, 3, 32, 32) and ds.x.dtype == torch.uint8
    assert ds.y.tolist() == parts["train"][1] + parts["test"][1]
    assert np.array_equal(ds.x[100].numpy(), parts["test"][0][0].reshape(3, 32, 32))
    assert ds.split.tolist() == [0] * 100 + [1] * 100
    assert load_dataset("cifar100_20", root=str(tmp_path)).num_classes == 20  # the super-classes stay available


def test_stl10(tmp_path, skip_md5):
    rng = np.random.default_rng(0)
    folder = tmp_path / "stl10_binary"
    folder.mkdir()
    images = {}
    for part, n in (("train", 3), ("test", 2)):
        images[part] = rng.integers(0, 256, size=(n, 3, 96, 96), dtype=np.uint8)
        # the binary format stores each channel column-major
        (folder / f"{part}_X.bin").write_bytes(images[part].transpose(0, 1, 3, 2).tobytes())
        (folder / f"{part}_y.bin").write_bytes(np.arange(1, n + 1, dtype=np.uint8).tobytes())

    ds = load_dataset("stl10", root=str(tmp_path))

    assert ds.x.shape == (5, 3, 96, 96) and ds.x.dtype == torch.uint8
    assert np.array_equal(ds.x.numpy(), np.concatenate([images["train"], images["test"]]))
    assert ds.y.tolist() == [0, 1, 2, 0, 1]


def test_imagenet10_image_folder(tmp_path):
    for c, name in enumerate(("n01", "n02")):
        (tmp_path / "imagenet-10" / name).mkdir(parents=True)
        for i in range(3):
            pixels = np.full((12, 20, 3), 40 * c + i, dtype=np.uint8)
            Image.fromarray(pixels).save(tmp_path / "imagenet-10" / name / f"{i}.png")

    ds = load_dataset("imagenet10", root=str(tmp_path), image_size=8)

    assert ds.x.shape == (6, 3, 8, 8) and ds.x.dtype == torch.uint8
    assert ds.y.tolist() == [0, 0, 0, 1, 1, 1] and ds.num_classes == 2
    assert int(ds.x[4, 0, 3, 3]) == 41  # a flat image stays flat when resized
    assert len(load_dataset("imagenet10", root=str(tmp_path / "imagenet-10"), image_size=8)) == 6
    with pytest.raises(ConfigError, match="data.split"):
        load_dataset("imagenet10", root=str(tmp_path), split="test")


@pytest.mark.parametrize(
    ("name", "folder"),
    [("cifar10", "cifar-10-batches-py"), ("cifar100", "cifar-100-python"), ("cifar100_20", "cifar-100-python"),
     ("stl10", "stl10_binary")],
)
def test_missing_torchvision_set_names_the_folder(tmp_path, name, folder):
    with pytest.raises(DataNotFoundError, match=str(tmp_path / folder)) as err:
        load_dataset(name, root=str(tmp_path))
    assert "download=True" in str(err.value)


def test_missing_image_folder_under_env_root(tmp_path, monkeypatch):
    monkeypatch.setenv("FEDCLUST_DATA_ROOT", str(tmp_path))
    with pytest.raises(DataNotFoundError, match=str(tmp_path / "imagenet-10")):
        load_dataset("imagenet10")


def test_unknown_name_split_and_option():
    with pytest.raises(ConfigError, match="data.name") as err:
        load_dataset("nope")
    assert "cifar10" in str(err.value)
    with pytest.raises(ConfigError, match="data.split"):
        load_dataset("digits", split="val")
    with pytest.raises(ConfigError, match="data.options.image_size"):
        load_dataset("digits", image_size=32)


# ---------------------------------------------------------------- synthetic sets (UIFCA)


@pytest.mark.parametrize("name", ["gaussian", "subspace"])
def test_synthetic_shapes_and_seeding(name):
    ds = load_dataset(name)
    assert ds.x.shape == (4000, 32) and ds.x.dtype == torch.float32 and not ds.is_image
    assert torch.equal(torch.bincount(ds.y), torch.full((4,), 1000)) and ds.num_classes == 4
    assert int(ds.split.sum()) == 0
    assert torch.equal(load_dataset(name, seed=0).x, ds.x)
    assert not torch.equal(load_dataset(name, seed=1).x, ds.x)
    small = load_dataset(name, num_clusters=3, points_per_cluster=10, dim=20)
    assert small.x.shape == (30, 20) and small.num_classes == 3


@pytest.mark.parametrize("name", ["gaussian", "subspace"])
def test_synthetic_clusters_of_unequal_sizes(name):
    """points_per_cluster as a list: one size per cluster (the hidden variations of UIFCA's Table 1)."""
    ds = load_dataset(name, points_per_cluster=[50, 100, 150, 200])
    assert torch.bincount(ds.y).tolist() == [50, 100, 150, 200] and ds.x.shape == (500, 32)
    assert torch.equal(load_dataset(name, points_per_cluster=[50, 100, 150, 200]).x, ds.x)
    if name == "subspace":  # every cluster still lies in its own 16-dim subspace
        assert all(torch.linalg.matrix_rank(ds.x[ds.y == k].double(), tol=1e-4).item() == 16 for k in range(4))
    for bad in ([50, 100], [50, 100, 150, 0], 0):
        with pytest.raises(ConfigError, match=r"data\.options\.points_per_cluster .*a list of 4 positive integers"):
            load_dataset(name, points_per_cluster=bad)


def test_gaussian_is_recovered_by_kmeans():
    ds = load_dataset("gaussian", seed=3)
    pred = KMeans(4, n_init=10, random_state=0).fit_predict(ds.x.numpy())
    assert normalized_mutual_info_score(ds.y.numpy(), pred) > 0.95


def test_subspace_clusters_lie_in_16_dim_subspaces():
    ds = load_dataset("subspace", points_per_cluster=100)
    for k in range(4):
        assert torch.linalg.matrix_rank(ds.x[ds.y == k].double(), tol=1e-4).item() == 16


def test_shared_data_root_uses_subfolders(tmp_path, monkeypatch):
    write_idx_set(tmp_path, gz=True)  # plain IDX files in a shared root could be either set: not read
    arrays = write_idx_set(tmp_path / "MNIST" / "raw", gz=True, seed=2)
    monkeypatch.setenv("FEDCLUST_DATA_ROOT", str(tmp_path))
    ds = load_dataset("mnist", split="test")
    assert np.array_equal(ds.x[:, 0].numpy(), arrays["t10k"][0])


# ---------------------------------------------------------------- damaged data files (issue 11)


def _damage(path: Path, how: str) -> None:
    data = path.read_bytes()
    if how == "truncated":
        path.write_bytes(data[: len(data) - 7])
    elif how == "padded":
        path.write_bytes(data + b"\x00" * 5)
    elif how == "header":
        path.write_bytes(b"\x01\x02" + data[2:])
    else:  # a gzip stream cut short
        path.write_bytes(gzip.compress(data)[:20])


@pytest.mark.parametrize("how", ["truncated", "padded", "header", "gzip"])
def test_a_damaged_idx_file_is_one_sentence_naming_it(tmp_path, how):
    from fedclust.errors import DataFileError

    write_idx_set(tmp_path, gz=False)
    target = tmp_path / "train-images-idx3-ubyte"
    if how == "gzip":
        target.unlink()
        target = tmp_path / "train-images-idx3-ubyte.gz"
        write_idx(target, np.zeros((5, 4, 6), np.uint8), gz=False)
    _damage(target, how)
    with pytest.raises(DataFileError) as error:
        load_dataset("mnist", root=str(tmp_path))
    assert str(target) in str(error.value) and "\n" not in str(error.value)


def test_labels_that_do_not_match_their_images_are_refused(tmp_path):
    """Before: a labels file of another length was accepted and trained on the wrong pairs (NMI 0.002)."""
    from fedclust.errors import DataFileError

    write_idx_set(tmp_path, gz=False)
    write_idx(tmp_path / "train-labels-idx1-ubyte", np.zeros(4, np.uint8), gz=False)
    with pytest.raises(DataFileError, match="5 images but .* 4 labels"):
        load_dataset("mnist", root=str(tmp_path))


def test_a_file_that_is_not_an_image_in_an_image_folder_is_one_sentence(tmp_path):
    from fedclust.errors import DataFileError

    folder = tmp_path / "imagenet-10" / "cat"
    folder.mkdir(parents=True)
    (folder / "a.jpg").write_bytes(b"not a jpeg at all")
    with pytest.raises(DataFileError, match="a.jpg is not a readable image"):
        load_dataset("imagenet10", root=str(tmp_path))


def test_subsample_keeps_the_same_random_subset_for_every_seed_and_refuses_too_many():
    import pytest
    import torch

    from fedclust.data.config import DataConfig, build_federated_data
    from fedclust.errors import ConfigError

    cfg = DataConfig(name="digits", num_clients=2, partition="iid", subsample=300)
    a = build_federated_data(cfg, torch.device("cpu"), seed=0)
    b = build_federated_data(cfg, torch.device("cpu"), seed=7)
    assert len(a) == 300 and torch.equal(a.x, b.x) and torch.equal(a.labels, b.labels)
    full = build_federated_data(DataConfig(name="digits", num_clients=2, partition="iid"), torch.device("cpu"), 0)
    rows = {tuple(r.flatten().tolist()) for r in full.x}
    assert all(tuple(r.flatten().tolist()) in rows for r in a.x)  # a subset of the split, not new samples
    with pytest.raises(ConfigError, match="data.subsample"):
        build_federated_data(DataConfig(name="digits", subsample=10**6), torch.device("cpu"), 0)

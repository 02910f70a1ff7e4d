"""A user's own data end to end (docs/own_data.md): tiny files written here, a real `fit` through the command line
or fit(), the run folder it leaves, and `evaluate` on it. Data without labels are scored without labels."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest
from PIL import Image

from fedclust.__main__ import main
from fedclust.clustering.metrics import LABEL_FREE_METRICS, LABEL_METRICS
from fedclust.federation.config import FederationConfig
from fedclust.methods import KFED, KMeans
from tests.conftest import tiny_ccfc, tiny_data

# The users' files here are tiny (clients of 15-30 samples), below the default privacy floor of 20 samples a summary:
# the tests lower the floor, as a user with such data must, knowingly.
TINY_FLOOR = 3
TINY = FederationConfig(min_summary_size=TINY_FLOOR)


def _blobs_csv(path, labels=True):
    """Three well separated blobs of 2-d points held by four users."""
    rng = np.random.default_rng(0)
    centres = np.array([[0.0, 0.0], [8.0, 8.0], [0.0, 8.0]])
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["a", "b", "kind", "user"])
        for i in range(60):
            x = centres[i % 3] + rng.normal(size=2) * 0.5
            writer.writerow([f"{x[0]:.4f}", f"{x[1]:.4f}", f"k{i % 3}", f"user{i % 4 * 10}"])


def _header(path):
    return path.read_text().splitlines()[0].split(",")


def test_csv_without_labels_natural_clients_through_the_cli(tmp_path, capsys):
    _blobs_csv(tmp_path / "points.csv")
    run = tmp_path / "run"
    argv = ["fit", "--method", "KFED", "--method.num_clusters", "3", "--data.name", "features",
            "--data.root", str(tmp_path / "points.csv"), "--data.partition", "natural",
            "--data.options", "{client_column: user, feature_columns: [a, b]}", "--progress", "false",
            "--run_dir", str(run), "--federation.min_summary_size", str(TINY_FLOOR)]

    assert main(argv) == 0

    final = json.loads((run / "final.json").read_text())["metrics"]
    assert set(final) == set(LABEL_FREE_METRICS)  # never NMI against stand-in labels
    assert final["calinski_harabasz"] > 100 and final["clusters_found"] == 3 and final["cluster_size_min"] == 20
    header = _header(run / "metrics.csv")
    assert "calinski_harabasz" in header and "cluster_size_max" in header and not set(header) & set(LABEL_METRICS)
    assert [line.split() for line in (run / "partition.txt").read_text().splitlines()][1:] == \
        [["0", "15"], ["1", "15"], ["2", "15"], ["3", "15"]]  # four users, 15 points each
    assert not (run / "partition.csv").exists()
    rows = list(csv.DictReader((run / "assignments.csv").open()))
    assert {r["label"] for r in rows} == {"-1"} and rows[1]["client"] == "1"

    assert main(["evaluate", "--run", str(run)]) == 0
    again = json.loads((run / "evaluate_same.json").read_text())
    assert again == pytest.approx(final)
    capsys.readouterr()
    assert main(["evaluate", "--run", str(run), "--knn", "3"]) == 2
    assert "no labels" in capsys.readouterr().err


def test_csv_with_labels_scores_against_them(tmp_path, run_fit):
    _blobs_csv(tmp_path / "points.csv")
    data = tiny_data(name="features", root=str(tmp_path / "points.csv"), partition="natural", num_clients=4,
                     options={"label_column": "kind", "client_column": "user"})

    final = run_fit(KFED(num_clusters=3), data, federation=TINY)

    assert set(final) == set(LABEL_METRICS) and final["nmi"] == pytest.approx(1.0)


def test_unlabelled_data_need_num_clusters_and_a_label_free_partition(tmp_path, capsys):
    _blobs_csv(tmp_path / "points.csv")
    base = ["fit", "--method", "KFED", "--data.name", "features", "--data.root", str(tmp_path / "points.csv"),
            "--data.options", "{feature_columns: [a, b]}", "--progress", "false"]
    cases = [(["--data.partition", "iid", "--data.num_clients", "2"], "method.init_args.num_clusters = None"),
             (["--method.num_clusters", "3", "--data.partition", "dirichlet"], "data.partition = 'dirichlet'"),
             (["--method.num_clusters", "3", "--data.partition", "natural"], "client_column")]
    for i, (extra, message) in enumerate(cases):
        assert main([*base, *extra, "--run_dir", str(tmp_path / f"refused{i}")]) == 2
        err = capsys.readouterr().err.strip()
        assert message in err and len(err.splitlines()) == 1
        assert not (tmp_path / f"refused{i}").exists()  # nothing left behind


def test_npy_features_with_kmeans(tmp_path, run_fit):
    rng = np.random.default_rng(1)
    np.save(tmp_path / "x.npy", np.concatenate([rng.normal(0, 1, (20, 5)), rng.normal(9, 1, (20, 5))]))
    data = tiny_data(name="features", root=str(tmp_path / "x.npy"), num_clients=1, partition="iid")

    final = run_fit(KMeans(num_clusters=2), data, federation=TINY)

    assert final["clusters_found"] == 2 and final["cluster_size_min"] == 20


def test_parquet_natural_clients(tmp_path, run_fit):
    pa = pytest.importorskip("pyarrow", reason="parquet needs the optional extra fedclust[parquet] (pyarrow)")
    import pyarrow.parquet as pq

    rng = np.random.default_rng(2)
    emb = np.concatenate([rng.normal(0, 1, (12, 3)), rng.normal(7, 1, (12, 3))])
    pq.write_table(pa.table({"emb": emb.tolist(), "site": [2, 11] * 12}), tmp_path / "d.parquet")
    data = tiny_data(name="features", root=str(tmp_path / "d.parquet"), partition="natural", num_clients=None,
                     options={"client_column": "site"})

    final = run_fit(KFED(num_clusters=2), data, federation=TINY)

    assert final["clusters_found"] == 2


def _image_tree(root, flat=False):
    """Two kinds of 8x8 images, dark and bright, 12 each: class sub-folders, or all in one folder."""
    rng = np.random.default_rng(3)
    for c, name in enumerate(("dark", "bright")):
        for i in range(12):
            pixels = np.clip(rng.normal(40 + 170 * c, 10, (8, 8, 3)), 0, 255).astype(np.uint8)
            path = (root if flat else root / name) / f"{name}{i}.png"
            path.parent.mkdir(parents=True, exist_ok=True)
            Image.fromarray(pixels).save(path)


def test_image_folder_with_ccfc(tmp_path, run_fit):
    _image_tree(tmp_path / "images")
    data = tiny_data(name="folder", root=str(tmp_path / "images"), num_clients=2, partition="iid")

    final = run_fit(tiny_ccfc(num_clusters=2, batch_size=8), data, federation=TINY)

    assert set(final) == set(LABEL_METRICS)


def test_flat_image_folder_with_ccfc_through_the_cli(tmp_path):
    _image_tree(tmp_path / "flat", flat=True)
    run = tmp_path / "run"
    argv = ["fit", "--method", "CCFC", "--method.num_clusters", "2", "--method.backbone", "mlp",
            "--method.latent_dim", "16", "--method.projector_hidden", "32", "--method.pretrain_rounds", "1",
            "--method.cluster_rounds", "1", "--method.batch_size", "8", "--method.kmeans_niter", "10",
            "--method.kmeans_redo", "1", "--data.name", "folder", "--data.root", str(tmp_path / "flat"),
            "--data.partition", "iid", "--data.num_clients", "2", "--data.options", "{image_size: 6}",
            "--fabric.accelerator", "cpu", "--progress", "false", "--run_dir", str(run),
            "--federation.min_summary_size", str(TINY_FLOOR)]

    assert main(argv) == 0

    final = json.loads((run / "final.json").read_text())["metrics"]
    assert set(final) == set(LABEL_FREE_METRICS) and final["cluster_size_min"] + final["cluster_size_max"] <= 24


def test_saved_hugging_face_data_set(tmp_path, run_fit):
    datasets = pytest.importorskip("datasets", reason="data.name hf needs the optional extra fedclust[hf]")
    rng = np.random.default_rng(4)
    points = np.concatenate([rng.normal(0, 1, (10, 4)), rng.normal(8, 1, (10, 4))])
    datasets.Dataset.from_dict({"x": points.tolist(), "label": [0] * 10 + [1] * 10,
                                "hospital": ["north", "south"] * 10}).save_to_disk(str(tmp_path / "hf"))
    data = tiny_data(name="hf", root=str(tmp_path / "hf"), partition="natural", num_clients=None,
                     options={"label_column": "label", "client_column": "hospital"})

    final = run_fit(KFED(num_clusters=2), data, federation=TINY)

    assert final["nmi"] == pytest.approx(1.0)


def test_fit_help_lists_every_data_name(capsys):
    try:  # the help comes from cli_schema.json while it is fresh (returns), else from the parser (exits)
        main(["fit", "--help"])
    except SystemExit:
        pass
    text = " ".join(capsys.readouterr().out.split())
    for name in ("imagenet10", "rotated", "representations", "hog", "folder", "features", "hf", "natural"):
        assert name in text

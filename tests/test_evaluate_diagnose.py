"""`fedclust evaluate --diagnose true`: the diagnostics of a saved run's final model (docs/diagnostics.md), for
runs fit without --diagnose, written to RUN/diagnostics_<split>.json as strict JSON; refused in one sentence for
a method that learns no representation."""

import csv
import json
import math
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from fedclust.__main__ import main
from fedclust.federation.config import FederationConfig
from fedclust.methods import KFED
from fedclust.probes.diagnose import DIAGNOSTIC_KEYS
from tests.conftest import tiny_ccfc, tiny_data
from tests.helpers.tiny import tiny_run_config


def _strict(text: str) -> dict:
    """JSON as a strict reader takes it: a bare NaN or Infinity fails."""
    def refuse(constant):
        raise ValueError(f"not strict JSON: {constant}")
    return json.loads(text, parse_constant=refuse)


def _files(folder):
    return {p.relative_to(folder): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


@pytest.fixture
def ccfc_run(run_fit, tmp_path):
    """A tiny CCFC run on digits, fit WITHOUT --diagnose."""
    method, data = tiny_ccfc(), tiny_data()
    run_fit(method, data, folder="ccfc", config_text=tiny_run_config(method, data))
    return tmp_path / "ccfc"


def test_diagnose_writes_one_strict_record_of_the_final_model(ccfc_run, capsys):
    before = _files(ccfc_run)
    assert not (ccfc_run / "diagnostics.csv").exists()

    assert main(["evaluate", "--run", str(ccfc_run), "--split", "test", "--diagnose", "true"]) == 0

    record = _strict((ccfc_run / "diagnostics_test.json").read_text())
    assert list(record) == ["split", "data", "samples", "round", *DIAGNOSTIC_KEYS]
    assert record["split"] == "test" and record["data"] == "digits" and record["samples"] == 297
    assert record["round"] == 2  # tiny CCFC: one pretraining round and one clustering round
    assert all(isinstance(record[k], float) and math.isfinite(record[k]) for k in DIAGNOSTIC_KEYS)
    assert 1 <= record["effective_rank"] <= 16  # latent_dim 16
    assert 0 < record["top1_share"] <= record["top3_share"] <= 1
    assert 0 <= record["pc1_brightness_r"] <= 1 and 0 <= record["embed_kmeans_nmi"] <= 1
    assert record["cluster_min"] <= record["cluster_max"] <= 297
    # the run's own files are untouched: evaluate added only its own outputs
    after = _files(ccfc_run)
    assert {k: after[k] for k in before} == before
    assert set(after) - set(before) == {Path("diagnostics_test.json"), Path("evaluate_test.json"),
                                        Path("assignments_test.csv")}
    printed = capsys.readouterr().out
    assert "diagnostics, test" in printed and "effective_rank" in printed and "top3_share" in printed


def test_diagnose_without_labels_writes_null_not_nan(run_fit, tmp_path):
    """Images without labels (a flat folder): no k-means NMI to compute, written as null (evaluate) or an empty
    cell (fit's diagnostics.csv); the rest is there."""
    rng = np.random.default_rng(0)
    (tmp_path / "flat").mkdir()
    for i in range(24):  # dark and bright 8x8 images
        Image.fromarray(np.clip(rng.normal(40 + 170 * (i % 2), 10, (8, 8, 3)), 0, 255).astype(np.uint8)).save(
            tmp_path / "flat" / f"img{i}.png")
    method = tiny_ccfc(num_clusters=2, batch_size=8)
    data = tiny_data(name="folder", root=str(tmp_path / "flat"), num_clients=2, partition="iid")
    few = FederationConfig(min_summary_size=4)  # 12 images a client: the floor lowered knowingly
    run_fit(method, data, few, folder="flat_run", config_text=tiny_run_config(method, data), diagnose=True)
    run = tmp_path / "flat_run"
    rows = list(csv.DictReader((run / "diagnostics.csv").open()))
    assert rows and rows[-1]["embed_kmeans_nmi"] == "" and float(rows[-1]["effective_rank"]) >= 1

    assert main(["evaluate", "--run", str(run), "--diagnose", "true"]) == 0

    text = (run / "diagnostics_same.json").read_text()
    record = _strict(text)
    assert "NaN" not in text and record["embed_kmeans_nmi"] is None
    assert record["samples"] == 24 and record["effective_rank"] >= 1 and record["pc1_brightness_r"] is not None


def test_diagnose_is_refused_for_a_method_without_an_embedding(run_fit, tmp_path, capsys):
    method, data = KFED(k_local=10), tiny_data(num_clients=3)
    run_fit(method, data, folder="kfed", config_text=tiny_run_config(method, data))
    run = tmp_path / "kfed"
    before = _files(run)

    assert main(["evaluate", "--run", str(run), "--diagnose", "true"]) == 2

    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert "diagnose" in err and "KFED clusters the input itself" in err and "CCFC, " in err
    named = err.split("the methods with one: ")[1].rstrip(").").split(", ")
    assert "FedSpectral" in named and not {"KFED", "KMeans", "FCM", "UIFCA"} & set(named)
    assert _files(run) == before  # nothing written, not even evaluate's own scores


def test_fit_refuses_it_with_evaluate_s_sentence_before_any_folder(run_fit, tmp_path, monkeypatch, capsys):
    """One rule (fedclust.run_checks.check_diagnose): fit says what evaluate says, before any data is loaded or
    any folder made, whether the first pass (the registry's record) or the run (the class) judges it."""
    from fedclust import precheck

    method, data = KFED(k_local=10), tiny_data(num_clients=3)
    run_fit(method, data, folder="kfed", config_text=tiny_run_config(method, data))
    assert main(["evaluate", "--run", str(tmp_path / "kfed"), "--diagnose", "true"]) == 2
    evaluate_said = capsys.readouterr().err.strip()
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    argv = ["fit", "--config", "ccfc_digits", "--method", "KFED", "--diagnose", "true"]

    assert main(argv) == 2  # the first pass refuses it
    assert capsys.readouterr().err.strip() == evaluate_said
    monkeypatch.setattr(precheck, "check", lambda command, args: None)
    assert main(argv) == 2  # the run refuses it too, from the class itself
    assert capsys.readouterr().err.strip() == evaluate_said
    assert list(work.iterdir()) == []  # no runs/ folder, no run folder


def test_a_method_with_an_embedding_passes_the_first_pass():
    from fedclust import precheck
    from fedclust.config_files import packaged_configs

    config = str(packaged_configs()["ccfc_digits"])
    assert precheck.judge("fit", ["--config", config, "--diagnose", "true"]) == "passed"
    assert precheck.judge("fit", ["--config", config, "--method", "FedSpectral", "--diagnose", "true"]) == "passed"

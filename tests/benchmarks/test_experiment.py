"""benchmarks/experiment.py: an experiment YAML is checked strictly, every mistake one sentence naming the field,
and every experiment in benchmarks/experiments parses into `fedclust fit` runs the fit parser accepts."""

import csv
import json
from pathlib import Path

import pytest

from benchmarks.__main__ import main
from benchmarks.archive import archived
from benchmarks.experiment import load, paper_cell
from benchmarks.report import collect, curve_table, write_csv
from fedclust.errors import ConfigError
from fedclust.sweep import check, fingerprint

ROOT = Path(__file__).resolve().parents[2]
EXPERIMENTS = ROOT / "benchmarks" / "experiments"


def _entry(**changes):
    return [{"label": "k-FED", "config": "kfed_fmnist", **changes}]


@pytest.mark.parametrize("changes, field, words", [
    ({"colums": ["nmi"]}, "tiny.yaml: colums", "a known key"),
    ({"title": None}, "tiny.yaml: title", "required"),
    ({"metrics": "nmi"}, "tiny.yaml: metrics", "a list"),
    ({"configs": _entry(config="nosuch_config")}, "configs[0].config", "packaged config"),
    ({"configs": _entry(lable="x")}, "configs[0]: lable", "a known key"),
    ({"configs": []}, "tiny.yaml: configs", "one or more"),
    ({"grid": {"seed": []}}, "grid: seed", "non-empty list"),
    ({"grid": {}}, "tiny.yaml: grid", "one or more keys"),
    ({"grid": {"dta.p": [0, 1]}}, "grid: dta.p", "`fedclust fit` setting"),
    ({"configs": _entry(overrides={"sed": 1})}, "configs[0].overrides: sed", "`fedclust fit` setting"),
    ({"metrics": ["nmii"]}, "tiny.yaml: metrics", "one of nmi"),
    ({"table": {"columns": ["method", "p"]}}, "tiny.yaml: table", "a grid key"),
    ({"settings": {"latent": "methd.latent_dim"}}, "settings: latent", "`fedclust fit` setting"),
    ({"paper": [{"metric": "nmi", "source": "s", "cells": {"KFED": 0.5}}]}, "paper[0].cells", "a label"),
    ({"paper": [{"metric": "acc", "source": "s", "cells": {"k-FED": 0.5}}]}, "paper[0].metric", "declared"),
    ({"paper": [{"metric": "nmi", "source": "s", "cells": {"k-FED": {1: 0.5}}}]}, "paper[0].by", "keyed by"),
    ({"plot": {"x": "data.p", "y": "nmi"}}, "plot.x", "a grid key"),
    ({"configs": _entry() * 2}, "configs[1]", "declared twice"),
    ({"curve": {"metric": "nmii", "rounds": [1]}}, "curve.metric", "a per-round column"),
    ({"curve": {"metric": "nmi", "rounds": [0, 2]}}, "curve.rounds", "round numbers from 1"),
    ({"curve": {"metric": "nmi", "rounds": [1], "stage2": [3, 3]}}, "curve.stage2", "1 <= first < last"),
    ({"metrics": ["nmi", "stage2_mean"], "table": {"columns": ["method", "nmi"]}}, "curve.stage2", "stage2_* need it"),
])
def test_a_mistake_is_one_sentence_naming_the_field(write_experiment, tiny_spec, changes, field, words):
    spec = tiny_spec(**changes)
    spec = {k: v for k, v in spec.items() if v is not None}
    path = write_experiment(spec)
    with pytest.raises(ConfigError) as error:
        load(str(path), path.parent)
    message = str(error.value)
    assert field in message and words in message and "\n" not in message


def test_every_experiment_is_in_the_readme_table():
    """benchmarks/README.md's table names every file of benchmarks/experiments (a row may name several)."""
    rows = [line.split("|")[1] for line in (ROOT / "benchmarks" / "README.md").read_text().splitlines()
            if line.startswith("| ")]
    listed = {name.strip() for row in rows for name in row.split(",")}
    assert sorted(path.stem for path in EXPERIMENTS.glob("*.yaml") if path.stem not in listed) == []


def test_the_cli_answers_a_bad_name_with_one_line(capsys):
    assert main(["report", "no_such_experiment"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "heterogeneity_fmnist" in err and "Traceback" not in err


def test_grid_crosses_each_config_and_a_config_may_have_its_own(write_experiment, tiny_spec):
    spec = tiny_spec(grid={"data.p": [0, 1], "setting": {"a": {"seed": 1}, "b": {"seed": 2, "data.alpha": 0.5}}},
                     configs=[*_entry(), {"label": "KM", "config": "kmeans_fmnist", "grid": {"seed": [3]}}],
                     table={"columns": ["method", "p", "setting", "nmi"]}, plot={"x": "data.p", "y": "nmi"})
    exp = load(str(write_experiment(spec)), ROOT)
    assert [r.point.name for r in exp.runs] == ["k-FED_p=0_setting=a", "k-FED_p=0_setting=b", "k-FED_p=1_setting=a",
                                                "k-FED_p=1_setting=b", "KM_seed=3"]
    assert exp.runs[1].point.overrides == {**tiny_spec()["overrides"], "data.p": 0, "seed": 2, "data.alpha": 0.5}
    assert exp.runs[1].values == {"data.p": 0, "setting": "b"}
    assert exp.runs[-1].point.config.endswith("kmeans_fmnist.yaml")
    assert paper_cell(exp, exp.paper[0], exp.runs[0]) == 0.5 and paper_cell(exp, exp.paper[0], exp.runs[-1]) is None


def test_a_config_path_is_read_from_the_repository_root_and_a_frozen_copy_keeps_the_rows(
        write_experiment, tiny_spec, tmp_path, monkeypatch):
    """An experiment may name a lab config by its path from the repository's root, from any working folder; the
    frozen copy of FedSpectral's nearest-labelling config keeps the committed rows made with it their runs (a
    fingerprint is the config's content, not its name) while configs/fedspectral_fmnist.yaml moves on."""
    frozen = "benchmarks/configs/fedspectral_fmnist_nearest.yaml"
    monkeypatch.chdir(tmp_path)  # not the repository: a path read from here would not exist
    spec = tiny_spec(configs=[{"label": "FedSpectral", "config": frozen}], paper=[])
    exp = load(str(write_experiment(spec)), tmp_path)
    assert Path(exp.runs[0].point.config) == ROOT / frozen
    table = load("heterogeneity_fmnist", EXPERIMENTS)
    with (ROOT / "benchmarks" / "results" / "heterogeneity_fmnist.csv").open(newline="") as f:
        made = {row["run"] for row in csv.DictReader(f) if row["method"].startswith("FedSpectral") and
                row["state"] == "done"}
    assert len(made) == 20 and made <= set(archived(table, ROOT / "benchmarks" / "results"))


def test_heterogeneity_experiment_is_what_issues_22_and_43_ask_for():
    exp = load("heterogeneity_fmnist", EXPERIMENTS)
    assert exp.labels == ["k-FED", "k-FED (HOG)", "Spectral (HOG, central)", "FedSpectral round 1", "KM",
                          "FedSpectral", "CCFC++ (20+10)", "CCFC (20+10)", "CCFC++", "CCFC", "CCFC (paper's settings)"]
    assert all(r.point.overrides["data.split"] == "test" for r in exp.runs)
    every_p = {0, 0.25, 0.5, 0.75, 1}
    for label in ("k-FED", "k-FED (HOG)", "FedSpectral", "FedSpectral round 1"):
        assert {r.values["data.p"] for r in exp.runs if r.label == label} == every_p
    for label in ("k-FED", "k-FED (HOG)"):  # the baselines at FedSpectral's floor (its config ships 50)
        assert all(r.point.overrides["federation.min_summary_size"] == 50 for r in exp.runs if r.label == label)
    assert all(r.point.overrides["federation.rounds"] == 1 for r in exp.runs if r.label == "FedSpectral round 1")
    assert [r.values for r in exp.runs if r.label == "Spectral (HOG, central)"] == [{"seed": 0}]
    for label in ("CCFC++ (20+10)", "CCFC (20+10)"):  # the same shortened schedule for both (issue 22 item 3)
        runs = [r for r in exp.runs if r.label == label]
        assert {r.values["data.p"] for r in runs} == {0, 0.5, 1}
        assert all(r.point.overrides["method.init_args.pretrain_rounds"] == 20 for r in runs)
    for label in ("CCFC++", "CCFC", "CCFC (paper's settings)"):  # whole schedules at every p (item 4)
        runs = [r for r in exp.runs if r.label == label]
        assert {r.values["data.p"] for r in runs} == every_p
        assert all("method.init_args.pretrain_rounds" not in r.point.overrides for r in runs)
    ccfc = {r.label: r.point.config for r in exp.runs if r.label.startswith("CCFC (") or r.label == "CCFC"}
    assert {label: Path(config).stem for label, config in ccfc.items()} == {  # the rows before the settings rule
        "CCFC": "ccfc_fmnist_code", "CCFC (20+10)": "ccfc_fmnist_code", "CCFC (paper's settings)": "ccfc_fmnist"}
    assert [r.values for r in exp.runs if r.label == "KM"] == [{"seed": 0}]
    seeds = {(r.values["data.p"], r.values["seed"]) for r in exp.runs if r.label == "FedSpectral"}
    assert seeds == {(p, seed) for p in every_p for seed in (0, 1, 2)}  # the issue asks seeds 1-2 at p = 0 and 1
    assert exp.columns == ["method", "p", "seed", "rounds", "min_summary", "nmi", "acc", "ari", "kappa",
                           "seconds_per_round", "peak_memory_mb", "commit"]
    assert exp.plot == {"x": "data.p", "y": "nmi"}
    nmi = exp.paper[0]
    assert nmi["metric"] == "nmi" and nmi["cells"]["KM"] == 0.6070 and nmi["cells"]["CCFC (20+10)"][1] == 0.1211


def test_every_experiment_gives_runs_the_fit_parser_accepts():
    """One run per config and per grid value of every experiment (the others differ only in values)."""
    names = sorted(p.stem for p in EXPERIMENTS.glob("*.yaml"))
    assert "heterogeneity_fmnist" in names and len(names) >= 15
    for name in names:
        covered = set()
        for run in load(name, EXPERIMENTS).runs:
            pairs = {(run.label, run.point.config, k, str(v)) for k, v in run.values.items()}
            if pairs and pairs <= covered:
                continue
            covered |= pairs
            check(run.point)


def test_stage2_is_the_level_of_the_curve_metric_over_its_rounds_once_all_are_in(write_experiment, tiny_spec,
                                                                                 tmp_path):
    spec = tiny_spec(metrics=["nmi", "stage2_mean", "stage2_std"], curve={"metric": "nmi", "rounds": [3],
                                                                            "stage2": [2, 4]},
                     table={"columns": ["method", "nmi", "stage2_mean", "stage2_std"]})
    exp = load(str(write_experiment(spec)), ROOT)
    folder = tmp_path / "runs" / exp.runs[0].point.name
    folder.mkdir(parents=True)
    (tmp_path / "runs" / ".points").mkdir()  # the start record a run writes: this folder is the point's run
    record = {"fingerprint": fingerprint(exp.runs[0].point)}
    (tmp_path / "runs" / ".points" / f"{exp.runs[0].point.name}.json").write_text(json.dumps(record))
    (folder / "metrics.csv").write_text("round,nmi\n1,0.1\n2,0.5\n3,0.7\n")
    assert collect(exp, tmp_path / "runs")[0]["stage2_mean"] is None  # round 4 not in yet: no stage level
    (folder / "metrics.csv").write_text("round,nmi\n1,0.1\n2,0.5\n3,0.7\n4,0.6\n")
    row = collect(exp, tmp_path / "runs")[0]
    assert row["stage2_mean"] == pytest.approx(0.6) and row["stage2_std"] == pytest.approx(0.1)
    no_grid = {k: v for k, v in spec.items() if k not in ("grid", "plot")}
    for changed in (spec, no_grid):  # the per-round table: every line as many cells as its header, grid or none
        exp = load(str(write_experiment(changed)), ROOT)
        table = [line for line in curve_table(exp, tmp_path / "runs", [row]) if line.startswith("|")]
        assert len(table) == 3 and len({line.count("|") for line in table}) == 1 and "|  |" not in table[0]


def test_the_results_csv_names_columns_as_the_issues_do(write_experiment, tiny_spec, tmp_path):
    """method, data, p, seed, ...: a grid key by its last part, data.name as "data", a clash kept dotted; a
    setting no override names is read from the run's config file (kfed_fmnist: fmnist, seed 66)."""
    overrides = {k: v for k, v in tiny_spec()["overrides"].items() if k != "data.name"}
    spec = tiny_spec(overrides=overrides, grid={"data.p": [0, 1], "method.init_args.p": [2]},
                     table={"columns": ["method", "data.p", "nmi"]}, plot={"x": "data.p", "y": "nmi"})
    exp = load(str(write_experiment(spec)), ROOT)
    assert exp.csv_columns == {"data.name": "data", "data.p": "data.p", "method.init_args.p": "method.init_args.p",
                               "seed": "seed"}
    assert exp.key("data.p") == "data.p" and exp.key("data") is None  # data.name is no grid key here
    write_csv(exp, collect(exp, tmp_path / "runs"), tmp_path / "out.csv")
    rows = list(csv.DictReader((tmp_path / "out.csv").open()))
    assert list(rows[0])[:6] == ["method", "data", "data.p", "method.init_args.p", "seed", "state"]
    assert (rows[1]["data"], rows[1]["data.p"], rows[1]["seed"], rows[1]["state"]) == ("fmnist", "1", "66", "pending")


def test_settings_and_samples_are_read_back_from_each_run_folder(write_experiment, tiny_spec, tmp_path):
    """A declared setting is the run's own config.yaml value (what fit resolved, not the experiment's declaration),
    samples partition.csv's total; a damaged folder gives empty cells, not an error."""
    spec = tiny_spec(settings={"latent": "method.init_args.latent_dim", "lambda": "method.init_args.lam"},
                     metrics=["nmi", "samples"], table={"columns": ["method", "seed", "samples", "latent", "nmi"]})
    exp = load(str(write_experiment(spec)), ROOT)
    runs = tmp_path / "runs"
    (runs / ".points").mkdir(parents=True)
    for run, config, partition in zip(exp.runs, ("method:\n  init_args: {latent_dim: 64, lam: 1.0}\n", "[not: yaml"),
                                      ("client,class_0,class_1\n0,3,4\n1,5,0\n", "client,class_0\n0,x\n")):
        folder = runs / run.point.name
        folder.mkdir()
        (folder / "config.yaml").write_text(config)
        (folder / "partition.csv").write_text(partition)
        (folder / "metrics.csv").write_text("round,nmi\n1,0.5\n")
        (runs / ".points" / f"{run.point.name}.json").write_text(json.dumps({"fingerprint": fingerprint(run.point)}))
    rows = collect(exp, runs)
    assert (rows[0]["latent"], rows[0]["lambda"], rows[0]["samples"]) == (64, 1.0, 12)
    assert (rows[1]["latent"], rows[1]["lambda"], rows[1]["samples"]) == (None, None, None)
    write_csv(exp, rows, tmp_path / "out.csv")
    header = next(csv.reader((tmp_path / "out.csv").open()))
    assert header[:6] == ["method", "data", "seed", "latent", "lambda", "state"] and "samples" in header

"""Issue 45 item 6, the users' last mile: refusals decided from the files before torch is imported (a resume that
would compute something else, a checkpoint that asks to load code, evaluate's config checks, NaN in a feature file,
`fit --help`), the same sentence from the run, a refused command that leaves the run folder byte-identical, the
messages that say what happened, the final table with `--progress false`, a k the model cannot form explained, and
the estimator as scikit-learn takes it.

What is fast is asserted through the modules a fresh interpreter imported (robust to a loaded machine), not by
timing; the figures are measured by hand (the issue's 2 s on an idle machine).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from fedclust.__main__ import main
from fedclust.errors import ConfigError, FedclustError

ROOT = Path(__file__).resolve().parents[1]


def blobs(rows_per_blob: int = 40, distinct: bool = True) -> np.ndarray:
    """Three well separated blobs in 4 dimensions (or three points, each repeated)."""
    rng = np.random.default_rng(0)
    centres = np.array([[0.0, 0, 0, 0], [10.0, 0, 0, 0], [0.0, 10.0, 0, 0]])
    x = np.repeat(centres, rows_per_blob, axis=0)
    return (x + rng.normal(scale=0.3, size=x.shape) if distinct else x).astype(np.float32)


def write_config(path: Path, data_file: Path, method: dict, **data) -> Path:
    path.write_text(yaml.safe_dump({"method": method, "data": {"name": "features", "root": str(data_file),
                                                                 "partition": "iid", "num_clients": 3, **data},
                                    "fabric": {"accelerator": "cpu"}}))
    return path


KFED = {"class_path": "KFED", "init_args": {"num_clusters": 3, "k_local": 3}}


@pytest.fixture(scope="module")
def d(tmp_path_factory) -> Path:
    """A finished k-FED run on a feature file, a copy of it whose checkpoint asks to load code, run folders whose
    config.yaml evaluate cannot read, and a feature file holding NaN."""
    import torch

    d = tmp_path_factory.mktemp("last_mile")
    np.save(d / "x.npy", blobs())
    config = write_config(d / "kfed.yaml", d / "x.npy", KFED)
    assert main(["fit", "--config", str(config), "--federation.rounds", "1", "--run_dir", str(d / "run"),
                 "--progress", "false"]) == 0
    code = d / "code_run"
    shutil.copytree(d / "run", code)
    (code / ".lock").unlink()
    torch.save({"model": argparse.Namespace(), "server": {}, "clients": {}, "done": 1},
               code / "checkpoints" / "last.ckpt")
    for name, text in (("yaml_tag_run", 'method: !!python/object/apply:os.system ["true"]\n'),
                       ("unreadable_run", "method:\n  class_path: CCF\n")):
        shutil.copytree(code, d / name)
        shutil.copy(d / "run" / "checkpoints" / "last.ckpt", d / name / "checkpoints" / "last.ckpt")
        (d / name / "config.yaml").write_text(text)
    x = blobs()
    x[3, 1] = np.nan
    x[7, 0] = np.inf
    np.save(d / "nan.npy", x)
    write_config(d / "nan.yaml", d / "nan.npy", KFED)
    return d


def fill(argv: list[str], d: Path) -> list[str]:
    return [a.replace("{d}", str(d)) for a in argv]


# (id, argv, a piece of the one-line refusal); {d} is the fixture's folder
REFUSALS = [
    ("resume_another_method", ["fit", "--resume", "{d}/run", "--method", "KMeans"],
     "method.class_path = 'KMeans' is not valid: the resumed run's own method, KFED (--resume continues that KFED "
     "run; start a new run to use KMeans)."),
    ("resume_another_seed", ["fit", "--resume", "{d}/run", "--seed", "3"],
     "seed = 3 is not valid: the resumed run's own value 0 (--resume continues that run"),
    ("resume_another_setting", ["fit", "--resume", "{d}/run", "--method.init_args.k_local", "2"],
     "method.init_args.k_local = 2 is not valid: the resumed run's own value 3"),
    ("resume_code_checkpoint", ["fit", "--resume", "{d}/code_run"],
     "this file asks to load argparse.Namespace and is refused."),
    ("evaluate_code_checkpoint", ["evaluate", "--run", "{d}/code_run"],
     "this file asks to load argparse.Namespace and is refused."),
    ("evaluate_yaml_tag", ["evaluate", "--run", "{d}/yaml_tag_run"],
     "run = '{d}/yaml_tag_run/config.yaml' is not valid: valid YAML"),
    ("nan_features", ["fit", "--config", "{d}/nan.yaml"],
     "{d}/nan.npy: column 'features' holds NaN (missing), infinite or too large values (2 rows, the first is row 3)"),
]
IDS = [case[0] for case in REFUSALS]


def _snapshot(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


def _fresh(argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-X", "importtime", "-m", "fedclust", *argv], cwd=cwd,
                          capture_output=True, text=True, timeout=300, env=env)


def _imported(stderr: str) -> set[str]:
    return {line.split("|")[-1].strip() for line in stderr.splitlines() if line.startswith("import time:")}


@pytest.mark.parametrize(("case_id", "argv", "needle"), REFUSALS, ids=IDS)
def test_refused_from_the_files_before_torch_leaving_the_folders_as_they_were(d, tmp_path, case_id, argv, needle):
    before = _snapshot(d)
    proc = _fresh(fill(argv, d), tmp_path)
    lines = [line for line in proc.stderr.splitlines() if not line.startswith("import time:")]
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr[-2000:]
    assert lines[0].startswith("fedclust: error: ") and fill([needle], d)[0] in lines[0], lines[0]
    assert not {"torch", "lightning"} & _imported(proc.stderr), f"{case_id} imported torch before refusing"
    assert _snapshot(d) == before, "a refused command changed a run folder"
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(("case_id", "argv", "needle"), REFUSALS, ids=IDS)
def test_the_run_refuses_with_the_same_sentence(d, tmp_path, monkeypatch, capsys, case_id, argv, needle):
    """Without the first pass, the real parser and fit() / evaluate() say the same, and change nothing either."""
    from fedclust import precheck

    monkeypatch.setattr(precheck, "check", lambda command, args: None)
    monkeypatch.chdir(tmp_path)
    before = _snapshot(d)
    assert main(fill(argv, d)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err and fill([needle], d)[0] in err[-1], err
    assert _snapshot(d) == before


def test_evaluate_refuses_a_config_fit_cannot_read_before_torch(d, tmp_path):
    proc = _fresh(["evaluate", "--run", str(d / "unreadable_run")], tmp_path)
    lines = [line for line in proc.stderr.splitlines() if not line.startswith("import time:")]
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr[-2000:]
    assert "a run folder whose config.yaml `fedclust fit` can read (" in lines[0] and "CCF" in lines[0]
    assert not {"torch", "lightning"} & _imported(proc.stderr)


def test_fit_help_comes_without_torch_and_is_the_parsers(tmp_path):
    from fedclust import cli_schema

    proc = _fresh(["fit", "--help"], tmp_path)
    assert proc.returncode == 0 and proc.stdout.startswith("usage: fedclust fit ")
    assert not {"torch", "lightning"} & _imported(proc.stderr)
    # what the real parser prints (at the stored width), asked in a fresh interpreter too: in this one the test
    # modules' own FederatedMethod subclasses would join the parser's list of methods
    script = ("from fedclust.cli_schema.writer import help_of; from fedclust.commands import parser; "
              "print(help_of(parser('fit')), end='')")
    parsers = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True,
                             timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.stdout == parsers.stdout, parsers.stderr[-2000:]
    stale = {**cli_schema.load(), "help_fingerprint": "not the code's"}
    assert cli_schema.help_text(stale, "fit") is None  # a stale help is never printed: the parser prints its own


def test_a_refused_resume_after_the_lock_leaves_the_folder_byte_identical(d, tmp_path):
    """A refusal the first pass cannot make (the run's data file is gone: the run finds out while loading it)
    comes after the folder is locked; the .lock gets its bytes back."""
    run = tmp_path / "run"
    shutil.copytree(d / "run", run)
    data = tmp_path / "gone.npy"
    shutil.copy(d / "x.npy", data)
    config = yaml.safe_load((run / "config.yaml").read_text())
    config["data"]["root"] = str(data)
    (run / "config.yaml").write_text(yaml.safe_dump(config))
    data.unlink()
    before = _snapshot(run)
    proc = _fresh(["fit", "--resume", str(run)], tmp_path)
    assert proc.returncode == 2 and f"{data} not found" in proc.stderr, proc.stderr[-2000:]
    assert _snapshot(run) == before


# ---------------------------------------------------------------- the messages


def _legacy_copy(d: Path, tmp_path: Path, state=None) -> Path:
    import torch

    run = tmp_path / "legacy_run"
    shutil.copytree(d / "run", run)
    checkpoint = run / "checkpoints" / "last.ckpt"
    state = torch.load(checkpoint, weights_only=True) if state is None else state
    torch.save(state, checkpoint, _use_new_zipfile_serialization=False)  # torch before 1.6 wrote this
    return run


def test_an_intact_old_style_checkpoint_is_read_and_a_cut_one_is_called_so(d, tmp_path, capsys):
    from fedclust.callbacks.checkpoint import load_checkpoint
    from fedclust.run_checks import check_checkpoint_file

    run = _legacy_copy(d, tmp_path)
    checkpoint = run / "checkpoints" / "last.ckpt"
    check_checkpoint_file(checkpoint)  # not "truncated or damaged"
    assert load_checkpoint(checkpoint)["done"] == 1
    assert main(["fit", "--resume", str(run), "--progress", "false"]) == 0  # a finished run: nothing left to do
    checkpoint.write_bytes(checkpoint.read_bytes()[:40])
    with pytest.raises(ConfigError, match="this file is truncated or damaged"):
        check_checkpoint_file(checkpoint)


def test_an_old_style_checkpoint_that_asks_to_load_code_is_refused_unread(d, tmp_path):
    from fedclust.run_checks import check_checkpoint_file

    run = _legacy_copy(d, tmp_path, {"model": argparse.Namespace(), "server": {}, "clients": {}, "done": 1})
    with pytest.raises(ConfigError, match="asks to load argparse.Namespace and is refused"):
        check_checkpoint_file(run / "checkpoints" / "last.ckpt")


def test_with_progress_false_the_final_table_is_still_printed(d, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(d / "run", run)
    assert main(["fit", "--resume", str(run), "--progress", "false"]) == 0
    out = capsys.readouterr().out
    assert "final clustering metrics (120 samples)" in out
    assert "round " not in out and "run folder" not in out  # no header, no per-round lines


def test_a_model_with_fewer_clusters_than_asked_says_so(tmp_path, capsys):
    """k-means asked for 10 clusters of three distinct points forms 3: the run says so in one sentence."""
    np.save(tmp_path / "three.npy", blobs(distinct=False))
    config = write_config(tmp_path / "km.yaml", tmp_path / "three.npy", {"class_path": "KMeans",
                          "init_args": {"num_clusters": 10}}, num_clients=1)
    assert main(["fit", "--config", str(config), "--run_dir", str(tmp_path / "run"), "--progress", "false"]) == 0
    notes = [line for line in capsys.readouterr().out.splitlines() if line.startswith("note: ")]
    assert len(notes) == 1 and "method.init_args.num_clusters asked for 10 clusters" in notes[0], notes
    assert "puts the 120 samples in only 3 (KMeans formed no more" in notes[0]
    assert notes[0] in (tmp_path / "run" / "run.log").read_text()


def test_the_note_is_about_the_clusters_found():
    import torch

    from fedclust.run_outcome import fewer_clusters

    class FedToy:
        num_clusters = 500

    clusters = torch.arange(1797) % 152
    assert "asked for 500 clusters and the final model puts the 1797 samples in only 152 (FedToy formed no more" \
        in fewer_clusters(FedToy(), clusters)
    FedToy.num_clusters = 152
    assert fewer_clusters(FedToy(), clusters) is None
    assert fewer_clusters(FedToy(), torch.full((5,), -1)) is None  # no clustering at all: the run says that itself


# ---------------------------------------------------------------- the estimator, as scikit-learn takes it


def test_the_estimator_is_a_scikit_learn_estimator():
    sklearn_base = pytest.importorskip("sklearn.base")
    import fedclust

    model = fedclust.FederatedClustering("kfed", n_clusters=3, k_local=5, federation={"rounds": 2})
    twin = sklearn_base.clone(model)
    assert twin is not model and twin.get_params() == model.get_params()
    assert model.get_params()["k_local"] == 5 and model.get_params(deep=False)["n_clusters"] == 3
    assert twin.set_params(k_local=7, n_clients=4) is twin
    assert twin.method_args == {"k_local": 7} and twin.n_clients == 4 and model.method_args == {"k_local": 5}
    assert sklearn_base.is_clusterer(model)
    assert repr(twin) == "FederatedClustering(n_clusters=3, n_clients=4, federation={'rounds': 2}, k_local=7)"
    with pytest.raises(ConfigError, match=r"^k_locl = 2 is not valid: an argument .* \(closest: k_local"):
        twin.set_params(k_locl=2)


@pytest.mark.parametrize("X", [[[1.0, 2.0], [3.0]], [np.zeros(2), np.zeros(3), np.zeros(2)]])
def test_a_ragged_x_is_one_sentence(tmp_path, X):
    import fedclust

    with pytest.raises(FedclustError, match=r"^X = 'rows of 2 different lengths \(.*\)' is not valid: an "
                                            r"\(n_samples, n_features\) array") as error:
        fedclust.FederatedClustering("kfed", runs_dir=str(tmp_path)).fit(X)
    assert "\n" not in str(error.value) and not any(tmp_path.iterdir())


def test_the_estimator_prints_nothing_unless_verbose(tmp_path, capsys):
    import fedclust

    X = blobs()
    fedclust.FederatedClustering("kfed", n_clusters=3, n_clients=3, runs_dir=str(tmp_path),
                                 federation={"rounds": 1}).fit(X)
    assert capsys.readouterr().out == ""
    fedclust.FederatedClustering("kfed", n_clusters=3, n_clients=3, runs_dir=str(tmp_path), verbose=True,
                                 federation={"rounds": 1}).fit(X)
    assert "final clustering metrics" in capsys.readouterr().out


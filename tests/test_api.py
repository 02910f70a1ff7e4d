"""The Python API (issue 25): `fedclust.fit` from a config or from objects returning a FitResult, the
scikit-learn-style FederatedClustering on a notebook's own arrays, the complete config.yaml a run started from
Python writes (re-loaded by `fedclust evaluate` and `fedclust fit --resume`), and its errors as exceptions."""

import json
import logging
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

import fedclust
from fedclust.__main__ import main
from fedclust.contract import FederatedMethod, Stage
from fedclust.errors import FedclustError
from fedclust.federation.config import FederationConfig
from fedclust.methods import CCFC, KFED, FedSpectral
from fedclust.parsers import init_arguments, parse, read_config, resolved_config
from fedclust.run import FabricConfig, fit_parser
from tests.conftest import tiny_ccfc, tiny_data
from tests.helpers.tiny import interrupted_after_round

ROOT = Path(__file__).resolve().parents[1]
CPU = FabricConfig(accelerator="cpu")
# the quick start cut to a second: small networks, two rounds
QUICK = {"federation.rounds": 2, "method.init_args.latent_dim": 16, "method.init_args.projector_hidden": 32,
         "method.init_args.batch_size": 64, "fabric.accelerator": "cpu",
         "progress": False, "seed": 1}


def flat(tree, prefix=""):
    if not isinstance(tree, dict):
        return {prefix: tree}
    out = {}
    for key, value in tree.items():
        out.update(flat(value, f"{prefix}.{key}" if prefix else key))
    return out


def only_folder(parent: Path) -> Path:
    folders = [p for p in parent.iterdir() if p.is_dir()]
    assert len(folders) == 1, folders
    return folders[0]


# --- import ----------------------------------------------------------------------------------------
def test_import_fedclust_stays_free_of_torch_and_names_the_api():
    code = ("import sys, fedclust; names = dir(fedclust); "
            "assert {'fit', 'FitResult', 'FederatedClustering', 'DataConfig', 'FederationConfig', 'FabricConfig', "
            "'FedclustError', 'ConfigError'} <= set(names), names; sys.exit('torch' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_fedclust_fit_is_the_api_and_the_command_lines_fit_is_in_run():
    import inspect

    import fedclust.run as module

    assert callable(fedclust.fit) and fedclust.fit is not module.fit
    assert "config_text" in inspect.signature(module.fit).parameters  # the CLI's fit
    assert list(inspect.signature(fedclust.fit).parameters)[:2] == ["config", "overrides"]
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        fedclust.nothing  # noqa: B018


# --- fedclust.fit ---------------------------------------------------------------------------------------
def test_fit_from_a_config_name_with_overrides_returns_the_run(tmp_path):
    result = fedclust.fit("quickstart", QUICK, runs_dir=str(tmp_path))
    folder = only_folder(tmp_path)
    assert result.run_dir == folder and folder.name.startswith("quickstart_")
    # the same config.yaml as `fedclust fit --config quickstart --KEY VALUE ...` saves
    parser = fit_parser()
    argv = ["--config", str(ROOT / "configs/quickstart.yaml"), f"--runs_dir={tmp_path}",
            *(f"--{k}={v}" for k, v in QUICK.items())]
    assert (folder / "config.yaml").read_text() == resolved_config(parser, parse(parser, argv))[1]
    assert isinstance(result.model, FedSpectral) and result.model.hparams["latent_dim"] == 16
    assert result.metrics == json.loads((folder / "final.json").read_text())["metrics"]
    assert [row["round"] for row in result.history] == [1, 2]
    assert result.history[-1]["nmi"] == pytest.approx(result.metrics["nmi"])
    table = np.loadtxt(folder / "assignments.csv", delimiter=",", skiprows=1, dtype=np.int64)
    assert list(result.assignments) == ["index", "client", "label", "cluster"]
    for i, column in enumerate(result.assignments.values()):
        np.testing.assert_array_equal(column, table[:, i])
    # FedSpectral's cluster directions, in its clustering space: the 64 pixels beside the trunk's features
    assert result.centroids.shape == (10, 9 * 4 * 4 + result.model.trunk.out_dim)  # HOG of 8x8 in 2-px cells, trunk
    torch.testing.assert_close(torch.from_numpy(result.centroids), result.model.global_centroids().float())
    assert "nmi=" in repr(result) and str(folder) in repr(result)


def test_fit_from_objects_trains_them_and_writes_a_config_that_rebuilds_them(tmp_path):
    method, data = KFED(k_local=4, labelling="nearest"), tiny_data(num_clients=3)
    result = fedclust.fit(method=method, data=data, fabric=CPU, seed=5, progress=False, runs_dir=str(tmp_path))
    assert result.model is method  # the object given is the one that trained
    np.testing.assert_array_equal(result.centroids, method.centroids.cpu().numpy())
    saved = read_config(fit_parser(), result.run_dir / "config.yaml")
    assert type(saved["method"]) is KFED and init_arguments(saved["method"]) == init_arguments(method)
    assert saved["data"] == data and saved["seed"] == 5 and saved["fabric"] == CPU
    assert yaml.safe_load((result.run_dir / "config.yaml").read_text())["run_dir"] is None  # as the call gave it


def test_the_fit_the_command_line_calls_also_writes_the_complete_config(run_fit, tmp_path):
    """fedclust.run.fit called from Python without config_text (tests, scripts) used to write an empty
    config.yaml, which `fedclust evaluate` refused with a traceback."""
    method = tiny_ccfc()
    run_fit(method, tiny_data(), FederationConfig(rounds=1))
    saved = read_config(fit_parser(), tmp_path / "run" / "config.yaml")
    assert type(saved["method"]) is CCFC and init_arguments(saved["method"]) == init_arguments(method)
    assert main(["evaluate", "--run", str(tmp_path / "run")]) == 0


def test_a_method_class_that_cannot_be_named_again_still_runs_with_a_warning(run_fit, tmp_path, caplog):
    class Local(KFED):  # defined in a function: jsonargparse cannot import it back
        pass

    with caplog.at_level(logging.WARNING, logger="fedclust.parsers"):
        run_fit(Local(k_local=5), tiny_data())
    text = (tmp_path / "run" / "config.yaml").read_text()
    assert text.startswith("# written from Python objects fedclust cannot name again")
    assert yaml.safe_load(text)["method"]["init_args"]["k_local"] == 5
    assert "cannot be re-loaded" in caplog.text
    assert (tmp_path / "run" / "final.json").exists()


def test_a_run_started_from_python_resumes_and_evaluates_from_the_command_line(tmp_path, capsys):
    """Python run of 3 rounds stopped after round 2 (checkpoint every round); `fedclust fit --resume` ends it and
    `fedclust evaluate --run` re-scores it. Its config.yaml has the keys of a run the command line started."""
    with interrupted_after_round(2):
        fedclust.fit(method=tiny_ccfc(), data=tiny_data(), federation=FederationConfig(rounds=3, checkpoint_every=1),
                     fabric=CPU, progress=False, runs_dir=str(tmp_path / "py"))
    folder = only_folder(tmp_path / "py")
    assert torch.load(folder / "checkpoints/last.ckpt", weights_only=True)["done"] == 2
    assert main(["fit", "--resume", str(folder)]) == 0
    final = json.loads((folder / "final.json").read_text())
    assert final["rounds"] == 3
    assert main(["evaluate", "--run", str(folder)]) == 0
    assert json.loads((folder / "evaluate_same.json").read_text()) == pytest.approx(final["metrics"])
    cli = tmp_path / "cli"
    assert main(["fit", "--config", "ccfc_digits", *(f"--{k}={v}" for k, v in QUICK.items()),
                 "--federation.rounds=1", "--run_dir", str(cli)]) == 0
    python_keys = flat(yaml.safe_load((folder / "config.yaml").read_text()))
    cli_keys = flat(yaml.safe_load((cli / "config.yaml").read_text()))
    assert python_keys.keys() == cli_keys.keys()
    assert "Traceback" not in capsys.readouterr().err


def test_fit_resume_from_python_takes_the_runs_own_config(tmp_path):
    with interrupted_after_round(1):
        fedclust.fit(method=tiny_ccfc(), data=tiny_data(), federation=FederationConfig(rounds=2, checkpoint_every=1),
                     fabric=CPU, progress=False, run_dir=str(tmp_path / "run"))
    result = fedclust.fit(resume=str(tmp_path / "run"))
    assert [row["round"] for row in result.history] == [1, 2] and result.run_dir == tmp_path / "run"
    assert isinstance(result.model, CCFC) and result.model.hparams["latent_dim"] == 16


# --- errors: raised, one sentence, nothing printed, nothing left behind ------------------------------
BAD_FITS = [
    (lambda d: fedclust.fit("quickstartt", runs_dir=d), "closest: quickstart"),
    (lambda d: fedclust.fit("quickstart", {"federation.roundz": 3}, runs_dir=d), "closest: --federation.rounds"),
    (lambda d: fedclust.fit("quickstart", {"federation.rounds": "many"}, runs_dir=d), "an integer"),
    (lambda d: fedclust.fit("quickstart", {"data.p": 2.0}, runs_dir=d), "data.p = 2.0"),
    (lambda d: fedclust.fit("ccfc_digits", {"method.init_args.lamm": 1.0}, runs_dir=d), "closest: lam"),
    (lambda d: fedclust.fit("quickstart", [("seed", 1)], runs_dir=d), "a mapping of dotted keys"),
    (lambda d: fedclust.fit("quickstart", {"method.init_args.lam": 1.0}, method=KFED(), runs_dir=d),
     "given as an object"),
    (lambda d: fedclust.fit("quickstart", rundir=d), "closest: run_dir"),
    (lambda d: fedclust.fit(method=KFED(k_local=0), data=tiny_data(), runs_dir=d), "k_local = 0"),
    (lambda d: fedclust.fit("quickstart", {"method.init_args.local_epochs": -1}, runs_dir=d),
     "method.init_args.local_epochs = -1 is not valid: an integer >= 0"),
    (lambda d: fedclust.fit(resume=f"{d}/nothing"), "a run folder written by fedclust fit"),
]


@pytest.mark.parametrize(("call", "needle"), BAD_FITS)
def test_bad_fit_requests_raise_one_sentence(tmp_path, capsys, call, needle):
    with pytest.raises(FedclustError) as error:
        call(str(tmp_path / "runs"))
    assert needle in str(error.value) and "\n" not in str(error.value)
    assert capsys.readouterr().err == ""
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


X4 = np.zeros((4, 2))
BAD_ARRAYS = [
    (lambda m: m.fit(np.zeros(4)), "X = (4,) is not valid", "kfed"),
    (lambda m: m.fit(np.array([["a", "b"]] * 4)), "an array of numbers", "kfed"),
    (lambda m: m.fit(np.array([[0.0, 1.0], [np.nan, 1.0]])), "first is row 1", "kfed"),
    (lambda m: m.fit(X4, clients=[0, 1, 0]), "clients = (3,) is not valid: one client id per row of X", "kfed"),
    (lambda m: m.fit(X4, y=np.zeros((4, 2))), "y = (4, 2) is not valid", "kfed"),
    (lambda m: m.fit(X4), "closest: kfed", "kfedd"),
    (lambda m: m.predict(X4), "not fitted yet", "kfed"),
]


@pytest.mark.parametrize(("call", "needle", "method"), BAD_ARRAYS)
def test_bad_arrays_raise_one_sentence(tmp_path, capsys, call, needle, method):
    model = fedclust.FederatedClustering(method, runs_dir=str(tmp_path / "runs"))
    with pytest.raises(FedclustError) as error:
        call(model)
    assert needle in str(error.value) and "\n" not in str(error.value)
    assert capsys.readouterr().err == ""
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_an_unknown_method_argument_leaves_no_folder(tmp_path):
    model = fedclust.FederatedClustering("kfed", k_locl=2, runs_dir=str(tmp_path))
    with pytest.raises(FedclustError, match=r"method.init_args.k_locl is not an option of KFED \(closest: k_local"):
        model.fit(X4)
    assert not any(tmp_path.iterdir())


# --- FederatedClustering ------------------------------------------------------------------------------
def blobs(n_per: int = 40, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    centres = np.array([[0.0, 0.0, 0.0], [10.0, 0.0, 0.0], [0.0, 10.0, 0.0]])
    y = np.repeat(np.arange(3), n_per)
    return centres[y] + rng.normal(scale=0.3, size=(len(y), 3)), y


def test_federated_clustering_on_arrays_with_named_clients(tmp_path):
    X, y = blobs()
    clients = np.array(["alice", "bob", "carol", "dave"])[np.arange(len(X)) % 4]
    model = fedclust.FederatedClustering("KFED", n_clusters=3, labelling="nearest", runs_dir=str(tmp_path))
    labels = model.fit_predict(X, y, clients=clients)
    assert labels.shape == (len(X),) and model.n_features_in_ == 3
    assert model.result_.metrics["nmi"] == pytest.approx(1.0)  # well separated: every row in its own blob's cluster
    assert model.cluster_centers_.shape == (3, 3)
    nearest = np.argmin(((X[:, None, :] - model.cluster_centers_[None]) ** 2).sum(-1), axis=1)
    np.testing.assert_array_equal(labels, nearest)  # labelling "nearest": each row to its nearest centre
    np.testing.assert_array_equal(model.predict(X), labels)
    np.testing.assert_array_equal(model.predict(X[::-1]), labels[::-1])
    assert sorted(set(model.result_.assignments["client"].tolist())) == [0, 1, 2, 3]
    # the run folder holds the arrays and its config points at them: the folder re-loads like any other
    folder = model.result_.run_dir
    config = yaml.safe_load((folder / "config.yaml").read_text())
    assert config["data"]["root"] == str(folder / "data.npz") and (folder / "data.npz").is_file()
    assert config["data"]["partition"] == "natural"
    with np.load(folder / "data.npz") as saved:
        np.testing.assert_array_equal(saved["x"], X.astype(np.float32))
        np.testing.assert_array_equal(saved["client"], clients)
    assert main(["evaluate", "--run", str(folder)]) == 0
    assert json.loads((folder / "evaluate_same.json").read_text()) == pytest.approx(model.result_.metrics)


def test_federated_clustering_without_clients_simulates_iid_clients_and_without_labels_scores_label_free(tmp_path):
    X, _ = blobs(n_per=40)  # 30 rows a client: the summaries' privacy floor (federation.min_summary_size 20) holds
    model = fedclust.FederatedClustering("kfed", n_clusters=3, n_clients=4, random_state=2, runs_dir=str(tmp_path))
    model.fit(X)
    assert sorted(set(model.result_.assignments["client"].tolist())) == [0, 1, 2, 3]
    assert (model.result_.assignments["label"] == -1).all() and "nmi" not in model.result_.metrics
    assert yaml.safe_load((model.result_.run_dir / "config.yaml").read_text())["seed"] == 2
    with pytest.raises(FedclustError, match=r"X = \(5, 2\) is not valid: an array of 3 columns"):
        model.predict(np.zeros((5, 2)))


# --- the optional contract accessor ---------------------------------------------------------------
class NoCentres(FederatedMethod):
    def stages(self):
        return [Stage("none", 1, 0)]

    def assign(self, x):
        return torch.zeros(len(x), dtype=torch.long)


def test_global_centroids_reads_server_states_centroids_and_is_none_without_them():
    kfed = KFED()
    assert kfed.global_centroids() is None  # not fitted yet
    kfed.centroids = torch.ones(2, 3)
    assert kfed.global_centroids() is kfed.centroids
    assert NoCentres().global_centroids() is None


# --- the example --------------------------------------------------------------------------------------
@pytest.mark.slow  # ~30 s: a fresh interpreter runs two fits
def test_the_notebook_example_runs(tmp_path):
    script = ROOT / "docs/examples/notebook_quickstart.py"
    result = subprocess.run([sys.executable, str(script), str(tmp_path)], capture_output=True, text=True,
                            timeout=240, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "k-FED: 10 clusters, centres shaped (10, 64)" in result.stdout
    assert "FitResult(FedSpectral, 1797 samples, 3 rounds" in result.stdout
    assert len([p for p in tmp_path.iterdir() if p.is_dir()]) == 2  # each run left its folder

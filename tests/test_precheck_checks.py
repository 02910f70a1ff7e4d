"""Issue 10, point 6, for values out of range: the checks that need no data (data.p, federation.fraction, learning
rates, --knn 0, ...) refuse bad input in one sentence before torch is imported (fedclust/precheck/ranges.py), by
calling the very functions the run calls (data/checks.py, FederationConfig.validate, federation/hparams.py,
run_checks.py). Each refusal is shown to be made by the real `fit` / `evaluate` too, and the edge values they
accept pass both.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from fedclust import cli_schema, precheck
from fedclust.config_files import expand_config_args
from tests.helpers.cli import HEAVY, fill, refusals_in_a_fresh_interpreter
from tests.helpers.known_data import write_checkpoint_stub

QUICK = ["fit", "--config", "ccfc_digits"]


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> Path:
    """A run folder evaluate accepts up to its first checks, and configs with values out of range."""
    d = tmp_path_factory.mktemp("precheck_checks")
    run = d / "fake_run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "config.yaml").write_text(yaml.safe_dump({"method": {"class_path": "CCFC"}}))
    write_checkpoint_stub(run / "checkpoints" / "last.ckpt")
    quick = {"method": {"class_path": "CCFC", "init_args": {"backbone": "mlp"}}, "data": {"name": "digits"}}
    (d / "bad_p.yaml").write_text(yaml.safe_dump({**quick, "data": {"name": "digits", "p": 2}}))
    (d / "bad_lr.yaml").write_text(yaml.safe_dump({"method": {"class_path": "CCFC", "init_args": {"lr": 0}}}))
    return d


# (argv, a piece of the one-line message); {d} is the files fixture's folder
BAD = [
    ([*QUICK, "--data.p", "1.5"], "data.p = 1.5 is not valid: a number in [0, 1]."),
    ([*QUICK, "--data.p=-0.1"], "data.p = -0.1 is not valid: a number in [0, 1]."),
    ([*QUICK, "--data.num_clients", "0"], "data.num_clients = 0 is not valid: a positive integer."),
    ([*QUICK, "--data.partition", "dirichlet", "--data.alpha", "0"], "data.alpha = 0.0 is not valid: a positive"),
    ([*QUICK, "--data.partition", "dirichlet", "--data.min_partition_size=-1"], "data.min_partition_size = -1"),
    ([*QUICK, "--data.partition", "pathological", "--data.num_classes_per_partition", "0"],
     "data.num_classes_per_partition = 0 is not valid: a positive integer."),
    (["fit", "--config", "{d}/bad_p.yaml"], "data.p = 2"),
    ([*QUICK, "--federation.fraction", "0"], "federation.fraction = 0.0 is not valid: a number in (0, 1]."),
    ([*QUICK, "--federation.disconnect_rate", "1"], "disconnect_rate = 1.0 is not valid: a number in [0, 1)"),
    ([*QUICK, "--federation.rounds", "0"], "federation.rounds = 0 is not valid: a positive integer or null."),
    ([*QUICK, "--federation.local_epochs=-1"], "federation.local_epochs = -1"),
    ([*QUICK, "--federation.eval_every", "0"], "federation.eval_every = 0 is not valid: a positive integer."),
    ([*QUICK, "--federation", "{checkpoint_every: 0}"], "federation.checkpoint_every = 0"),
    ([*QUICK, "--embedding_points", "5"], "embedding_points = 5 is not valid: at least 10 samples"),
    ([*QUICK, "--fabric.devices", "0"], "fabric.devices = 0 is not valid: a positive number of devices"),
    ([*QUICK, "--method.init_args.lr=-1e-3"], "method.init_args.lr = -0.001 is not valid: a positive learning rate."),
    ([*QUICK, "--method.init_args.batch_size", "1"], "method.init_args.batch_size = 1 is not valid: at least 2"),
    ([*QUICK, "--method.init_args.latent_dim", "0"], "init_args.latent_dim = 0 is not valid: a positive integer"),
    ([*QUICK, "--method.lam", "1e999"], "method.init_args.lam = inf is not valid: a finite number."),
    ([*QUICK, "--method.init_args.blur_sigma", "[0.1, .inf]"], "blur_sigma = (0.1, inf) is not valid: a finite"),
    (["fit", "--config", "{d}/bad_lr.yaml"], "method.init_args.lr = 0"),
    # jsonargparse keeps the init args a new class takes too: FedCC gets batch_size 1
    ([*QUICK, "--method.init_args.batch_size", "1", "--method", "FedCC"], "batch_size = 1 is not valid: at least 2"),
    # the classic methods' sizes are checked too (they save their hyperparameters like every method)
    ([*QUICK, "--method", "KFED", "--method.niter", "0"], "method.init_args.niter = 0 is not valid: a positive"),
    ([*QUICK, "--method", "KMeans", "--method.nredo", "0"], "method.init_args.nredo = 0 is not valid: a positive"),
    ([*QUICK, "--method", "FFCM", "--method.kmeans_redo", "0"], "init_args.kmeans_redo = 0 is not valid: a positive"),
    (["evaluate", "--run", "{d}/fake_run", "--knn", "0"], "knn = 0 is not valid: a positive integer number of"),
    (["evaluate", "--run", "{d}/fake_run", "--knn", "1", "-3"], "knn = -3 is not valid"),  # -3 read as a value
    (["evaluate", "--run", "{d}/fake_run", "--per_client", "true", "--split", "test"], "per_client = True is not"),
    (["evaluate", "--run", "{d}/fake_run", "--per_client", "yes", "--data_name", "mnist"], 'split "same" without'),
]

# each accepted by the precheck and by the run's own checks (up to and including build_federated_data)
EDGES = [
    [*QUICK, "--data.p", "0"],
    [*QUICK, "--data.p", "1"],
    [*QUICK, "--data.p", "1.5", "--data.partition", "iid"],  # p is read by pshift only
    [*QUICK, "--data.partition", "dirichlet", "--data.alpha", "1e3", "--data.min_partition_size", "0"],
    [*QUICK, "--data.partition", "pathological", "--data.num_classes_per_partition", "1", "--data.alpha", "0"],
    [*QUICK, "--federation.fraction", "1", "--federation.disconnect_rate", "0", "--federation.rounds", "1"],
    [*QUICK, "--federation.local_epochs", "0", "--federation.eval_every", "1", "--federation.rounds", "null"],
    [*QUICK, "--embedding_points", "10", "--fabric.devices", "1"],
    [*QUICK, "--method.init_args.lr", "1e-9", "--method.init_args.batch_size", "2", "--method.latent_dim", "1"],
    [*QUICK, "--method.init_args.batch_size", "1", "--method", "KFED"],  # KFED takes no batch_size: dropped
]


_fill = fill


def test_the_precheck_imports_no_torch():
    """The precheck and every check module it calls, imported in a fresh interpreter."""
    modules = ["fedclust.precheck", "fedclust.precheck.ranges", "fedclust.precheck.facts", "fedclust.data.checks",
               "fedclust.data.catalog", "fedclust.data.idx", "fedclust.federation.config",
               "fedclust.federation.hparams", "fedclust.run_checks", "fedclust.cli_schema", "fedclust.config_files"]
    script = (f"import importlib, json, sys\nfor m in {modules!r}: importlib.import_module(m)\n"
              f"print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == []


def test_out_of_range_is_one_sentence_without_torch(files, tmp_path):
    results = refusals_in_a_fresh_interpreter([_fill(argv, files) for argv, _ in BAD], tmp_path)
    for (argv, code, err, heavy), (_, needle) in zip(results, BAD):
        lines = err.strip().splitlines()
        assert code == 2 and len(lines) == 1 and "Traceback" not in err, (argv, err)
        assert lines[0].startswith("fedclust: error: ") and needle in lines[0], (argv, err)
        assert heavy == [], f"{argv} imported {heavy} before refusing"


@pytest.fixture
def real_path(monkeypatch, tmp_path):
    """`fedclust` as it was before the precheck: the real parser, then fit() / evaluate() and their checks."""
    from fedclust import precheck as package

    monkeypatch.setattr(package, "check", lambda command, args: None)
    monkeypatch.chdir(tmp_path)  # a run folder fit claims before its data checks lands (and is removed) here


@pytest.mark.parametrize(("argv", "needle"), BAD, ids=[" ".join(a[1:])[:60] for a, _ in BAD])
def test_the_run_refuses_them_too(files, real_path, capsys, argv, needle):
    from fedclust.__main__ import main

    assert main(_fill(argv, files)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err and needle in err[-1], err


@pytest.fixture
def fresh_process(monkeypatch):
    monkeypatch.setattr(precheck, "_foreign_classes_possible", lambda: False)


@pytest.mark.parametrize("argv", EDGES, ids=[" ".join(a[3:])[:60] for a in EDGES])
def test_edge_values_pass_the_precheck_and_the_run(fresh_process, argv):
    import torch

    from fedclust import parsers
    from fedclust.data.config import build_federated_data
    from fedclust.federation.setup import check_hparams
    from fedclust.run import check_devices, fit_parser
    from fedclust.run_checks import check_embedding_points

    args = expand_config_args(argv)[1:]
    assert precheck.judge("fit", args) == "passed"
    parser = fit_parser()
    init, _ = parsers.resolved_config(parser, parsers.parse(parser, args))
    init["federation"].validate()  # fit()'s checks, in its order, up to its data
    check_devices(init["fabric"])
    check_hparams(init["method"])
    check_embedding_points(init["embedding_points"])
    build_federated_data(init["data"], torch.device("cpu"), init["seed"])


@pytest.mark.parametrize("argv", [
    ["sweep", "--config", "quickstart", "--grid", "data.p=0,1.5"],  # a sweep runs its points, one fails alone
    [*QUICK, "--data.p", "1.5", "--print_config"],  # prints the config, runs no check
    [*QUICK, "--method", "mypackage.MyMethod", "--method.lr=-1"],  # a user's own class: the real parser judges it
])
def test_what_the_precheck_leaves_to_the_run_passes(fresh_process, argv):
    assert precheck.judge(argv[0], expand_config_args(argv)[1:]) == "passed"


def test_a_stale_schema_refuses_no_range(fresh_process):
    stale = {**cli_schema.load(), "fingerprint": "not the code's"}
    assert precheck.judge("fit", expand_config_args([*QUICK, "--data.p", "1.5"])[1:], stale) == "aside"


def test_the_range_checks_find_their_arguments_in_the_schema():
    """ranges.py reads each check's arguments as options of the same name: a renamed argument would silently
    turn a check off."""
    import inspect

    from fedclust.data.checks import check_data_settings
    from fedclust.run_checks import check_embedding_points, check_evaluate_settings

    schema = cli_schema.load()
    for command, check, prefix in (("fit", check_data_settings, "--data."), ("fit", check_embedding_points, "--"),
                                   ("evaluate", check_evaluate_settings, "--")):
        options = schema["commands"][command]["options"]
        for name in inspect.signature(check).parameters:
            assert "default" in options[prefix + name], (check.__name__, name)
    assert "default" in schema["commands"]["fit"]["options"]["--fabric.devices"]

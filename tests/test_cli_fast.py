"""Issue 10, point 6: every bad-input error of fit / evaluate / sweep / compare arrives as one sentence without
importing torch or Lightning (fedclust/precheck.py against fedclust/cli_schema.json), and that first pass
never refuses a command the real parser accepts.

What is fast is asserted through sys.modules in a subprocess (robust to a loaded machine), not by timing.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from fedclust import cli_schema, precheck
from fedclust.cli_schema.writer import spec_of
from fedclust.config_files import expand_config_args, packaged_configs
from tests.helpers.cli import fill, refusals_in_a_fresh_interpreter
from tests.helpers.known_data import write_checkpoint_stub, write_known_data


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> Path:
    """Bad config files, an empty folder, and a folder that looks like a run (config.yaml + checkpoint)."""
    d = tmp_path_factory.mktemp("cli_fast")
    quick = {"method": {"class_path": "CCFC", "init_args": {"backbone": "mlp"}}, "data": {"name": "digits"}}
    configs = {
        "nested.yaml": {**quick, "data": {"pp": 1}},
        "wrong_type.yaml": {**quick, "data": {"p": "abc"}},
        "unknown_method.yaml": {"method": {"class_path": "NoSuch"}},
        "unknown_init.yaml": {"method": {"class_path": "CCFC", "init_args": {"lamm": 1}}},
        "init_beside.yaml": {"method": {"class_path": "CCFC", "lam": 0.5}},
        "literal.yaml": {**quick, "fabric": {"precision": "16-mixed"}},
        "init_type.yaml": {"method": {"class_path": "KFED", "init_args": {"niter": "many"}}},
    }
    for name, content in configs.items():
        (d / name).write_text(yaml.safe_dump(content))
    (d / "malformed.yaml").write_text("method: [\n")
    (d / "empty_dir").mkdir()
    run = d / "fake_run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "config.yaml").write_text(yaml.safe_dump(quick))
    write_checkpoint_stub(run / "checkpoints" / "last.ckpt")
    return d


# (argv, a piece of the one-line message); {d} is the files fixture's folder
BAD = [
    (["fit", "--config", "ccfc_digits", "--data.p", "abc"], "data.p = 'abc' is not valid: a number"),
    (["fit", "--bogus", "1"], "--bogus is not an option of `fedclust fit`"),
    (["fit", "--config", "ccfc_digits", "--method", "NoSuch"], "method = 'NoSuch' is not valid: a fedclust method"),
    (["fit", "--config", "ccfc_digits", "--method", "KFEDD"], "closest: KFED"),
    (["fit", "--config", "ccfc_digits", "--method", "ccfc"], "closest: CCFC"),
    (["fit", "--config", "ccfc_digits", "--data.pp", "3"], "closest: --data.p"),
    (["fit", "--config", "ccfc_digits", "--method.init_args.lamm", "3"], "closest: lam"),
    (["fit", "--config", "ccfc_digits", "--method.lamm=3"], "closest: lam"),
    (["fit", "--config", "ccfc_digits", "--method", "KFED", "--method.init_args.lam", "3"], "init argument of KFED"),
    (["fit", "--method.init_args.lam", "0.5", "--config", "ccfc_digits"], "after the method is chosen"),
    (["fit", "--config", "ccfc_digits", "--logger", "wanb"], "one of csv, wandb, tensorboard (closest: wandb)"),
    (["fit", "--config", "ccfc_digits", "--fabric.precision", "16-mixed"], "one of auto, 32-true, bf16-mixed"),
    (["fit", "--config", "ccfc_digits", "--method.init_args.crop_scale", "0.5"], "a list of 2 numbers"),
    (["fit", "--config", "ccfc_digits", "--method.init_args.augment", "colr"], "(closest: color)"),
    (["fit", "--config", "ccfc_digits", "--method.init_args.lr", "-1e-5"], "goes after an equals sign"),
    (["fit", "--config", "ccfc_digits", "--seed", "1.5"], "seed = '1.5' is not valid: an integer"),
    (["fit", "--config", "ccfc_digits", "--federation.rounds", "many"], "an integer or null"),
    (["fit", "--config", "ccfc_digits", "--progress", "maybe"], "true or false"),
    (["fit", "--config", "ccfc_digits", "--seed", "3", "extra"], "'extra' is not an option"),
    (["fit", "--config", "ccfc_digits", "--data.n", "3"], "--data.n is ambiguous"),
    (["fit", "--config", "ccfc_digits", "--data", '{"pp": 1}'], "a data setting (closest: p)"),
    (["fit"], "--method is required"),
    (["fit", "--config", "{d}/nested.yaml"], "nested.yaml: data.pp = 1 is not valid: a data setting"),
    (["fit", "--config", "{d}/wrong_type.yaml"], "wrong_type.yaml: data.p = 'abc' is not valid: a number"),
    (["fit", "--config", "{d}/unknown_method.yaml"], "unknown_method.yaml: method = 'NoSuch'"),
    (["fit", "--config", "{d}/unknown_init.yaml"], "unknown_init.yaml: method.init_args.lamm"),
    (["fit", "--config", "{d}/init_beside.yaml"], "settings under init_args"),
    (["fit", "--config", "{d}/literal.yaml"], "literal.yaml: fabric.precision = '16-mixed'"),
    (["fit", "--config", "{d}/init_type.yaml"], "method.init_args.niter = 'many' is not valid: an integer"),
    (["fit", "--config", "{d}/malformed.yaml"], "valid YAML (line 2"),
    (["fit", "--config", "{d}/missing.yaml"], "an existing YAML file"),
    (["fit", "--config", "quickstartt"], "closest: quickstart"),
    (["fit", "--resume", "{d}/empty_dir"], "a run folder written by `fedclust fit`"),
    (["evaluate", "--run", "{d}/empty_dir"], "a run folder holding config.yaml and checkpoints/last.ckpt"),
    (["evaluate"], "--run is required"),
    (["evaluate", "--run", "{d}/fake_run", "--split", "tes"], "(closest: test)"),
    (["evaluate", "--run", "{d}/fake_run", "--knn", "1", "a"], "one or more integers after --knn"),
    (["evaluate", "--run", "{d}/fake_run", "--bogus"], "--bogus is not an option of `fedclust evaluate`"),
    (["sweep", "--config", "kfed_fmnist", "--grid", "data.p"], "KEY=V1,V2"),
    (["sweep", "--config", "kfed_fmnist", "--grid", "data.pp=0,1"], "grid point data.pp=0"),
    (["sweep", "--config", "kfed_fmnist", "--grid", "data.p=abc"], "data.p = 'abc' is not valid: a number"),
    (["sweep", "--config", "kfed_fmnist", "--grid", "config={d}/missing.yaml"], "a config file that exists"),
    (["sweep", "--config", "kfed_fmnist", "--slots", "x"], "slots = 'x' is not valid: an integer"),
    (["sweep", "--grid", "seed=1,2"], "--config is required"),
    (["compare", "{d}/empty_dir"], "a run folder holding config.yaml"),
    (["compare", "{d}/fake_run", "--output", "{d}"], "a file path for the HTML page, not a folder"),
    (["compare"], "runs is required"),
]


_fill = fill


def test_bad_input_is_one_sentence_without_torch_or_lightning(files, tmp_path):
    """All refusals in one fresh interpreter, run from another folder as a user would; none may import torch."""
    results = refusals_in_a_fresh_interpreter([_fill(argv, files) for argv, _ in BAD], tmp_path)
    for (argv, code, err, heavy), (_, needle) in zip(results, BAD):
        lines = err.strip().splitlines()
        assert code == 2 and len(lines) == 1 and "Traceback" not in err, (argv, err)
        assert lines[0].startswith("fedclust: error: ") and _fill([needle], files)[0] in lines[0], (argv, err)
        assert heavy == [], f"{argv} imported {heavy} before refusing"


@pytest.fixture
def fresh_process(monkeypatch):
    """Judge as a fresh `fedclust` process would: this test process has imported the contract (and maybe
    methods of its own), where the precheck leaves unknown bare class names to the real parser."""
    monkeypatch.setattr(precheck, "_foreign_classes_possible", lambda: False)


def _real_refuses(argv: list[str]) -> bool:
    """Whether the real parser (plus the subcommand's own first checks on the run folders and the grid) refuses."""
    from jsonargparse import ArgumentError

    from fedclust import commands, parsers
    from fedclust.errors import FedclustError

    command = argv[0]
    try:
        args = expand_config_args(argv)[1:]
        cfg = parsers.parse(commands.parser(command), args)
        if command == "evaluate":
            import torch

            from fedclust.run import load_run

            load_run(Path(cfg.run), torch.device("cpu"))
        elif command == "compare":
            from fedclust.compare.runs import load_runs

            load_runs(cfg.runs)
            if Path(cfg.output).is_dir():
                return True
        elif command == "sweep":
            from fedclust.run import fit_parser
            from fedclust.sweep import expand, parse_grid

            fit = fit_parser()
            for point in expand(cfg.config, parse_grid(cfg.grid)):  # sweep.check, with one parser
                if not Path(point.config).is_file():
                    return True
                fit.parse_args(["--config", point.config, *point.argv()])
    except (ArgumentError, FedclustError):
        return True
    return False


@pytest.mark.parametrize(("argv", "needle"), BAD, ids=[" ".join(a)[:60] for a, _ in BAD])
def test_what_the_precheck_refuses_the_real_parser_refuses_too(files, fresh_process, argv, needle):
    argv = _fill(argv, files)
    with pytest.raises(Exception) as refused:  # noqa: PT011  (ConfigError or FedclustError)
        precheck.judge(argv[0], expand_config_args(argv)[1:])
    assert "FedclustError" in [c.__name__ for c in type(refused.value).__mro__]
    assert _real_refuses(argv), f"the real parser accepts {argv}"


VALID = [  # (argv, verdict): each accepted by the real parser; "aside" = left to it on purpose
    (["fit", "--config", "ccfc_digits", "--method.lam", "0.3"], "passed"),
    (["fit", "--config", "ccfc_digits", "--method", "KFED"], "passed"),  # CCFC's init args are dropped
    (["fit", "--config", "ccfc_digits", "--method", "CCFC", "--method.init_args.lam", "0.5", "--method", "KFED"],
     "passed"),
    (["fit", "--config", "ccfc_digits", "--federation.roun", "5", "--see", "5"], "passed"),  # abbreviations
    (["fit", "--config", "ccfc_digits", "--method", '{"class_path": "KFED"}'], "passed"),
    (["fit", "--config", "ccfc_digits", "--method", "{lam: 0.5}"], "passed"),
    (["fit", "--config", "ccfc_digits", "--method.init_args", '{"lam": 3}'], "passed"),
    (["fit", "--config", "ccfc_digits", "--method.class_path", "KFED", "--method.k_local", "4"], "passed"),
    (["fit", "--config", "ccfc_digits", "--method", "FedU", "--method.init_args.ema_decay", "0.5"], "passed"),
    (["fit", "--config", "ccfc_digits", "--method", "fedclust.methods.families.fedu.FedU"], "passed"),
    (["fit", "--config", "ccfc_digits", "--method", "fedclust.methods.ccfc.CCFC"], "passed"),
    (["fit", "--method", "CCFC", "--method.init_args.lam", "3"], "passed"),
    (["fit", "--config", "ccfc_digits", "--data", '{"p": 0.5}'], "passed"),
    (["fit", "--config", "ccfc_digits", "--data.p", "1e-5", "--data.alpha", "-3"], "passed"),
    (["fit", "--config", "ccfc_digits", "--data.alpha=-3e-3"], "passed"),  # lam=-1e-3: test_hparams refuses it
    (["fit", "--config", "ccfc_digits", "--progress", "yes", "--embedding_plot=false"], "passed"),
    (["fit", "--config", "ccfc_digits", "--name", "3", "--group", "null"], "passed"),
    (["fit", "--config", "ccfc_digits", "--data.partition", "iid", "--data.num_clients", "1_000", "--seed", "0x10"],
     "passed"),
    (["fit", "--config", "ccfc_digits", "--data.root", "[1,2]", "--fabric.devices", "auto"], "passed"),
    (["fit", "--config", "ccfc_digits", "--fabric.devices", "2.5"], "passed"),  # int | str
    (["fit", "--config", "ccfc_digits", "--fabric.precision", "auto", "--fabric.memory_format", "auto"], "passed"),
    (["fit", "--config", "ccfc_digits", "--method.num_clusters", "null"], "passed"),
    (["fit", "--config", "ccfc_digits", "--method.init_args.crop_scale", "[0.5, 1.0]"], "passed"),
    (["fit", "--config", "ccfc_digits", "--method.dict_kwargs", "{}"], "passed"),
    (["fit", "--config", "ccfc_digits", "--data.name", "imagenet10", "--data.options", "{image_size: 64}"], "passed"),
    (["fit", "--config", "ccfc_digits", "--data.options.image_size", "64"], "aside"),
    (["fit", "--config", "ccfc_digits", "--config", "kfed_fmnist"], "passed"),
    (["fit", "--print_config"], "passed"),  # prints the defaults: nothing is required
    (["fit", "--config", "ccfc_digits", "--bogus", "--help"], "aside"),  # help wins wherever it stands
    (["evaluate", "--ru", "{d}/fake_run", "--knn", "1", "3", "--linear", "yes"], "passed"),  # -3: test_precheck_checks
    (["evaluate", "--run", "{d}/fake_run", "--knn=3", "--split", "test"], "passed"),
    (["sweep", "--config", "kfed_fmnist", "--grid", "data.p=0,0.5", "--grid=seed=1,2", "--devices", "0", "1",
      "--dry_run", "true"], "passed"),
    (["sweep", "--config", "kfed_fmnist", "--grid", "config={d}/fake_run/config.yaml,quickstart.yaml"], "passed"),
    (["compare", "{d}/fake_run", "--output", "{d}/page.html", "--title", "t"], "passed"),
    (["compare", "--output", "{d}/page.html", "{d}"], "passed"),  # a folder of runs
]


@pytest.mark.parametrize(("argv", "verdict"), VALID, ids=[" ".join(a)[:60] for a, _ in VALID])
def test_valid_commands_pass_the_precheck_and_the_real_parser(files, fresh_process, monkeypatch, argv, verdict):
    argv = _fill(argv, files)
    if "quickstart.yaml" in argv[-1]:  # a grid over config files resolves paths from the working folder
        monkeypatch.chdir(Path(packaged_configs()["quickstart"]).parent)
    assert precheck.judge(argv[0], expand_config_args(argv)[1:]) == verdict
    if argv[0] in ("fit", "evaluate", "sweep", "compare") and "--help" not in argv:
        from fedclust import commands, parsers

        try:
            parsers.parse(commands.parser(argv[0]), expand_config_args(argv)[1:])
        except SystemExit as stop:  # --print_config prints and exits 0
            assert stop.code in (0, None)


def test_every_packaged_config_and_its_resolved_dump_pass(tmp_path, fresh_process, monkeypatch):
    """The packaged configs, and what a run folder's config.yaml holds (`fit --resume` reads it back), with
    every known data set where the precheck looks for it (their sizes are the official ones)."""
    from fedclust.run import fit_parser

    monkeypatch.setenv("FEDCLUST_DATA_ROOT", str(write_known_data(tmp_path / "data")))
    monkeypatch.chdir(tmp_path)  # the configs that name a root name ./data

    for name, path in packaged_configs().items():
        assert precheck.judge("fit", ["--config", str(path)]) == "passed", name
    for name in ("quickstart", "kfed_fmnist", "fedu_kmeans_fmnist", "uifca_gaussian", "sdafc_fcm_fmnist",
                 "fedmcc_cifar10_iid", "ffcm_fmnist"):
        parser = fit_parser()
        cfg = parser.parse_args(["--config", str(packaged_configs()[name])], with_meta=False)
        cfg.pop("config", None)
        saved = tmp_path / f"{name}.yaml"
        saved.write_text(parser.dump(cfg, skip_unset=False))
        assert precheck.judge("fit", ["--config", str(saved)]) == "passed", name


def test_a_stale_schema_refuses_nothing(fresh_process):
    schema = cli_schema.load()
    stale = {**schema, "fingerprint": "not the code's"}
    args = expand_config_args(["fit", "--config", "ccfc_digits", "--data.p", "abc"])[1:]
    with pytest.raises(Exception, match="data.p"):  # noqa: PT011
        precheck.judge("fit", args, schema)
    assert precheck.judge("fit", args, stale) == "aside"


def test_the_fingerprint_follows_signatures_not_bodies():
    base = 'class A:\n    """Doc."""\n    def __init__(self, x: int = 1):\n        self.x = x\n\n    def f(self):\n' \
           '        return 1\n'
    body = base.replace("return 1", "return 2  # new training code").replace('"""Doc."""', '"""Other doc."""')
    signature = base.replace("x: int = 1", "x: int = 2")
    init_body = base.replace("self.x = x", "super().__init__(**{})")
    assert cli_schema.skeleton(base) == cli_schema.skeleton(body)
    assert cli_schema.skeleton(base) != cli_schema.skeleton(signature)
    assert cli_schema.skeleton(base) != cli_schema.skeleton(init_body)


def test_type_specs_round_trip_through_type_hints():
    schema = cli_schema.load()
    specs = [o["type"] for cmd in schema["commands"].values() for o in cmd["options"].values() if "type" in o]
    specs += [s for c in schema["method"]["classes"].values() for s in (c["params"] or {}).values()]
    for spec in specs:
        assert spec_of(cli_schema.typehint(spec)) == spec


def test_the_schema_is_up_to_date():
    """Regenerated from the real parsers in a fresh process; refresh with `python -m fedclust.cli_schema --write`."""
    proc = subprocess.run([sys.executable, "-m", "fedclust.cli_schema", "--check"], capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, (f"fedclust/cli_schema.json is stale: run `{cli_schema.REFRESH}` and commit it "
                                  f"({proc.stderr.strip()[-500:]})")


@pytest.mark.parametrize(("argv", "needle"), [
    (["--data.p", "abc"], "data.p = 'abc' is not valid: a number."),
    (["--method.init_args.lam", "abc"], "method.init_args.lam = 'abc' is not valid: a number."),
    (["--method.init_args.num_clusters", "None"], "method.init_args.num_clusters = 'None' is not valid: an integer "
                                                  "or null."),
    (["--method.init_args.augment", "colr"], "(closest: color)"),
    (["--method.init_args.lamm", "3"], "closest: lam"),
])
def test_the_real_parsers_errors_read_the_same_way(capsys, monkeypatch, argv, needle):
    """What the precheck leaves to the real parser (or a process that skips it) still ends in one house-style line."""
    from fedclust.__main__ import main

    monkeypatch.setattr(precheck, "check", lambda command, args: None)
    assert main(["fit", "--config", "ccfc_digits", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and needle in err, err

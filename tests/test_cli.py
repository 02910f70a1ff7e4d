import json
from pathlib import Path

import pytest
import yaml

from fedclust.__main__ import main
from fedclust.run import fit_parser
from tests.helpers.tiny import CLI_TINY as TINY

CONFIGS = sorted(Path(__file__).parents[1].glob("configs/*.yaml"))


@pytest.mark.parametrize("path", CONFIGS, ids=[p.name for p in CONFIGS])
def test_every_config_parses_and_builds_its_method(path):
    parser = fit_parser()
    cfg = parser.parse_path(str(path), with_meta=False)
    cfg.pop("config", None)
    init = parser.instantiate(cfg)
    assert init.method.stages()


def test_help_documents_options_from_docstrings(capsys):
    try:  # printed from cli_schema.json (returns) or, where that is stale, by the parser (exits)
        assert main(["fit", "--help"]) == 0
    except SystemExit as stop:
        assert stop.code in (0, None)
    out = capsys.readouterr().out
    assert "--federation.disconnect_rate" in out and "Share of clients that miss a round" in out
    assert "--data.p" in out and "--seed" in out


def test_print_config_shows_overrides(capsys):
    with pytest.raises(SystemExit):
        main(["fit", "--config", "configs/ccfc_digits.yaml", "--federation.rounds", "5", "--print_config"])
    cfg = yaml.safe_load(capsys.readouterr().out)
    assert cfg["federation"]["rounds"] == 5
    assert cfg["method"]["init_args"]["latent_dim"] == 64


def test_fit_then_evaluate_same_and_other_split(tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["fit", "--config", "configs/ccfc_digits.yaml", *TINY, "--run_dir", str(run)]) == 0
    final = json.loads((run / "final.json").read_text())["metrics"]
    saved = yaml.safe_load((run / "config.yaml").read_text())
    assert saved["federation"]["rounds"] == 2 and saved["data"]["num_clients"] == 2
    assert main(["evaluate", "--run", str(run)]) == 0
    again = json.loads((run / "evaluate_same.json").read_text())
    assert again == pytest.approx(final, abs=1e-6)
    assert main(["evaluate", "--run", str(run), "--split", "test"]) == 0
    lines = (run / "assignments_test.csv").read_text().splitlines()
    assert len(lines) == 1 + 297  # digits' test part


@pytest.mark.parametrize("args,needle", [
    (["--data.p", "1.5"], "data.p"),
    (["--data.name", "nope"], "data.name"),
    (["--federation.fraction", "0"], "federation.fraction"),
    (["--data.num_clients", "3", "--data.partition", "pshift"], "data.num_clients"),
])
def test_bad_config_is_one_clear_sentence(tmp_path, capsys, args, needle):
    code = main(["fit", "--config", "configs/ccfc_digits.yaml", "--progress", "false",
                 "--run_dir", str(tmp_path / "r"), *args])
    err = capsys.readouterr().err
    assert code == 2 and needle in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_an_existing_run_folder_is_never_overwritten(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.csv").write_text("precious")
    assert main(["fit", "--config", "configs/ccfc_digits.yaml", "--run_dir", str(run)]) == 2
    assert (run / "metrics.csv").read_text() == "precious"
    assert "run_dir" in capsys.readouterr().err


def test_each_run_log_gets_only_its_own_run_and_no_handler_is_left_behind(run_fit, tmp_path, monkeypatch):
    import logging

    from fedclust.federation import orchestrator
    from tests.conftest import tiny_ccfc

    before = list(logging.getLogger("fedclust").handlers)
    real = orchestrator.Orchestrator.run_round

    def warn_then_run(self, ctx):
        orchestrator.log.warning("marker for %s", self.method.hparams.latent_dim)
        return real(self, ctx)

    monkeypatch.setattr(orchestrator.Orchestrator, "run_round", warn_then_run)
    run_fit(tiny_ccfc(latent_dim=16), folder="a")
    run_fit(tiny_ccfc(latent_dim=8), folder="b")
    assert logging.getLogger("fedclust").handlers == before
    assert "marker for 8" not in (tmp_path / "a" / "run.log").read_text()
    assert "marker for 8" in (tmp_path / "b" / "run.log").read_text()


def test_version_help_and_configs_answer_without_importing_torch():
    """`fedclust --help`, `--version`, `configs` and config-file errors must not wait for torch (issue 10)."""
    import subprocess
    import sys

    code = ("import sys; from fedclust.__main__ import main; "
            "[main(a) for a in (['--help'], ['--version'], ['configs'], ['fit', '--config', 'no_such_config'], "
            "['fitt'])]; sys.exit('torch' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "fedclust 0." in result.stdout and "quickstart" in result.stdout


def test_config_by_packaged_name_and_the_catalogue(capsys):
    from fedclust.config_files import packaged_configs, resolve_config

    assert resolve_config("quickstart") == resolve_config("quickstart.yaml") == packaged_configs()["quickstart"]
    assert main(["configs"]) == 0
    listing = capsys.readouterr().out.splitlines()
    assert len(listing) == len(packaged_configs())
    row = next(line for line in listing if line.startswith("quickstart "))
    assert "FedSpectral" in row  # its first comment line


@pytest.mark.parametrize(("content", "needle"), [
    (b"\x89PNG\r\n\x1a\n\x00\x00", "binary"),
    (b"method: [\n", "valid YAML (line 2"),
    (b"- a\n- b\n", "YAML mapping"),
    (b"method: {class_path: CCFC}\ndatta: {p: 1}\n", "closest: data"),
])
def test_a_config_file_that_cannot_be_one_is_one_sentence(tmp_path, capsys, content, needle):
    path = tmp_path / "bad.yaml"
    path.write_bytes(content)
    assert main(["fit", "--config", str(path), "--run_dir", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and needle in err and "Traceback" not in err
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize(("args", "needle"), [
    (["--data.pp", "3"], "closest: --data.p"),
    (["--method", "KFEDD"], "closest: KFED"),
    (["--method.init_args.lamm", "3"], "closest: lam"),
    (["--config", "quickstartt"], "closest: quickstart"),
])
def test_typos_name_the_nearest_valid_choice(tmp_path, capsys, args, needle):
    assert main(["fit", "--config", "ccfc_digits", *args, "--run_dir", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and needle in err


@pytest.mark.parametrize(("args", "needle"), [
    (["--method.init_args.lr", ".nan"], "method.init_args.lr = nan"),
    (["--method.init_args.lam", ".inf"], "method.init_args.lam = inf"),
    (["--method.init_args.latent_dim", "0"], "method.init_args.latent_dim = 0"),
    (["--method.init_args.projector_hidden", "-3"], "method.init_args.projector_hidden = -3"),
    (["--method.init_args.batch_size", "1"], "method.init_args.batch_size = 1"),
    (["--method.init_args.num_clusters", "0"], "method.init_args.num_clusters = 0"),
    (["--method.init_args.resize", "-1"], "method.init_args.resize = -1 is not valid: a positive integer"),
    (["--method.init_args.pretrain_rounds", "-1"], "pretrain_rounds = -1 is not valid: an integer >= 0"),
    (["--method.init_args.num_clusters", "500"], "smallest client"),
    (["--fabric.accelerator", "cuda"], "fabric.accelerator"),
])
def test_impossible_values_stop_before_any_folder_exists(tmp_path, capsys, args, needle):
    if "cuda" in args:
        pytest.importorskip("torch")
        import torch

        if torch.cuda.is_available():
            pytest.skip("this machine has a GPU")
    assert main(["fit", "--config", "ccfc_digits", *args, "--run_dir", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and needle in err and "Traceback" not in err
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize(("argv", "needle"), [
    (["fit"], "--method is required (e.g. --config quickstart"),
    (["evaluate"], "--run is required"),
    (["fit", "--config", "quickstart", "--logger", "wanb"], "closest: wandb"),
    (["fit", "--config", "quickstart", "--data.partition", "dirichlett"], "closest: dirichlet"),
])
def test_missing_and_misspelt_choices_are_one_sentence(capsys, argv, needle):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and needle in err


def test_a_reader_that_closes_the_pipe_early_gets_no_traceback():
    """`fedclust configs | grep -q NAME` closes the pipe at the first match (CI's wheel check does this)."""
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-m", "fedclust", "configs"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    proc.stdout.close()  # the reader is gone before fedclust writes
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0 and b"Traceback" not in err

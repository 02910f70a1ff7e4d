import pytest

from tests.conftest import tiny_ccfc


def test_tensorboard_logger_writes_event_files(run_fit, tmp_path):
    run_fit(tiny_ccfc(), logger="tensorboard")
    assert list((tmp_path / "run" / "tensorboard").glob("events.out.tfevents.*"))


def test_wandb_logger_works_offline(run_fit, tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    run_fit(tiny_ccfc(), logger="wandb", project="fedclust-test", group="g", name="n")
    runs = list((tmp_path / "run" / "wandb").glob("offline-run-*"))
    assert runs and list(runs[0].glob("*.wandb"))


def _fit_quickstart(tmp_path, *extra):
    from fedclust.__main__ import main

    argv = ["fit", "--config", "ccfc_digits", "--federation.rounds", "2",
            "--progress", "false", "--run_dir", str(tmp_path / "cli"), *extra]
    assert main(argv) == 0
    return tmp_path / "cli"


def test_tensorboard_receives_the_resolved_config_as_nested_hyperparameters(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams.plugin_data_pb2 import HParamsPluginData

    folder = _fit_quickstart(tmp_path, "--logger", "tensorboard", "--data.p", "0.5")
    events = EventAccumulator(str(folder / "tensorboard"))
    events.Reload()
    content = events.PluginTagToContent("hparams")["_hparams_/session_start_info"]
    hparams = HParamsPluginData.FromString(content).session_start_info.hparams
    assert hparams["data/p"].number_value == 0.5
    assert hparams["method/class_path"].string_value.endswith("CCFC")
    assert hparams["seed"].number_value == 66


def test_wandb_receives_the_resolved_config_as_nested_keys(tmp_path, monkeypatch):
    pytest.importorskip("wandb")

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    folder = _fit_quickstart(tmp_path, "--logger", "wandb", "--data.p", "0.5")
    config = _wandb_offline_config(next((folder / "wandb").glob("offline-run-*/*.wandb")))
    assert config["data"]["p"] == 0.5
    assert config["method"]["init_args"]["lam"] == pytest.approx(0.001)
    assert config["seed"] == 66


def _wandb_offline_config(path) -> dict:
    """The config an offline W&B run recorded, read from its .wandb file: LevelDB-log records (7-byte headers,
    32 KiB blocks) of wandb's Record protobufs (wandb 0.31 has no public reader for offline files)."""
    import json
    import struct

    from wandb.proto import wandb_internal_pb2

    raw, pos, chunk, config = path.read_bytes(), 7, b"", {}
    while pos + 7 <= len(raw):
        if 32768 - pos % 32768 < 7:  # block trailer
            pos += 32768 - pos % 32768
            continue
        _, length, kind = struct.unpack("<IHB", raw[pos:pos + 7])
        chunk, pos = chunk + raw[pos + 7:pos + 7 + length], pos + 7 + length
        if kind in (1, 4):  # a full record, or the last fragment of one
            record = wandb_internal_pb2.Record.FromString(chunk)
            chunk = b""
            which = record.WhichOneof("record_type")
            items = record.config.update if which == "config" else record.run.config.update if which == "run" else []
            config.update({item.key: json.loads(item.value_json) for item in items})
    return config


def test_wandb_without_a_key_runs_offline_and_says_so(monkeypatch, tmp_path):
    from fedclust.callbacks.loggers import wandb_offline_reason

    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))
    monkeypatch.setenv("HOME", str(tmp_path))
    assert "API key" in wandb_offline_reason()


def test_a_missing_logger_package_is_one_sentence_before_any_folder(tmp_path, monkeypatch, capsys):
    import importlib.util

    from fedclust.__main__ import main

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else real(name, *a))
    assert main(["fit", "--config", "ccfc_digits", "--logger", "wandb", "--run_dir", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "fedclust[wandb]" in err
    assert not (tmp_path / "r").exists()

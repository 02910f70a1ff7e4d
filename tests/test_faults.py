"""Faults end in one sentence and lose nothing (issue 25, point 5): a damaged or malicious config.yaml read by
evaluate, a disk that fills while writing, a run whose every update is non-finite, NaN in the data; and the
whole-run remaining time and the Ctrl-C hint of 25.7."""

import errno
import io
import json
import math
import os
import re
import signal
import time

import numpy as np
import pytest
import torch
from rich.console import Console

from fedclust.__main__ import main
from fedclust.callbacks.checkpoint import load_checkpoint
from fedclust.callbacks.csv_metrics import CSVMetrics
from fedclust.callbacks.progress import ProgressCallback, duration
from fedclust.data import datasets
from fedclust.errors import DataFileError, FedclustError
from fedclust.federation.config import FederationConfig
from fedclust.federation.orchestrator import Orchestrator
from fedclust.run_folder import json_text, read_final_metrics, write_json
from fedclust.run_outcome import unusable_run
from tests.conftest import tiny_ccfc, tiny_data

QUICK = ["fit", "--config", "quickstart", "--progress", "false"]


def refuse_constant(name):
    raise ValueError(f"not strict JSON: {name}")


def strict(text: str):
    """Parse as RFC 8259 JSON: NaN and Infinity are refused."""
    return json.loads(text, parse_constant=refuse_constant)


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("fedclust: error:") and "Traceback" not in err, err
    return err


# ---------------------------------------------------------------- evaluate on a bad config.yaml


@pytest.mark.parametrize("text", [
    'method: !!python/object/apply:os.system ["touch {marker}"]\n',   # code in a YAML tag
    "method:\n  class_path: CCFC\n  init_args:\n    backbone: [ml",    # cut off mid-file: not YAML
    "method:\n  class_path: CCF",                                      # cut off at a line: YAML, but no fit config
], ids=["python-tag", "truncated-yaml", "truncated-config"])
def test_evaluate_refuses_a_bad_config_yaml_as_fit_resume_does(tmp_path, capsys, text, request):
    marker = tmp_path / "pwned"
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    torch.save({"model": {}, "server": {}, "clients": {}, "done": 1}, run / "checkpoints" / "last.ckpt")  # judged fine
    (run / "config.yaml").write_text(text.replace("{marker}", str(marker)))
    assert main(["evaluate", "--run", str(run)]) == 2
    said = one_error_line(capsys)
    assert "run = " in said and str(run) in said
    if not request.node.name.endswith("[truncated-config]"):  # the very check `fit --resume` makes, its words
        assert main(["fit", "--resume", str(run)]) == 2
        resumed = one_error_line(capsys)
        assert said.split("is not valid:")[1] == resumed.split("is not valid:")[1]
    else:
        assert "CCF" in said and "config.yaml" in said
    assert not marker.exists()


# ---------------------------------------------------------------- the disk fills


def test_a_checkpoint_that_cannot_be_written_is_one_sentence_keeps_the_last_and_resumes(tmp_path, capsys,
                                                                                        monkeypatch):
    run = tmp_path / "run"
    real_save = torch.save
    calls = []

    def disk_fills_on_the_second_checkpoint(obj, file, *args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            file.write(b"x" * 1000)  # half a checkpoint, then the disk is full
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_save(obj, file, *args, **kwargs)

    monkeypatch.setattr(torch, "save", disk_fills_on_the_second_checkpoint)
    argv = [*QUICK, "--federation.rounds", "3", "--federation.checkpoint_every", "1", "--run_dir", str(run)]
    assert main(argv) == 2
    said = one_error_line(capsys)
    assert "the checkpoint after round 2 could not be written" in said and str(run / "checkpoints") in said
    assert "No space left on device" in said and "(after round 1) is intact" in said
    assert f"fedclust fit --resume {run}" in said
    assert not (run / "checkpoints" / "last.tmp").exists()
    assert load_checkpoint(run / "checkpoints" / "last.ckpt")["done"] == 1
    assert len((run / "metrics.csv").read_text().splitlines()) == 1 + 2  # the rows written are kept
    monkeypatch.setattr(torch, "save", real_save)  # space freed
    assert main(["fit", "--resume", str(run), "--progress", "false"]) == 0
    assert load_checkpoint(run / "checkpoints" / "last.ckpt")["done"] == 3
    assert [int(r.split(",")[0]) for r in (run / "metrics.csv").read_text().splitlines()[1:]] == [1, 2, 3]


_FSIZE_SCRIPT = """
import resource, signal, sys, types
from pathlib import Path
import torch
from fedclust.callbacks.checkpoint import save_checkpoint
from fedclust.errors import FedclustError

path = Path(sys.argv[1]) / "checkpoints" / "last.ckpt"
orch = types.SimpleNamespace(fabric=types.SimpleNamespace(is_global_zero=True),
                             progress=types.SimpleNamespace(done=2),
                             state_dict=lambda: {"w": torch.ones(100_000)})
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # as a shell's `ulimit -f`: writes beyond it fail with EFBIG
resource.setrlimit(resource.RLIMIT_FSIZE, (50_000, 50_000))
try:
    save_checkpoint(path, orch, saved_round=1)
except FedclustError as error:
    print(error)
"""


def test_a_real_failed_write_names_the_os_reason_and_leaves_no_temporary_file(tmp_path):
    import subprocess
    import sys

    previous = tmp_path / "checkpoints" / "last.ckpt"
    previous.parent.mkdir()
    torch.save({"model": {}, "server": {}, "clients": {}, "done": 1}, previous)
    before = previous.read_bytes()
    proc = subprocess.run([sys.executable, "-c", _FSIZE_SCRIPT, str(tmp_path)], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "could not be written" in proc.stdout and "File too large" in proc.stdout, proc.stdout
    assert "(after round 1) is intact" in proc.stdout
    assert not (tmp_path / "checkpoints" / "last.tmp").exists()
    assert previous.read_bytes() == before


def test_a_failed_output_write_keeps_the_earlier_file_and_no_temporary_one(tmp_path, monkeypatch):
    path = tmp_path / "evaluate_same.json"
    path.write_text('{"nmi": 0.5}')

    def full(self, *args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(type(path), "write_text", full)
    with pytest.raises(FedclustError, match=r"could not be written \(No space left on device\); the earlier file "
                                            "is unchanged"):
        write_json(path, {"nmi": 0.7}, "run")
    monkeypatch.undo()
    assert path.read_text() == '{"nmi": 0.5}'
    assert [p.name for p in tmp_path.iterdir()] == [path.name]


def test_metrics_csv_keeps_its_rows_when_the_resumed_rewrite_fails(tmp_path, monkeypatch):
    path = tmp_path / "metrics.csv"
    path.write_text("round,loss,nmi\n1,0.5,0.1\n2,0.4,0.2\n3,0.")  # the last row cut short by a full disk
    orch = type("O", (), {})()
    orch.progress = type("P", (), {"done": 3})()
    orch.data = type("D", (), {"dataset": type("S", (), {"has_labels": True})()})()
    callback = CSVMetrics(path)
    callback.on_fit_start(orch)  # the cut row has missing fields: dropped, the whole rows kept
    assert [r.split(",")[0] for r in path.read_text().splitlines()[1:]] == ["1", "2"]
    before = path.read_text()
    monkeypatch.setattr("fedclust.callbacks.csv_metrics.write_output",
                        lambda *a: (_ for _ in ()).throw(FedclustError("disk full")))
    with pytest.raises(FedclustError):
        callback.on_fit_start(orch)
    assert path.read_text() == before


# ---------------------------------------------------------------- every update non-finite


def test_a_run_whose_every_update_is_non_finite_fails_in_one_sentence(tmp_path, capsys):
    run = tmp_path / "run"
    assert main([*QUICK, "--method.init_args.lr", "1e30", "--federation.rounds", "2", "--run_dir", str(run)]) == 2
    said = one_error_line(capsys)
    assert f"the run in {run} produced no usable model: every client update was non-finite in rounds 1-2" in said
    assert "the final model gives no finite clustering score" in said
    assert not (run / "final.json").exists() and not (run / "assignments.csv").exists()
    assert len((run / "metrics.csv").read_text().splitlines()) == 1 + 2
    assert "run failed: every client update was non-finite" in (run / "run.log").read_text()
    assert main(["fit", "--resume", str(run), "--progress", "false"]) == 2  # resumed, it says the same
    assert "no usable model" in one_error_line(capsys)


def test_a_stage_lost_entirely_fails_even_when_the_end_scores():
    stages = [type("S", (), {"name": n, "rounds": r})() for n, r in (("pretrain", 2), ("cluster", 1))]
    rows = [{"stage": 0, "round": 1, "clients": 0, "rejected": 3}, {"stage": 0, "round": 2, "clients": 0,
            "rejected": 3}, {"stage": 1, "round": 3, "clients": 3, "rejected": 0}]
    assert unusable_run(rows, stages, {"nmi": 0.4}) == ("every client update was non-finite in rounds 1-2 "
                                                         "(all of stage pretrain)")
    rows[1].update(clients=2, rejected=1)  # one round where some clients diverged: the run is usable
    assert unusable_run(rows, stages, {"nmi": 0.4}) is None
    dropped = [{**r, "clients": 0, "rejected": 0} for r in rows]  # every client disconnected: not non-finite
    assert unusable_run(dropped, stages, {"nmi": 0.4}) is None


def test_json_is_strict_everywhere_fedclust_writes_it(tmp_path, run_fit, monkeypatch):
    text = json_text({"nmi": math.nan, "x": [math.inf, 1.0], "n": {"k": -math.inf}, "s": "a"})
    assert strict(text) == {"nmi": None, "x": [None, 1.0], "n": {"k": None}, "s": "a"}
    real = Orchestrator.evaluate
    monkeypatch.setattr(Orchestrator, "evaluate", lambda self: {**real(self), "ari": math.nan})
    run_fit(tiny_ccfc(), embedding_plot=True, embedding_points=50)
    final = strict((tmp_path / "run" / "final.json").read_text())
    assert final["metrics"]["ari"] is None and isinstance(final["metrics"]["nmi"], float)
    assert math.isnan(read_final_metrics(tmp_path / "run" / "final.json")["ari"])  # read back (sweep, compare)
    strict((tmp_path / "run" / "embedding.json").read_text())


# ---------------------------------------------------------------- NaN in the data


def test_a_built_in_loader_giving_nan_is_one_sentence_naming_the_set_and_the_count(monkeypatch, run_fit, capsys,
                                                                                  tmp_path):
    real = datasets.DATASETS["gaussian"]

    def with_nan(*args, **kwargs):
        dataset = real(*args, **kwargs)
        dataset.x[[3, 7]] = torch.tensor(float("nan"))
        dataset.x[11, 0] = torch.tensor(float("inf"))
        return dataset

    monkeypatch.setitem(datasets.DATASETS, "gaussian", with_nan)
    with pytest.raises(DataFileError, match=r"data set 'gaussian' holds 3 of \d+ samples with non-finite values "
                                            r"\(NaN or infinite; the first is sample 3\)"):
        run_fit(tiny_ccfc(), tiny_data(name="gaussian"))
    assert main(["fit", "--method", "KFED", "--data.name", "gaussian", "--data.partition", "iid",
                 "--run_dir", str(tmp_path / "cli"), "--progress", "false"]) == 2
    assert "'gaussian' holds 3 of" in one_error_line(capsys)
    assert not (tmp_path / "cli").exists()  # refused before anything was written


def test_the_finite_check_goes_a_chunk_at_a_time(monkeypatch):
    monkeypatch.setattr(datasets, "FINITE_CHECK_ELEMENTS", 10)
    x = torch.zeros(50, 4)
    x[[0, 21, 49], 1] = float("nan")
    dataset = datasets.Dataset("mine", x, torch.zeros(50, dtype=torch.long), 1, False, torch.zeros(50))
    with pytest.raises(DataFileError, match="holds 3 of 50 samples .*the first is sample 0"):
        datasets.check_finite(dataset)


def test_a_features_file_with_nan_is_one_sentence(tmp_path, capsys):
    x = np.random.default_rng(0).normal(size=(40, 3)).astype(np.float32)
    x[5, 1] = np.nan
    np.save(tmp_path / "x.npy", x)
    assert main(["fit", "--method", "KFED", "--data.name", "features", "--data.root", str(tmp_path / "x.npy"),
                 "--data.partition", "iid", "--run_dir", str(tmp_path / "run"), "--progress", "false"]) == 2
    assert "NaN" in one_error_line(capsys)


# ---------------------------------------------------------------- 25.7: remaining time, Ctrl-C hint


def test_each_round_line_gives_the_whole_runs_remaining_time(monkeypatch):
    from tests.helpers.tiny import build

    clock = iter(range(0, 1000, 10))  # the progress callback's clock advances 10 s at each look
    monkeypatch.setattr("fedclust.callbacks.progress.perf_counter", lambda: next(clock))
    out = io.StringIO()
    orch = build(tiny_ccfc(pretrain_rounds=3, cluster_rounds=1), tiny_data(num_clients=2),
                 FederationConfig(eval_every=10))
    orch.callbacks = [ProgressCallback(Console(file=out, width=200))]
    orch.run()
    lines = [line for line in out.getvalue().splitlines() if line.startswith("round")]
    # the mean time per round so far x the rounds left: 10/1 x 3, 30/2 x 2, 50/3 x 1 (the bar looked in between)
    assert [re.search(r"~(.+) left$", line)[1] if "left" in line else None for line in lines] == [
        "30s", "30s", "17s", None]
    assert duration(45) == "45s" and duration(185) == "3m 05s" and duration(7620) == "2h 07m"


def _ctrl_c() -> None:
    raise KeyboardInterrupt


def _sigterm() -> None:  # as `kill PID` or a scheduler's stop: fedclust takes it as Ctrl-C (fedclust/interrupts.py)
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(1)  # the handler raises here, at the next bytecode; reaching the line after would be a failure
    raise AssertionError("SIGTERM did not interrupt the fit")


@pytest.mark.parametrize("stop", [_ctrl_c, _sigterm], ids=["ctrl-c", "sigterm"])
def test_ctrl_c_names_this_runs_folder_in_the_resume_hint_and_ends_the_bar(tmp_path, capsys, monkeypatch, stop):
    before = signal.getsignal(signal.SIGTERM)
    run = tmp_path / "quick"
    argv = [*QUICK, "--federation.rounds", "3", "--federation.checkpoint_every", "1", "--run_dir", str(run),
            "--progress", "true"]  # the live bar, which must end
    real_round = Orchestrator.run_round

    def stop_after_2(self, ctx):
        if self.progress.done == 2:
            stop()
        return real_round(self, ctx)

    bars = []
    real_close = ProgressCallback.close
    monkeypatch.setattr(ProgressCallback, "close", lambda self: (bars.append(self), real_close(self)))
    Orchestrator.run_round = stop_after_2
    try:
        assert main(argv) == 130
    finally:
        Orchestrator.run_round = real_round
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err == f"fedclust: interrupted; the last checkpoint is kept: resume with `fedclust fit --resume {run}`"
    assert bars and not bars[0].progress.live.is_started  # the live bar ended (it hides the terminal's cursor)
    assert main(["fit", "--resume", str(run), "--progress", "false"]) == 0
    assert signal.getsignal(signal.SIGTERM) == before  # main's handler is not left behind

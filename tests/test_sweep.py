import fcntl
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from fedclust.__main__ import main
from fedclust.errors import ConfigError
from fedclust.sweep import expand, parse_grid, sweep

KFED = "configs/kfed_fmnist.yaml"
DIGITS = ["data.name=digits", "data.num_clients=2", "data.partition=iid"]


def test_grid_axes_are_yaml_values_and_names_show_what_varies():
    axes = parse_grid(["data.p=0,0.5", "seed=1,2", "federation.disconnect_rate=0.2", "config=a.yaml,b.yaml"])
    assert axes["data.p"] == [0, 0.5] and axes["seed"] == [1, 2]
    points = expand("base.yaml", axes)
    assert len(points) == 8
    assert points[0].name == "p=0_seed=1_config=a" and points[0].config == "a.yaml"
    assert points[0].overrides == {"data.p": 0, "seed": 1, "federation.disconnect_rate": 0.2}
    assert points[0].argv() == ["--data.p", "0", "--seed", "1", "--federation.disconnect_rate", "0.2"]


@pytest.mark.parametrize("entry", ["data.p", "=1,2", "seed="])
def test_bad_grid_entry_is_one_sentence(entry):
    with pytest.raises(ConfigError, match="KEY=V1,V2"):
        parse_grid([entry])


def test_unknown_override_stops_the_sweep_before_anything_runs(tmp_path, capsys):
    assert main(["sweep", "--config", KFED, "--grid", "data.pp=0,1", "--sweep_dir", str(tmp_path / "s")]) == 2
    err = capsys.readouterr().err
    assert "grid" in err and "data.pp" in err and "Traceback" not in err
    assert not (tmp_path / "s").exists()


@pytest.mark.slow  # several processes, each importing torch: 35-100 s here; CI runs -m slow
def test_sweep_runs_skips_resumes_and_keeps_incomplete_folders(tmp_path):
    root = tmp_path / "sweep"
    grid = [*DIGITS, "seed=1,2"]
    runs = sweep(KFED, grid, str(root), slots=2)
    assert [r["status"] for r in runs] == ["done", "done"]
    ledger = json.loads((root / "sweep.json").read_text())
    assert {r["name"] for r in ledger} == {"seed=1", "seed=2"}
    assert all(0 <= r["metrics"]["nmi"] <= 1 for r in ledger)
    nmi = {r["name"]: r["metrics"]["nmi"] for r in runs}

    # interrupted: seed=1 lost its final.json after its checkpoint; seed=2 died before any checkpoint
    (root / "seed=1" / "final.json").unlink()
    for item in (root / "seed=2").rglob("*"):
        if item.is_file() and item.name != "config.yaml":
            item.unlink()
    again = sweep(KFED, grid, str(root), slots=1)
    assert [r["status"] for r in again] == ["done", "done"]
    # resumed from its checkpoint in place: same folder, its metrics rows kept and not repeated
    assert not (root / "seed=1.incomplete-1").exists()
    assert len((root / "seed=1" / "metrics.csv").read_text().splitlines()) == 2
    assert (root / "seed=2.incomplete-1" / "config.yaml").exists()  # moved aside, not deleted
    assert {r["name"]: r["metrics"]["nmi"] for r in again} == pytest.approx(nmi)

    done = sweep(KFED, grid, str(root), slots=1, dry_run=True)  # everything finished: nothing runs
    assert [r["status"] for r in done] == ["done", "done"] and all(r["seconds"] is None for r in done)


def test_a_point_run_with_other_settings_is_not_done(tmp_path):
    """Re-running with a changed fixed setting must not report the old numbers as this setting's (issue 11)."""
    root = tmp_path / "sweep"
    first = sweep(KFED, [*DIGITS, "seed=1"], str(root), slots=1)
    assert first[0]["status"] == "done"
    before = (root / "base" / "final.json").read_bytes()
    again = sweep(KFED, [*DIGITS, "seed=1", "method.init_args.niter=5"], str(root), slots=1, dry_run=True)
    assert again[0]["status"] == "pending"  # the old run is not this point's
    assert (root / "base.stale-1" / "final.json").read_bytes() == before  # kept whole, moved aside


def _fake_done_point(root, point, record):
    (root / point.name).mkdir(parents=True)
    (root / point.name / "final.json").write_text("{}")
    (root / ".points").mkdir(exist_ok=True)
    (root / ".points" / f"{point.name}.json").write_text(record)


def test_a_comment_edit_of_the_config_leaves_a_finished_point_done(tmp_path):
    """The fingerprint covers what the config says, not its bytes: a comment or layout edit changes nothing a run
    computes, so its finished points stay; a changed value still sets them aside."""
    from fedclust.sweep.points import fingerprint, set_aside_if_stale

    config = tmp_path / "c.yaml"
    config.write_text("# first words\nseed: 1\ndata: {name: digits}\n")
    point = expand(str(config), {"data.p": [0]})[0]
    root = tmp_path / "sweep"
    _fake_done_point(root, point, json.dumps({"fingerprint": fingerprint(point)}))
    config.write_text("# other words\nseed: 1\ndata:\n  name: digits\n")
    set_aside_if_stale(root, point)
    assert (root / point.name / "final.json").exists()
    config.write_text("seed: 2\ndata: {name: digits}\n")
    set_aside_if_stale(root, point)
    assert not (root / point.name).exists() and (root / f"{point.name}.stale-1" / "final.json").exists()


def test_records_of_the_former_byte_fingerprint_still_count_and_a_damaged_record_sets_aside(tmp_path):
    import hashlib

    from fedclust.sweep.points import set_aside_if_stale

    config = tmp_path / "c.yaml"
    config.write_text("seed: 1\n")
    point = expand(str(config), {"data.p": [0]})[0]
    former = hashlib.sha256(config.read_bytes() + json.dumps(point.overrides, sort_keys=True).encode()).hexdigest()
    root = tmp_path / "sweep"
    _fake_done_point(root, point, json.dumps({"fingerprint": former}))
    set_aside_if_stale(root, point)
    assert (root / point.name / "final.json").exists()
    (root / ".points" / f"{point.name}.json").write_text("{not json")
    set_aside_if_stale(root, point)  # untrusted file: no traceback, the folder is kept aside, not reused
    assert (root / f"{point.name}.stale-1" / "final.json").exists()


@pytest.mark.slow  # a real sweep and its fit, each importing torch: 20-40 s here
def test_sigterm_stops_a_real_sweep_and_its_fit_which_keeps_its_checkpoint(tmp_path):
    """`kill` on a sweep (as a scheduler stops a job): the sweep passes it on, its fit ends as on Ctrl-C (its
    checkpoint kept, the command that resumes it in its log), no further point starts, and the same command
    resumes it (fedclust/interrupts.py, sweep/points.py stop_runs)."""
    root = tmp_path / "sweep"
    command = [sys.executable, "-m", "fedclust", "sweep", "--config", "quickstart", "--sweep_dir", str(root),
               "--grid", "seed=1,2", "--grid", "federation.rounds=200", "--grid", "federation.checkpoint_every=1"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    sweep_process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     start_new_session=True)  # its own process group: only the sweep gets the signal
    checkpoint = root / "seed=1" / "checkpoints" / "last.ckpt"
    deadline = time.monotonic() + 120
    while not checkpoint.exists() and time.monotonic() < deadline and sweep_process.poll() is None:
        time.sleep(0.2)
    assert checkpoint.exists(), sweep_process.communicate()[0]
    sweep_process.send_signal(signal.SIGTERM)
    out, _ = sweep_process.communicate(timeout=90)
    assert sweep_process.returncode == 130, out
    assert "interrupted seed=1" in out and "start seed=2" not in out and not (root / "seed=2").exists()
    log = (root / "logs" / "seed=1.log").read_text()
    assert f"resume with `fedclust fit --resume {root / 'seed=1'}`" in log
    ledger = {r["name"]: r["status"] for r in json.loads((root / "sweep.json").read_text())}
    assert ledger == {"seed=1": "interrupted", "seed=2": "pending"}
    lock = os.open(root / "seed=1" / ".lock", os.O_RDONLY)  # released: no fit of this sweep is left running
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    finally:
        os.close(lock)

"""`benchmarks/gpu_protocol.sh speed` (issue 46 items 3-4) without a GPU: its dry run takes every leg but the peer's
through the CPU on 600 test images, so what a lent GPU will run is checked here: the CSV's columns, a leg measured
at this commit is not measured again, a protocol run cut off by the call's budget resumes at the next call and its
row counts the seconds of both calls. The measurement itself waits for a GPU (benchmarks/results/gpu_speed.md)."""

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
COLUMNS = ["method", "clients", "images", "rounds", "mode", "seconds_total", "seconds_per_round",
           "peak_gpu_memory_mb", "nmi", "device", "commit"]


def _speed(tmp_path: Path, *args: str) -> str:
    env = {**os.environ, "FEDCLUST_GPU_RUNS": str(tmp_path / "runs"), "OUT": str(tmp_path / "out"),
           "FEDCLUST_GPU_SPEED_CSV": str(tmp_path / "gpu_speed.csv"), "BENCHMARKS_COMMIT": "abc123"}
    done = subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu_protocol.sh"), "speed", *args], env=env,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "Traceback" not in done.stdout + done.stderr, done.stdout[-3000:]
    return done.stdout


def _rows(tmp_path: Path) -> list[dict]:
    with open(tmp_path / "out" / "gpu_speed.csv", newline="") as f:
        reader = csv.DictReader(f)
        assert reader.fieldnames == COLUMNS
        return list(reader)


@pytest.mark.slow  # five `fedclust fit` / step processes, each importing torch: 3-6 minutes here
def test_dry_run_measures_each_leg_once_and_resumes_a_cut_off_protocol(tmp_path):
    first = _speed(tmp_path, "--budget", "400", "--dry-run", "--clients", "2", "--modes", "auto",
                   "--legs", "short", "step")
    rows = _rows(tmp_path)
    assert [(r["clients"], r["images"], r["rounds"], r["mode"]) for r in rows] == [
        ("2", "600", "2", "auto"), ("2", "600", "0", "step eager:fp32")], first
    short = rows[0]
    assert short["device"] == "cpu" and short["commit"] == "abc123" and 0 <= float(short["nmi"]) <= 1
    assert float(short["seconds_total"]) > float(short["seconds_per_round"]) > 0
    assert short["peak_gpu_memory_mb"] == ""  # no GPU: nothing to say
    assert "compile:fp32: skipped: needs CUDA" in first

    again = _speed(tmp_path, "--budget", "400", "--dry-run", "--clients", "2", "--modes", "auto",
                   "--legs", "short", "step")
    assert "measured at this commit" in again and len(_rows(tmp_path)) == 2  # nothing measured twice

    # the whole protocol (cut to 2 + 1 rounds); then as if the call had been cut off after the last checkpoint: the
    # next call resumes the run and its row counts the seconds of both calls
    _speed(tmp_path, "--budget", "400", "--dry-run", "--clients", "2", "--legs", "full", "--full-rounds", "2", "1")
    table = tmp_path / "gpu_speed.csv"
    lines = table.read_text().splitlines()
    assert lines[-1].startswith("CCFC,2,600,3,auto,")
    folder = tmp_path / "runs" / "speed" / "ccfc_c2_r2+1_auto"
    (folder / "final.json").unlink()
    table.write_text("\n".join(lines[:-1]) + "\n")
    _speed(tmp_path, "--budget", "400", "--dry-run", "--clients", "2", "--legs", "full", "--full-rounds", "2", "1")
    full = _rows(tmp_path)[-1]
    assert (full["rounds"], full["mode"]) == ("3", "auto") and len(_rows(tmp_path)) == 3
    assert len((folder / "metrics.csv").read_text().splitlines()) == 1 + 3  # resumed: no round run twice
    walls = json.loads(folder.with_name(folder.name + ".wall.json").read_text())
    assert len(walls) == 2 and float(full["seconds_total"]) == pytest.approx(sum(walls), abs=0.1)

    # a budget spent mid-run: no row, the run kept for the next call (2,000 rounds outlast 30 s on any machine)
    cut = _speed(tmp_path, "--budget", "45", "--dry-run", "--clients", "2", "--legs", "full", "--full-rounds", "2000",
                 "1")
    assert "cut off by the budget" in cut and len(_rows(tmp_path)) == 3


def test_the_script_names_what_the_device_lacks_and_carries_within_its_limit():
    """The wheels the device image lacks are pinned here, and the call that carries Flower's stack carries the test
    split only: both together would pass the 64 MiB a call carries."""
    wheels = (ROOT / "benchmarks" / "gpu_wheels.sh").read_text()
    script = (ROOT / "benchmarks" / "gpu_protocol.sh").read_text()
    pinned = {line.split("==")[0].lower() for line in (ROOT / "constraints.txt").read_text().splitlines()
              if "==" in line}
    for group in ("BASE", "FLOWER"):
        names = wheels.split(f"\n{group}=(")[1].split(")")[0].split()
        assert names and all(name.lower() in pinned for name in names), (group, names)
    assert 'carry [".whl", ".whl_flower", ".data_test"]' in script and 'carry [".whl", ".data"]' in script
    ignored = (ROOT / ".gitignore").read_text().split()
    assert all(folder in ignored for folder in ("/.whl/", "/.whl_flower/", "/.data/", "/.data_test/"))


def test_gpu_command_parses_its_legs_and_fit_options():
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "flower_peer.py"), "gpu", "--help"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "--legs" in done.stdout and "--fit-args" in done.stdout

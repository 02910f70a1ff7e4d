"""`benchmarks/gpu_protocol.sh speed | step | peer` (issue 46 items 3-4) without a GPU: what a lent GPU will run is
checked here on the CPU at a tiny scale: the speed modes reach `fedclust fit` as declared, the step probe writes a row
per variant (and says why a variant cannot run), the peer writes a row per run. The measurement itself waits for a GPU
(docs/findings/engine.md)."""

import csv
import os
import subprocess
from pathlib import Path

import pytest
import yaml

from benchmarks import flower_peer
from benchmarks.__main__ import main

ROOT = Path(__file__).resolve().parents[2]
TINY = {"data.split": "test", "data.subsample": 600, "data.partition": "iid", "federation.min_summary_size": 5,
        "kmeans_backend": "auto", "federation.checkpoint_every": 1}


def _script(tmp_path: Path, *args: str, experiment: Path | None = None) -> str:
    env = {**os.environ, "FEDCLUST_GPU_RUNS": str(tmp_path / "runs"), "OUT": str(tmp_path / "out")}
    if experiment is not None:
        env["FEDCLUST_GPU_EXPERIMENT"] = str(experiment)
    done = subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu_protocol.sh"), *args], env=env,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "Traceback" not in done.stdout + done.stderr, done.stderr[-3000:]
    return done.stdout


def _rows(path: Path) -> list[dict]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


@pytest.mark.slow  # three `fedclust fit` processes on 600 images, each importing torch: ~1-2 minutes here
def test_each_speed_mode_reaches_fit_as_declared(tmp_path):
    """gpu_speed's first entry (the 3 + 1-round cut, every mode) at 2 clients on 600 test images, through the same
    script and runner a GPU call uses (`speed` is `run` of gpu_speed)."""
    spec = yaml.safe_load((ROOT / "benchmarks" / "experiments" / "gpu_speed.yaml").read_text())
    entry = spec["configs"][0]
    entry["grid"]["data.num_clients"] = [2]
    spec.update(configs=[entry], overrides=TINY)
    path = tmp_path / "experiments" / "speed.yaml"
    path.parent.mkdir()
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    _script(tmp_path, "run", "--budget", "600", experiment=path)
    _script(tmp_path, "report", experiment=path)
    rows = {r["mode"]: r for r in _rows(tmp_path / "out" / "speed.csv")}
    assert set(rows) == {"fp32", "sequential", "auto"} and all(r["state"] == "done" for r in rows.values())
    assert all(r["rounds"] == "4" and float(r["seconds"]) >= float(r["seconds_per_round"]) > 0 for r in rows.values())
    for mode, precision, together in [("fp32", "32-true", "off"), ("sequential", "auto", "off"),
                                      ("auto", "auto", "auto")]:
        config = yaml.safe_load((tmp_path / "runs" / "speed" / rows[mode]["run"] / "config.yaml").read_text())
        assert (config["fabric"]["precision"], config["federation"]["clients_together"]) == (precision, together)


@pytest.mark.slow  # one process importing torch and timing a few steps
def test_step_probe_writes_a_row_per_variant_and_why_one_cannot_run(tmp_path):
    _script(tmp_path, "step", "--budget", "300", "--device", "cpu", "--variants", "eager:fp32", "compile:fp32",
            "--steps", "2", "--warmup", "1")
    eager, compiled = _rows(tmp_path / "out" / "gpu_step.csv")
    assert eager["variant"] == "eager:fp32" and float(eager["seconds_per_step"]) > 0 and not eager["error"]
    assert compiled["variant"] == "compile:fp32" and compiled["error"] == "RuntimeError: skipped: needs CUDA"


def test_peer_writes_a_row_per_framework_and_run(tmp_path, monkeypatch):
    """The A B driver on its own (each side stubbed: Flower is an optional extra): rows in run order, the
    first round apart as the warm-up, the median of the others as the round's time."""
    calls = []

    def side(name):
        def run(n, rounds, *args, **kwargs):
            calls.append((name, n, rounds))
            return {"rounds": [9.0, 2.0, 4.0, 3.0], "nmi": 0.5, "rss": 100.0, "pss": 90.0, "gpu_mb": None,
                    "precision": "bf16-mixed", "wall": 20.0}
        return run

    monkeypatch.setattr(flower_peer, "run_flower", side("Flower"))
    monkeypatch.setattr(flower_peer, "run_fedclust", side("fedclust"))
    monkeypatch.setattr(flower_peer, "WORK", tmp_path / "work")
    assert main(["--results", str(tmp_path), "peer", "--clients", "2", "5", "--rounds", "4", "--threads", "1"]) == 0
    assert calls == [("Flower", 2, 4), ("fedclust", 2, 4), ("Flower", 5, 4), ("fedclust", 5, 4)]
    rows = _rows(tmp_path / "flower_peer.csv")
    assert [(r["framework"], r["clients"]) for r in rows] == [("Flower", "2"), ("fedclust", "2"), ("Flower", "5"),
                                                              ("fedclust", "5")]
    assert rows[0]["warmup_seconds"] == "9.00" and rows[0]["seconds_per_round"] == "3.000"
    assert rows[1]["setting"] == "1 threads, bf16-mixed" and rows[1]["peak_gpu_mb"] == ""


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

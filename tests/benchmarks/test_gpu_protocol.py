"""benchmarks/gpu_protocol.sh on the CPU with a tiny experiment (issue 14): a call cut off by its time budget
leaves no process behind and its run is resumed by the next call, a checkpointed run resumes, a done one is
skipped, and the report lists every run."""

import csv
import json
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _protocol(tmp_path: Path, experiment: Path, *args: str) -> str:
    env = {**os.environ, "FEDCLUST_GPU_RUNS": str(tmp_path / "runs"), "FEDCLUST_GPU_EXPERIMENT": str(experiment),
           "OUT": str(tmp_path / "out")}
    done = subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu_protocol.sh"), *args], env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Traceback" not in done.stderr, done.stderr[-2000:]  # a spent budget is news, not a crash
    return done.stdout


@pytest.mark.slow  # several processes, each importing torch: ~1-2 minutes here; CI runs -m slow
def test_calls_are_time_boxed_resumable_and_reported(tmp_path, write_experiment, tiny_spec):
    quick = {"label": "quick", "config": "quickstart", "overrides": {"federation.rounds": 3}}
    # 20,000 rounds outlast a 20 s budget on any machine; 20 s, not less: on a loaded 2-core machine a shorter budget
    # could end before the runner had imported what it needs, which is not what this test is about
    long = {"label": "long", "config": "quickstart", "overrides": {"federation.rounds": 20000}}
    experiment = write_experiment(tiny_spec(overrides={"federation.checkpoint_every": 1}, grid={"seed": [1]},
                                            configs=[long, quick], paper=[], plot={"x": "seed", "y": "nmi"}))
    first = _protocol(tmp_path, experiment, "run", "--budget", "20", "--only", "long")
    assert "budget of 20 s spent" in first and "long_seed=1" in first
    assert not (tmp_path / "runs" / "tiny" / "long_seed=1" / "final.json").exists()
    assert "quick_seed=1  done" not in first  # the call started nothing after its budget

    assert "quick_seed=1" in _protocol(tmp_path, experiment, "run", "--budget", "500", "--only", "quick")
    folder = tmp_path / "runs" / "tiny" / "quick_seed=1"
    final = json.loads((folder / "final.json").read_text())
    assert final["rounds"] == 3
    (folder / "final.json").unlink()  # as if cut off after its last checkpoint: the next call resumes it
    _protocol(tmp_path, experiment, "run", "--budget", "500", "--only", "quick")
    assert json.loads((folder / "final.json").read_text())["metrics"] == final["metrics"]
    assert not folder.with_name(folder.name + ".incomplete-1").exists()

    _protocol(tmp_path, experiment, "report")
    rows = {r["run"]: r["state"] for r in csv.DictReader((tmp_path / "out" / "tiny.csv").open())}
    assert rows["quick_seed=1"] == "done"
    assert rows["long_seed=1"] in ("pending", "checkpointed", "incomplete")  # not running: nothing was left behind


def test_prepared_data_folder_is_where_the_loader_looks(monkeypatch):
    """`prepare` copies Fashion-MNIST to the folder the run step names as FEDCLUST_DATA_ROOT; the loader reads a
    shared root only through one folder per set, so the copy must land in that set's folder (the first GPU
    call found nothing in .data/fashion-mnist)."""
    import re

    from fedclust.data import catalog

    script = (ROOT / "benchmarks" / "gpu_protocol.sh").read_text()
    copied_to = re.search(r"cp /usr/share/datasets/fashion-mnist/\*\.gz (\S+)/\n", script).group(1)
    root = re.search(r'export FEDCLUST_DATA_ROOT="\$PWD/([^"]+)"', script).group(1)
    monkeypatch.setenv("FEDCLUST_DATA_ROOT", str(ROOT / root))
    assert ROOT / copied_to in catalog.idx_folders("fmnist", None)


def test_report_on_the_device_keeps_the_rows_committed_here(tmp_path):
    """A device call's report starts from the committed CSV: the file it returns holds the runs this machine finished
    (archived rows) beside the device's, so copying it back loses none (uifca_variations has done rows committed)."""
    committed = {r["run"] for r in csv.DictReader((ROOT / "benchmarks" / "results" / "uifca_variations.csv").open())
                 if r["state"] == "done"}
    assert committed  # what this test stands on
    _protocol(tmp_path, Path("uifca_variations"), "report")
    returned = {r["run"]: r["state"] for r in csv.DictReader((tmp_path / "out" / "uifca_variations.csv").open())}
    assert all(returned[run] == "done" for run in committed)
    assert (ROOT / "benchmarks" / "results" / "uifca_variations.csv").read_text().count(",done,") == len(committed)

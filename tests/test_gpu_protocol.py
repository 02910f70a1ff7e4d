"""benchmarks/gpu_protocol.sh on the CPU with its tiny setting (issue 14): a part cut off by its time budget
leaves no process behind and is started or resumed by the next call, a checkpointed part resumes, a done
part is skipped, and the report lists every part."""

import json
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _protocol(runs: Path, *args: str) -> str:
    env = {**os.environ, "FEDCLUST_GPU_RUNS": str(runs), "OUT": str(runs / "out")}
    done = subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu_protocol.sh"), *args], env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


@pytest.mark.slow  # several processes, each importing torch: 35-100 s here; CI runs -m slow
def test_parts_are_time_boxed_resumable_and_reported(tmp_path):
    runs = tmp_path / "runs"
    # cut off by its budget: 2,000 tiny rounds outlast 8 s on any machine (3 rounds finished within 6 s once)
    long = tmp_path / "long"
    first = _protocol(long, "run", "ccfc_p0", "--tiny", "--tiny_rounds", "2000", "--budget", "8")
    assert first.strip() in ("ccfc_p0: not started", "ccfc_p0: checkpointed")
    assert not (long / "ccfc_p0" / "final.json").exists()
    assert _protocol(runs, "run", "ccfc_p0", "--tiny", "--budget", "500").strip() == "ccfc_p0: done"
    folder = runs / "ccfc_p0"
    final = json.loads((folder / "final.json").read_text())
    assert final["rounds"] == 3

    (folder / "final.json").unlink()  # as if cut off after its last checkpoint: the next call resumes it
    assert _protocol(runs, "run", "ccfc_p0", "--tiny", "--budget", "500").strip() == "ccfc_p0: done"
    assert json.loads((folder / "final.json").read_text())["metrics"] == final["metrics"]
    assert _protocol(runs, "run", "ccfc_p0", "--tiny", "--budget", "500").strip() == "ccfc_p0: done"  # skipped

    _protocol(runs, "report")
    report = (runs / "out" / "gpu_protocol.md").read_text()
    assert "| ccfc_p0 | done | 3 |" in report and "| fedmcc_noniid | not started |" in report

"""Helpers shared by the benchmark scripts: run a config with overrides, describe the machine."""

from __future__ import annotations

import csv
import json
import os
import platform
import shutil
import subprocess
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
RUNS = ROOT / "benchmarks" / "runs"  # run folders (git-ignored); results go to benchmarks/results
RESULTS = ROOT / "benchmarks" / "results"


def run_config(config: str, name: str, overrides: list[str], fresh: bool = False,
               env: dict[str, str] | None = None) -> dict:
    """Run `fedclust fit` once (skipped when its final.json exists, unless ``fresh``) and return final.json +
    wall time; ``env`` adds environment variables (e.g. OMP_NUM_THREADS)."""
    folder = RUNS / name
    final = folder / "final.json"
    if final.exists() and not fresh:
        return json.loads(final.read_text())
    if folder.exists():
        shutil.rmtree(folder)
    start = time.perf_counter()
    subprocess.run(["fedclust", "fit", "--config", str(ROOT / config), "--run_dir", str(folder),
                    "--progress", "false", *overrides], check=True, cwd=ROOT,
                   env={**os.environ, **(env or {})})
    result = json.loads(final.read_text())
    result["wall_seconds"] = time.perf_counter() - start
    final.write_text(json.dumps(result, indent=2))
    return result


def csv_rows(path: Path) -> list[dict[str, str]]:
    """The rows of a CSV file with a header (metrics.csv of a run folder, ...); [] when it does not exist."""
    if not path.exists():
        return []
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def machine() -> str:
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
    return (f"{platform.node()} | {platform.processor() or platform.machine()} | {os.cpu_count()} cores | {gpu} | "
            f"torch {torch.__version__} | {time.strftime('%Y-%m-%d %H:%M %Z')}")

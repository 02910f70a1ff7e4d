"""What the runner and the remaining scripts share: where things live, the machine, the commit."""

from __future__ import annotations

import csv
import math
import os
import platform
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXPERIMENTS = ROOT / "benchmarks" / "experiments"
RUNS = ROOT / "benchmarks" / "runs"  # run folders (git-ignored)
RESULTS = ROOT / "benchmarks" / "results"


def machine(date: bool = True) -> str:
    """Host, CPU, cores, GPU, torch (and the time): the line every results file starts with."""
    import torch

    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
    return (f"{platform.node()} | {platform.processor() or platform.machine()} | {os.cpu_count()} cores | {gpu} | "
            f"torch {torch.__version__}" + (f" | {now()}" if date else ""))


def now() -> str:
    return time.strftime("%Y-%m-%d %H:%M %Z")


def git_commit() -> str:
    """HEAD of this checkout, with "-dirty" when the code a run executes (fedclust/, callbacks/, configs/)
    differs from it; BENCHMARKS_COMMIT when set (a copy of the tree without .git: the GPU protocol's);
    "unknown" outside a git checkout."""
    if os.environ.get("BENCHMARKS_COMMIT"):
        return os.environ["BENCHMARKS_COMMIT"]

    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
        return done.stdout.strip() if done.returncode == 0 else ""

    head = git("rev-parse", "--short=12", "HEAD")
    if not head:
        return "unknown"
    return head + ("-dirty" if git("status", "--porcelain", "--", "fedclust", "callbacks", "configs") else "")


def append_row(path: Path, columns: list[str], row: dict) -> None:
    """One row added to a CSV (its header first if the file is new), and printed: rows that survive a cut-off call."""
    new = not path.exists()
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", newline="") as f:
        writer = csv.DictWriter(f, columns, extrasaction="ignore")
        if new:
            writer.writeheader()
        writer.writerow(row)
    print(",".join(str(row.get(c, "")) for c in columns), flush=True)


def as_number(text: object) -> float | None:
    """A finite float, or None (the CSVs and run folders read here are untrusted)."""
    try:
        value = float(text)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None

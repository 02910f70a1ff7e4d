"""The papers' full protocols on a lent GPU, in parts that each end inside one 10-minute device call.

Driven by benchmarks/gpu_protocol.sh (which sets up the device machine: carried wheels, the carried
Fashion-MNIST files). Every part is an ordinary `fedclust fit` in RUNS/<part>; a call gives the parts it
is asked for a shared time budget, interrupts the running one with SIGINT when the budget is spent (the
run keeps its last checkpoint, written every round) and resumes it on the next call while the machine
is still warm. `report` writes one results file from whatever the run folders hold.

    python benchmarks/gpu_protocol.py plan                         # the parts, in order
    python benchmarks/gpu_protocol.py run ccfc_p0 ccfc_p0.25 --budget 540
    python benchmarks/gpu_protocol.py report --out benchmarks/results/gpu_protocol.md
    python benchmarks/gpu_protocol.py run ccfc_p0 --tiny --budget 20   # the same logic on the CPU in seconds

Parts: CCFC on all 70,000 Fashion-MNIST images at the five p of its Table 1 (100 + 30 rounds, 10
clients), then the other methods' Fashion-MNIST schedules on the 10,000-image test split: FedCC and FedPNP
(100 rounds x 5 local epochs, IID and Dirichlet 0.1), FedMCC (100 + 10 rounds x 5 epochs), Fed+CC and
FedU + K-means (100 rounds x 5 epochs), IID and non-IID. k-means runs on the torch backend there (the
device image has no FAISS).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TEST = ["--data.split", "test"]
IID = ["--data.partition", "iid"]
DIR01 = ["--data.partition", "dirichlet", "--data.alpha", "0.1"]
NONIID = ["--data.partition", "pathological", "--data.num_classes_per_partition", "2",
          "--data.class_assignment_mode", "disjoint"]
E5 = ["--method.init_args.local_epochs", "5"]

PARTS: dict[str, tuple[str, list[str]]] = {
    **{f"ccfc_p{p}": ("ccfc_fmnist", ["--data.p", p]) for p in ("0", "0.25", "0.5", "0.75", "1")},
    **{f"{m}_{s}": (f"{m}_fmnist", [*TEST, *split, "--method.init_args.rounds", "100", *E5])
       for m in ("fedcc", "fedpnp") for s, split in (("iid", IID), ("dir01", DIR01))},
    **{f"fedmcc_{s}": ("fedmcc_fmnist", [*TEST, *split, "--method.init_args.representation_rounds", "100",
                                         "--method.init_args.cluster_rounds", "10", *E5,
                                         "--method.init_args.cluster_local_epochs", "5"])
       for s, split in (("iid", IID), ("noniid", NONIID))},
    **{f"{m}_{s}_fedmcc_split": (f"{m}_fmnist", [*TEST, *split, "--method.init_args.rounds", "100", *E5])
       for m in ("fedcc", "fedu_kmeans") for s, split in (("iid", IID), ("noniid", NONIID))},
}
TINY = ["--data.name", "digits", "--data.num_clients", "10", "--method.init_args.backbone", "mlp",
        "--method.init_args.batch_size", "32"]
# fp32: the papers' arithmetic (precision: auto would train CCFC's ConvNet28 in bf16 on an H100)
COMMON = ["--federation.checkpoint_every", "1", "--progress", "false", "--kmeans_backend", "auto",
          "--fabric.precision", "32-true"]


def folder(runs: Path, part: str) -> Path:
    return runs / part


def state(runs: Path, part: str) -> str:
    f = folder(runs, part)
    if (f / "final.json").exists():
        return "done"
    if (f / "checkpoints" / "last.ckpt").exists():
        return "checkpointed"
    return "not started"


def run_part(runs: Path, part: str, seconds: float, tiny: bool, tiny_rounds: int = 3) -> str:
    """Start or resume one part for at most `seconds`; returns its state afterwards."""
    f = folder(runs, part)
    if state(runs, part) == "done":
        return "done"
    if state(runs, part) == "checkpointed":
        cmd = ["--resume", str(f), "--progress", "false"]
    else:
        if f.exists():  # died before its first checkpoint: start again
            f.rename(f.with_name(f"{f.name}.incomplete-{time.time_ns()}"))
        config, overrides = PARTS[part]
        small = [*TINY, "--federation.rounds", str(tiny_rounds)] if tiny else []
        cmd = ["--config", config, *overrides, *small, *COMMON, "--run_dir", str(f)]
    log = runs / f"{part}.log"
    with log.open("a") as out:
        proc = subprocess.Popen([sys.executable, "-m", "fedclust", "fit", *cmd], cwd=ROOT, stdout=out,
                                stderr=subprocess.STDOUT)
        try:
            proc.wait(timeout=max(1.0, seconds))
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGINT)  # fedclust stops, keeping its last checkpoint
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    return state(runs, part)


def report(runs: Path, out: Path) -> None:
    import platform

    import torch

    device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "CPU only"
    stamp = time.strftime("%Y-%m-%d %H:%M %Z")
    lines = ["# Full protocols on a lent GPU", "",
             f"Machine: {platform.node()} | {device} | torch {torch.__version__} | {stamp}", "",
             "Command: `bash benchmarks/gpu_protocol.sh run PART ...` per device call, then `report`. CCFC on all "
             "70,000 Fashion-MNIST images (train + test, as the paper); the other methods on the 10,000-image test "
             "split. k-means: torch backend.", "",
             "| part | state | rounds logged | NMI | ACC | ARI | Kappa | median s per round |",
             "|---|---|---|---|---|---|---|---|"]
    curves = []
    for part in PARTS:
        f = folder(runs, part)
        rows = list(csv.DictReader((f / "metrics.csv").open())) if (f / "metrics.csv").exists() else []
        scored = [r for r in rows if r.get("nmi") not in ("", None)]
        last = json.loads((f / "final.json").read_text())["metrics"] if (f / "final.json").exists() else (
            scored[-1] if scored else {})
        secs = sorted(float(r["seconds"]) for r in rows) if rows else []
        cells = [f"{float(last[m]):.4f}" if last.get(m) not in (None, "") else ""
                 for m in ("nmi", "acc", "ari", "kappa")]
        median = f"{secs[len(secs) // 2]:.1f}" if secs else ""
        lines.append(f"| {part} | {state(runs, part)} | {len(rows)} | {' | '.join(cells)} | {median} |")
        if scored:
            curves.append(f"- {part}: " + ", ".join(f"{r['round']}: {float(r['nmi']):.3f}" for r in scored))
    lines += ["", "## NMI per scored round", "", *curves, ""]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines))
    print(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("command", choices=["plan", "run", "report"])
    parser.add_argument("parts", nargs="*")
    parser.add_argument("--runs", type=Path, default=Path(os.environ.get("FEDCLUST_GPU_RUNS", "/tmp/fedclust_gpu")))
    parser.add_argument("--budget", type=float, default=540.0, help="seconds for this call, all parts together")
    parser.add_argument("--tiny", action="store_true", help="8x8 digits, MLP, 3 rounds: the logic on a CPU")
    parser.add_argument("--tiny_rounds", type=int, default=3, help="rounds of the tiny setting (tests: a long one "
                        "that a budget surely cuts off)")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "gpu_protocol.md")
    opts = parser.parse_args()
    unknown = [p for p in opts.parts if p not in PARTS]
    if unknown:
        sys.exit(f"unknown part(s) {', '.join(unknown)}; parts: {', '.join(PARTS)}")
    opts.runs.mkdir(parents=True, exist_ok=True)
    if opts.command == "plan":
        for part in PARTS:
            print(f"{part:28s} {state(opts.runs, part)}")
    elif opts.command == "run":
        deadline = time.monotonic() + opts.budget
        for part in opts.parts or list(PARTS):
            left = deadline - time.monotonic()
            if left < 5:
                break
            print(f"{part}: {run_part(opts.runs, part, left, opts.tiny, opts.tiny_rounds)}", flush=True)
    else:
        report(opts.runs, opts.out)


if __name__ == "__main__":
    main()

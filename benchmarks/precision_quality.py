"""Does bf16 + channels-last keep the clustering quality of fp32? Three seeds each (issue 13, point 2).

    nice -n 10 python benchmarks/precision_quality.py run --threads 1     # start or go on (skips finished runs)
    python benchmarks/precision_quality.py report                         # benchmarks/results/precision_quality.md

Workloads (each an ordinary `fedclust fit`, data and method settings from the config, schedule shortened):
- ccfc_fmnist_test: configs/ccfc_fmnist.yaml (ConvNet28, latent 64, lambda 1, batch 128, 10 clients) on the
  Fashion-MNIST test split (10,000 images), p = 0, 5 SimSiam rounds + 2 cluster-contrastive rounds;
- quickstart: configs/quickstart.yaml (CCFC with the MLP trunk on the 8x8 digits), its whole 15 + 5 rounds.
Settings: fp32 (`--fabric.precision 32-true`) and bf16 autocast + channels-last (`--fabric.precision bf16-mixed
--fabric.memory_format channels_last`), for seeds 66, 1, 2, run in the order seed by seed, fp32 then bf16, so a
slow phase of a shared machine hits both. Seconds per round are the engine's own clock (metrics.csv
train_seconds: local training + local k-means). The verdict: bf16 keeps the quality when the difference of the
two means is within the larger of the two seed standard deviations (seed noise).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
from pathlib import Path

from common import RESULTS, ROOT, RUNS, machine

OUT = RUNS / "precision"
SEEDS = (66, 1, 2)
SETTINGS = {"fp32": ["--fabric.precision", "32-true"],
            "bf16+channels_last": ["--fabric.precision", "bf16-mixed", "--fabric.memory_format", "channels_last"]}
WORKLOADS = {
    "ccfc_fmnist_test": ["--config", str(ROOT / "configs/ccfc_fmnist.yaml"), "--data.split", "test", "--data.p", "0.0",
                         "--method.init_args.pretrain_rounds", "5", "--method.init_args.cluster_rounds", "2"],
    "quickstart": ["--config", "quickstart"],
}


def folder(workload: str, setting: str, seed: int) -> Path:
    return OUT / f"{workload}_{setting.replace('+', '_')}_seed{seed}"


def run(workloads: list[str], threads: int) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    for workload in workloads:
        for seed in SEEDS:
            for setting, flags in SETTINGS.items():
                where = folder(workload, setting, seed)
                if (where / "final.json").exists():
                    continue
                resume = ["--resume", str(where)] if (where / "checkpoints").exists() else ["--run_dir", str(where)]
                command = ["fedclust", "fit", *WORKLOADS[workload], *flags, "--seed", str(seed), "--progress", "false",
                           "--federation.checkpoint_every", "1", *resume]
                print(" ".join(command), flush=True)
                subprocess.run(command, check=True, env=env, cwd=ROOT)


def rows(where: Path) -> list[dict]:
    path = where / "metrics.csv"
    return list(csv.DictReader(path.open())) if path.exists() else []


def report() -> None:
    lines = ["# bf16 + channels-last against fp32: clustering quality over three seeds, and round seconds", "",
             f"Machine: {machine()}", "",
             "Command: `nice -n 10 python benchmarks/precision_quality.py run --threads 1` then `... report`. "
             "Each workload and setting is described in the script's docstring; NMI/ACC are the final metrics "
             "(final.json). Seconds: median over rounds of metrics.csv train_seconds (training + local k-means), "
             "one thread per run, on a machine shared with other jobs (so seconds are noisy; the same machine "
             "for both settings, interleaved).", ""]
    for workload in WORKLOADS:
        lines += [f"## {workload}", "", "| setting | seed | NMI | ACC | median train s per round |",
                  "|---|---|---|---|---|"]
        summary = {}
        for setting in SETTINGS:
            nmis, accs, secs = [], [], []
            for seed in SEEDS:
                where = folder(workload, setting, seed)
                if not (where / "final.json").exists():
                    lines.append(f"| {setting} | {seed} | not finished | | |")
                    continue
                final = json.loads((where / "final.json").read_text())["metrics"]
                train = statistics.median(float(r["train_seconds"]) for r in rows(where) if r.get("train_seconds"))
                nmis.append(final["nmi"]), accs.append(final["acc"]), secs.append(train)
                lines.append(f"| {setting} | {seed} | {final['nmi']:.4f} | {final['acc']:.4f} | {train:.1f} |")
            if len(nmis) == len(SEEDS):
                summary[setting] = (statistics.mean(nmis), statistics.stdev(nmis), statistics.mean(accs),
                                    statistics.stdev(accs), secs)
        lines.append("")
        if len(summary) == len(SETTINGS):
            (m32, s32, a32, sa32, t32), (m16, s16, a16, sa16, t16) = summary.values()
            # the two settings of one seed ran back to back, so their ratio is the least disturbed by the load
            pairs = [a / b for a, b in zip(t32, t16)]
            keeps = abs(m16 - m32) <= max(s32, s16) and abs(a16 - a32) <= max(sa32, sa16)
            lines += [f"fp32: NMI {m32:.4f} +- {s32:.4f}, ACC {a32:.4f} +- {sa32:.4f}; bf16 + channels-last: NMI "
                      f"{m16:.4f} +- {s16:.4f}, ACC {a16:.4f} +- {sa16:.4f} (mean +- sd over seeds {SEEDS}). "
                      f"Difference of means: NMI {m16 - m32:+.4f}, ACC {a16 - a32:+.4f}: "
                      f"**{'within' if keeps else 'outside'} seed noise**. Training seconds per round, fp32 / bf16 "
                      f"for each seed (its two runs back to back): {', '.join(f'{r:.2f}x' for r in pairs)}; median "
                      f"**{statistics.median(pairs):.2f}x** (the load changed between seeds, so only pairs compare).",
                      ""]
    out = RESULTS / "precision_quality.md"
    out.write_text("\n".join(lines))
    print(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("command", choices=["run", "report"])
    parser.add_argument("--workloads", nargs="+", default=list(WORKLOADS), choices=list(WORKLOADS))
    parser.add_argument("--threads", type=int, default=1)
    opts = parser.parse_args()
    if opts.command == "run":
        run(opts.workloads, opts.threads)
    else:
        report()


if __name__ == "__main__":
    main()

"""Peak process memory of FedSpectral against CCFC, round by round, with and without glibc keeping freed heap
(issue 22, item 6: "memory per client stays within CCFC's").

Runs short `fedclust fit` runs on the Fashion-MNIST test split (10 clients, p = 0, seed 0, one thread, no evaluation
or checkpoint until the end) as subprocesses, two at a time (memory is per process, so they do not disturb each
other's figures), and prints each run's `peak_memory_mb` (the process's maximum resident set after each round's
training, metrics.csv). "glibc returns memory" sets MALLOC_MMAP_THRESHOLD_ and MALLOC_TRIM_THRESHOLD_ to 128 KiB, so
large blocks are mapped and unmapped and the resident set follows live memory rather than what the heap kept. It
then measures, in fresh processes, how much the server's spectral clustering of 1,000 summaries raises the maximum
resident set alone and after a freed 300 MB peak (as in a run, where training peaks first), and counts each model's
parameters: every client keeps its Adam state (two numbers a parameter) between rounds, so a larger model costs
memory per client (the runs with the smaller projectors tried, pooled and pooled2x2, measure how much).

Usage: python -m benchmarks.memory_peaks [--out DIR] [--parameters]     Results: benchmarks/results/memory_peaks.md
(`--parameters`: only the parameter counts and each client's MB of model state, in seconds.)
"""

from __future__ import annotations

import argparse
import csv
import os
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from .common import machine

COMMON = {"data.split": "test", "data.p": 0, "seed": 0, "federation.eval_every": 100,
          "federation.checkpoint_every": 100, "progress": "false"}
RUNS = {  # label -> (packaged config, overrides)
    "CCFC (2 SimSiam + 2 cluster rounds)": ("ccfc_fmnist", {"method.init_args.pretrain_rounds": 2,
                                                            "method.init_args.cluster_rounds": 2}),
    # the shipped FedSpectral: its projector sees the trunk's 2,304 flat features through a rank-128 first layer
    # (2,304 x 128, then 128 x 512; fedspectral_recluster.md, fifteenth pass)
    "FedSpectral (3 rounds)": ("fedspectral_fmnist", {"method.init_args.rounds": 3}),
    # the full first layer (2,304 x 512, shipped until c8d1885) and the smaller projectors tried for this clause
    # (fedspectral_recluster.md, ninth and tenth passes): each of the 256 channels' mean, and each channel's means
    # over a 2 x 2 grid
    "FedSpectral (3 rounds), full flat first layer": ("fedspectral_fmnist", {
        "method.init_args.rounds": 3, "method.init_args.projector_rank": "null"}),
    "FedSpectral (3 rounds), projector_input pooled": ("fedspectral_fmnist", {
        "method.init_args.rounds": 3, "method.init_args.projector_input": "pooled",
        "method.init_args.projector_rank": "null"}),
    "FedSpectral (3 rounds), projector_input pooled2x2": ("fedspectral_fmnist", {
        "method.init_args.rounds": 3, "method.init_args.projector_input": "pooled2x2",
        "method.init_args.projector_rank": "null"}),
}
RETURN_MEMORY = {"MALLOC_MMAP_THRESHOLD_": "131072", "MALLOC_TRIM_THRESHOLD_": "131072"}

SPECTRAL = """
import resource, sys, torch
from fedclust.clustering.spectral import spectral_clustering
torch.set_num_threads(1)
rss = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
x, w = torch.randn(1000, 3088, generator=torch.Generator().manual_seed(0)), torch.full((1000,), 10.0)
if sys.argv[1] == "after-peak":
    peak = torch.ones(75_000_000); del peak   # 300 MB, freed
before = rss()
spectral_clustering(x, 10, neighbors=5, weights=w, kernel="self_tuning")
print(f"{before:.0f} {rss():.0f}")
"""


def peaks(config: str, overrides: dict, env: dict[str, str], folder: Path) -> list[float]:
    flags = [f"--{key}={value}" for key, value in {**overrides, **COMMON}.items()]
    cmd = [sys.executable, "-m", "fedclust", "fit", "--config", config, *flags, "--run_dir", str(folder)]
    subprocess.run(cmd, env={**os.environ, "OMP_NUM_THREADS": "1", **env}, check=True, capture_output=True)
    with open(folder / "metrics.csv") as f:
        return [float(r["peak_memory_mb"]) for r in csv.DictReader(f)]


def parameter_counts() -> dict[str, int]:
    """Parameters of each run's model (its config and overrides resolved as `fedclust fit` does), built for 28 x 28
    grey images."""
    from fedclust.api import resolve
    from fedclust.data.info import DataInfo
    info = DataInfo(num_classes=10, in_channels=1, input_size=28, num_features=784, is_image=True,
                    min_client_size=1000)
    counts = {}
    for label, (config, overrides) in RUNS.items():
        method = resolve(config, overrides, {}).init["method"]
        method.build(info)
        counts[label] = sum(p.numel() for p in method.parameters())
    return counts


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, help="where the runs go (default: a temporary folder, removed)")
    ap.add_argument("--parameters", action="store_true", help="only the parameter counts and state per client")
    args = ap.parse_args(argv)
    if args.parameters:
        return print_parameters()
    jobs = [(f"{name}{', glibc returns memory' if env else ''}", run, env)
            for name, run in RUNS.items() for env in ({}, RETURN_MEMORY)]
    with tempfile.TemporaryDirectory() as tmp:
        out = args.out or Path(tmp)
        out.mkdir(parents=True, exist_ok=True)
        with ThreadPoolExecutor(2) as pool:
            results = list(pool.map(lambda i: peaks(*jobs[i][1], jobs[i][2], out / str(i)), range(len(jobs))))
    print(f"{machine()} | Fashion-MNIST test split, 10 clients, p = 0, seed 0, one thread\n")
    print("| run | peak after each round (MB) |\n|---|---|")
    for (label, _, _), values in zip(jobs, results):
        print(f"| {label} | {' / '.join(f'{v:,.0f}' for v in values)} |")
    print("\nServer spectral clustering of 1,000 summaries (3,088 dimensions), max resident set before -> after (MB):")
    for mode in ("fresh", "after-peak"):
        done = subprocess.run([sys.executable, "-c", SPECTRAL, mode], capture_output=True, text=True, check=True)
        before, after = done.stdout.split()
        print(f"- {mode}: {before} -> {after}")
    print_parameters()


def print_parameters() -> None:
    """Each run's parameters and a client's model state while it trains: the weights, their gradients and Adam's
    two moments, four float32 numbers (16 bytes) a parameter."""
    print("\nParameters (each client keeps two Adam numbers a parameter between rounds); model, gradients and Adam "
          "state a client (16 bytes a parameter):")
    for name, count in parameter_counts().items():
        print(f"- {name}: {count:,} parameters, {16 * count / 1e6:.1f} MB")


if __name__ == "__main__":
    main()

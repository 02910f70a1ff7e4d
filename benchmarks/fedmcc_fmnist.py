"""FedMCC vs Fed+CC (FedCC) vs FedU + K-means on Fashion-MNIST, IID and FedMCC's non-IID class split.

    OMP_NUM_THREADS=1 python benchmarks/fedmcc_fmnist.py --rounds 2 --cluster_rounds 1   # the CPU budget used
    python benchmarks/fedmcc_fmnist.py --rounds 100 --cluster_rounds 10 --epochs 5     # the paper's schedule (GPU)

FedMCC's Tables I-II compare these three (plus FedU + MCC) on CIFAR / STL / ImageNet-10 / MNIST; the paper
has no Fashion-MNIST cell. Every method: 5 clients, the test split (10,000 images), ConvNet28 backbone,
batch 128, crop scale 0.2-1, `--epochs` local epochs, evaluation after the last round only, each round with
a fresh optimizer (federation.optimizer_state reset, for all three). FedMCC trains its encoder for
`--rounds` rounds (Algorithm 1) and its cluster projector for `--cluster_rounds` more (Algorithm 2), as the
paper gives FedMCC and FedU 10 extra cluster rounds over Fed+CC's 100. Settings per method:
configs/fedmcc_fmnist.yaml, configs/fedcc_fmnist.yaml (the FedPNP helper's; Adam 3e-4), and
configs/fedu_kmeans_fmnist.yaml. Non-IID = pathological partition, disjoint mode, 2 classes per client
(FedMCC Section IV-A: each client holds all the samples of C/K classes).
"seconds per round" are the engine's per-round timings (client training + server step, no evaluation);
wall time includes start-up, data loading and the final scoring. Timings are only as quiet as the machine.
"k-means on f*" re-loads each run's saved global model and scores K-means (FAISS, 5 restarts, seed 0) on
its backbone representations f*(x) of all 10,000 images: the same probe for the three methods, so it tells
the encoder's quality apart from the clustering head's (FedU + K-means' own score is this probe).
Writes benchmarks/results/fedmcc_fmnist_<tag>.md and benchmarks/results/fedmcc_fmnist.md (every tag's table).
"""

from __future__ import annotations

import argparse
import csv
import time

import torch
from common import RESULTS, RUNS, machine, run_config

from fedclust.clustering.kmeans import kmeans
from fedclust.clustering.metrics import cluster_metrics
from fedclust.fit import load_run

NONIID = ["--data.partition", "pathological", "--data.num_classes_per_partition", "2",
          "--data.class_assignment_mode", "disjoint"]


def methods(rounds: int, cluster_rounds: int, epochs: int, cluster_epochs: int) -> list[tuple[str, str, list[str]]]:
    common = ["--federation.eval_every", "1000", "--federation.optimizer_state", "reset"]
    return [
        ("FedMCC", "configs/fedmcc_fmnist.yaml",
         ["--method.init_args.representation_rounds", str(rounds), "--method.init_args.cluster_rounds",
          str(cluster_rounds), "--method.init_args.local_epochs", str(epochs),
          "--method.init_args.cluster_local_epochs", str(cluster_epochs), *common]),
        ("Fed+CC", "configs/fedcc_fmnist.yaml",
         ["--method.init_args.rounds", str(rounds), "--method.init_args.local_epochs", str(epochs), *common]),
        ("FedU+K-means", "configs/fedu_kmeans_fmnist.yaml",
         ["--method.init_args.rounds", str(rounds), "--method.init_args.local_epochs", str(epochs), *common]),
    ]


@torch.no_grad()
def encoder_kmeans_nmi(folder) -> float:
    """NMI of K-means on the saved global backbone's representations of the run's images."""
    run = load_run(folder, torch.device("cpu"))
    run.method.eval()
    z = torch.cat([run.method.embed(x) for x in run.data.iter_all()])
    labels = kmeans(z, run.data.info.num_classes, niter=100, nredo=5, seed=0).labels
    return cluster_metrics(labels.cpu(), run.data.labels.cpu())["nmi"]


def write_index() -> None:
    parts = sorted(p for p in RESULTS.glob("fedmcc_fmnist_*.md"))
    (RESULTS / "fedmcc_fmnist.md").write_text("\n".join(p.read_text() for p in parts))


def main() -> None:
    args = argparse.ArgumentParser()
    args.add_argument("--rounds", type=int, default=2)
    args.add_argument("--cluster_rounds", type=int, default=1)
    args.add_argument("--epochs", type=int, default=1)
    args.add_argument("--cluster_epochs", type=int, default=None, help="FedMCC's stage-2 epochs (default: --epochs)")
    args.add_argument("--settings", nargs="+", default=["iid", "noniid"])
    args.add_argument("--note", default="", help="conditions of the run (what else shared the machine)")
    opts = args.parse_args()
    cluster_epochs = opts.epochs if opts.cluster_epochs is None else opts.cluster_epochs
    base = f"r{opts.rounds}c{opts.cluster_rounds}e{opts.epochs}"  # Fed+CC and FedU runs are shared across ce
    tag = base + (f"ce{cluster_epochs}" if cluster_epochs != opts.epochs else "")
    start = time.perf_counter()
    lines = [f"## FedMCC vs Fed+CC vs FedU + K-means on Fashion-MNIST ({tag})", "", f"Machine: {machine()}", "",
             f"Command: `python benchmarks/fedmcc_fmnist.py --rounds {opts.rounds} --cluster_rounds "
             f"{opts.cluster_rounds} --epochs {opts.epochs} --cluster_epochs {cluster_epochs} "
             f"--settings {' '.join(opts.settings)}`", "",
             "| setting | method | rounds | NMI | ACC | ARI | k-means on f* NMI | s per round | wall s |",
             "|---|---|---|---|---|---|---|---|---|"]
    for setting in opts.settings:
        for label, config, overrides in methods(opts.rounds, opts.cluster_rounds, opts.epochs, cluster_epochs):
            name = f"fedmcc_fmnist_{label.replace('+', '_').lower()}_{setting}_{tag if label == 'FedMCC' else base}"
            result = run_config(config, name, overrides + (NONIID if setting == "noniid" else []))
            with open(RUNS / name / "metrics.csv", newline="") as f:
                rows = list(csv.DictReader(f))
            each = ", ".join(f"{float(r['seconds']) - float(r.get('eval_seconds') or 0):.0f}" for r in rows)
            m = result["metrics"]
            lines.append(f"| {setting} | {label} | {len(rows)} | {m['nmi']:.4f} | {m['acc']:.4f} | {m['ari']:.4f} | "
                         f"{encoder_kmeans_nmi(RUNS / name):.4f} | {each} | "
                         f"{result.get('wall_seconds', float('nan')):.0f} |")
            note = ["", f"Conditions: {opts.note}"] if opts.note else []
            total = ["", f"Script wall time so far: {time.perf_counter() - start:.0f} s"]
            (RESULTS / f"fedmcc_fmnist_{tag}.md").write_text("\n".join(lines + total + note) + "\n")
            write_index()
            print(lines[-1], flush=True)


if __name__ == "__main__":
    main()

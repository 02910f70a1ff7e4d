"""Speed and scale of the engine on Fashion-MNIST, measured side by side in one run (issue 5).

    python benchmarks/scale_fmnist.py                       # the CPU budget used (see the results file)
    python benchmarks/scale_fmnist.py --split all           # all 70,000 images (GPU)

1. Seconds per CCFC stage-1 round, 10 clients (p = 0): `fedclust fit` against the plain reference loop of
   benchmarks/reference_loop.py (deepcopy per client, DataLoader with per-sample PIL augmentation, a fresh
   scikit-learn k-means per client and on the server every round), same networks, same data.
2. 10 -> 100 -> 1,000 clients over the same data: seconds per round and the process's peak memory. CCFC's
   stage 1 keeps no per-client state once the optimizer state is reset per round
   (`federation.optimizer_state reset`); with CCFC's default `persist` each client keeps its Adam moments,
   which grows by design (measured too, at 10 and 100 clients).
3. 1 vs 2 processes (Fabric DDP over gloo on the CPU, one thread per process in both): seconds per round and
   whether the final metrics and global model are identical.

Seconds per round exclude scoring (the engine's `seconds` column). Peak memory is the max resident set
size of the run's process (of rank 0 under DDP). Writes benchmarks/results/scale_fmnist_SPLIT.md (all three
sections) or --output. `--sections 2 --modes reset --threads 1` gives the client-scaling table alone, at one
thread per process (comparable on a shared machine).
"""

from __future__ import annotations

import argparse
import csv
import statistics
from pathlib import Path

import torch
from common import RESULTS, RUNS, machine, run_config

CONFIG = "configs/ccfc_fmnist.yaml"


def fit(name: str, overrides: list[str], env: dict[str, str] | None = None) -> tuple[list[dict], dict, float]:
    """A fresh `fedclust fit` run of CCFC; returns metrics.csv rows, final.json and the wall time."""
    final = run_config(CONFIG, name, overrides, fresh=True, env=env)
    with open(RUNS / name / "metrics.csv", newline="") as f:
        return list(csv.DictReader(f)), final, final["wall_seconds"]


def stage1_seconds(rows: list[dict]) -> list[float]:
    return [float(r["seconds"]) for r in rows if r["stage"] == "0"]


def reference_seconds(split: str, rounds: int) -> list[float]:
    """The reference loop on the same CCFC networks and the same 10-client partition."""
    from reference_loop import reference_round

    from fedclust.data.config import DataConfig, build_federated_data
    from fedclust.methods import CCFC

    torch.manual_seed(66)
    data = build_federated_data(DataConfig(name="fmnist", split=split, num_clients=10, partition="pshift", p=0.0),
                                torch.device("cpu"), 66)
    images = (data.x.squeeze(1) * 255 if data.x.is_floating_point() else data.x.squeeze(1)).to(torch.uint8).numpy()
    method = CCFC(backbone="convnet28", latent_dim=64, lam=1.0)
    method.build(data.info)
    per_client = [images[part.cpu().numpy()] for part in data.parts]
    return [reference_round(method, per_client) for _ in range(rounds)]


def main() -> None:
    args = argparse.ArgumentParser()
    args.add_argument("--split", default="test", help="fmnist split: test (10,000 images) or all (70,000)")
    args.add_argument("--rounds", type=int, default=2, help="stage-1 rounds timed per setting")
    args.add_argument("--reference-rounds", type=int, default=1, help="rounds of the (slow) reference loop")
    args.add_argument("--clients", type=int, nargs="+", default=[10, 100, 1000])
    args.add_argument("--note", default="", help="conditions of the run (what else shared the machine)")
    args.add_argument("--sections", type=int, nargs="+", default=[1, 2, 3], choices=[1, 2, 3],
                      help="which of the three measurements to run")
    args.add_argument("--modes", nargs="+", default=["reset", "persist"], choices=["reset", "persist"],
                      help="optimizer-state modes of section 2")
    args.add_argument("--threads", type=int, default=None,
                      help="OMP_NUM_THREADS of every run of sections 1-2 (section 3 always uses 1); default: torch's")
    args.add_argument("--output", default=None, help="results file (default: results/scale_fmnist_SPLIT.md)")
    opts = args.parse_args()
    env = {"OMP_NUM_THREADS": str(opts.threads)} if opts.threads else None
    if opts.threads:
        torch.set_num_threads(opts.threads)  # the in-process reference loop of section 1
    base = ["--data.split", opts.split, "--method.init_args.pretrain_rounds", str(opts.rounds),
            "--method.init_args.cluster_rounds", "1", "--federation.eval_every", "100"]
    lines = [f"# Engine speed and scale, CCFC on Fashion-MNIST ({opts.split} split)", "", f"Machine: {machine()}", "",
             f"Command: `python benchmarks/scale_fmnist.py --split {opts.split} --rounds {opts.rounds} "
             f"--reference-rounds {opts.reference_rounds} --clients "
             f"{' '.join(map(str, opts.clients))} --sections {' '.join(map(str, opts.sections))} --modes "
             f"{' '.join(opts.modes)}" + (f" --threads {opts.threads}" if opts.threads else "") + "`", ""]
    if opts.note:
        lines += [f"Conditions: {opts.note}", ""]

    if 1 in opts.sections:
        lines += section_reference(opts, base, env)
    if 2 in opts.sections:
        lines += section_clients(opts, base, env)
    if 3 in opts.sections:
        lines += section_processes(base)
    output = Path(opts.output) if opts.output else RESULTS / f"scale_fmnist_{opts.split}.md"
    output.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def section_reference(opts: argparse.Namespace, base: list[str], env: dict[str, str] | None) -> list[str]:
    """1. fedclust vs the reference loop."""
    rows, _, _ = fit("scale_ours_10", [*base, "--data.num_clients", "10"], env)
    ours = stage1_seconds(rows)
    ref = reference_seconds(opts.split, opts.reference_rounds)
    ratio = statistics.median(ref) / statistics.median(ours)
    lines = ["## 1. Seconds per CCFC stage-1 round, 10 clients: fedclust vs a reference loop", "",
              "| loop | seconds per round (each) | median |", "|---|---|---|",
              f"| fedclust (`fedclust fit`) | {', '.join(f'{s:.1f}' for s in ours)} | {statistics.median(ours):.1f} |",
              f"| reference (deepcopy, PIL DataLoader, fresh k-means) | {', '.join(f'{s:.1f}' for s in ref)} | "
              f"{statistics.median(ref):.1f} |", "", f"Speed-up: **{ratio:.2f}x**", ""]
    print("\n".join(lines))
    return lines


def section_clients(opts: argparse.Namespace, base: list[str], env: dict[str, str] | None) -> list[str]:
    """2. Clients at a fixed total of data."""
    lines = ["## 2. Clients at a fixed total of data (CCFC stage 1, iid)", "",
              "| clients | samples per client | optimizer state | s per round (each) | peak memory MB |",
              "|---|---|---|---|---|"]
    for mode, counts in (("reset", opts.clients), ("persist", [c for c in opts.clients if c <= 100])):
        if mode not in opts.modes:
            continue
        for n in counts:
            rows, _, _ = fit(f"scale_{mode}_{n}", [*base, "--data.num_clients", str(n), "--data.partition", "iid",
                                                   "--federation.optimizer_state", mode], env)
            peak = max(float(r["peak_memory_mb"]) for r in rows if r["stage"] == "0")
            per = 10000 if opts.split == "test" else 70000
            lines.append(f"| {n} | {per // n} | {mode} | {', '.join(f'{s:.1f}' for s in stage1_seconds(rows))} | "
                         f"{peak:.0f} |")
            print(lines[-1])
    lines.append("")
    return lines


def section_processes(base: list[str]) -> list[str]:
    """3. One vs two processes."""
    single = {"OMP_NUM_THREADS": "1"}
    one_rows, one_final, one_wall = fit("scale_ddp1", [*base, "--data.num_clients", "10", "--fabric.accelerator",
                                                       "cpu"], single)
    two_rows, two_final, two_wall = fit("scale_ddp2", [*base, "--data.num_clients", "10", "--fabric.accelerator",
                                                       "cpu", "--fabric.devices", "2", "--fabric.strategy", "ddp"],
                                        single)
    a = torch.load(RUNS / "scale_ddp1" / "checkpoints" / "last.ckpt", weights_only=False)["model"]
    b = torch.load(RUNS / "scale_ddp2" / "checkpoints" / "last.ckpt", weights_only=False)["model"]
    max_diff = max((a[k].double() - b[k].double()).abs().max().item() for k in a)
    lines = ["## 3. One vs two processes (gloo, one thread each)", "",
              "| processes | s per stage-1 round (each) | s cluster round | wall s | NMI | ACC | ARI |",
              "|---|---|---|---|---|---|---|"]
    for n, rows, final, wall in ((1, one_rows, one_final, one_wall), (2, two_rows, two_final, two_wall)):
        m = final["metrics"]
        cluster = [float(r["seconds"]) for r in rows if r["stage"] == "1"]
        lines.append(f"| {n} | {', '.join(f'{s:.1f}' for s in stage1_seconds(rows))} | "
                     f"{', '.join(f'{s:.1f}' for s in cluster)} | {wall:.0f} | {m['nmi']:.4f} | {m['acc']:.4f} | "
                     f"{m['ari']:.4f} |")
    same = one_final["metrics"] == two_final["metrics"]
    lines += ["", f"Final metrics identical: **{same}**; largest difference between the two global models: "
              f"**{max_diff:.3g}**.", ""]
    return lines


if __name__ == "__main__":
    main()

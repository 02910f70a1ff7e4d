"""UIFCA's Table 1: UIFCA and k-FED on the synthetic Gaussian and subspace clusters.

    python benchmarks/uifca_synthetic.py                     # the reduced budget below, ~30 min on 2 cores
    python benchmarks/uifca_synthetic.py --comm 100 --steps 100   # the paper's budget (hours on a CPU)

4 clusters, 4 clients x 1,000 points, p = 0, .25, .5, .75, 1 (configs/uifca_gaussian.yaml,
configs/uifca_subspace.yaml; k-FED with k' = 4 per client on the same data). The paper's "cluster
accuracy" is purity; we report it with ACC (one-to-one) and NMI. Writes benchmarks/results/uifca_synthetic.md.
"""

from __future__ import annotations

import argparse

from common import RESULTS, machine, run_config

PS = [0.0, 0.25, 0.5, 0.75, 1.0]
PAPER = {("gaussian", "UIFCA"): [100] * 5, ("gaussian", "k-FED"): [100] * 5,
         ("subspace", "UIFCA"): [100] * 5, ("subspace", "k-FED"): [11.5, 11.7, 12.5, 15.8, 19.3]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cluster-rounds", type=int, default=20, help="T (paper 20)")
    ap.add_argument("--comm", type=int, default=10, help="tau, communication rounds per cluster round (paper 100)")
    ap.add_argument("--steps", type=int, default=20, help="M, local steps per round (paper 100)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--inits", nargs="+", default=["models", "random"], help="UIFCA initial assignments to run")
    ap.add_argument("--note", default="", help="run conditions to record (e.g. other jobs on the machine)")
    args = ap.parse_args()
    budget = f"T{args.cluster_rounds}_tau{args.comm}_M{args.steps}_seed{args.seed}"
    rows = []
    for data in ("gaussian", "subspace"):
        common = ["--data.name", data, "--seed", str(args.seed)]
        for init in args.inits:
            runs = []
            for p in PS:
                tag = "" if init == "models" else f"_{init}"  # runs of the first version kept their names
                runs.append(run_config(f"configs/uifca_{data}.yaml", f"uifca_{data}_{budget}{tag}_p{p}", common + [
                    "--data.p", str(p), "--method.init_args.init", init,
                    "--method.init_args.cluster_rounds", str(args.cluster_rounds),
                    "--method.init_args.communication_rounds", str(args.comm),
                    "--method.init_args.local_steps", str(args.steps), "--federation.eval_every", str(args.comm)]))
            rows.append((data, f"UIFCA (init {init})", "UIFCA", runs))
        for k_local in (4, 1):
            runs = [run_config("configs/kfed_fmnist.yaml", f"kfed_{data}_seed{args.seed}_p{p}"
                               + ("" if k_local == 4 else f"_k{k_local}"), common + [
                "--data.p", str(p), "--data.num_clients", "4", "--data.normalize", "none",
                "--method.init_args.k_local", str(k_local)]) for p in PS]
            rows.append((data, f"k-FED (k' = {k_local})", "k-FED", runs))
    lines = ["# UIFCA Table 1: synthetic Gaussian and subspace clusters", "", f"Machine: {machine()}", "",
             "Command: `python benchmarks/uifca_synthetic.py "
             f"--cluster-rounds {args.cluster_rounds} --comm {args.comm} --steps {args.steps} --seed {args.seed}`", "",
             f"Budget: T = {args.cluster_rounds} cluster rounds x tau = {args.comm} communication rounds x "
             f"M = {args.steps} local steps (the paper: 20 x 100 x 100); batch 100, Adam (lr 0.001 Gaussian, "
             "0.01 subspace), affine flows (full W on the Gaussian set, triangular W on the subspace set), "
             "initial assignment by the initial models or uniform at random; k-FED with k' = 4 (the paper's "
             "Algorithm 1) and k' = 1 local centres, labelling through the local centre; "
             f"seed {args.seed}.",
             *([f"Conditions: {args.note}"] if args.note else []), "",
             "Purity (%, the paper's cluster accuracy) / NMI; paper purity in brackets.", "",
             "| data | method | " + " | ".join(f"p = {p}" for p in PS) + " | seconds (mean) |",
             "|---|---|" + "---|" * len(PS) + "---|"]
    for data, name, paper_name, runs in rows:
        cells = [f"{100 * r['metrics']['purity']:.1f} / {r['metrics']['nmi']:.3f} ({paper})"
                 for r, paper in zip(runs, PAPER[(data, paper_name)])]
        seconds = sum(r.get("wall_seconds", float("nan")) for r in runs) / len(runs)
        lines.append(f"| {data} | {name} | " + " | ".join(cells) + f" | {seconds:.0f} |")
    lines += ["", "Notes:", "",
              "- 75% purity is one local optimum of the hard assignment: one model holds two true clusters and "
              "two models share one. The budget is 1/50 of the paper's local steps and one seed per cell, so "
              "a cell at 75% says this seed stalled, not that the setting fails.",
              "- k' = 1 at p = 1 is k-FED with one centre per client holding one cluster; k' = 4 there starts "
              "the server's k-means from one client's four centres, all inside one cluster (REFERENCE.md's "
              "seeding), and stays in that optimum.",
              "- Purity cannot fall below 25% with 4 equal clusters, so the paper's 11.5-19.3% for k-FED on "
              "the subspace set must be another measure; we report purity as the paper defines it in its text."]
    out = RESULTS / "uifca_synthetic.md"
    out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()

"""Where FedPNP's difference from FedCC comes from (issue 14: "where a claim does not hold, find out why").

FedPNP differs from FedCC in two things (fedclust/methods/fedpnp.py): the past negatives pool (eq. 3, mu 0.999)
and the weight alpha of the cluster loss (eq. 8: 2 in round 1, then 0.1; FedCC weighs it 1). This runs the
first rounds of a whole-schedule setting (configs/fedpnp_fmnist.yaml on the Fashion-MNIST test split, 5 clients,
IID or Dirichlet 0.1 as in benchmarks/whole_schedule.py, 1 local epoch, fp32, seed 0) with one change at a time,
and records how many of a batch's pairs the pool keeps as negatives:

    nice -n 5 python benchmarks/fedpnp_ablation.py run [--rounds 10] [--setting iid|dir01] [VARIANT ...]
    python benchmarks/fedpnp_ablation.py report       # benchmarks/results/fedpnp_ablation_fmnist_test.md

Variants: `fedpnp` (the method as configured: reproduces the first rounds of the whole-schedule run, which
checks that the run is deterministic, and measures its pool), `pool_only` (the pool, alpha 1 throughout, as
FedCC's weight), `alpha_only` (alpha 2 then 0.1, pool threshold 1.0: only identical soft labels are removed,
i.e. no pool), `wide_pool` (the method with mu 0.9 instead of 0.999: a pair leaves the negatives when
||u - v||^2 < 0.105, another reading of eq. 3 under which the pool acts). FedCC itself is the whole-schedule
run `fedcc_<setting>`. Pool statistics: for every batch, the fraction of the n(n-1) ordered pairs j != i that
eq. (3) keeps as negatives, averaged per client and round (pool.csv in each run folder).
"""

from __future__ import annotations

import argparse
import csv
import os
import statistics
import subprocess
import sys
from pathlib import Path

from common import RESULTS, ROOT, RUNS, csv_rows, machine
from whole_schedule import WHOLE, nmi_by_round

OUT = RUNS / "fedpnp_ablation"
BASE = ["--config", str(ROOT / "configs/fedpnp_fmnist.yaml"), "--data.split", "test",
        "--fabric.precision", "32-true", "--federation.checkpoint_every", "5", "--progress", "false"]
# the whole-schedule runs' partitions (benchmarks/whole_schedule.py); folder prefix, overrides
SETTINGS = {"iid": ("", ["--data.partition", "iid"]),
            "dir01": ("dir01_", ["--data.partition", "dirichlet", "--data.alpha", "0.1"])}
VARIANTS = {
    "fedpnp": [],
    "pool_only": ["--method.init_args.alpha_first", "1.0", "--method.init_args.alpha", "1.0"],
    "alpha_only": ["--method.init_args.pool_threshold", "1.0"],
    "wide_pool": ["--method.init_args.pool_threshold", "0.9"],
}


def run(variants: list[str], rounds: int, setting: str) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    prefix, partition = SETTINGS[setting]
    for name in variants:
        folder = OUT / f"{prefix}{name}"
        if (folder / "final.json").exists():
            continue
        where = (["--resume", str(folder)] if (folder / "checkpoints" / "last.ckpt").exists()
                 else [*BASE, *partition, *VARIANTS[name], "--method.init_args.rounds", str(rounds),
                       "--run_dir", str(folder)])
        print(name, " ".join(where), flush=True)
        subprocess.run([sys.executable, __file__, "_child", str(folder), *where], check=True, cwd=ROOT, env=env)


def child(folder: Path, argv: list[str]) -> None:
    """`fedclust fit` with FedPNP's pool measured: the pool function is wrapped, one row per client and round."""
    import fedclust.methods.fedpnp as fedpnp
    from fedclust.__main__ import main

    original_pool, original_start, original_end = fedpnp.pnp_pool, fedpnp.FedPNP.on_client_start, \
        fedpnp.FedPNP.on_client_end
    seen: dict[str, object] = {"fractions": []}

    def pool(y_a, y_b, threshold=0.999):
        mask = original_pool(y_a, y_b, threshold)
        n = len(y_a)
        seen["fractions"].append(float(mask.sum()) / max(n * (n - 1), 1))
        return mask

    def on_client_start(self, ctx):
        seen.update(round=ctx.round + 1, client=ctx.client_id, fractions=[])
        original_start(self, ctx)

    def on_client_end(self, ctx):
        fractions = seen["fractions"]
        path = folder / "pool.csv"
        new = not path.exists()
        with path.open("a", newline="") as f:
            writer = csv.writer(f)
            if new:
                writer.writerow(["round", "client", "batches", "pool_fraction", "min_batch_fraction"])
            writer.writerow([seen["round"], seen["client"], len(fractions),
                             statistics.fmean(fractions) if fractions else "", min(fractions, default="")])
        return original_end(self, ctx)

    fedpnp.pnp_pool = pool
    fedpnp.FedPNP.on_client_start, fedpnp.FedPNP.on_client_end = on_client_start, on_client_end
    sys.exit(main(["fit", *argv]))


def _pool_by_round(folder: Path) -> dict[int, float]:
    last: dict[tuple[int, int], float] = {}  # a resumed round is measured again: its last rows count
    for r in csv_rows(folder / "pool.csv"):
        if r["pool_fraction"]:
            last[(int(r["round"]), int(r["client"]))] = float(r["pool_fraction"])
    rounds = sorted({k[0] for k in last})
    return {t: statistics.fmean(v for (s, _), v in last.items() if s == t) for t in rounds}


LABELS = {"fedpnp": "FedPNP, rerun here (pool + alpha 2/0.1)", "pool_only": "pool only (alpha 1)",
          "alpha_only": "alpha 2/0.1 only (no pool)", "wide_pool": "FedPNP with mu 0.9 (wider pool)"}


def _section(setting: str) -> list[str]:
    prefix, partition = SETTINGS[setting]
    curves = {f"FedCC (whole-schedule fedcc_{setting})": nmi_by_round(WHOLE / f"fedcc_{setting}"),
              f"FedPNP (whole-schedule fedpnp_{setting})": nmi_by_round(WHOLE / f"fedpnp_{setting}")}
    pools = {}
    for name, label in LABELS.items():
        if (OUT / f"{prefix}{name}").exists():
            curves[label] = nmi_by_round(OUT / f"{prefix}{name}")
            pools[label] = _pool_by_round(OUT / f"{prefix}{name}")
    rounds = sorted({t for label in pools for t in curves[label]})
    if not rounds:
        return []
    head = "| run | " + " | ".join(f"r{t}" for t in rounds) + " |"
    rule = "|---|" + "---|" * len(rounds)
    lines = [f"## {setting}: `{' '.join(partition)}`", "", "NMI per round:", "", head, rule]
    for label, curve in curves.items():
        lines.append(f"| {label} | " + " | ".join(f"{curve[t]:.3f}" if t in curve else "" for t in rounds) + " |")
    lines += ["", "Fraction of a batch's pairs the pool keeps as negatives (mean over clients and batches):", "",
              head, rule]
    for label, pool in pools.items():
        lines.append(f"| {label} | " + " | ".join(f"{pool[t]:.3f}" if t in pool else "" for t in rounds) + " |")
    return [*lines, ""]


def report() -> None:
    sections = [line for setting in SETTINGS for line in _section(setting)]
    if not sections:
        sys.exit("no ablation run has metrics yet: run `python benchmarks/fedpnp_ablation.py run` first")
    lines = ["# FedPNP: the pool and alpha, one at a time (issue 14)", "",
             f"Generated by `python benchmarks/fedpnp_ablation.py report`. Machine: {machine()}.",
             "Setting: the whole-schedule runs' (configs/fedpnp_fmnist.yaml, Fashion-MNIST test split, 10,000 "
             "images, 5 clients, 1 local epoch, batch 128, Adam 3e-4, fp32, seed 0), first rounds only.", "",
             *sections]
    out = RESULTS / "fedpnp_ablation_fmnist_test.md"
    out.write_text("\n".join(lines))
    print(f"wrote {out}")


def main() -> None:
    if sys.argv[1:2] == ["_child"]:
        child(Path(sys.argv[2]), sys.argv[3:])
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["run", "report"])
    parser.add_argument("variants", nargs="*", default=list(VARIANTS), help=f"of {', '.join(VARIANTS)}")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--setting", choices=list(SETTINGS), default="iid", help="the partition (run)")
    opts = parser.parse_intermixed_args()
    unknown = [v for v in opts.variants if v not in VARIANTS]
    if unknown:
        parser.error(f"unknown variant {unknown[0]!r}; valid: {', '.join(VARIANTS)}")
    run(opts.variants, opts.rounds, opts.setting) if opts.command == "run" else report()


if __name__ == "__main__":
    main()

"""How much a run's NMI moves from round to round: mean and standard deviation of metrics.csv's `nmi` over a range
of rounds, for each run folder given (a diagnostic of how far the reported final round is one draw from a scatter;
never a way to choose a round). With `--each N` it lists every N-th round's NMI instead (a curve), and a range of
one round gives that round's NMI (e.g. round 20 of two runs that differ in one setting). `--metric loss` reads
another column of metrics.csv the same way (e.g. the training loss at the end of each UIFCA cluster round).

Usage: python -m benchmarks.round_spread RUN_FOLDER... [--rounds 11 30] [--each 5] [--metric nmi]
"""

from __future__ import annotations

import argparse
import csv
import statistics
from pathlib import Path


def by_round(run: Path, first: int, last: int, metric: str = "nmi") -> dict[int, float]:
    """metrics.csv's ``metric`` of every round in [first, last] that has it (NMI: the evaluated rounds)."""
    with open(run / "metrics.csv") as f:
        return {int(r["round"]): float(r[metric]) for r in csv.DictReader(f)
                if r.get(metric) and first <= int(r["round"]) <= last}


def spread(run: Path, first: int, last: int, metric: str = "nmi") -> tuple[float, float, int]:
    values = list(by_round(run, first, last, metric).values())
    if len(values) < 2:
        raise SystemExit(f"{run}: fewer than two evaluated rounds in {first}-{last}")
    return statistics.mean(values), statistics.stdev(values), len(values)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", type=Path, nargs="+")
    ap.add_argument("--rounds", type=int, nargs=2, default=[11, 30], metavar=("FIRST", "LAST"))
    ap.add_argument("--each", type=int, metavar="N", help="list the value of rounds FIRST, FIRST + N, ... instead")
    ap.add_argument("--metric", default="nmi", help="the metrics.csv column to read (default nmi)")
    args = ap.parse_args(argv)
    first, last = args.rounds
    name = "NMI" if args.metric == "nmi" else args.metric
    for run in args.runs:
        if args.each or first == last:
            found = by_round(run, first, last, args.metric)
            listed = [r for r in range(first, last + 1, args.each or 1) if r in found]
            if not listed:
                raise SystemExit(f"{run}: no evaluated round in {first}-{last}")
            print(f"{run.name}: {name} at round " + ", ".join(f"{r} {found[r]:.4f}" for r in listed))
            continue
        mean, std, n = spread(run, first, last, args.metric)
        print(f"{run.name}: {name} over rounds {first}-{last} ({n} evaluated): mean {mean:.4f}, std {std:.4f}")


if __name__ == "__main__":
    main()

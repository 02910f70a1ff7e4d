"""How much a run's NMI moves from round to round: mean and standard deviation of metrics.csv's `nmi` over a range
of rounds, for each run folder given (a diagnostic of how far the reported final round is one draw from a scatter;
never a way to choose a round). With `--each N` it lists every N-th round's NMI instead (a curve), and a range of
one round gives that round's NMI (e.g. round 20 of two runs that differ in one setting).

Usage: python -m benchmarks.round_spread RUN_FOLDER... [--rounds 11 30] [--each 5]
"""

from __future__ import annotations

import argparse
import csv
import statistics
from pathlib import Path


def nmi_by_round(run: Path, first: int, last: int) -> dict[int, float]:
    """metrics.csv's NMI of every evaluated round in [first, last]."""
    with open(run / "metrics.csv") as f:
        return {int(r["round"]): float(r["nmi"]) for r in csv.DictReader(f)
                if r.get("nmi") and first <= int(r["round"]) <= last}


def spread(run: Path, first: int, last: int) -> tuple[float, float, int]:
    values = list(nmi_by_round(run, first, last).values())
    if len(values) < 2:
        raise SystemExit(f"{run}: fewer than two evaluated rounds in {first}-{last}")
    return statistics.mean(values), statistics.stdev(values), len(values)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", type=Path, nargs="+")
    ap.add_argument("--rounds", type=int, nargs=2, default=[11, 30], metavar=("FIRST", "LAST"))
    ap.add_argument("--each", type=int, metavar="N", help="list the NMI of rounds FIRST, FIRST + N, ... instead")
    args = ap.parse_args(argv)
    first, last = args.rounds
    for run in args.runs:
        if args.each or first == last:
            found = nmi_by_round(run, first, last)
            listed = [r for r in range(first, last + 1, args.each or 1) if r in found]
            if not listed:
                raise SystemExit(f"{run}: no evaluated round in {first}-{last}")
            print(f"{run.name}: NMI at round " + ", ".join(f"{r} {found[r]:.4f}" for r in listed))
            continue
        mean, std, n = spread(run, first, last)
        print(f"{run.name}: NMI over rounds {first}-{last} ({n} evaluated): mean {mean:.4f}, std {std:.4f}")


if __name__ == "__main__":
    main()

"""How much a run's NMI moves from round to round: mean and standard deviation of metrics.csv's `nmi` over a range
of rounds, for each run folder given (a diagnostic of how far the reported final round is one draw from a scatter;
never a way to choose a round).

Usage: python -m benchmarks.round_spread RUN_FOLDER... [--rounds 11 30]
"""

from __future__ import annotations

import argparse
import csv
import statistics
from pathlib import Path


def spread(run: Path, first: int, last: int) -> tuple[float, float, int]:
    with open(run / "metrics.csv") as f:
        values = [float(r["nmi"]) for r in csv.DictReader(f) if r.get("nmi") and first <= int(r["round"]) <= last]
    if len(values) < 2:
        raise SystemExit(f"{run}: fewer than two evaluated rounds in {first}-{last}")
    return statistics.mean(values), statistics.stdev(values), len(values)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", type=Path, nargs="+")
    ap.add_argument("--rounds", type=int, nargs=2, default=[11, 30], metavar=("FIRST", "LAST"))
    args = ap.parse_args(argv)
    for run in args.runs:
        mean, std, n = spread(run, *args.rounds)
        print(f"{run.name}: NMI over rounds {args.rounds[0]}-{args.rounds[1]} ({n} evaluated): mean {mean:.4f}, "
              f"std {std:.4f}")


if __name__ == "__main__":
    main()

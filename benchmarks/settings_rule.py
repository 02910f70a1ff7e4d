"""Compare settings of one method over several trained models by their final rounds, per p (issue 22).

The passes of benchmarks/results/fedspectral_recluster.md choose a setting by a rule written before the runs are
read: per p the mean of the final rounds over its seeds, a setting's worse p and its mean over the models. This
prints those figures from the run folders, so no aggregate is arithmetic by hand. Each `--setting NAME RUN...`
names a setting and its models (training-split run folders; p and seed are read from each run's config.yaml).

A model's final round is metrics.csv's last NMI when the run voted over its last rounds itself (its config's
`round_vote` >= `--vote`); a run from before FedSpectral had `round_vote` (it kept every round's labels in
round_labels.pt, benchmarks.fedspectral_round_vote record) is voted over its last `--vote` rounds offline, as
the method does, and marked so. Beside it, the level over rounds FIRST-LAST (benchmarks.round_spread).

Usage: python -m benchmarks.settings_rule --setting flat RUN... --setting pooled RUN... [--vote 10] [--level 11 30]
"""

from __future__ import annotations

import argparse
import csv
import statistics
from collections import defaultdict
from pathlib import Path

import yaml

from benchmarks.round_spread import spread


def run_config(run: Path) -> dict:
    with open(run / "config.yaml") as f:
        return yaml.safe_load(f)


def final_nmi(run: Path, vote: int) -> tuple[float, bool]:
    """The run's final-round NMI and whether it was voted offline (see the module's docstring)."""
    config = run_config(run)
    if int(config["method"].get("init_args", {}).get("round_vote", 1)) >= vote or vote == 1:
        with open(run / "metrics.csv") as f:
            rows = [r for r in csv.DictReader(f) if r.get("nmi")]
        if not rows:
            raise SystemExit(f"{run}: metrics.csv has no evaluated round")
        return float(rows[-1]["nmi"]), False
    if not (run / "round_labels.pt").exists():
        raise SystemExit(f"{run}: its config votes over fewer than {vote} rounds and it kept no round_labels.pt")
    return _voted_offline(run, vote), True


def _voted_offline(run: Path, vote: int) -> float:
    from sklearn.metrics import normalized_mutual_info_score

    from benchmarks.fedspectral_recluster import load  # refuses a test-split run
    from benchmarks.fedspectral_round_vote import kept_rounds, round_vote

    data, method = load(run)
    rounds, parts = kept_rounds(run)
    voted = round_vote(rounds[-vote:], parts, method.num_clusters)
    return float(normalized_mutual_info_score(data.labels.numpy(), voted.numpy()))


def parse_settings(tokens: list[str]) -> dict[str, list[Path]]:
    """`--setting NAME RUN...` groups, in order."""
    settings: dict[str, list[Path]] = {}
    for group in tokens:
        name, *runs = group
        if not runs:
            raise SystemExit(f"--setting {name}: name at least one run folder")
        settings[name] = [Path(r) for r in runs]
    return settings


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--setting", nargs="+", action="append", required=True, metavar=("NAME", "RUN"))
    ap.add_argument("--vote", type=int, default=10, help="rounds a final label is voted over (default 10)")
    ap.add_argument("--level", type=int, nargs=2, default=[11, 30], metavar=("FIRST", "LAST"))
    args = ap.parse_args(argv)
    for name, runs in parse_settings(args.setting).items():
        by_p: dict[float, list[float]] = defaultdict(list)
        finals, levels = [], []
        print(f"{name}:")
        for run in runs:
            config = run_config(run)
            p, seed = float(config["data"]["p"]), config.get("seed")
            final, offline = final_nmi(run, args.vote)
            level = spread(run, *args.level)[0]
            by_p[p].append(final)
            finals.append(final)
            levels.append(level)
            print(f"  {run.name}: p {p:g} seed {seed}: final {final:.4f}{' (voted offline)' if offline else ''}, "
                  f"rounds {args.level[0]}-{args.level[1]} {level:.4f}")
        means = {p: statistics.mean(v) for p, v in sorted(by_p.items())}
        print("  per p: " + " / ".join(f"{p:g} {m:.3f}" for p, m in means.items())
              + f"; worse p {min(means.values()):.3f}; mean of the {len(finals)} models {statistics.mean(finals):.4f}"
              f" (rounds {args.level[0]}-{args.level[1]}: {statistics.mean(levels):.4f})")


if __name__ == "__main__":
    main()

"""The one runner of the declared experiments (benchmarks/README.md).

    python -m benchmarks list [NAME ...]                       # runs done / running / pending (NAME: each run)
    python -m benchmarks run NAME [--slots N] [--only LABEL ...] [--where p=1.0 seed=0,1] [--devices 0 1] [--nice 10]
    python -m benchmarks report NAME                           # results/NAME.csv, NAME.md (+ NAME.png)
    python -m benchmarks results                               # docs/results.md from every results/NAME.csv
    python -m benchmarks holdings RUN... [--min-share 0.2]     # which true clusters each found cluster holds

NAME is a file of benchmarks/experiments (or a YAML path). `run` is resumable: the same command again after
an interruption skips what is done and resumes what is checkpointed. Never run it inside CI.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from fedclust.errors import FedclustError

from . import common


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.split("\n")[0])
    parser.add_argument("--experiments", type=Path, default=common.EXPERIMENTS, help=argparse.SUPPRESS)
    parser.add_argument("--runs", type=Path, default=common.RUNS, help="where run folders go (RUNS/NAME/...)")
    parser.add_argument("--results", type=Path, default=common.RESULTS, help="where report writes")
    sub = parser.add_subparsers(dest="command", required=True)
    listing = sub.add_parser("list", help="experiments and the state of their runs")
    listing.add_argument("names", nargs="*", help="experiments whose every run to list")
    run = sub.add_parser("run", help="start or resume an experiment's runs")
    run.add_argument("name")
    run.add_argument("--slots", type=int, default=1, help="runs at a time on the CPU (threads: cores / slots)")
    run.add_argument("--only", nargs="+", metavar="LABEL", help="only these configs' labels")
    run.add_argument("--where", nargs="+", metavar="KEY=VALUES",
                     help="only the runs whose grid values match, e.g. p=1.0 seed=0,1")
    run.add_argument("--devices", type=int, nargs="+", help="GPU ids, one run per GPU at a time")
    run.add_argument("--nice", type=int, default=10, help="niceness of the runs (0: as this shell)")
    run.add_argument("--threads", type=int, help="threads per run (default: cores / slots)")
    report = sub.add_parser("report", help="write results/NAME.csv, .md (+ .png)")
    report.add_argument("name")
    report.add_argument("--replace", action="store_true", help="overwrite a results file a former script wrote")
    results = sub.add_parser("results", help="write docs/results.md from every results/NAME.csv")
    results.add_argument("--output", type=Path, default=common.ROOT / "docs" / "results.md", help="the page to write")
    holdings = sub.add_parser("holdings", help="which true clusters each found cluster of a finished run holds")
    holdings.add_argument("run_folders", type=Path, nargs="+")
    holdings.add_argument("--min-share", type=float, default=0.2, help="a true cluster is listed above this share")
    opts = parser.parse_args(argv)
    command = shlex.join(["python", "-m", "benchmarks", *argv])
    try:
        return _do(opts, command)
    except FedclustError as error:
        print(f"benchmarks: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C, or gpu_protocol.sh's budget (timeout -s INT): the sweep said how to go on
        return 130


def _do(opts: argparse.Namespace, command: str) -> int:
    from .archive import archived
    from .experiment import load
    from .runner import PENDING, run, state

    if opts.command == "list" and opts.names:
        for name in opts.names:
            exp = load(name, opts.experiments)
            kept = archived(exp, opts.results)
            for r in exp.runs:
                print(f"{exp.name}  {r.point.name:40s} {state(opts.runs / exp.name, r, kept)}")
        return 0
    if opts.command == "list":
        for path in sorted(opts.experiments.glob("*.yaml")):
            try:
                exp = load(str(path), opts.experiments)
            except FedclustError as error:
                print(f"{path.stem:28s} invalid: {error}")
                continue
            kept = archived(exp, opts.results)
            states = [state(opts.runs / exp.name, r, kept) for r in exp.runs]
            pending = sum(s in PENDING for s in states)
            done = states.count("done") + states.count("archived")
            print(f"{exp.name:28s} {done:3d} done {states.count('running'):3d} running "
                  f"{pending:3d} pending  {exp.title}")
        return 0
    if opts.command == "holdings":
        from .cluster_holdings import print_holdings

        print_holdings(opts.run_folders, opts.min_share)
        return 0
    if opts.command == "results":
        from .overview import write

        print(write(opts.results, opts.experiments, opts.output))
        return 0
    exp = load(opts.name, opts.experiments)
    if opts.command == "run":
        runs = run(exp, opts.runs / exp.name, command, opts.slots, opts.only, opts.devices, opts.nice, opts.threads,
                   archived(exp, opts.results), opts.where)
        failed = [r["name"] for r in runs if r["status"] == "failed"]
        if failed:
            print(f"benchmarks: {len(failed)} run(s) failed: {', '.join(failed)} (logs in "
                  f"{opts.runs / exp.name / 'logs'}; the same command retries them)", file=sys.stderr)
        return 1 if failed else 0
    from .report import report

    for path in report(exp, opts.runs / exp.name, opts.results, command, opts.replace):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())

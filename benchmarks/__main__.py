"""The one runner of the declared experiments (benchmarks/README.md): `python -m benchmarks --help` lists its
commands (list, run, report, results; holdings, step and peer for what an experiment cannot declare).

NAME is a file of benchmarks/experiments (or a YAML path). `run` is resumable: the same command again after
an interruption skips what is done and resumes what is checkpointed. Never run it inside CI.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from pathlib import Path

from fedclust.errors import FedclustError
from fedclust.interrupts import sigterm_as_interrupt

from . import common
from .step_probe import VARIANTS as STEP_VARIANTS


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
    run.add_argument("--where", nargs="+", metavar="KEY=VALUES", help="only runs whose grid values match: p=1 seed=0,1")
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
    step = sub.add_parser("step", help="CCFC's local step eager and under torch.compile (results/gpu_step.csv)")
    step.add_argument("--device", default="cuda", help="cuda, or cpu (eager only) to check the probe")
    step.add_argument("--variants", nargs="+", choices=STEP_VARIANTS, default=STEP_VARIANTS, metavar="KIND:PRECISION",
                      help=f"of {', '.join(STEP_VARIANTS)} (default: all)")
    step.add_argument("--steps", type=int, default=200, help="timed steps per variant")
    step.add_argument("--warmup", type=int, default=10, help="untimed steps first (compilation happens there)")
    peer = sub.add_parser("peer", help="Flower's simulation against fedclust, A B (results/flower_peer.csv)")
    peer.add_argument("--clients", type=int, nargs="+", default=[10, 100])
    peer.add_argument("--rounds", type=int, default=3, help="rounds per run (the first is the warm-up)")
    peer.add_argument("--pairs", type=int, default=1, help="A B pairs per client count")
    peer.add_argument("--accelerator", default="cpu", choices=["cpu", "cuda"], help="both sides'")
    peer.add_argument("--flower-python", default=sys.executable, help="an interpreter that has flwr[simulation]")
    peer.add_argument("--flower-site", help="a folder put before PYTHONPATH for Flower's side (its unpacked stack)")
    peer.add_argument("--flower-cpus", type=float, default=1, help="CPUs per Flower client (Ray actor)")
    peer.add_argument("--flower-gpus", type=float, default=0.0, help="GPU share per Flower client (Ray actor)")
    peer.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="fedclust's torch threads")
    peer.add_argument("--precision", default="auto", help="fedclust's fabric.precision")
    opts = parser.parse_args(argv)
    command = shlex.join(["python", "-m", "benchmarks", *argv])
    try:
        with sigterm_as_interrupt():  # `kill` stops the runs as Ctrl-C does (fedclust/interrupts.py)
            return _do(opts, command)
    except FedclustError as error:
        print(f"benchmarks: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C, SIGTERM, gpu_protocol.sh's budget (timeout -s INT): the sweep said how to go on
        return 130
    except BrokenPipeError:  # `list | head` stopped reading: nothing more to say
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def _do(opts: argparse.Namespace, command: str) -> int:
    from .archive import archived
    from .experiment import load
    from .runner import PENDING, run, state

    if opts.command == "list" and opts.names:
        for exp in (load(name, opts.experiments) for name in opts.names):
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
            done, pending = states.count("done") + states.count("archived"), sum(s in PENDING for s in states)
            print(f"{exp.name:28s} {done:3d} done {states.count('running'):3d} running "
                  f"{pending:3d} pending  {exp.title}")
        return 0
    if opts.command == "holdings":
        from .cluster_holdings import print_holdings
        print_holdings(opts.run_folders, opts.min_share)
        return 0
    if opts.command == "step":
        from .step_probe import measure
        print(measure(opts.device, opts.variants, opts.steps, opts.warmup, opts.results / "gpu_step.csv"))
        return 0
    if opts.command == "peer":
        from .flower_peer import peer
        print(peer(opts.clients, opts.rounds, opts.pairs, opts.accelerator, opts.flower_python, opts.flower_site,
                   opts.flower_cpus, opts.flower_gpus, opts.threads, opts.precision, opts.results / "flower_peer.csv"))
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

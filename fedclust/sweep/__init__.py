"""`fedclust sweep`: one `fedclust fit` per point of a grid of overrides, queued over device slots.

    fedclust sweep --config configs/kfed_fmnist.yaml --grid data.p=0,0.5,1 --grid seed=1,2 --slots 2
    fedclust sweep --config configs/ccfc_fmnist.yaml --grid data.p=0,1 --devices [0,1,2,3]

Every point is a subprocess with its own run folder SWEEP_DIR/<point name> (so a run that crashes takes
nothing else down, and each GPU slot gets CUDA_VISIBLE_DEVICES). A point whose folder holds final.json is
skipped; one with a checkpoint is resumed; one that died before its first checkpoint is moved aside to
<name>.incomplete-N and started again. So re-running the same command after an interruption finishes the
sweep. Ctrl-C or SIGTERM stops the sweep and its running fits with it (each keeps its last checkpoint:
sweep/points.py `stop_runs`); no further point starts. SWEEP_DIR/sweep.json records every point's overrides,
status, metrics and log file.

A point is "done" (or resumable) only for the settings it ran with: SWEEP_DIR/.points/<name>.json keeps a
fingerprint of its base config's content and overrides, and a point whose config or overrides changed since
(`--grid federation.rounds=4` after 2) is moved aside to <name>.stale-N and run again; nothing is deleted. A
comment or layout edit of the config changes nothing a run computes and leaves its points done.

Written here rather than with a sweep library: the queue is twenty lines on concurrent.futures, and the
points must stay plain `fedclust fit` runs that `fedclust compare` and `--resume` understand.

Beyond one machine the queue is not ours: `--executor slurm` hands the points to Slurm as one job array through
submitit (the `[slurm]` extra), one GPU per point by default, each job running the same point in the same folder
as the local queue would (done points skipped, checkpointed ones resumed, stale ones set aside). A job cut off by
its time limit or preempted is requeued by submitit and resumes from its checkpoint; the same command again
skips what is done, leaves points whose job is still queued or running alone and submits the rest.
`--executor submitit-local` runs the same job array as processes on this machine and `submitit-debug` in this
process (to try a cluster set-up, or step into a point with pdb).

    fedclust sweep --config ccfc_fmnist --grid data.p=0,0.5,1 --grid seed=1,2,3 --executor slurm \
        --slurm_partition gpu --slurm_time 240
"""

from __future__ import annotations

import os
import queue
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Literal

from jsonargparse import ArgumentParser
from rich.console import Console

from fedclust.errors import ConfigError
from fedclust.interrupts import Terminated
from fedclust.parsers import command_parser
from fedclust.sweep import points as _points  # run_point by attribute: tests replace it
from fedclust.sweep.points import (
    Ledger,
    Point,
    check,
    expand,
    fingerprint,
    fingerprint_of,
    made_with,
    mark_done,
    parse_grid,
    start_record,
    summed_up,
)

__all__ = ["Point", "check", "expand", "fingerprint", "fingerprint_of", "made_with", "parse_grid", "run_points",
           "start_record", "sweep", "sweep_parser"]


def sweep(config: str, grid: list[str] | None = None, sweep_dir: str | None = None, slots: int = 1,
          devices: list[int] | None = None, group: str | None = None, dry_run: bool = False,
          executor: Literal["local", "slurm", "submitit-local", "submitit-debug"] = "local",
          slurm_partition: str | None = None, slurm_time: int = 240, slurm_gpus: int = 1, slurm_cpus: int = 8,
          slurm_mem_gb: int | None = None, slurm_array_parallelism: int = 64, slurm_account: str | None = None,
          slurm_qos: str | None = None, slurm_constraint: str | None = None, slurm_setup: list[str] | None = None,
          slurm_wait: bool = True) -> list[dict]:
    """Run one `fedclust fit` per point of a grid of overrides, a queue over device slots or a Slurm job array.

    Args:
        config: The base config (configs/*.yaml).
        grid: Axes as KEY=V1,V2,... (repeat the flag; `config=a.yaml,b.yaml` sweeps over configs).
        sweep_dir: Folder of the sweep's run folders (default sweeps/<config name>).
        slots: Parallel runs on the CPU (each gets cores / slots threads); ignored when devices is given.
        devices: GPU ids, one run per GPU at a time (CUDA_VISIBLE_DEVICES).
        group: W&B group of the runs (default: the sweep folder's name), used when the config logs to W&B.
        dry_run: List the points and their status without running anything.
        executor: local: the queue over --slots / --devices on this machine; slurm: a Slurm job array through
            submitit (one job per point, settings --slurm_*); submitit-local / submitit-debug: the same job array as
            processes on this machine / in this process (both need the [slurm] extra, submitit).
        slurm_partition: Slurm partition of the points (sbatch --partition); None: the cluster's default.
        slurm_time: Minutes a point may run (sbatch --time); a point cut off is requeued and resumes from its
            checkpoint.
        slurm_gpus: GPUs per point (sbatch --gpus-per-node); 0 for CPU-only points.
        slurm_cpus: CPU cores per point (sbatch --cpus-per-task).
        slurm_mem_gb: Memory per point in GB (sbatch --mem); None: the partition's default.
        slurm_array_parallelism: Points of the job array running at once (sbatch --array=0-N%K).
        slurm_account: Account to charge (sbatch --account).
        slurm_qos: Quality of service (sbatch --qos).
        slurm_constraint: Node features (sbatch --constraint), e.g. a GPU model.
        slurm_setup: Shell lines each job runs first (module load ..., source .venv/bin/activate).
        slurm_wait: Wait for the points and print the summary; false submits and returns (the same command again
            reports the points and submits those neither done nor queued).
    """
    if executor != "local":
        from fedclust.sweep.slurm import require_submitit

        require_submitit(executor)
    axes = parse_grid(grid or [])
    root = Path(sweep_dir or Path("sweeps") / Path(config).stem)
    points = expand(config, axes)
    for point in points:
        check(point)
    if executor != "local":
        from fedclust.sweep.slurm import SlurmConfig, submit_points

        slurm = SlurmConfig(slurm_partition, slurm_time, slurm_gpus, slurm_cpus, slurm_mem_gb, slurm_array_parallelism,
                            slurm_account, slurm_qos, slurm_constraint, list(slurm_setup or []), slurm_wait)
        return submit_points(root, points, executor, slurm, group=group, dry_run=dry_run)
    return run_points(root, points, slots, devices, group=group, dry_run=dry_run)


def run_points(root: Path, points: list[Point], slots: int = 1, devices: list[int] | None = None,
               threads: int | None = None,
               group: str | None = None, dry_run: bool = False,
               record: Callable[[], dict] | None = None) -> list[dict]:
    """The sweep's queue over points already checked: ROOT/<name> per point, done ones skipped, checkpointed
    ones resumed, stale ones set aside (the benchmarks runner shares it). `record()` is called as each point
    starts afresh and kept beside its fingerprint (ROOT/.points/<name>.json), e.g. the git commit it ran at."""
    if slots < 1:
        raise ConfigError("slots", slots, "a positive number of parallel runs")
    slot_envs = _slot_envs(slots, devices, threads)
    root.mkdir(parents=True, exist_ok=True)
    group = group or root.name
    ledger = Ledger(root / "sweep.json", points)
    console = Console()
    mark_done(root, points)
    todo = [p for p in points if p.status != "done"]
    console.print(f"sweep {root}: {len(points)} runs, {len(points) - len(todo)} already done, "
                  f"{len(slot_envs)} slot(s)")
    if dry_run or not todo:
        return summed_up(ledger, console, points)
    free: queue.Queue[dict[str, str]] = queue.Queue()
    for env in slot_envs:
        free.put(env)

    def work(point: Point) -> None:
        env = free.get()
        try:
            _points.run_point(root, point, env, group, console, record)
        finally:
            free.put(env)
            ledger.write()

    _points.allow_runs()
    pool = ThreadPoolExecutor(max_workers=len(slot_envs))
    try:
        list(pool.map(work, todo))
    except KeyboardInterrupt as stop:  # Ctrl-C, or SIGTERM under fedclust's main (fedclust/interrupts.py)
        pool.shutdown(wait=False, cancel_futures=True)  # the points not started stay pending
        _points.stop_runs(settle=0.0 if isinstance(stop, Terminated) else 5.0)  # else the pool waits on them
        console.print("sweep interrupted: run the same command again to finish it (finished runs are kept)")
        raise
    finally:
        pool.shutdown(wait=True)
    return summed_up(ledger, console, points)


def sweep_parser() -> ArgumentParser:
    """`fedclust sweep`'s parser: sweep's typed arguments, --grid and --devices the shell's way."""
    parser = command_parser(sweep)
    parser.add_function_arguments(sweep, fail_untyped=True, skip={"grid", "devices"})
    # added by hand for the shell's way of repeating a flag (--grid a=1,2 --grid b=3) and listing ids
    parser.add_argument("--grid", action="append", default=[], metavar="KEY=V1,V2",
                        help="An axis of the grid; repeat for more axes (config=a.yaml,b.yaml sweeps configs).")
    parser.add_argument("--devices", type=int, nargs="+", default=None, metavar="GPU",
                        help="GPU ids, one run per GPU at a time (default: --slots CPU runs).")
    return parser


def _slot_envs(slots: int, devices: list[int] | None, threads: int | None = None) -> list[dict[str, str]]:
    if devices:
        return [{"CUDA_VISIBLE_DEVICES": str(d)} for d in devices]
    threads = threads or max(1, (os.cpu_count() or 1) // slots)  # given: leave the other cores to other work
    return [{"OMP_NUM_THREADS": str(threads), "CUDA_VISIBLE_DEVICES": ""} for _ in range(slots)]

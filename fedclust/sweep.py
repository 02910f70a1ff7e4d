"""`fedclust sweep`: one `fedclust fit` per point of a grid of overrides, queued over device slots.

    fedclust sweep --config configs/kfed_fmnist.yaml --grid data.p=0,0.5,1 --grid seed=1,2 --slots 2
    fedclust sweep --config configs/ccfc_fmnist.yaml --grid data.p=0,1 --devices [0,1,2,3]

Every point is a subprocess with its own run folder SWEEP_DIR/<point name> (so a run that crashes takes
nothing else down, and each GPU slot gets CUDA_VISIBLE_DEVICES). A point whose folder holds final.json is
skipped; one with a checkpoint is resumed; one that died before its first checkpoint is moved aside to
<name>.incomplete-N and started again. So re-running the same command after an interruption finishes the
sweep. SWEEP_DIR/sweep.json records every point's overrides, status, metrics and log file.

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

import hashlib
import itertools
import json
import os
import queue
import re
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml
from jsonargparse import ArgumentParser
from rich.console import Console
from rich.table import Table

from fedclust.errors import ConfigError
from fedclust.parsers import command_parser
from fedclust.run import fit_parser
from fedclust.run_folder import CHECKPOINT, read_final_metrics, write_json


@dataclass
class SlurmConfig:
    """What each point asks of Slurm: sweep()'s slurm_* arguments (documented there), as submit_points takes them."""

    partition: str | None = None
    time: int = 240
    gpus: int = 1
    cpus: int = 8
    mem_gb: int | None = None
    array_parallelism: int = 64
    account: str | None = None
    qos: str | None = None
    constraint: str | None = None
    setup: list[str] = field(default_factory=list)
    wait: bool = True


EXECUTORS = ("local", "slurm", "submitit-local", "submitit-debug")
_LIVE = {"PENDING", "RUNNING", "REQUEUED", "CONFIGURING", "COMPLETING", "SUSPENDED", "RESIZING", "REQUEUE_HOLD",
         "REQUEUE_FED", "SIGNALING", "STAGE_OUT"}  # Slurm job states of a point that is still coming


@dataclass
class Point:
    """One run of the sweep."""

    name: str
    config: str
    overrides: dict[str, object]
    status: str = "pending"  # pending | done | failed (then see log)
    metrics: dict[str, float] = field(default_factory=dict)
    seconds: float | None = None
    log: str = ""

    def argv(self) -> list[str]:
        out = []
        for key, value in self.overrides.items():
            out += [f"--{key}", value if isinstance(value, str) else json.dumps(value)]
        return out


def parse_grid(grid: list[str]) -> dict[str, list[object]]:
    """["data.p=0,0.5", "seed=1,2"] -> {"data.p": [0, 0.5], "seed": [1, 2]}; values are read as YAML
    scalars (numbers, booleans, strings). The key "config" takes config files (one method per file)."""
    axes: dict[str, list[object]] = {}
    for entry in grid:
        key, sep, values = entry.partition("=")
        if not sep or not key.strip() or not values.strip():
            raise ConfigError("grid", entry, "KEY=V1,V2,... (e.g. data.p=0,0.5,1)")
        axes[key.strip().removeprefix("--")] = [yaml.safe_load(v) for v in values.split(",")]
    return axes


def expand(config: str, axes: dict[str, list[object]]) -> list[Point]:
    """Every combination of the axes, in order, named by the values that vary (p=0.5_seed=2)."""
    keys = list(axes)
    varying = [k for k in keys if len(axes[k]) > 1]
    points = []
    for combo in itertools.product(*(axes[k] for k in keys)):
        chosen = dict(zip(keys, combo))
        name = "_".join(f"{k.rsplit('.', 1)[-1]}={_value_name(chosen[k])}" for k in varying) or "base"
        cfg = str(chosen.pop("config", config))
        points.append(Point(name=re.sub(r"[^\w.=,+-]", "-", name), config=cfg, overrides=chosen))
    return points


def _value_name(value: object) -> str:
    text = str(value)
    return Path(text).stem if text.endswith((".yaml", ".yml")) else text


def check(point: Point) -> None:
    """Parse the point's config + overrides now, so a typo stops the sweep before anything runs."""
    if not Path(point.config).is_file():
        raise ConfigError("config", point.config, "a config file that exists")
    parser = fit_parser()
    try:
        parser.parse_args(["--config", point.config, *point.argv()])
    except Exception as error:  # jsonargparse reports unknown keys and bad values as ArgumentError
        raise ConfigError("grid", point.overrides, f"overrides `fedclust fit` accepts ({error})") from None


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
        require_submitit(executor)
    axes = parse_grid(grid or [])
    root = Path(sweep_dir or Path("sweeps") / Path(config).stem)
    points = expand(config, axes)
    for point in points:
        check(point)
    if executor != "local":
        slurm = SlurmConfig(slurm_partition, slurm_time, slurm_gpus, slurm_cpus, slurm_mem_gb, slurm_array_parallelism,
                            slurm_account, slurm_qos, slurm_constraint, list(slurm_setup or []), slurm_wait)
        return submit_points(root, points, executor, slurm, group=group, dry_run=dry_run)
    return run_points(root, points, slots, devices, group=group, dry_run=dry_run)


def require_submitit(executor: str) -> None:
    try:
        import submitit  # noqa: F401
    except ImportError:
        raise ConfigError("executor", executor, "local, or install submitit (pip install 'fedclust[slurm]') to "
                          "run the points through it") from None


def run_points(root: Path, points: list[Point], slots: int = 1, devices: list[int] | None = None,
               threads: int | None = None,
               group: str | None = None, dry_run: bool = False, record: dict | None = None) -> list[dict]:
    """The sweep's queue over points already checked: ROOT/<name> per point, done ones skipped, checkpointed
    ones resumed, stale ones set aside (the benchmarks runner shares it). `record` is kept beside the
    fingerprint of every point started afresh (ROOT/.points/<name>.json), e.g. the git commit it ran at."""
    if slots < 1:
        raise ConfigError("slots", slots, "a positive number of parallel runs")
    slot_envs = _slot_envs(slots, devices, threads)
    root.mkdir(parents=True, exist_ok=True)
    group = group or root.name
    ledger = Ledger(root / "sweep.json", points)
    console = Console()
    for point in points:
        _set_aside_if_stale(root, point)
        if (root / point.name / "final.json").exists():
            point.status = "done"
            point.metrics = read_final_metrics(root / point.name / "final.json")
    todo = [p for p in points if p.status != "done"]
    console.print(f"sweep {root}: {len(points)} runs, {len(points) - len(todo)} already done, "
                  f"{len(slot_envs)} slot(s)")
    if dry_run or not todo:
        ledger.write()
        _summary(console, points)
        return [asdict(p) for p in points]
    free: queue.Queue[dict[str, str]] = queue.Queue()
    for env in slot_envs:
        free.put(env)

    def work(point: Point) -> None:
        env = free.get()
        try:
            _run_point(root, point, env, group, console, record)
        finally:
            free.put(env)
            ledger.write()

    try:
        with ThreadPoolExecutor(max_workers=len(slot_envs)) as pool:
            list(pool.map(work, todo))
    except KeyboardInterrupt:
        console.print("sweep interrupted: run the same command again to finish it (finished runs are kept)")
        raise
    ledger.write()
    _summary(console, points)
    return [asdict(p) for p in points]


def submit_points(root: Path, points: list[Point], executor: str, slurm: SlurmConfig = SlurmConfig(),  # noqa: B008
                  group: str | None = None, dry_run: bool = False, record: dict | None = None) -> list[dict]:
    """The points as one submitit job array: ROOT/<name> per point as run_points makes them; a point whose Slurm
    job is still queued or running (ROOT/.submitit/jobs.json) is left to it; submitit's files and each job's log
    are under ROOT/.submitit/."""
    import submitit

    if executor not in EXECUTORS[1:]:
        raise ConfigError("executor", executor, f"one of {', '.join(EXECUTORS)}")
    for key, least in (("time", 1), ("gpus", 0), ("cpus", 1), ("array_parallelism", 1), ("mem_gb", 1)):
        value = getattr(slurm, key)
        if value is not None and value < least:
            raise ConfigError(f"slurm_{key}", value, f"a whole number of at least {least}")
    root = root.resolve()
    root.mkdir(parents=True, exist_ok=True)
    group = group or root.name
    ledger, console = Ledger(root / "sweep.json", points), Console()
    jobs_file = root / ".submitit" / "jobs.json"
    jobs = _read_jobs(jobs_file)
    coming = []
    for point in points:
        _set_aside_if_stale(root, point)
        if (root / point.name / "final.json").exists():
            point.status = "done"
            point.metrics = read_final_metrics(root / point.name / "final.json")
        elif executor == "slurm" and point.name in jobs and _slurm_state(root, jobs[point.name]) in _LIVE:
            point.status = "submitted"
            coming.append(point)
    todo = [p for p in points if p.status not in ("done", "submitted")]
    console.print(f"sweep {root}: {len(points)} runs, {sum(p.status == 'done' for p in points)} already done, "
                  f"{len(coming)} queued or running, {len(todo)} to submit ({executor})")
    if dry_run or not todo:
        ledger.write()
        _summary(console, points)
        return [asdict(p) for p in points]
    ex = submitit_executor(root, executor, slurm)
    n = len(todo)
    submitted = ex.map_array(PointJob(), [str(root)] * n, todo, [group] * n, [record] * n, [os.getcwd()] * n)
    for point, job in zip(todo, submitted):
        point.status, point.log = "submitted", str(job.paths.stdout)
        jobs[point.name] = str(job.job_id)
    write_json(jobs_file, jobs, "sweep_dir")
    ledger.write()
    console.print(f"submitted {n} point(s) as job array {submitted[0].job_id.split('_')[0]} ({executor})")
    if executor == "slurm" and not slurm.wait:
        console.print("not waiting: the same command again reports the points and submits those neither done nor "
                      "queued")
        _summary(console, points)
        return [asdict(p) for p in points]
    try:
        for job in submitit.helpers.as_completed(submitted):
            point = todo[submitted.index(job)]
            try:
                finished = job.result()
            except Exception as error:  # the job itself failed (a node lost, the job killed): its log says why
                point.status = "failed"
                console.print(f"[red]failed[/] {point.name}: {str(error).splitlines()[0] if str(error) else error}")
            else:
                point.status, point.metrics, point.seconds = finished.status, finished.metrics, finished.seconds
                point.log = finished.log
            ledger.write()
    except KeyboardInterrupt:
        console.print("stopped waiting: the submitted points go on; run the same command again to see them")
        raise
    ledger.write()
    _summary(console, points)
    return [asdict(p) for p in points]


class PointJob:
    """One point as a submitit job: run_points' `_run_point` on the cluster node. submitit calls `checkpoint` when
    Slurm's time limit nears or the job is preempted, and requeues the job, which then resumes the point's run
    from its last checkpoint (a module-level class, so the job pickles by reference)."""

    def __call__(self, root: str, point: Point, group: str, record: dict | None, cwd: str) -> Point:
        os.chdir(cwd)  # the point's config path is relative to where the sweep was started
        _run_point(Path(root), point, {}, group, Console(), record)
        return point

    def checkpoint(self, *args: Any):
        from submitit.helpers import DelayedSubmission

        return DelayedSubmission(self, *args)


def submitit_executor(root: Path, executor: str, slurm: SlurmConfig):
    """submitit's executor for the sweep's points, with SlurmConfig as submitit's parameters."""
    import submitit

    cluster = {"slurm": "slurm", "submitit-local": "local", "submitit-debug": "debug"}[executor]
    ex = submitit.AutoExecutor(folder=root / ".submitit" / "%j", cluster=cluster)
    params: dict[str, Any] = {"name": f"fedclust-{root.name}", "timeout_min": slurm.time, "nodes": 1,
                              "tasks_per_node": 1, "cpus_per_task": slurm.cpus, "gpus_per_node": slurm.gpus,
                              "slurm_array_parallelism": slurm.array_parallelism}
    if slurm.mem_gb is not None:
        params["mem_gb"] = slurm.mem_gb
    for key in ("partition", "account", "qos", "constraint"):
        if getattr(slurm, key) is not None:
            params[f"slurm_{key}"] = getattr(slurm, key)
    if slurm.setup:
        params["slurm_setup"] = list(slurm.setup)
    ex.update_parameters(**params)
    return ex


def _read_jobs(path: Path) -> dict[str, str]:
    try:
        jobs = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return {str(k): str(v) for k, v in jobs.items()} if isinstance(jobs, dict) else {}


def _slurm_state(root: Path, job_id: str) -> str:
    """The Slurm state of a point's job (sacct through submitit); UNKNOWN when Slurm no longer knows it."""
    from submitit.slurm.slurm import SlurmJob

    try:
        return SlurmJob(root / ".submitit" / job_id, job_id).state.split()[0].upper()
    except Exception:  # sacct missing or failing: the point is not known to be coming
        return "UNKNOWN"


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


def _run_point(root: Path, point: Point, slot_env: dict[str, str], group: str, console: Console,
               record: dict | None = None) -> None:
    folder = root / point.name
    log = root / "logs" / f"{point.name}.log"
    log.parent.mkdir(exist_ok=True)
    point.log = str(log)
    if (folder / CHECKPOINT).exists():
        target = ["--resume", str(folder)]
        console.print(f"[cyan]resume[/] {point.name}")
    else:
        if folder.exists() and any(folder.iterdir()):  # died before its first checkpoint: keep, move aside
            n = 1
            while folder.with_name(f"{folder.name}.incomplete-{n}").exists():
                n += 1
            folder.rename(folder.with_name(f"{folder.name}.incomplete-{n}"))
        target = ["--config", point.config, "--run_dir", str(folder), *point.argv()]
        _fingerprint_file(root, point).write_text(json.dumps({"fingerprint": fingerprint(point), **(record or {})}))
        console.print(f"[cyan]start[/] {point.name}")
    cmd = [sys.executable, "-m", "fedclust", "fit", *target, "--progress", "false", "--group", group,
           "--name", point.name]
    env = {**os.environ, **slot_env}
    env.pop("FEDCLUST_RUN_DIR", None)
    start = time.perf_counter()
    with open(log, "a") as out:
        rc = subprocess.run(cmd, env=env, stdout=out, stderr=subprocess.STDOUT).returncode
    point.seconds = time.perf_counter() - start
    if rc == 0 and (folder / "final.json").exists():
        point.status = "done"
        point.metrics = read_final_metrics(folder / "final.json")
        console.print(f"[green]done[/] {point.name}: NMI {point.metrics.get('nmi', float('nan')):.4f} "
                      f"({point.seconds:.0f} s)")
    else:
        point.status = "failed"
        console.print(f"[red]failed[/] {point.name} (exit {rc}): see {log}")


def fingerprint(point: Point) -> str:
    """What a point computes: its base config's content and its overrides. The YAML is parsed first, so editing a
    comment or the layout leaves finished points done (hashing the bytes once made 30 finished runs stale over a
    comment); a file that does not parse is hashed as text (fit reports it)."""
    return fingerprint_of(Path(point.config).read_text(), point.overrides)


def fingerprint_of(text: str, overrides: dict[str, object]) -> str:
    """fingerprint of a config file's text (e.g. as an earlier commit held it) and overrides."""
    try:
        content = yaml.safe_load(text)
    except yaml.YAMLError:
        content = text
    return hashlib.sha256(json.dumps([content, overrides], sort_keys=True, default=str).encode()).hexdigest()


def _bytes_fingerprint(point: Point) -> str:
    """The fingerprint records written before 2026-11-26 hold: the config file's bytes and the overrides."""
    text = Path(point.config).read_bytes() + json.dumps(point.overrides, sort_keys=True, default=str).encode()
    return hashlib.sha256(text).hexdigest()


def made_with(record: dict, point: Point) -> bool:
    """Whether a start record (start_record) was written for this point's present settings, in either format."""
    return record.get("fingerprint") in (fingerprint(point), _bytes_fingerprint(point))


def start_record(root: Path, point: Point) -> dict:
    """What ROOT/.points/<name>.json kept when the point last started afresh ({} if it never did here)."""
    try:
        record = json.loads((root / ".points" / f"{point.name}.json").read_text())
    except (OSError, ValueError):  # never started here, or a damaged file: no record
        return {}
    return record if isinstance(record, dict) else {}


def _fingerprint_file(root: Path, point: Point) -> Path:
    (root / ".points").mkdir(parents=True, exist_ok=True)
    return root / ".points" / f"{point.name}.json"


def _set_aside_if_stale(root: Path, point: Point) -> None:
    """A point folder made with other settings is not this point's run: move it aside, keep it whole."""
    folder, saved = root / point.name, _fingerprint_file(root, point)
    if not folder.exists() or made_with(start_record(root, point), point):
        return
    n = 1
    while folder.with_name(f"{folder.name}.stale-{n}").exists():
        n += 1
    folder.rename(folder.with_name(f"{folder.name}.stale-{n}"))
    saved.unlink(missing_ok=True)


class Ledger:
    """sweep.json, rewritten after every finished run (thread-safe, atomic)."""

    def __init__(self, path: Path, points: list[Point]):
        self.path, self.points, self.lock = path, points, threading.Lock()

    def write(self) -> None:
        with self.lock:  # strict JSON (a NaN score is null), atomically
            write_json(self.path, [asdict(p) for p in self.points], "sweep_dir")


def _summary(console: Console, points: list[Point]) -> None:
    table = Table(title="sweep")
    for column in ("run", "status", "NMI", "ACC", "ARI", "seconds"):
        table.add_column(column)
    for p in points:
        m = p.metrics
        table.add_row(p.name, p.status, *(f"{m[k]:.4f}" if k in m else "" for k in ("nmi", "acc", "ari")),
                      f"{p.seconds:.0f}" if p.seconds else "")
    console.print(table)

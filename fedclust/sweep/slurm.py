"""`fedclust sweep --executor slurm | submitit-local | submitit-debug`: the points as one submitit job array, each
job running the same point in the same folder as the local queue would (done points skipped, checkpointed ones
resumed, stale ones set aside); a job cut off by its time limit or preempted is requeued and resumes."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console

from fedclust.errors import ConfigError
from fedclust.run_folder import write_json
from fedclust.sweep import points as _points  # run_point by attribute: tests replace it
from fedclust.sweep.points import Ledger, Point, mark_done, summed_up


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


def require_submitit(executor: str) -> None:
    try:
        import submitit  # noqa: F401
    except ImportError:
        raise ConfigError("executor", executor, "local, or install submitit (pip install 'fedclust[slurm]') to "
                          "run the points through it") from None


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
    mark_done(root, points)
    for point in points:
        if point.status != "done" and executor == "slurm" and point.name in jobs and (
                _slurm_state(root, jobs[point.name]) in _LIVE):
            point.status = "submitted"
            coming.append(point)
    todo = [p for p in points if p.status not in ("done", "submitted")]
    console.print(f"sweep {root}: {len(points)} runs, {sum(p.status == 'done' for p in points)} already done, "
                  f"{len(coming)} queued or running, {len(todo)} to submit ({executor})")
    if dry_run or not todo:
        return summed_up(ledger, console, points)
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
        return summed_up(ledger, console, points)
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
    return summed_up(ledger, console, points)


class PointJob:
    """One point as a submitit job: run_points' `_run_point` on the cluster node. submitit calls `checkpoint` when
    Slurm's time limit nears or the job is preempted, and requeues the job, which then resumes the point's run
    from its last checkpoint (a module-level class, so the job pickles by reference)."""

    def __call__(self, root: str, point: Point, group: str, record: dict | None, cwd: str) -> Point:
        os.chdir(cwd)  # the point's config path is relative to where the sweep was started
        _points.run_point(Path(root), point, {}, group, Console(), record)
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

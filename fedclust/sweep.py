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

import yaml
from jsonargparse import ArgumentParser
from rich.console import Console
from rich.table import Table

from fedclust.errors import ConfigError
from fedclust.parsers import command_parser
from fedclust.run import fit_parser
from fedclust.run_folder import CHECKPOINT, read_final_metrics, write_json


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
          devices: list[int] | None = None, group: str | None = None, dry_run: bool = False) -> list[dict]:
    """Run one `fedclust fit` per point of a grid of overrides, a queue over device slots.

    Args:
        config: The base config (configs/*.yaml).
        grid: Axes as KEY=V1,V2,... (repeat the flag; `config=a.yaml,b.yaml` sweeps over configs).
        sweep_dir: Folder of the sweep's run folders (default sweeps/<config name>).
        slots: Parallel runs on the CPU (each gets cores / slots threads); ignored when devices is given.
        devices: GPU ids, one run per GPU at a time (CUDA_VISIBLE_DEVICES).
        group: W&B group of the runs (default: the sweep folder's name), used when the config logs to W&B.
        dry_run: List the points and their status without running anything.
    """
    axes = parse_grid(grid or [])
    root = Path(sweep_dir or Path("sweeps") / Path(config).stem)
    points = expand(config, axes)
    for point in points:
        check(point)
    return run_points(root, points, slots, devices, group=group, dry_run=dry_run)


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

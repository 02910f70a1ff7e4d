"""A sweep's points and their records: the grid as `Point`s (each checked with fit's parser), one point run as a
`fedclust fit` subprocess in its own folder, the fingerprint of what a point computes (a folder made with other
settings is set aside, never deleted), the sweep.json ledger and the summary table. Shared by the local queue
(fedclust/sweep/__init__.py), the Slurm job array (sweep/slurm.py) and the benchmarks runner."""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console
from rich.table import Table

from fedclust.errors import ConfigError
from fedclust.run import fit_parser
from fedclust.run_folder import CHECKPOINT, read_final_metrics, write_json


@dataclass
class Point:
    """One run of the sweep."""

    name: str
    config: str
    overrides: dict[str, object]
    status: str = "pending"  # pending | done | failed (then see log) | interrupted (the sweep was stopped)
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


def run_point(root: Path, point: Point, slot_env: dict[str, str], group: str, console: Console,
               record: Callable[[], dict] | None = None) -> None:
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
        # the record is made now, not when the queue began: a long queue outlives commits and days
        fields = record() if record else {}
        _fingerprint_file(root, point).write_text(json.dumps({"fingerprint": fingerprint(point), **fields}))
        console.print(f"[cyan]start[/] {point.name}")
    cmd = [sys.executable, "-m", "fedclust", "fit", *target, "--progress", "false", "--group", group,
           "--name", point.name]
    env = {**os.environ, **slot_env}
    env.pop("FEDCLUST_RUN_DIR", None)
    start = time.perf_counter()
    with open(log, "a") as out:
        rc = _run_fit(cmd, env, out)
    point.seconds = time.perf_counter() - start
    if rc is None or (rc != 0 and _stopping.is_set()):
        point.status = "interrupted"  # its checkpoint (if it made one) is kept: the same command resumes it
        console.print(f"[yellow]interrupted[/] {point.name}")
    elif rc == 0 and (folder / "final.json").exists():
        point.status = "done"
        point.metrics = read_final_metrics(folder / "final.json")
        console.print(f"[green]done[/] {point.name}: NMI {point.metrics.get('nmi', float('nan')):.4f} "
                      f"({point.seconds:.0f} s)")
    else:
        point.status = "failed"
        console.print(f"[red]failed[/] {point.name} (exit {rc}): see {log}")


_live: set[subprocess.Popen] = set()  # the points' fits running now, for stop_runs
_live_lock = threading.Lock()
_stopping = threading.Event()  # set by stop_runs: no further fit starts


def _run_fit(cmd: list[str], env: dict[str, str], out: Any) -> int | None:
    """A point's `fedclust fit` to its end, known to stop_runs while it runs; its exit code, or None when the sweep
    is stopping and it was not started."""
    with _live_lock:  # the check and the start under one lock: stop_runs cannot miss a fit starting as it runs
        if _stopping.is_set():
            return None
        child = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)
        _live.add(child)
    try:
        return child.wait()
    finally:
        with _live_lock:
            _live.discard(child)


def allow_runs() -> None:
    """A new sweep may start fits again (after an earlier one in this process was stopped)."""
    _stopping.clear()


def stop_runs(settle: float = 5.0, grace: float = 60.0) -> None:
    """Stop the sweep's running fits as Ctrl-C stops one, and start no further one. Each gets `settle` seconds to end
    on a signal it already had (a terminal's Ctrl-C reaches the whole process group), then SIGTERM (which a fit takes
    as Ctrl-C: it keeps its last checkpoint and says how to resume; SIGINT would not do, as a sweep started in the
    background hands its fits SIGINT ignored), and is killed if still running `grace` seconds later."""
    _stopping.set()
    with _live_lock:
        running = list(_live)
    _wait_all(running, settle)
    for child in running:
        if child.poll() is None:
            child.send_signal(signal.SIGTERM)
    for child in _wait_all(running, grace):
        child.kill()
        child.wait()


def _wait_all(children: list[subprocess.Popen], seconds: float) -> list[subprocess.Popen]:
    """Wait up to `seconds` in all for the children to end; those still running."""
    deadline = time.monotonic() + seconds
    for child in children:
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.wait(max(0.0, deadline - time.monotonic()))
    return [child for child in children if child.poll() is None]


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


def set_aside_if_stale(root: Path, point: Point) -> None:
    """A point folder made with other settings is not this point's run: move it aside, keep it whole."""
    folder, saved = root / point.name, _fingerprint_file(root, point)
    if not folder.exists() or made_with(start_record(root, point), point):
        return
    n = 1
    while folder.with_name(f"{folder.name}.stale-{n}").exists():
        n += 1
    folder.rename(folder.with_name(f"{folder.name}.stale-{n}"))
    saved.unlink(missing_ok=True)


def mark_done(root: Path, points: list[Point]) -> None:
    """Before a sweep starts: each point's folder set aside if made with other settings, and a finished one (its
    final.json) marked done with its metrics, so neither the local queue nor the job array runs it again."""
    for point in points:
        set_aside_if_stale(root, point)
        if (root / point.name / "final.json").exists():
            point.status, point.metrics = "done", read_final_metrics(root / point.name / "final.json")


class Ledger:
    """sweep.json, rewritten after every finished run (thread-safe, atomic)."""

    def __init__(self, path: Path, points: list[Point]):
        self.path, self.points, self.lock = path, points, threading.Lock()

    def write(self) -> None:
        with self.lock:  # strict JSON (a NaN score is null), atomically
            write_json(self.path, [asdict(p) for p in self.points], "sweep_dir")


def summed_up(ledger: Ledger, console: Console, points: list[Point]) -> list[dict]:
    """Where a sweep call ends: the ledger written, the summary table printed, the points as sweep returns them."""
    ledger.write()
    print_summary(console, points)
    return [asdict(p) for p in points]


def print_summary(console: Console, points: list[Point]) -> None:
    table = Table(title="sweep")
    for column in ("run", "status", "NMI", "ACC", "ARI", "seconds"):
        table.add_column(column)
    for p in points:
        m = p.metrics
        table.add_row(p.name, p.status, *(f"{m[k]:.4f}" if k in m else "" for k in ("nmi", "acc", "ari")),
                      f"{p.seconds:.0f}" if p.seconds else "")
    console.print(table)

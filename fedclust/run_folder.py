"""Run folders: claimed atomically and locked while their run is alive, and the files written into them.

- A new folder is created with an exclusive mkdir; an automatic name that is taken (two runs started in
  the same second) gets a numeric suffix, an explicit `run_dir` that holds files is refused.
- The claiming process holds an advisory lock (fcntl.flock on RUN/.lock, which also records its PID) until
  it ends; the kernel drops the lock when the process dies, so `--resume` of a killed run works while a
  second process on a live run's folder is refused with one sentence.
- If the run fails before it has written anything (a bad config found while building the data or the
  method), the folder it created is removed again, and so are the parents it created (an empty runs/):
  a rejected config leaves nothing behind.

It knows no parser and no command: a run is brought back from its folder by fedclust.run.load_run, which reads
config.yaml with fit's parser (fedclust/saved_run.py).
"""

from __future__ import annotations

import contextlib
import csv
import errno
import fcntl
import json
import math
import os
import shutil
import statistics
import time
from collections.abc import Iterator
from pathlib import Path

import torch

from fedclust.errors import ConfigError, FedclustError
from fedclust.run_checks import CHECKPOINT, LOCK, check_new_run_dir, check_resume_folder, rank_zero_before_launch  # noqa: F401  (CHECKPOINT: read from here too)

# a write that failed for want of room: disk full, quota exceeded, or the process's file-size limit (ulimit -f)
NO_ROOM = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
RUN_DIR_ENV = "FEDCLUST_RUN_DIR"  # rank 0's run folder, inherited by the DDP processes it launches


class RunFolder:
    """A claimed run folder and its lock; `release()` lets go of the lock, `abandon()` also removes a
    folder this process created."""

    def __init__(self, path: Path, created: bool, created_parents: tuple[Path, ...] = ()):
        self.path, self.created, self.created_parents = path, created, created_parents  # parents: innermost first
        self._fd: int | None = None
        self._lock_before: bytes | None = None  # the .lock's bytes before this process locked it (None: no file)
        self.written = False  # the run has begun writing its files (set by fedclust.run.fit)

    def lock(self, field: str = "run_dir") -> RunFolder:
        try:
            self._lock_before = (self.path / LOCK).read_bytes()
        except OSError:
            self._lock_before = None
        fd = os.open(self.path / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "another process"
            os.close(fd)
            raise ConfigError(field, str(self.path), f"a folder no live run holds (pid {holder} is running in "
                              f"it; wait for it or choose another --{field})") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing drops the flock; the file stays as a harmless marker
            self._fd = None

    def restore_lock(self) -> None:
        """A run refused after locking a folder it did not create (a resumed run whose data or model could not be
        built): the .lock gets back its earlier bytes (or goes, if there was none), so the folder is as it was."""
        if self._fd is None:
            return
        if self._lock_before is None:
            (self.path / LOCK).unlink(missing_ok=True)
        else:
            os.ftruncate(self._fd, 0)
            os.pwrite(self._fd, self._lock_before, 0)
        self.release()

    def abandon(self) -> None:
        """The run failed before writing anything: remove the folder if this process made it."""
        self.release()
        if self.created:
            shutil.rmtree(self.path, ignore_errors=True)
            for parent in self.created_parents:  # runs/ made for this run: removed while nothing else is in it
                try:
                    parent.rmdir()
                except OSError:
                    break


def claim(runs_dir: str, prefix: str, run_dir: str | None) -> RunFolder:
    """A new run folder: runs_dir/<prefix>_<time>[-N] or exactly run_dir (which must be new or empty)."""
    if run_dir is not None:
        folder = Path(run_dir)
        check_new_run_dir(folder)
        parents = _missing_parents(folder)
        created = _mkdir(folder, exist_ok=True, field="run_dir")
        return RunFolder(folder, created, parents).lock()
    base = Path(runs_dir) / f"{prefix}_{time.strftime('%Y%m%d-%H%M%S')}"
    parents = _missing_parents(base)
    for n in range(1, 1000):
        folder = base if n == 1 else base.with_name(f"{base.name}-{n}")
        if _mkdir(folder, exist_ok=False, field="runs_dir"):
            return RunFolder(folder, True, parents).lock()
    raise ConfigError("runs_dir", runs_dir, "a folder where new run folders can be created")


def resume(run_dir: str) -> RunFolder:
    check_resume_folder(run_dir)
    return RunFolder(Path(run_dir), created=False).lock("resume")


@contextlib.contextmanager
def claimed(runs_dir: str, run_dir: str | None, resume_dir: str | None, prefix: str) -> Iterator[RunFolder]:
    """A run's folder, claimed (`claim`, or `resume` of resume_dir) and locked by rank 0 for the run's life (the
    processes it launches, and ranks torchrun started, find it through RUN_DIR_ENV or the arguments). A run that
    fails before it has written its own files leaves nothing: a new folder is removed again, a resumed one gets its
    .lock back as it was."""
    if not rank_zero_before_launch():
        yield RunFolder(Path(os.environ.get(RUN_DIR_ENV) or resume_dir or run_dir or ""), created=False)
        return
    folder = resume(resume_dir) if resume_dir is not None else claim(runs_dir, prefix, run_dir)
    os.environ[RUN_DIR_ENV] = str(folder.path)  # the processes Fabric launches next write nothing, but know it
    try:
        yield folder
    except BaseException:
        if not (folder.path / "config.yaml").exists():
            folder.abandon()  # failed before writing anything (a bad config found late): leave nothing behind
        elif not folder.written:
            folder.restore_lock()  # a resumed run refused before its first write: the folder is as it was
        raise
    finally:
        folder.release()


def write_output(path: Path, text: str, field: str) -> None:
    """Write a user-named output file atomically (temp file + rename: a failure never leaves half a file, and
    the file there before stays as it was); a place that cannot be written is one sentence naming `field`."""
    path = Path(path)
    if path.is_dir():
        raise ConfigError(field, str(path), "a file path, not a folder")
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(text)
        os.replace(tmp, path)
    except BaseException as error:  # an interruption too: no temp file is left behind
        if tmp.parent.is_dir():
            tmp.unlink(missing_ok=True)
        if isinstance(error, OSError) and error.errno in NO_ROOM:
            kept = "the earlier file is unchanged" if path.exists() else "nothing was written"
            raise FedclustError(f"{path} could not be written ({error.strerror}); {kept}: free space and run "
                                "again.") from None
        if isinstance(error, OSError):
            raise ConfigError(field, str(path), f"a file this user can write ({error.strerror or error})") from None
        raise


def json_text(value) -> str:
    """Strict JSON (RFC 8259 has no NaN or Infinity, which Python's json module writes by default and most other
    readers refuse): a non-finite float is written as null."""
    return json.dumps(_finite_or_none(value), indent=2, allow_nan=False)


def _finite_or_none(value):
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: _finite_or_none(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite_or_none(item) for item in value]
    return value


def write_json(path: Path, value, field: str = "run_dir") -> None:
    """`value` as strict JSON (json_text), written atomically (write_output)."""
    write_output(path, json_text(value), field)


def read_final_metrics(path: Path) -> dict[str, float]:
    """The metrics of a final.json, null (a score that could not be computed) read back as nan."""
    metrics = json.loads(Path(path).read_text())["metrics"]
    return {key: math.nan if value is None else value for key, value in metrics.items()}


def metric_by_round(folder: Path, metric: str) -> dict[int, float]:
    """round -> what the run in ``folder`` scored on ``metric`` at that round, from metrics.csv and diagnostics.csv
    (a diagnostic wins). A run folder is untrusted: unreadable files, unscored rounds and non-numbers are left out."""
    found: dict[int, float] = {}
    for name in ("metrics.csv", "diagnostics.csv"):
        try:
            with (Path(folder) / name).open(newline="") as table:
                rows = list(csv.DictReader(table))
        except (OSError, UnicodeDecodeError, csv.Error):
            continue
        for row in rows:
            try:
                at, value = int(row.get("round") or ""), float(row.get(metric) or "")
            except ValueError:
                continue
            if math.isfinite(value):
                found[at] = value
    return found


def rounds_level(values: dict[int, float], first: int, last: int) -> tuple[float, float] | None:
    """The mean and sample standard deviation of ``values`` over rounds first..last (a stage's level, which one
    round's draw is not); None until every one of those rounds is in."""
    inside = [v for r, v in values.items() if first <= r <= last]
    if len(inside) < max(2, last - first + 1):
        return None
    return statistics.mean(inside), statistics.stdev(inside)


def check_writable(path: Path, field: str) -> None:
    """Before any work: `path` (a file to write later) can be written, or one sentence naming `field`."""
    write_output(Path(path).with_name(f".{Path(path).name}.probe"), "", field)
    Path(path).with_name(f".{Path(path).name}.probe").unlink()


def _missing_parents(folder: Path) -> tuple[Path, ...]:
    """The parents of `folder` that do not exist yet, innermost first (made by _mkdir, removed by abandon)."""
    missing = []
    for parent in Path(folder).absolute().parents:
        if parent.exists():
            break
        missing.append(parent)
    return tuple(missing)


def _mkdir(folder: Path, exist_ok: bool, field: str) -> bool:
    """Create `folder` (True), or find it already there (False; only with exist_ok); a failure names `field`
    (runs_dir for a folder made inside it, run_dir for an explicit one)."""
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        folder.mkdir()
        return True
    except FileExistsError:
        if exist_ok and folder.is_dir():
            return False
        if exist_ok:
            raise ConfigError(field, str(folder), "a folder path (a file has that name)") from None
        return False
    except PermissionError:
        raise ConfigError(field, str(folder), "a folder this user can write in") from None
    except OSError as error:
        raise ConfigError(field, str(folder), f"a folder that can be created ({error.strerror})") from None


# ---------------------------------------------------------------- what a run folder holds


def write_counts_csv(path: Path, counts: torch.Tensor) -> None:
    header = "client," + ",".join(f"class_{c}" for c in range(counts.shape[1]))
    rows = [f"{i}," + ",".join(str(int(v)) for v in row) for i, row in enumerate(counts)]
    write_output(path, "\n".join([header, *rows]) + "\n", "run_dir")


def write_assignments(path: Path, clusters: torch.Tensor, data, field: str = "run_dir") -> None:
    """index, client, label, cluster for every sample (client -1 when a sample belongs to none)."""
    client = torch.full((len(data),), -1, dtype=torch.long)
    for cid, part in enumerate(data.parts):
        client[part.cpu()] = cid
    lines = ["index,client,label,cluster"]
    lines += [f"{i},{c},{y},{k}" for i, (c, y, k) in
              enumerate(zip(client.tolist(), data.labels.cpu().tolist(), clusters.tolist()))]
    write_output(path, "\n".join(lines) + "\n", field)

"""A sweep sent SIGTERM (`kill PID`, a scheduler's stop) stops as on Ctrl-C: its running fits are stopped with it
rather than left running without it, and no further point starts (fedclust/interrupts.py, sweep/points.py)."""

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from fedclust.interrupts import Terminated, sigterm_as_interrupt
from fedclust.sweep import Point, run_points
from fedclust.sweep import points as sweep_points

SLEEPER = "import time; print('up', flush=True); time.sleep(120)"  # a fit that would outlast the test


def _started(log, seconds=30.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if log.exists() and "up" in log.read_text():
            return True
        time.sleep(0.05)
    return False


def test_sigterm_raises_terminated_inside_the_block_only():
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(Terminated), sigterm_as_interrupt():
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the handler raises at the next bytecode
    assert signal.getsignal(signal.SIGTERM) == before
    assert issubclass(Terminated, KeyboardInterrupt)  # every Ctrl-C path handles it


def test_sigterm_stops_the_running_fits_and_starts_no_further_point(tmp_path, monkeypatch):
    started, children = [], []
    real_popen = subprocess.Popen

    def popen(*args, **kwargs):
        children.append(real_popen(*args, **kwargs))
        return children[-1]

    def fake_run_point(root, point, env, group, console, record=None):
        started.append(point.name)
        with open(tmp_path / f"{point.name}.log", "w") as out:
            point.status = str(sweep_points._run_fit([sys.executable, "-c", SLEEPER], dict(os.environ), out))

    monkeypatch.setattr(sweep_points, "run_point", fake_run_point)
    monkeypatch.setattr(sweep_points.subprocess, "Popen", popen)
    threading.Thread(target=lambda: _started(tmp_path / "p0.log") and os.kill(os.getpid(), signal.SIGTERM),
                     daemon=True).start()
    points = [Point(f"p{i}", "unused.yaml", {}) for i in range(3)]
    began = time.monotonic()
    with pytest.raises(Terminated), sigterm_as_interrupt():
        run_points(tmp_path / "sweep", points, slots=1)
    assert time.monotonic() - began < 30  # not the sleeper's 120 s: it was stopped, not waited for
    assert started == ["p0"] and len(children) == 1
    assert children[0].returncode == -signal.SIGTERM  # the sweep passed SIGTERM on (a fit takes it as Ctrl-C)
    assert [p.status for p in points] == [str(-signal.SIGTERM), "pending", "pending"]


def test_stop_runs_kills_a_fit_that_ignores_sigterm(tmp_path):
    ignorer = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('up', flush=True); " \
              "time.sleep(120)"
    codes = []
    sweep_points.allow_runs()
    with open(tmp_path / "p.log", "w") as out:
        worker = threading.Thread(target=lambda: codes.append(
            sweep_points._run_fit([sys.executable, "-c", ignorer], dict(os.environ), out)))
        worker.start()
        assert _started(tmp_path / "p.log")
        sweep_points.stop_runs(settle=0.0, grace=0.5)
        worker.join(10)
    assert codes == [-signal.SIGKILL]
    assert sweep_points._run_fit([sys.executable, "-c", "pass"], dict(os.environ), None) is None  # none starts now
    sweep_points.allow_runs()

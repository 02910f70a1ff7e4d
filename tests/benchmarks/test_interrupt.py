"""An interrupted queue (Ctrl-C, or the GPU protocol's time budget: `timeout -s INT`) stops: the fits that run
get the same SIGINT and keep their checkpoints, and no further point is started."""

import os
import signal
import time

import pytest

from fedclust.sweep import Point, run_points
from fedclust.sweep import points as sweep_points


def test_sigint_starts_no_further_point(tmp_path, monkeypatch):
    started = []

    def fake_run_point(root, point, env, group, console, record=None):
        started.append(point.name)
        os.kill(os.getpid(), signal.SIGINT)  # as a terminal's Ctrl-C reaches the whole process group
        time.sleep(0.5)  # the running fit winds down

    monkeypatch.setattr(sweep_points, "run_point", fake_run_point)
    # a pytest started in the background (`nohup ... &`) inherits SIGINT ignored; the test needs Python's default
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    points = [Point(f"p{i}", "unused.yaml", {}) for i in range(3)]
    try:
        with pytest.raises(KeyboardInterrupt):
            run_points(tmp_path, points, slots=1)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert started == ["p0"]

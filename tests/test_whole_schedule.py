"""benchmarks/whole_schedule.py's definitions and branching (issue 14, point 2), without running a fit: every run
names a packaged config, every branch goes on from a snapshot of a defined run and changes only settings its
method has, and `start_branch` builds the branch's folder without touching its source."""

import inspect
import os
import sys
from pathlib import Path

import yaml

from fedclust.registry import METHODS

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
import whole_schedule  # noqa: E402  (benchmarks/ is not a package)


def _at(node: dict, key: str) -> object:
    """The value under a dotted key ("federation.eval_every") of a loaded config; KeyError when it is missing."""
    for part in key.split("."):
        node = node[part]
    return node


def _method_arguments(config: Path) -> set[str]:
    class_path = yaml.safe_load(config.read_text())["method"]["class_path"]
    return set(inspect.signature(METHODS[class_path].load().__init__).parameters) - {"self"}


def test_every_run_names_a_config_and_every_branch_a_defined_source_and_known_settings():
    for name, spec in whole_schedule.RUNS_BY_NAME.items():
        assert (ROOT / spec.config).is_file(), name
    for name, branch in whole_schedule.BRANCHES.items():
        run, _, at = branch.source.rpartition("_round")
        assert run in whole_schedule.RUNS_BY_NAME and at.isdigit(), (name, branch.source)
        config = ROOT / whole_schedule.RUNS_BY_NAME[run].config
        for key in branch.changes:
            section, *rest = key.split(".")
            if section == "method":
                assert rest[0] == "init_args" and rest[-1] in _method_arguments(config), (name, key)
            else:
                _at(yaml.safe_load(config.read_text()), key)  # a setting the run's config has


def test_start_branch_copies_the_snapshot_and_edits_only_the_copy(tmp_path, monkeypatch):
    name, branch = next(iter(whole_schedule.BRANCHES.items()))
    monkeypatch.setattr(whole_schedule, "WHOLE", tmp_path)
    source = tmp_path / branch.source
    (source / "checkpoints").mkdir(parents=True)
    (source / "checkpoints" / "last.ckpt").write_bytes(b"weights")
    for extra in ("partition.csv", "partition.txt", "metrics.csv"):
        (source / extra).write_text(extra)
    config = {"method": {"class_path": "FedMCC", "init_args": {"rounds_placeholder": 1}},
              "federation": {"eval_every": 5}}
    (source / "config.yaml").write_text(yaml.safe_dump(config))

    folder = whole_schedule.start_branch(name)

    assert folder == tmp_path / name and not (tmp_path / f"{name}.tmp").exists()
    assert os.path.samefile(folder / "checkpoints" / "last.ckpt", source / "checkpoints" / "last.ckpt")
    edited = yaml.safe_load((folder / "config.yaml").read_text())
    for key, value in branch.changes.items():
        assert _at(edited, key) == value, key
    assert yaml.safe_load((source / "config.yaml").read_text()) == config  # the source is untouched
    assert (folder / "metrics.csv").read_text() == "metrics.csv"
    assert whole_schedule.start_branch(name) == folder  # a started branch is reused, not rebuilt

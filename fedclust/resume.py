"""What `fit --resume` may change, and what a resumed run keeps from its start (fedclust/run.py calls both)."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import re
from pathlib import Path

import yaml

from fedclust.data.config import DataConfig
from fedclust.errors import ConfigError
from fedclust.federation.config import FederationConfig
from fedclust.nn.precision import BF16, FP32

# Settings that change what a run computes; a resumed run must keep them (observation settings such as the
# logger, eval_every, checkpoint_every, progress, data.root and data loading may change).
_RESUME_FREE = {"federation": {"eval_every", "checkpoint_every"},
                "data": {"root", "placement", "num_workers", "eval_batch_size"}}


def check_resume_overrides(folder: Path, config_text: str) -> None:
    """--resume continues the run that was saved: refuse any change of method, data, partition, seed or schedule.

    A setting the saved run lacks (added to fedclust since it started) is no change when it holds the code's
    default, which is what the run computed with before the setting existed.
    """
    saved = yaml.safe_load((folder / "config.yaml").read_text()) or {}
    now = yaml.safe_load(config_text) or {}
    old_flat = _flatten({section: saved.get(section) for section in _RESUME_KEPT})
    new_flat = _flatten({section: now.get(section) for section in _RESUME_KEPT})
    defaults = _code_defaults(now)
    for key in sorted(set(old_flat) | set(new_flat)):
        section, _, leaf = key.partition(".")
        if leaf.split(".")[0] in _RESUME_FREE.get(section, set()) or old_flat.get(key) == new_flat.get(key):
            continue
        if key not in old_flat and key in defaults and new_flat[key] == defaults[key]:
            continue  # a setting newer than the run, at the default the run had
        raise ConfigError(key, new_flat.get(key), f"the resumed run's own value {old_flat.get(key)!r} "
                          "(--resume continues that run; start a new run to change it)")


_RESUME_KEPT = ("method", "data", "federation", "seed")


def _flatten(tree, prefix: str = "") -> dict:
    """{"a": {"b": 1}} -> {"a.b": 1}; lists and other values are leaves."""
    if not isinstance(tree, dict):
        return {prefix: tree} if prefix else {}
    flat = {}
    for key, value in tree.items():
        flat.update(_flatten(value, f"{prefix}.{key}" if prefix else str(key)))
    return flat


def _code_defaults(config: dict) -> dict:
    """The defaults today's code gives each setting of the method and the data and federation sections."""
    def as_yaml(value):  # tuples are written to config.yaml as lists
        return yaml.safe_load(yaml.safe_dump(list(value) if isinstance(value, tuple) else value))

    defaults = {}
    for section, cls in (("data", DataConfig), ("federation", FederationConfig)):
        for field in dataclasses.fields(cls):
            if field.default is not dataclasses.MISSING:
                defaults[f"{section}.{field.name}"] = as_yaml(field.default)
    module, _, name = str(config.get("method", {}).get("class_path", "")).rpartition(".")
    try:
        method_class = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError, ValueError):
        return defaults
    for param in inspect.signature(method_class).parameters.values():
        if param.default is not inspect.Parameter.empty:
            try:
                defaults[f"method.init_args.{param.name}"] = as_yaml(param.default)
            except yaml.YAMLError:
                continue
    return defaults


def arithmetic_line(precision: str, memory_format: str, why: str) -> str:
    """The run.log line that records the arithmetic a run trains in (started_arithmetic reads it back)."""
    return f"precision: {precision} ({why}); memory format: {memory_format}"


_ARITHMETIC = re.compile(r"precision: (\S+) \(.*\); memory format: (\S+)")


def started_arithmetic(folder: Path) -> tuple[str, str] | None:
    """(precision, memory format) of the first arithmetic_line in the run's run.log; None if there is none valid."""
    log_path = folder / "run.log"
    if not log_path.is_file():
        return None
    for line in log_path.read_text(errors="replace").splitlines():
        found = _ARITHMETIC.fullmatch(line)
        if found and found[1] in (FP32, BF16) and found[2] in ("contiguous", "channels_last"):
            return found[1], found[2]
    return None

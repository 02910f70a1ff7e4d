"""What `fit --resume` may change, and what a resumed run keeps from its start (fedclust/run.py calls both).

Torch-free at import: the command line's first pass (fedclust/precheck/) applies the same rule (`first_change`)
to what it knows of a command line before torch is imported, so a refused resume reads the same both ways.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import re
from pathlib import Path

import yaml

from fedclust.errors import ConfigError

# Settings that change what a run computes; a resumed run must keep them (observation settings such as the
# logger, eval_every, checkpoint_every, progress, data.root and data loading may change).
_RESUME_FREE = {"federation": {"eval_every", "checkpoint_every"},
                "data": {"root", "placement", "num_workers", "eval_batch_size"}}
RESUME_KEPT = ("method", "data", "federation", "seed")
NOT_KNOWN = object()  # a value the caller cannot tell (the first pass): never judged


def check_resume_overrides(folder: Path, config_text: str) -> None:
    """--resume continues the run that was saved: refuse any change of method, data, partition, seed or schedule.

    A setting the saved run lacks (added to fedclust since it started) is no change when it holds the code's
    default, which is what the run computed with before the setting existed.
    """
    saved = yaml.safe_load((folder / "config.yaml").read_text()) or {}
    now = yaml.safe_load(config_text) or {}
    refuse_change(saved, flatten({section: now.get(section) for section in RESUME_KEPT}), _code_defaults(now))


def refuse_change(saved: dict, new_flat: dict, defaults: dict, complete: bool = True) -> None:
    """One sentence for the first setting `new_flat` changes in the saved config (see first_change)."""
    change = first_change(saved, new_flat, defaults, complete)
    if change is None:
        return
    key, old, new = change
    if key == "method.class_path":
        old_name, new_name = (str(v).rsplit(".", 1)[-1] for v in (old, new))
        raise ConfigError(key, new_name, f"the resumed run's own method, {old_name} (--resume continues that "
                          f"{old_name} run; start a new run to use {new_name})")
    raise ConfigError(key, new, f"the resumed run's own value {old!r} (--resume continues that run; start a new run "
                      "to change it)")


def first_change(saved: dict, new_flat: dict, defaults: dict,
                 complete: bool = True) -> tuple[str, object, object] | None:
    """(key, saved value, new value) of the first setting a resumed run may not change, the method first; None.

    `new_flat`: the dotted settings the resumed run would get. `complete` (the run's resolved config) holds every
    setting; the first pass (complete=False) knows only some, and values it cannot tell are NOT_KNOWN: a setting it
    does not know, or whose default it does not know, is never called a change.
    """
    old_flat = flatten({section: saved.get(section) for section in RESUME_KEPT})
    old_class, new_class = old_flat.get("method.class_path"), new_flat.get("method.class_path", NOT_KNOWN)
    if new_class is not NOT_KNOWN and _short(old_class) != _short(new_class):
        return "method.class_path", old_class, new_class
    for key in sorted(set(old_flat) | set(new_flat)):
        section, _, leaf = key.partition(".")
        if leaf.split(".")[0] in _RESUME_FREE.get(section, set()):
            continue
        if not complete and (key == "method.class_path" or _not_known(key, new_flat)):
            continue
        old, new = old_flat.get(key), _plain(new_flat.get(key))
        if old == new:
            continue
        if key not in old_flat:
            default = defaults.get(key, NOT_KNOWN)
            if default is not NOT_KNOWN and new == _plain(default):
                continue  # a setting newer than the run, at the default the run had
            if default is NOT_KNOWN and not complete:
                continue
        return key, old, new
    return None


def _short(class_path) -> str:
    return str(class_path).rsplit(".", 1)[-1]


def _not_known(key: str, new_flat: dict) -> bool:
    """Whether the first pass cannot tell `key`'s new value: not given, or it or a section above it NOT_KNOWN."""
    parts = key.split(".")
    if any(new_flat.get(".".join(parts[:i])) is NOT_KNOWN for i in range(1, len(parts))):
        return True
    return new_flat.get(key, NOT_KNOWN) is NOT_KNOWN


def _plain(value):
    """A value as config.yaml holds it (tuples are written as lists)."""
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def flatten(tree, prefix: str = "") -> dict:
    """{"a": {"b": 1}} -> {"a.b": 1}; lists and other values are leaves."""
    if not isinstance(tree, dict):
        return {prefix: tree} if prefix else {}
    flat = {}
    for key, value in tree.items():
        flat.update(flatten(value, f"{prefix}.{key}" if prefix else str(key)))
    return flat


def _code_defaults(config: dict) -> dict:
    """The defaults today's code gives each setting of the method and the data and federation sections."""
    from fedclust.data.config import DataConfig
    from fedclust.federation.config import FederationConfig

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
    from fedclust.nn.precision import BF16, FP32  # (torch: only a run that resumes asks)

    log_path = folder / "run.log"
    if not log_path.is_file():
        return None
    for line in log_path.read_text(errors="replace").splitlines():
        found = _ARITHMETIC.fullmatch(line)
        if found and found[1] in (FP32, BF16) and found[2] in ("contiguous", "channels_last"):
            return found[1], found[2]
    return None

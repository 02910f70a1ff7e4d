"""`fedclust evaluate | sweep | compare` against the schema: options by type, the value checks evaluate makes
before loading anything, the run folders, and each sweep point as the `fedclust fit` command it becomes."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

from fedclust.errors import ConfigError, FedclustError
from fedclust.precheck import facts, ranges
from fedclust.precheck.argv import Argv, Event, option_value
from fedclust.precheck.fit_config import Fit
from fedclust.precheck.values import Schema, StepAside

MAX_SWEEP_POINTS = 5000


def simple(schema: Schema, command: str, args: list[str]) -> tuple[dict[str, list[Event]], dict, list[str] | None]:
    """Options checked by type: the events of each option, the values they make ("split" -> "test"), and the
    positional values."""
    cmd = schema.command(command)
    argv = Argv(command, cmd["options"])
    seen: dict[str, list[Event]] = {}
    values: dict[str, object] = {}
    positional = None
    for event in argv.events(args):
        if isinstance(event, tuple):
            if cmd["positional"] is None:
                raise argv.stray(event[1])
            positional = event[1]
            continue
        spec = cmd["options"][event.name]
        if spec["kind"] != "value":
            raise StepAside
        values[event.name[2:]] = option_value(schema, event.name, spec, event)
        seen.setdefault(event.name, []).append(event)
    required = [o for o, s in cmd["options"].items() if s.get("required") and o not in seen]
    if required:
        raise FedclustError(f"{', '.join(dict.fromkeys(required))} is required (`fedclust {command} --help` lists "
                            "the options).")
    if cmd["positional"] and cmd["positional"]["required"] and not positional:
        dest = cmd["positional"]["dest"]
        raise FedclustError(f"{dest} is required: one or more folders (`fedclust {command} RUN_DIR ...`; "
                            f"`fedclust {command} --help` lists the options).")
    return seen, values, positional


def path_value(event: Event) -> str:
    if event.value in ("null", "Null", "NULL", "~", ""):
        raise StepAside  # the parser reads these as None
    return event.value


def fit(schema: Schema, args: list[str]) -> None:
    Fit(schema).run(args)


def evaluate(schema: Schema, args: list[str]) -> None:
    seen, values, _ = simple(schema, "evaluate", args)
    ranges.evaluate(schema.command("evaluate")["options"], values)  # evaluate() checks these before the folder
    run = Path(path_value(seen["--run"][-1]))  # evaluate() reads Path(run): its messages show the path so
    facts.evaluate(run, values, schema.raw.get("datasets"), lambda folder: saved_fit_config(schema, folder))


def saved_fit_config(schema: Schema, folder: Path) -> None:
    """A run folder's config.yaml as load_run reads it with fit's parser: one it cannot read is refused with
    load_run's sentence around the reason (names and types only: the run made its range checks)."""
    try:
        Fit(schema, ranges=False).run(["--config", str(folder / "config.yaml")])
    except StepAside:
        return
    except FedclustError as error:
        raise ConfigError("run", str(folder), "a run folder whose config.yaml `fedclust fit` can read "
                          f"({str(error).rstrip('.')})") from None


def compare(schema: Schema, args: list[str]) -> None:
    seen, _, runs = simple(schema, "compare", args)
    for folder in map(Path, runs or []):  # as compare.runs.load_runs
        if (folder / "config.yaml").is_file():
            continue
        try:
            inner = folder.is_dir() and any((f / "config.yaml").is_file() and ".incomplete-" not in f.name
                                            for f in folder.iterdir())
        except OSError:  # a folder that cannot be listed
            inner = False
        if not inner:
            raise ConfigError("runs", str(folder), "a run folder holding config.yaml (written by `fedclust fit`) or a "
                              "folder of such run folders")
    if "--output" in seen and Path(path_value(seen["--output"][-1])).is_dir():
        raise ConfigError("output", seen["--output"][-1].value, "a file path for the HTML page, not a folder")


def sweep(schema: Schema, args: list[str]) -> None:
    import yaml

    seen, _, _ = simple(schema, "sweep", args)
    config = path_value(seen["--config"][-1])
    axes: dict[str, list] = {}
    for event in seen.get("--grid", []):  # as sweep.parse_grid
        entry = event.value
        key, sep, values = entry.partition("=")
        if not sep or not key.strip() or not values.strip():
            raise ConfigError("grid", entry, "KEY=V1,V2,... (e.g. data.p=0,0.5,1)")
        try:
            axes[key.strip().removeprefix("--")] = [yaml.safe_load(v) for v in values.split(",")]
        except yaml.YAMLError:
            raise ConfigError("grid", entry, "KEY=V1,V2,... with each value a number, true/false or a plain "
                              "word (e.g. data.p=0,0.5,1)") from None
    keys = list(axes)
    count = 1
    for values in axes.values():
        count *= len(values)
    if count > MAX_SWEEP_POINTS:
        raise StepAside
    for combo in itertools.product(*(axes[k] for k in keys)):  # as sweep.expand and sweep.check
        overrides = dict(zip(keys, combo))
        point_config = str(overrides.pop("config", config))
        if not Path(point_config).is_file():
            raise ConfigError("config", point_config, "a config file that exists")
        argv = ["--config", point_config]
        for key, value in overrides.items():
            argv += [f"--{key}", value if isinstance(value, str) else json.dumps(value)]
        try:
            Fit(schema, ranges=False).run(argv)  # sweep.check parses each point; its runs make the range checks
        except FedclustError as error:
            shown = ", ".join(f"{k}={v}" for k, v in overrides.items()) or f"config={point_config}"
            raise FedclustError(f"grid point {shown} is refused by `fedclust fit`: {error}") from None


CHECKS = {"fit": fit, "evaluate": evaluate, "sweep": sweep, "compare": compare}

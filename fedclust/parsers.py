"""jsonargparse parsers typed from a function's signature, knowing no command: each command's module builds its
own parser with `command_parser` (run.fit_parser, evaluate.evaluate_parser, ...), and hands it back here to
parse a command line, to turn the parsed values into objects, or to read a saved config file with it.

Building a command's parser imports torch and Lightning (through the types in its signature), so the command
line builds only the one of the subcommand that runs (fedclust/commands.py).
"""

from __future__ import annotations

import dataclasses
import importlib
import logging
from pathlib import Path

from jsonargparse import ActionConfigFile, ArgumentParser, Namespace

log = logging.getLogger(__name__)


def command_parser(function) -> ArgumentParser:
    """An empty parser for `function`'s arguments, described by its docstring's first line."""
    # exit_on_error=False: the CLI turns every parse error into one sentence (no usage block); prog: the usage
    # line names the subcommand (`fedclust compare ...`), not python's __main__.py
    return ArgumentParser(prog=f"fedclust {function.__name__}", description=function.__doc__.split("\n")[0],
                          exit_on_error=False)


def parse(parser: ArgumentParser, argv: list[str]) -> Namespace:
    """The arguments of a command line; a `--config` file (ActionConfigFile) is folded into the other keys."""
    cfg = parser.parse_args(argv, with_meta=False)
    if any(isinstance(action, ActionConfigFile) for action in parser._actions):
        cfg.pop("config", None)  # (sweep's `config` is a plain argument, its base file, and stays)
    return cfg


def resolved_config(parser: ArgumentParser, cfg: Namespace) -> tuple[dict, str]:
    """The arguments as objects, and the resolved config as YAML text (fit saves it in the run folder)."""
    text = parser.dump(cfg, skip_unset=False)
    return dict(parser.instantiate(cfg)), text


def read_config(parser: ArgumentParser, path: Path) -> dict:
    """The arguments saved in a config file (a run folder's config.yaml), as objects."""
    cfg = parser.parse_path(str(path), with_meta=False)
    cfg.pop("config", None)
    return dict(parser.instantiate(cfg))


def objects_config(parser: ArgumentParser, values: dict) -> str:
    """The resolved config (YAML) of a call made with objects instead of a command line, as the command line
    would save it: a dataclass as its fields, any other object as `class_path` + `init_args` (`init_arguments`).
    Objects it cannot describe so (a class defined inside a function, which jsonargparse cannot import again)
    are written as well as they can be, under a comment saying the file cannot be re-loaded, with a warning:
    the run itself goes on."""
    try:
        return parser.dump(parser.parse_object({key: describe(value) for key, value in values.items()}),
                           skip_unset=False)
    except Exception as error:  # noqa: BLE001 - whatever the objects are, the run goes on and says so
        import yaml

        reason = " ".join(str(error).split())[:300]
        log.warning("config.yaml cannot be re-loaded by `fedclust evaluate` or `--resume`: %s", reason)
        return f"# written from Python objects fedclust cannot name again ({reason})\n" + yaml.safe_dump(
            {key: _best_effort(value) for key, value in values.items()}, sort_keys=False, default_flow_style=None)


def _best_effort(value):
    try:
        return describe(value)
    except Exception:  # noqa: BLE001 - only for the comment-headed fallback file
        return repr(value)


def describe(value):
    """One value of a call as the config file holds it."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: describe(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, tuple | list):
        return [describe(v) for v in value]
    if isinstance(value, dict):
        return {k: describe(v) for k, v in value.items()}
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if callable(getattr(value, "tolist", None)):  # a NumPy or torch number or array
        return describe(value.tolist())
    if isinstance(value, type):  # a class: its defaults
        return {"class_path": class_path(value)}
    return {"class_path": class_path(type(value)), "init_args": init_arguments(value)}


def class_path(cls: type) -> str:
    """`module.Name` by the shortest package that exports the class (fedclust.methods.CCFC, as the command line
    writes it: a resumed run compares the saved class_path with the new one)."""
    module = cls.__module__
    while "." in module:
        parent = module.rsplit(".", 1)[0]
        if getattr(importlib.import_module(parent), cls.__name__, None) is not cls:
            break
        module = parent
    return f"{module}.{cls.__qualname__}"


def init_arguments(obj) -> dict:
    """The init arguments an object was built with, as far as it saved them: a method's `hparams` (Lightning's
    save_hyperparameters, which every registered method calls), restricted to what its class accepts (a
    family's base class saves arguments its subclasses fix). Arguments it did not save are left to their
    defaults, with a warning naming them."""
    parser = ArgumentParser(exit_on_error=False)
    parser.add_class_arguments(type(obj), fail_untyped=False)
    accepted = {action.dest.split(".", 1)[0] for action in parser._actions
                if action.dest not in ("help", "config", "__default_config__")}
    saved = dict(getattr(obj, "hparams", None) or {})
    unsaved = sorted(accepted - set(saved))
    if unsaved:
        log.warning("%s does not save the init arguments %s (call self.save_hyperparameters() in its __init__): "
                    "config.yaml records their defaults", type(obj).__name__, ", ".join(unsaved))
    return {key: describe(value) for key, value in saved.items() if key in accepted}

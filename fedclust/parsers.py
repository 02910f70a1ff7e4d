"""jsonargparse parsers typed from a function's signature, knowing no command: each command's module builds its
own parser with `command_parser` (fit.fit_parser, evaluate.evaluate_parser, ...), and hands it back here to
parse a command line, to turn the parsed values into objects, or to read a saved config file with it.

Building a command's parser imports torch and Lightning (through the types in its signature), so the command
line builds only the one of the subcommand that runs (fedclust/commands.py).
"""

from __future__ import annotations

from pathlib import Path

from jsonargparse import ActionConfigFile, ArgumentParser, Namespace


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

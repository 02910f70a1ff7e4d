"""The `fedclust` command line.

    fedclust fit --config quickstart [--federation.rounds 5 ...]     (a packaged config's name, or a path)
    fedclust fit --resume runs/RUN_DIR
    fedclust evaluate --run runs/RUN_DIR [--split test] [--knn 3 5 7 9 100 1000 7000] [--linear true]
                      [--diagnose true]
    fedclust sweep --config kfed_fmnist --grid data.p=0,0.5,1 --grid seed=1,2 --slots 2
    fedclust compare runs/RUN_A runs/RUN_B ... [--output compare.html]
    fedclust configs                                                   (the packaged configs)

Only the subcommand that runs builds its parser (fedclust/commands.py), which imports torch and Lightning;
`fedclust --help`, `--version`, `configs` and `fedclust COMMAND --help` (stored in cli_schema.json while it is
fresh) answer without them, and so does bad input: fedclust/precheck/
checks the arguments and YAML configs against fedclust/cli_schema.json first (the real parser still parses
every command that passes).
Every user error is one line on stderr and exit code 2; Ctrl-C and SIGTERM stop a command with exit code 130 and,
for a fit, the command that resumes it.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

from fedclust import __version__
from fedclust.config_files import description, expand_config_args, nearest, packaged_configs
from fedclust.errors import ConfigError, FedclustError
from fedclust.interrupts import sigterm_as_interrupt
from fedclust.registry import METHODS

SUBCOMMANDS = {
    "fit": "Run one federated clustering experiment.",
    "evaluate": "Re-score a saved run (other splits, kNN and linear probes, per-client scores, "
                "diagnostics).",
    "sweep": "Run a grid of configs over CPU slots or GPUs.",
    "compare": "One self-contained HTML page comparing run folders (or sweep folders of them).",
    "configs": "List the packaged configs with their descriptions.",
}


def top_help() -> str:
    rows = "\n".join(f"  {name:<10}{text}" for name, text in SUBCOMMANDS.items())
    return (f"usage: fedclust [-h] [--version] {{{','.join(SUBCOMMANDS)}}} ...\n\n"
            "Federated clustering research framework (CCFC, FedPNP, FedMCC, UIFCA and their baselines).\n\n"
            f"subcommands:\n{rows}\n\n"
            f"methods (--method NAME): {', '.join(METHODS)}\n\n"
            "`fedclust SUBCOMMAND --help` lists a subcommand's options; `fedclust fit --config quickstart` runs "
            "the quick start.")


def list_configs() -> str:
    configs = packaged_configs()
    width = max(map(len, configs), default=0)
    return "\n".join(f"{name:<{width}}  {description(path)}" for name, path in configs.items())


def _resume_argv(argv: list[str]) -> list[str]:
    """`fit --resume DIR` without --config loads DIR/config.yaml first, so the run continues as it was."""
    if argv[:1] != ["fit"] or any(a == "--config" or a.startswith("--config=") for a in argv):
        return argv
    for i, arg in enumerate(argv):
        value = argv[i + 1] if arg == "--resume" and i + 1 < len(argv) else None
        value = arg.split("=", 1)[1] if arg.startswith("--resume=") else value
        if value:
            if not (Path(value) / "config.yaml").is_file():
                raise ConfigError("resume", value, "a run folder written by `fedclust fit` (it holds config.yaml)")
            return ["fit", "--config", str(Path(value) / "config.yaml"), *argv[1:]]
    return argv


def _emit(text: str) -> None:
    """Print, tolerating a reader that closed the pipe early (`fedclust configs | head -1`)."""
    try:
        print(text, flush=True)
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so the interpreter's final flush is quiet


def main(argv: list[str] | None = None) -> int:
    with sigterm_as_interrupt():  # `kill` or a scheduler's stop ends a fit or a sweep as Ctrl-C does
        return _main(argv)


def _main(argv: list[str] | None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        _emit(top_help())
        return 0
    if argv[0] in ("-V", "--version"):
        _emit(f"fedclust {__version__}")
        return 0
    command = argv[0]
    try:
        if command not in SUBCOMMANDS:
            raise FedclustError(f"'{command}' is not a fedclust subcommand: use {nearest(command, SUBCOMMANDS)} "
                                "(`fedclust --help` lists them all).")
        if command == "configs":
            _emit(list_configs())
            return 0
        argv = expand_config_args(_resume_argv(argv))
        from fedclust import precheck

        text = precheck.stored_help(command, argv[1:])  # `fedclust fit --help` without building the parser
        if text is not None:
            _emit(text.removesuffix("\n"))
            return 0
        precheck.check(command, argv[1:])  # bad input refused here, before torch (see fedclust/precheck/)
        from fedclust import commands

        return commands.run(command, argv[1:])
    except FedclustError as error:
        print(f"fedclust: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"fedclust: interrupted{_resume_hint(command)}", file=sys.stderr)
        return 130


def _resume_hint(command: str) -> str:
    """How to go on after Ctrl-C: for fit, the command that resumes THIS run, from the folder fit claimed."""
    folders = sys.modules.get("fedclust.run_folder")  # imported only once a fit has started: nothing heavy here
    folder = os.environ.get(folders.RUN_DIR_ENV) if command == "fit" and folders else None
    if not folder:  # (an interrupted sweep says itself how to finish it)
        return ""
    if (Path(folder) / folders.CHECKPOINT).exists():
        return f"; the last checkpoint is kept: resume with `fedclust fit --resume {folder}`"
    if Path(folder).is_dir():
        return f" before the first checkpoint of {folder}: nothing to resume, start the run again"
    return " before the run wrote anything"


if __name__ == "__main__":
    sys.exit(main())

"""The subcommands that do the work (fit, evaluate, sweep, compare): each one's parser, built by the command's
own module from its function's signature, and the call that hands the parsed arguments to that function.

The command line comes here once the arguments have passed the precheck (fedclust/precheck/); only the module
of the command that runs is imported, since building its parser imports torch and Lightning.
"""

from __future__ import annotations

import sys

from jsonargparse import ArgumentError, ArgumentParser

from fedclust.cli_errors import one_sentence
from fedclust.errors import FedclustError
from fedclust.parsers import parse, resolved_config


def parser(command: str) -> ArgumentParser:
    """The parser of fit, evaluate, sweep or compare."""
    if command == "fit":
        from fedclust.run import fit_parser as build
    elif command == "evaluate":
        from fedclust.evaluate import evaluate_parser as build
    elif command == "sweep":
        from fedclust.sweep import sweep_parser as build
    elif command == "compare":
        from fedclust.compare import compare_parser as build
    else:
        raise ValueError(f"not a fedclust command that runs: {command!r}")
    return build()


def run(command: str, args: list[str]) -> int:
    """Parse one subcommand's arguments and run it; the exit code (1: some sweep runs failed)."""
    built = parser(command)
    try:
        cfg = parse(built, args)
    except ArgumentError as error:
        raise FedclustError(one_sentence(str(error), built)) from None
    if command == "fit":
        from fedclust.run import fit

        init, text = resolved_config(built, cfg)
        fit(**init, config_text=text)
    elif command == "sweep":
        from fedclust.sweep import sweep

        runs = sweep(**cfg)
        failed = [r["name"] for r in runs if r["status"] == "failed"]
        if failed:
            print(f"fedclust: {len(failed)} sweep run(s) failed: {', '.join(failed)} (logs in the sweep "
                  "folder's logs/; run the same command again to retry them)", file=sys.stderr)
            return 1
    elif command == "compare":
        from fedclust.compare import compare

        compare(**cfg)
    else:
        from fedclust.evaluate import evaluate

        evaluate(**cfg)
    return 0

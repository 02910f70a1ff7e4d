"""A fast first pass over `fedclust fit | evaluate | sweep | compare` arguments, before torch is imported.

Building the real parser imports torch, Lightning and every method (about 6 s on a small CPU), so a typo
used to cost that long. This pass checks the command line and its YAML configs against the schema read off
the real parsers (fedclust/cli_schema.json, see fedclust/cli_schema/) and refuses bad input with one
sentence naming the field, the value and what is valid: an unknown option or config key (with the closest
valid names), a value of the wrong type or outside a Literal's choices, an unknown method or init argument, a
value out of range (data.p, federation.fraction, a learning rate, --knn 0, ...: the checks that need no data),
a missing run folder, a malformed `--grid` entry; and what needs only the machine, the file system, a file's
header or a known data set's size (facts.py): a GPU asked for where there is certainly none, a run folder that
cannot be made, a missing or truncated checkpoint, an unknown data set, a known data set's missing or truncated
files, a partition or a k its sizes cannot give. The real parser still parses every command afterwards.

The rule it keeps: refuse only what the real parser (or the subcommand's own first checks) would refuse too,
never a valid command. Hence:

- Values are judged by jsonargparse itself (values.py): a one-option parser built from the stored type hint
  parses the very tokens (or the YAML value) the real one would get.
- The command line is split the way argparse and jsonargparse split it (argv.py).
- Range checks call the very functions the run calls (ranges.py), on the values the run would get: the
  last one given, else the default the schema holds; a method's init args only where check_hparams sees them.
- Whatever it cannot judge with certainty it leaves to the real parser (`StepAside`): help, `--`, keys
  inside a dict-typed value, a class outside fedclust, a method dict it does not know the shape of.
- Before refusing, it checks that the schema still matches the code's signatures (`cli_schema.fresh`); a
  stale schema refuses nothing.

Modules: values.py (values judged by jsonargparse, message words), argv.py (argv splitting), fit_config.py
(a fit command line: configs, groups, the method), ranges.py (the checks in the run's order), facts.py (those
that need the machine, the file system or a known data set's size), commands.py (evaluate, sweep, compare and
the table of commands). Its imports stay torch-free
(tests/test_precheck_checks.py checks it in a fresh interpreter).

tests/test_cli_fast.py runs every refusal in a subprocess (checking torch and Lightning stay unimported)
and parses every case with the real parsers too, to show each one is refused there as well and that the
valid ones it lets through are accepted; tests/test_precheck_checks.py does the same for the range checks
through the real `fit` and `evaluate`; tests/test_fast_refusals.py times the refusals that need data or files
(each under 3 s, as `python -m fedclust ...`) and shows the run prints the same sentence.
"""

from __future__ import annotations

import sys

from fedclust import cli_schema
from fedclust.errors import FedclustError
from fedclust.precheck.commands import CHECKS
from fedclust.precheck.values import Schema, StepAside


def check(command: str, args: list[str]) -> None:
    """Refuse bad `fedclust COMMAND args` input with a FedclustError, or return (the real parser runs next)."""
    judge(command, args)


def stored_help(command: str, args: list[str]) -> str | None:
    """`fedclust COMMAND --help` (the flag alone) as the real parser prints it, from the schema, torch-free; None
    when the schema cannot say it for certain (then the real parser prints it)."""
    if args not in (["-h"], ["--help"]):
        return None
    return cli_schema.help_text(cli_schema.load(), command)


def judge(command: str, args: list[str], schema: dict | None = None) -> str:
    """"passed" (checked, nothing wrong found) or "aside" (left to the real parser); bad input raises
    FedclustError. `args` are the subcommand's arguments after `--config NAME` was resolved to a path."""
    schema = cli_schema.load() if schema is None else schema
    if command not in cli_schema.COMMANDS or schema is None:
        return "aside"
    try:
        CHECKS[command](Schema(schema), args)
    except StepAside:
        return "aside"
    except FedclustError:
        if not cli_schema.fresh(schema):
            return "aside"  # the code's signatures changed since the schema was written: refuse nothing on its word
        raise
    return "passed"


def _foreign_classes_possible() -> bool:
    """Whether this process may hold method classes of its own (it imported the contract, so it may have
    defined subclasses that jsonargparse would find by a bare name): a fresh `fedclust` process has none."""
    return "fedclust.contract" in sys.modules

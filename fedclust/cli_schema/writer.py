"""Writing fedclust/cli_schema.json off the real jsonargparse parsers and the method classes (imports torch,
Lightning and every method, so only `python -m fedclust.cli_schema` and the tests import it). What the file holds
and why it is generated: the package's docstring (fedclust/cli_schema/__init__.py)."""

from __future__ import annotations

import argparse
import json
import sys
import typing
from pathlib import Path

from fedclust.cli_schema import COMMANDS, HELP_COLUMNS, PACKAGE_DIR, REFRESH, SCHEMA_PATH, fingerprint


def spec_of(hint):
    """The JSON spec of a type hint; "any" for what it does not describe."""
    import types

    scalar = {int: "int", float: "float", bool: "bool", str: "str", type(None): "none"}
    if hint in scalar:
        return scalar[hint]
    if hint is typing.Any or hint is None:
        return "any"
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Literal and all(isinstance(a, (str, int, float, bool, type(None))) for a in args):
        return {"literal": list(args)}
    if origin in (typing.Union, types.UnionType):
        return {"union": [spec_of(a) for a in args]}
    if origin is list and len(args) == 1:
        return {"list": spec_of(args[0])}
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        return {"tuple_of": spec_of(args[0])}
    if origin is tuple and args and Ellipsis not in args:
        return {"tuple": [spec_of(a) for a in args]}
    if origin is dict and len(args) == 2:
        return {"dict": [spec_of(args[0]), spec_of(args[1])]}
    return "any"


def _option(action) -> dict:
    """One parser action as the precheck needs it."""
    from jsonargparse import ActionConfigFile

    kind = type(action).__name__
    hint = getattr(action, "_typehint", None)
    if isinstance(action, argparse._HelpAction) or kind == "_ActionHelpClassPath":
        return {"kind": "help"}
    if isinstance(action, ActionConfigFile):
        return {"kind": "config"}
    if kind == "_ActionPrintConfig":
        return {"kind": "print_config"}
    if kind == "_ActionConfigLoad":
        return {"kind": "group"}
    if kind == "ActionTypeHint" and isinstance(hint, type) and hint not in (int, float, bool, str):
        return {"kind": "method", "required": bool(action.required)}
    if kind == "ActionTypeHint" or isinstance(action, (argparse._StoreAction, argparse._AppendAction)):
        spec = spec_of(hint) if kind == "ActionTypeHint" else spec_of(action.type)
        option = {"kind": "value", "type": spec, "nargs": action.nargs, "required": bool(action.required),
                  "append": isinstance(action, argparse._AppendAction)}
        try:  # the value a setting takes when no config or option gives it (the precheck's range checks need it)
            if action.default is not argparse.SUPPRESS and json.loads(json.dumps(action.default)) == action.default:
                option["default"] = action.default
        except (TypeError, ValueError):
            pass
        return option
    return {"kind": "other"}  # the precheck steps aside when it meets one


def _subclasses(cls) -> list[type]:
    out = []
    for sub in cls.__subclasses__():
        out += [sub, *_subclasses(sub)]
    return list(dict.fromkeys(out))


def _class_params(cls) -> dict:
    """A class's init arguments as jsonargparse's subclass parser sees them."""
    from jsonargparse import ArgumentParser

    parser = ArgumentParser(exit_on_error=False)
    parser.add_class_arguments(cls, fail_untyped=False)
    params, nested = {}, []
    for action in parser._actions:
        for opt in action.option_strings:
            if not opt.startswith("--") or opt in ("--help",):
                continue
            name = opt[2:]
            if "." in name:
                nested.append(name.split(".", 1)[0])
            elif type(action).__name__ == "ActionTypeHint":
                params[name] = spec_of(action._typehint)
            elif type(action).__name__ != "_ActionConfigLoad":
                params[name] = "any"
    for head in set(nested):  # a nested group (a dataclass or class argument): its keys are not judged
        params[head] = "any"
    return dict(sorted(params.items()))


def _class_defaults(cls) -> dict:
    """The init arguments' defaults that are plain JSON (what the run gets when a config leaves them out)."""
    import inspect

    out = {}
    for klass in cls.__mro__:  # `**kwargs` followed into a parent's __init__, as jsonargparse does
        if "__init__" not in vars(klass):
            continue
        for name, param in inspect.signature(klass.__init__).parameters.items():
            if name in out or param.default is inspect.Parameter.empty:
                continue
            try:
                if json.loads(json.dumps(param.default)) == param.default:
                    out[name] = param.default
            except (TypeError, ValueError):
                continue
    return dict(sorted(out.items()))


def _returned(cls, params: dict, read) -> list[str] | None:
    """Which init arguments `read(instance)` returns, first one not None first: k-FED's local_clusters() is
    `k_local or num_clusters` -> ["k_local", "num_clusters"]; [] when it returns None whatever they hold; None
    when it returns anything else (a computed value: the precheck then leaves that check to the run).

    Read off instances: every integer argument gets its own sentinel value; the argument whose sentinel comes
    back is next in the chain; it is set to None and the instance built again, until None comes back."""
    import warnings

    def takes(spec, kind: str) -> bool:
        return spec == kind or (isinstance(spec, dict) and kind in spec.get("union", []))

    ints = [p for p, spec in params.items() if takes(spec, "int")]
    sentinels = {p: 100_003 + 2 * i for i, p in enumerate(ints)}  # distinct odd numbers no default is
    chain: list[str] = []
    while True:
        kwargs = {p: None if p in chain else v for p, v in sentinels.items()}
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                value = read(cls(**kwargs))
        except Exception:  # noqa: BLE001  (a class that cannot be built so: nothing is judged)
            return None
        if value is None:
            return chain
        name = next((p for p, v in sentinels.items() if v == value and p not in chain), None)
        if name is None:
            return None
        chain.append(name)
        if not takes(params[name], "none"):
            return chain  # it cannot be None: the chain ends with it


def _checked(cls, params: dict) -> list[str]:
    """The init arguments that fedclust.federation.setup.check_hparams sees in `method.hparams` (those the
    class saves with save_hyperparameters), found on an instance built with the defaults; [] when it cannot be
    built so or saves none (KFED, KMeans, FCM, FFCM): the precheck range-checks only these."""
    import warnings

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            saved = dict(getattr(cls(), "hparams", {}))
    except Exception:  # noqa: BLE001  (a class that needs arguments: nothing is judged)
        return []
    return sorted(p for p in params if p in saved)


def _source(obj) -> str | None:
    """The file (relative to the package) that defines a class, function or module; None outside fedclust."""
    module = obj if isinstance(obj, type(sys)) else sys.modules.get(getattr(obj, "__module__", ""))
    if not getattr(module, "__file__", None):
        return None
    path = Path(module.__file__).resolve()
    try:
        return path.relative_to(PACKAGE_DIR).as_posix()
    except ValueError:
        return None  # not a fedclust file (jsonargparse, typing, ...)


def generate() -> dict:
    """Build the schema from the real parsers (imports torch, Lightning and every method)."""
    import warnings

    import fedclust.methods
    from fedclust import parsers
    from fedclust.commands import parser as command_parser

    commands, helps, sources = {}, {}, {_source(parsers), _source(fedclust.methods)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name in COMMANDS:
            parser = command_parser(name)
            helps[name] = help_of(parser)
            options, positional = {}, None
            for action in parser._actions:
                if not action.option_strings:
                    positional = {"dest": action.dest, "nargs": action.nargs, "required": bool(action.required),
                                  "type": spec_of(getattr(action, "_typehint", None) or action.type)}
                    continue
                for opt in action.option_strings:
                    options[opt] = _option(action)
                if options[action.option_strings[0]]["kind"] == "method":
                    base = action._typehint
            commands[name] = {"options": options, "positional": positional}
    from fedclust import evaluate, fit, run, sweep
    from fedclust.compare import page
    from fedclust.data import config as data_config
    from fedclust.federation import config as federation_config

    # run.py: `fedclust fit`'s own signature and docstrings (the help's words), beside the Python API's fit
    sources |= {_source(m) for m in (fit, run, evaluate, sweep, page, data_config, federation_config)}
    classes = {}
    names: dict[str, list[str]] = {}
    for cls in [base, *_subclasses(base)]:
        names.setdefault(cls.__name__, []).append(f"{cls.__module__}.{cls.__qualname__}")
        params = _class_params(cls)
        classes[cls.__name__] = {"path": f"{cls.__module__}.{cls.__qualname__}", "params": params,
                                 "checked": _checked(cls, params), "defaults": _class_defaults(cls),
                                 "local_clusters": _returned(cls, params, lambda m: m.local_clusters()),
                                 "num_clusters": _returned(cls, params, lambda m: m.num_clusters)}
        sources |= {_source(c) for c in cls.__mro__}
    clashes = {n: paths for n, paths in names.items() if len(paths) > 1}
    for name in clashes:  # two classes of one name: the precheck cannot tell which a config means
        classes[name] = {"path": None, "params": None, "checked": [], "defaults": {}, "local_clusters": None,
                         "num_clusters": None}
    from fedclust.data import datasets
    from fedclust.data.checks import loader_options

    data_sets = {name: loader_options(loader) for name, loader in datasets.DATASETS.items()}
    sources |= {_source(datasets), *(_source(loader) for loader in datasets.DATASETS.values())}
    sources.discard(None)
    packages = {rel.rsplit("/", 1)[0] + "/__init__.py" for rel in sources if "/" in rel}
    sources |= {rel for rel in packages if (PACKAGE_DIR / rel).is_file()}
    sources = sorted(sources)
    return {"comment": f"Generated by `{REFRESH}` from the real parsers; do not edit by hand.",
            "fingerprint": fingerprint(sources), "sources": sources, "commands": commands,
            "datasets": data_sets, "method": {"base": base.__name__, "classes": dict(sorted(classes.items()))},
            "help_fingerprint": fingerprint(sources, docstrings=True), "help": helps}


def help_of(parser) -> str:
    """The parser's --help text at HELP_COLUMNS (the width argparse reads from COLUMNS), as `fedclust COMMAND
    --help` prints it; stored so that the command line prints it without building the parser."""
    import os

    before = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = str(HELP_COLUMNS)
    try:
        return parser.format_help()
    finally:
        if before is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = before


def dumps(schema: dict) -> str:
    """The schema as JSON with one line per option and per method class (readable diffs)."""
    def one(value) -> str:
        return json.dumps(value, ensure_ascii=False)

    def block(mapping: dict, indent: str) -> str:
        rows = [f"{indent}{one(key)}: {one(value)}" for key, value in mapping.items()]
        return "{\n" + ",\n".join(rows) + "\n" + indent[:-1] + "}"

    commands = ",\n".join(
        f'  {one(name)}: {{"positional": {one(cmd["positional"])},\n   "options": {block(cmd["options"], "    ")}}}'
        for name, cmd in schema["commands"].items())
    method = schema["method"]
    return ("{\n"
            f' "comment": {one(schema["comment"])},\n'
            f' "fingerprint": {one(schema["fingerprint"])},\n'
            f' "sources": {one(schema["sources"])},\n'
            f' "commands": {{\n{commands}}},\n'
            f' "datasets": {one(schema["datasets"])},\n'
            f' "method": {{"base": {one(method["base"])},\n  "classes": {block(method["classes"], "   ")}}},\n'
            f' "help_fingerprint": {one(schema["help_fingerprint"])},\n'
            f' "help": {block(schema["help"], "  ")}\n'
            "}\n")


def main(argv: list[str] | None = None) -> int:
    cli = argparse.ArgumentParser(prog="python -m fedclust.cli_schema",
                                  description="Write or check fedclust/cli_schema.json (what the commands accept).")
    cli.add_argument("--write", action="store_true", help=f"(re)write {SCHEMA_PATH.name}")
    cli.add_argument("--check", action="store_true", help="exit 1 when the packaged schema is stale")
    args = cli.parse_args(argv)
    text = dumps(generate())
    if args.write:
        SCHEMA_PATH.write_text(text, encoding="utf-8")
        print(f"wrote {SCHEMA_PATH}")
        return 0
    if args.check:
        current = SCHEMA_PATH.read_text(encoding="utf-8") if SCHEMA_PATH.exists() else ""
        if current != text:
            print(f"{SCHEMA_PATH} is stale: run `{REFRESH}` and commit it", file=sys.stderr)
            return 1
        print(f"{SCHEMA_PATH.name} is up to date")
        return 0
    print(text, end="")
    return 0

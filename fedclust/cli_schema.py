"""What `fedclust fit | evaluate | sweep | compare` accept, known without importing torch: fedclust/cli_schema.json.

The JSON is read off the real jsonargparse parsers (fedclust/commands.py) and the method classes, so it says
exactly what they accept: every option with its type hint and nargs, the keys of the data / federation /
fabric groups, the base class `--method` takes, and each method class's init arguments as jsonargparse
resolves them (`**kwargs` followed into a parent's `__init__`, as for FedUKMeans). fedclust/precheck/
checks a command line and its YAML configs against it before the real parser (and torch, Lightning, every
method) is imported.

Why a generated file and not the signatures read with `ast` at run time: what the CLI accepts is decided by
jsonargparse (groups from dataclasses, `**kwargs` resolution, class names resolved among the imported
subclasses of the base); reading it off the built parsers cannot drift from it, re-implementing it from
syntax could. The price is a file to refresh, which is guarded twice:

- `python -m fedclust.cli_schema --write` refreshes it; `--check` exits 1 when it is stale
  (tests/test_cli_fast.py runs that and names the command).
- the file records a fingerprint of the signatures in the source files it was read from (`sources`): their
  syntax trees with docstrings and every function body except `__init__`'s dropped, so editing a method's
  training code does not make it stale, while a new init argument, type or default does. At run time the
  precheck recomputes it before refusing anything (about 0.1 s) and, when it differs, refuses nothing and lets
  the real parser decide: a stale schema can cost speed, never a valid command.

Value options keep their default (when it is plain JSON) and each method class the init arguments that
check_hparams sees (`checked`), so the precheck can run the value checks that need no data (ranges of data.p,
federation.fraction, learning rates, ...: fedclust/precheck/ranges.py) on the values a run would get. Each class
also keeps its init defaults (`defaults`, plain JSON ones) and which init arguments its `local_clusters()` and
its `num_clusters` attribute return (`local_clusters`, `num_clusters`: read off an instance, see `_returned`),
and the schema lists the registered data sets with the data.options each takes (`datasets`), so the precheck
judges data.name, data.options and k against a known data set's sizes (fedclust/precheck/facts.py).

Type hints are stored as small JSON specs: "int", "float", "bool", "str", "none", "any", {"literal": [...]},
{"union": [...]}, {"list": spec}, {"tuple": [spec, ...]}, {"tuple_of": spec}, {"dict": [key, value]}. A hint
with no spec (a class, a callable) is "any": the precheck never judges it.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import sys
import typing
from pathlib import Path

SCHEMA_PATH = Path(__file__).resolve().with_name("cli_schema.json")
PACKAGE_DIR = Path(__file__).resolve().parent
REFRESH = "python -m fedclust.cli_schema --write"
COMMANDS = ("fit", "evaluate", "sweep", "compare")


# ---- reading it (torch-free) ----------------------------------------------------------------------------

def load(path: Path = SCHEMA_PATH) -> dict | None:
    """The packaged schema, or None when it is missing or unreadable (the precheck then stays out of the way)."""
    try:
        schema = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return schema if isinstance(schema, dict) and "commands" in schema else None


def fresh(schema: dict) -> bool:
    """Whether the source files the schema was read from still have the signatures it was read from."""
    return fingerprint(schema.get("sources", [])) == schema.get("fingerprint")


def fingerprint(sources: list[str]) -> str | None:
    """A hash of the signature skeleton of each source (paths relative to the package); None if one is missing."""
    digest = hashlib.sha256()
    for rel in sorted(sources):
        try:
            text = (PACKAGE_DIR / rel).read_text(encoding="utf-8")
            digest.update(f"{rel}\n{skeleton(text)}\n".encode())
        except (OSError, SyntaxError, ValueError):
            return None
    return digest.hexdigest()


def skeleton(source: str) -> str:
    """The parts of a module that can change what a parser accepts: imports, module and class level
    statements, class definitions and function signatures; `__init__` keeps its body (jsonargparse follows
    `super().__init__(**kwargs)` there), and so does `local_clusters` (the schema records what it returns).
    Docstrings and other function bodies are dropped."""

    class Strip(ast.NodeTransformer):
        def _body(self, node):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant) \
                    and isinstance(body[0].value.value, str):
                body = body[1:]
            return body

        def visit_Module(self, node):
            node.body = self._body(node)
            self.generic_visit(node)
            return node

        def visit_ClassDef(self, node):
            node.body = self._body(node) or [ast.Pass()]
            self.generic_visit(node)
            return node

        def visit_FunctionDef(self, node):
            kept = node.name in ("__init__", "local_clusters")
            node.body = (self._body(node) or [ast.Pass()]) if kept else [ast.Pass()]
            self.generic_visit(node)
            return node

        visit_AsyncFunctionDef = visit_FunctionDef

    return ast.dump(Strip().visit(ast.parse(source)), include_attributes=False)


def typehint(spec):
    """The type hint a spec stands for (the precheck hands it to jsonargparse to judge a value)."""
    if isinstance(spec, str):
        return {"int": int, "float": float, "bool": bool, "str": str, "none": type(None), "any": typing.Any}[spec]
    (kind, arg), = spec.items()
    if kind == "literal":
        return typing.Literal[tuple(arg)]
    if kind == "union":
        return typing.Union[tuple(typehint(s) for s in arg)]  # noqa: UP007  (built from a list at run time)
    if kind == "list":
        return list[typehint(arg)]
    if kind == "tuple":
        return tuple[tuple(typehint(s) for s in arg)]
    if kind == "tuple_of":
        return tuple[typehint(arg), ...]
    if kind == "dict":
        return dict[typehint(arg[0]), typehint(arg[1])]
    raise ValueError(f"unknown type spec {spec!r}")


def judged(spec) -> bool:
    """False when a spec holds "any" somewhere the precheck cannot reason about (it then leaves it alone)."""
    if spec == "any":
        return False
    if isinstance(spec, str):
        return True
    (kind, arg), = spec.items()
    if kind == "literal":
        return True
    if kind == "dict":
        return judged(arg[0])  # dict[str, Any]: the value may be anything, the container is still checked
    parts = arg if isinstance(arg, list) else [arg]
    return all(judged(s) for s in parts)


# ---- writing it (imports the parsers, hence torch) -------------------------------------------------------

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

    commands, sources = {}, {_source(parsers), _source(fedclust.methods)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name in COMMANDS:
            parser = command_parser(name)
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
    from fedclust import evaluate, fit, sweep
    from fedclust.compare import page
    from fedclust.data import config as data_config
    from fedclust.federation import config as federation_config

    sources |= {_source(m) for m in (fit, evaluate, sweep, page, data_config, federation_config)}
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
            "datasets": data_sets, "method": {"base": base.__name__, "classes": dict(sorted(classes.items()))}}


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
            f' "method": {{"base": {one(method["base"])},\n  "classes": {block(method["classes"], "   ")}}}\n'
            "}\n")


def main(argv: list[str] | None = None) -> int:
    cli = argparse.ArgumentParser(prog="python -m fedclust.cli_schema", description=__doc__.split("\n")[0])
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


if __name__ == "__main__":
    sys.exit(main())

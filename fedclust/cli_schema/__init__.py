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

This package is split in two: this module reads the schema (torch-free, for the precheck); `writer.py` builds it
off the real parsers (imports torch, Lightning and every method), run as `python -m fedclust.cli_schema`.

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

import ast
import hashlib
import json
import typing
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parents[1]  # the fedclust package: the schema's sources are relative to it
SCHEMA_PATH = PACKAGE_DIR / "cli_schema.json"
REFRESH = "python -m fedclust.cli_schema --write"
COMMANDS = ("fit", "evaluate", "sweep", "compare")



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


def help_text(schema: dict | None, command: str) -> str | None:
    """`fedclust COMMAND --help` as the real parser printed it when the schema was written (at HELP_COLUMNS), or
    None when the schema holds none or its sources' signatures or docstrings (the help's words) changed since."""
    text = (schema or {}).get("help", {}).get(command)
    if not isinstance(text, str) or fingerprint(schema.get("sources", []), docstrings=True) != schema.get(
            "help_fingerprint"):
        return None
    return text


HELP_COLUMNS = 100  # the width the stored help is written at


def fingerprint(sources: list[str], docstrings: bool = False) -> str | None:
    """A hash of the signature skeleton of each source (paths relative to the package), with its docstrings
    when asked; None if one is missing."""
    digest = hashlib.sha256()
    for rel in sorted(sources):
        try:
            text = (PACKAGE_DIR / rel).read_text(encoding="utf-8")
            digest.update(f"{rel}\n{skeleton(text, docstrings)}\n".encode())
        except (OSError, SyntaxError, ValueError):
            return None
    return digest.hexdigest()


def skeleton(source: str, docstrings: bool = False) -> str:
    """The parts of a module that can change what a parser accepts: imports, module and class level
    statements, class definitions and function signatures; `__init__` keeps its body (jsonargparse follows
    `super().__init__(**kwargs)` there), and so does `local_clusters` (the schema records what it returns).
    Other function bodies are dropped, and so are docstrings unless asked for (the help's words are in them)."""

    class Strip(ast.NodeTransformer):
        def _body(self, node):
            body = node.body
            if not docstrings and body and _is_docstring(body[0]):
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
            if node.name in ("__init__", "local_clusters"):
                node.body = self._body(node) or [ast.Pass()]
            else:  # its docstring alone, when docstrings are kept
                docstring = node.body[:1] if node.body and _is_docstring(node.body[0]) else []
                node.body = (docstring if docstrings else []) or [ast.Pass()]
            self.generic_visit(node)
            return node

        visit_AsyncFunctionDef = visit_FunctionDef

    return ast.dump(Strip().visit(ast.parse(source)), include_attributes=False)


def _is_docstring(statement) -> bool:
    return isinstance(statement, ast.Expr) and isinstance(getattr(statement, "value", None), ast.Constant) \
        and isinstance(statement.value.value, str)


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

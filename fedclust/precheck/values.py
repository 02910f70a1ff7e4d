"""Values judged by jsonargparse itself, and the words the precheck's messages use for them.

A one-option parser built from the stored type hint parses the very tokens (or the YAML value) the real
parser would get, so `0x10`, `1_000`, `1e-5`, `yes` and `'3'` pass exactly where they pass today, and the
value it makes is the one the run would get (the range checks judge that value).
"""

from __future__ import annotations

import difflib
import json
import warnings
from pathlib import Path

from fedclust import cli_schema
from fedclust.config_files import MAX_CONFIG_BYTES
from fedclust.errors import ConfigError

MISSING = object()  # no value given
UNKNOWN = object()  # a value the precheck does not judge (its type holds Any): the real parser will
REFUSED = object()  # a value jsonargparse refuses for the option's type


class StepAside(Exception):
    """This pass cannot judge the command with certainty: the real parser will."""


class Schema:
    """cli_schema.json, with the one-option parsers and the config files read so far."""

    def __init__(self, schema: dict):
        self.raw = schema
        self.classes: dict = schema["method"]["classes"]
        self.base: str = schema["method"]["base"]
        self._parsers: dict = {}
        self._yaml_cache: dict = {}

    def command(self, name: str) -> dict:
        return self.raw["commands"][name]

    def value(self, spec, nargs=None, tokens: list[str] | None = None, obj=MISSING):
        """What jsonargparse makes of these command-line tokens (`--v=x` or `--v x y`), or of this YAML value,
        for an option of this type: the value, REFUSED, or UNKNOWN when the type is not judged."""
        if not cli_schema.judged(spec):
            return UNKNOWN
        from jsonargparse import ArgumentError, ArgumentParser

        key = (json.dumps(spec, sort_keys=True), nargs)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                if key not in self._parsers:
                    parser = ArgumentParser(exit_on_error=False, prog="fedclust")
                    parser.add_argument("--v", type=cli_schema.typehint(spec), nargs=nargs)
                    self._parsers[key] = parser
                parser = self._parsers[key]
                parsed = parser.parse_args(tokens) if tokens is not None else parser.parse_object({"v": obj})
            except ArgumentError:
                return REFUSED
            except Exception as error:  # noqa: BLE001  (anything unexpected: not ours to judge)
                raise StepAside from error
        return parsed.v

    def load_yaml(self, text: str):
        """YAML as jsonargparse reads it (its loader takes 1e-5 for a number, plain PyYAML does not)."""
        from jsonargparse import get_loader

        try:
            return get_loader("yaml")(text)
        except Exception as error:  # noqa: BLE001
            raise StepAside from error

    def config_file(self, path: str):
        """A config file's content, read once."""
        if path not in self._yaml_cache:
            try:
                file = Path(path)
                if not file.is_file() or file.stat().st_size > MAX_CONFIG_BYTES:
                    raise StepAside
                self._yaml_cache[path] = self.load_yaml(file.read_text(encoding="utf-8"))
            except (OSError, UnicodeDecodeError) as error:
                raise StepAside from error
        return self._yaml_cache[path]


def describe(spec) -> str:
    """What a value of this type looks like, for the error message."""
    if isinstance(spec, str):
        return {"int": "an integer", "float": "a number", "bool": "true or false", "str": "a string",
                "none": "null", "any": "any value"}[spec]
    (kind, arg), = spec.items()
    if kind == "literal":
        return "one of " + ", ".join("null" if a is None else str(a) for a in arg)
    if kind == "union":
        return " or ".join(describe(s) for s in arg)
    if kind in ("list", "tuple_of"):
        return f"a list of {plural(arg)}"
    if kind == "tuple":
        if all(s == arg[0] for s in arg):
            return f"a list of {len(arg)} {plural(arg[0])} ([...])"
        return f"a list of {len(arg)} values: " + ", ".join(describe(s) for s in arg)
    if kind == "dict":
        return "a mapping ({key: value, ...})"
    return "a valid value"


def plural(spec) -> str:
    if isinstance(spec, str) and spec in ("int", "float", "bool", "str"):
        return {"int": "integers", "float": "numbers", "bool": "booleans", "str": "strings"}[spec]
    return f"items of the form: {describe(spec)}"


def closest(word: object, choices) -> list[str]:
    """Valid names close to a typo (case-insensitive); [] when none is close."""
    choices = [str(c) for c in choices]
    lowered = {c.lower(): c for c in choices}
    return [lowered[c] for c in difflib.get_close_matches(str(word).lower(), list(lowered), n=3, cutoff=0.6)]


def either(names: list[str]) -> str:
    return ", ".join(names[:-1]) + " or " + names[-1] if len(names) > 1 else "".join(names)


def closest_hint(word: str, choices) -> str:
    close = closest(word, choices)
    return f"closest: {either(close)}" if close else "valid: " + ", ".join(sorted(choices))


def invalid(field: str, value: object, spec) -> ConfigError:
    valid = describe(spec)
    literals = [c for s in (spec.get("union", [spec]) if isinstance(spec, dict) else [spec])
                if isinstance(s, dict) and "literal" in s for c in s["literal"]]
    close = closest(value, literals) if literals and isinstance(value, str) else []
    return ConfigError(field, value, valid + (f" (closest: {either(close)})" if close else ""))

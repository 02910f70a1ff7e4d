"""A fast first pass over `fedclust fit | evaluate | sweep | compare` arguments, before torch is imported.

Building the real parser imports torch, Lightning and every method (about 6 s on a small CPU), so a typo
used to cost that long. This pass checks the command line and its YAML configs against the schema read off
the real parsers (fedclust/cli_schema.json, see fedclust/cli_schema.py) and refuses bad input with one
sentence naming the field, the value and what is valid: an unknown option or config key (with the closest
valid names), a value of the wrong type or outside a Literal's choices, an unknown method or init argument, a
missing run folder, a malformed `--grid` entry. The real parser still parses every command afterwards.

The rule it keeps: refuse only what the real parser (or the subcommand's own first check) would refuse too,
never a valid command. Hence:

- Values are judged by jsonargparse itself: a one-option parser built from the stored type hint parses the
  very tokens (or the YAML value) the real one would get, so `0x10`, `1_000`, `1e-5`, `yes` and `'3'` pass
  exactly where they pass today.
- The command line is split the way argparse and jsonargparse split it (`--key=value`, abbreviations,
  `-3` as a value, `--method.init_args.KEY` routed to the method, each value checked where it is given).
- Whatever it cannot judge with certainty it leaves to the real parser (`_StepAside`): help, `--`, keys
  inside a dict-typed value, a class outside fedclust, a method dict it does not know the shape of.
- Before refusing, it checks that the schema still matches the code's signatures (`cli_schema.fresh`); a
  stale schema refuses nothing.

tests/test_cli_fast.py runs every refusal in a subprocess (checking torch and Lightning stay unimported)
and parses every case with the real parsers too, to show each one is refused there as well and that the
valid ones it lets through are accepted.
"""

from __future__ import annotations

import difflib
import itertools
import json
import re
import sys
import warnings
from pathlib import Path

from fedclust import cli_schema
from fedclust.config_files import MAX_CONFIG_BYTES
from fedclust.errors import ConfigError, FedclustError

CHECKPOINT = Path("checkpoints/last.ckpt")  # fedclust.run_folder.CHECKPOINT (that module imports torch)
_NEGATIVE_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")  # argparse's: such a token is a value, not an option
_UNKNOWN = object()  # a method class outside the schema (a user's own class path): its init args are not judged
_MISSING = object()
_MAX_SWEEP_POINTS = 5000


class _StepAside(Exception):
    """This pass cannot judge the command with certainty: the real parser will."""


def check(command: str, args: list[str]) -> None:
    """Refuse bad `fedclust COMMAND args` input with a FedclustError, or return (the real parser runs next)."""
    judge(command, args)


def judge(command: str, args: list[str], schema: dict | None = None) -> str:
    """"passed" (checked, nothing wrong found) or "aside" (left to the real parser); bad input raises
    FedclustError. `args` are the subcommand's arguments after `--config NAME` was resolved to a path."""
    schema = cli_schema.load() if schema is None else schema
    if command not in cli_schema.COMMANDS or schema is None:
        return "aside"
    try:
        _CHECKS[command](_Schema(schema), args)
    except _StepAside:
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


# ---- values, judged by jsonargparse ------------------------------------------------------------------------

class _Schema:
    def __init__(self, schema: dict):
        self.raw = schema
        self.classes: dict = schema["method"]["classes"]
        self.base: str = schema["method"]["base"]
        self._parsers: dict = {}
        self._yaml_cache: dict = {}

    def command(self, name: str) -> dict:
        return self.raw["commands"][name]

    def accepts(self, spec, nargs=None, tokens: list[str] | None = None, obj=_MISSING) -> bool:
        """Whether jsonargparse takes these command-line tokens (`--v=x` or `--v x y`), or this YAML value, for
        an option of this type."""
        if not cli_schema.judged(spec):
            return True
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
                if tokens is not None:
                    parser.parse_args(tokens)
                else:
                    parser.parse_object({"v": obj})
            except ArgumentError:
                return False
            except Exception as error:  # noqa: BLE001  (anything unexpected: not ours to judge)
                raise _StepAside from error
        return True

    def load_yaml(self, text: str):
        """YAML as jsonargparse reads it (its loader takes 1e-5 for a number, plain PyYAML does not)."""
        from jsonargparse import get_loader

        try:
            return get_loader("yaml")(text)
        except Exception as error:  # noqa: BLE001
            raise _StepAside from error

    def config_file(self, path: str):
        """A config file's content, read once."""
        if path not in self._yaml_cache:
            try:
                file = Path(path)
                if not file.is_file() or file.stat().st_size > MAX_CONFIG_BYTES:
                    raise _StepAside
                self._yaml_cache[path] = self.load_yaml(file.read_text(encoding="utf-8"))
            except (OSError, UnicodeDecodeError) as error:
                raise _StepAside from error
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
        return f"a list of {_plural(arg)}"
    if kind == "tuple":
        if all(s == arg[0] for s in arg):
            return f"a list of {len(arg)} {_plural(arg[0])} ([...])"
        return f"a list of {len(arg)} values: " + ", ".join(describe(s) for s in arg)
    if kind == "dict":
        return "a mapping ({key: value, ...})"
    return "a valid value"


def _plural(spec) -> str:
    if isinstance(spec, str) and spec in ("int", "float", "bool", "str"):
        return {"int": "integers", "float": "numbers", "bool": "booleans", "str": "strings"}[spec]
    return f"items of the form: {describe(spec)}"


def _closest(word: object, choices) -> list[str]:
    """Valid names close to a typo (case-insensitive); [] when none is close."""
    choices = [str(c) for c in choices]
    lowered = {c.lower(): c for c in choices}
    return [lowered[c] for c in difflib.get_close_matches(str(word).lower(), list(lowered), n=3, cutoff=0.6)]


def _or(names: list[str]) -> str:
    return ", ".join(names[:-1]) + " or " + names[-1] if len(names) > 1 else "".join(names)


def _invalid(field: str, value: object, spec) -> ConfigError:
    valid = describe(spec)
    literals = [c for s in (spec.get("union", [spec]) if isinstance(spec, dict) else [spec])
                if isinstance(s, dict) and "literal" in s for c in s["literal"]]
    close = _closest(value, literals) if literals and isinstance(value, str) else []
    return ConfigError(field, value, valid + (f" (closest: {_or(close)})" if close else ""))


# ---- the command line, split as argparse splits it ---------------------------------------------------------

class _Event:
    """One option as argparse consumes it: its name, the tokens a one-option parser should see, the values."""

    def __init__(self, kind: str, name: str, explicit: str | None, values: list[str], index: int):
        self.kind, self.name, self.explicit, self.values, self.index = kind, name, explicit, values, index

    @property
    def tokens(self) -> list[str]:
        return [f"--v={self.explicit}"] if self.explicit is not None else ["--v", *self.values]

    @property
    def value(self) -> str:
        return self.explicit if self.explicit is not None else " ".join(self.values)


class _Argv:
    def __init__(self, command: str, options: dict):
        self.command, self.options = command, options

    def _typed_parent(self, key: str) -> str | None:
        """jsonargparse sends `--a.b.c` to a typed option `--a` or `--a.b` (the method, a dict) when one exists."""
        parts = key.split(".")
        for n in range(len(parts) - 1, 0, -1):
            option = self.options.get("--" + ".".join(parts[:n]))
            if option and option["kind"] in ("method", "value"):
                return "--" + ".".join(parts[:n])
        return None

    def classify(self, token: str) -> tuple:
        """("A",) a value; ("O", option, explicit) a known option; ("M", key, explicit) a key of the method;
        ("U", name) an unknown option. Mirrors ArgumentParser._parse_optional (jsonargparse's, then argparse's)."""
        if token == "--":
            raise _StepAside
        if not token or token[0] != "-":
            return ("A",)
        base, sep, explicit = token.partition("=")
        explicit = explicit if sep else None
        if token.startswith("--") and "." in base and base not in self.options:
            parent = self._typed_parent(base[2:])
            if parent is not None:
                if self.options[parent]["kind"] == "method":
                    return ("M", base[2:], explicit)
                raise _StepAside  # a key inside a dict-typed value (--data.options.size 64)
        if token in self.options:
            return ("O", token, "" if self.options[token]["kind"] == "print_config" else None)
        if len(token) == 1:
            return ("A",)
        if sep and base in self.options:
            return ("O", base, explicit)
        if token.startswith("--"):
            matches = [o for o in self.options if o.startswith(base)]
            if len(matches) > 1:
                raise FedclustError(f"{base} is ambiguous: it could be {_or(sorted(matches))} (give the whole name).")
            if len(matches) == 1:
                if self.options[matches[0]]["kind"] == "print_config" and explicit is None:
                    raise _StepAside  # an abbreviated --print_config takes the next token as its flags
                return ("O", matches[0], explicit)
        elif token.startswith("-h"):
            raise _StepAside  # argparse reads -hX as -h
        if _NEGATIVE_NUMBER.match(token) or " " in token:
            return ("A",)
        return ("U", base)

    def steps_aside(self, args: list[str]) -> bool:
        """Whether any token asks for help: argparse prints it and exits 0 wherever it stands, even after an
        error it has only noted (an unknown option)."""
        for token in args:
            try:
                kind, *rest = self.classify(token)
            except FedclustError:
                continue
            if kind == "O" and self.options[rest[0]]["kind"] == "help":
                return True
            if kind == "M" and _helpish(rest[0].split(".", 1)[1]):
                return True
        return False

    def events(self, args: list[str]) -> list:
        """The options in order, and the positional values (first chunk only) as ("P", values)."""
        if self.steps_aside(args):
            raise _StepAside
        out, positional, chunks, i = [], [], 0, 0
        previous_was_value = False
        while i < len(args):
            kind, *rest = self.classify(args[i])
            if kind == "A":
                if not previous_was_value:
                    chunks += 1
                    if chunks > 1:
                        raise _StepAside  # argparse takes positionals in one chunk; leave the rest to it
                positional.append(args[i])
                previous_was_value = True
                i += 1
                continue
            previous_was_value = False
            if kind == "U":
                raise self.unknown(rest[0])
            name, explicit = rest
            spec = self.options.get(name, {}) if kind == "O" else {"kind": "method_key"}
            if spec.get("kind") in ("help", "other"):
                raise _StepAside
            nargs = spec.get("nargs") if spec.get("kind") == "value" else None
            if spec.get("kind") == "print_config":
                out.append(_Event("O", name, explicit, [], i))
                i += 1
                continue
            if explicit is not None:
                out.append(_Event(kind, name, explicit, [], i))
                i += 1
                continue
            values, j = [], i + 1
            while j < len(args) and (nargs == "+" or not values) and self.classify(args[j])[0] == "A":
                values.append(args[j])
                j += 1
            if not values:
                shown = name if kind == "O" else "--" + name
                need = "at least one argument" if nargs == "+" else "one argument"
                hint = "" if j >= len(args) else (" (a value that starts with '-', such as -1e-5, goes after an "
                                                  f"equals sign: {shown}=-1e-5)")
                raise FedclustError(f"{shown} expects {need}{hint}.")
            out.append(_Event(kind, name, None, values, i))
            i = j
        if positional:
            out.append(("P", positional))
        return out

    def unknown(self, name: str) -> FedclustError:
        close = _closest(name, [o for o in self.options if o.startswith("--")])
        hint = f"closest: {_or(close)}; " if close else ""
        return FedclustError(f"{name} is not an option of `fedclust {self.command}` ({hint}`fedclust {self.command} "
                             "--help` lists them all).")

    def stray(self, values: list[str]) -> FedclustError:
        return FedclustError(f"{values[0]!r} is not an option of `fedclust {self.command}`: options start with -- and "
                             f"take their value after them (`fedclust {self.command} --help` lists them all).")


def _helpish(key: str) -> bool:
    """--method.help and what argparse or jsonargparse might take for it."""
    return "help".startswith(key) or key.startswith("help")


def _value(schema: _Schema, option: str, spec: dict, event: _Event) -> None:
    if schema.accepts(spec["type"], spec.get("nargs"), tokens=event.tokens):
        return
    if spec.get("nargs") == "+":
        raise ConfigError(option.lstrip("-"), event.value, f"one or more {_plural(spec['type'])} after {option}, "
                          f"separated by spaces (e.g. {option} 3 5 7)")
    raise _invalid(option.lstrip("-"), event.value, spec["type"])


# ---- fit ---------------------------------------------------------------------------------------------------

class _Fit:
    """One fit command line: the configs and options in order, the method class as it changes."""

    def __init__(self, schema: _Schema):
        self.schema = schema
        self.options = schema.command("fit")["options"]
        self.cls: object = None  # None: no class yet (jsonargparse then judges init args by the base class)
        self.method_touched = False
        self.print_config = False

    def run(self, args: list[str]) -> None:
        argv = _Argv("fit", self.options)
        for event in argv.events(args):
            if isinstance(event, tuple):
                raise argv.stray(event[1])
            if event.kind == "M":
                self.method_key(event)
                continue
            spec = self.options[event.name]
            kind = spec["kind"]
            if kind == "config":
                self.config_file(event.value)
            elif kind == "print_config":
                self.print_config = True
            elif kind == "group":
                content = self.schema.load_yaml(event.value)
                if not isinstance(content, dict):
                    raise _StepAside  # a path to a group's file, or something the real parser will judge
                self.section(event.name[2:], content, "")
            elif kind == "method":
                self.method_obj(self.schema.load_yaml(event.value), "", event.value)
            elif kind == "value":
                _value(self.schema, event.name, spec, event)
            else:
                raise _StepAside
        if not self.method_touched and not self.print_config:
            raise FedclustError("--method is required (e.g. --config quickstart; `fedclust configs` lists the packaged "
                                "configs).")

    # config files and sections

    def config_file(self, path: str) -> None:
        content = self.schema.config_file(path)
        if content is None:
            return
        if not isinstance(content, dict):
            raise _StepAside
        where = f"{Path(path).name}: "
        top = [o[2:] for o in self.options if o.startswith("--") and "." not in o[2:]]
        for key, value in content.items():
            if not isinstance(key, str):
                raise _StepAside
            if key.startswith("__"):
                continue  # jsonargparse's own keys (__path__)
            spec = self.options.get("--" + key)
            if key == "method":
                self.method_obj(value, where)
            elif spec is None:
                raise ConfigError(f"{where}{key}", value, "a fit setting (" + _closest_hint(key, top) + ")")
            elif spec["kind"] == "value":
                if not self.schema.accepts(spec["type"], obj=value):
                    raise _invalid(f"{where}{key}", value, spec["type"])
            elif spec["kind"] == "group" and isinstance(value, dict):
                self.section(key, value, where)
            else:
                raise _StepAside

    def section(self, group: str, content: dict, where: str) -> None:
        keys = [o[len(group) + 3:] for o in self.options if o.startswith(f"--{group}.")]
        for key, value in content.items():
            if not isinstance(key, str):
                raise _StepAside
            if key.startswith("__"):
                continue
            spec = self.options.get(f"--{group}.{key}")
            if spec is None:
                raise ConfigError(f"{where}{group}.{key}", value,
                                  f"a {group} setting ({_closest_hint(key, keys)})")
            if spec["kind"] == "value":
                if not self.schema.accepts(spec["type"], obj=value):
                    raise _invalid(f"{where}{group}.{key}", value, spec["type"])
            elif spec["kind"] == "group" and isinstance(value, dict):
                self.section(f"{group}.{key}", value, where)
            else:
                raise _StepAside

    # the method

    def method_obj(self, value, where: str, shown: object = _MISSING) -> None:
        """`method:` in a config or `--method VALUE`: a class path, or a dict (jsonargparse's three shapes)."""
        self.method_touched = True
        shown = value if shown is _MISSING else shown
        if isinstance(value, str):
            self.set_class(value, where)
            return
        if not isinstance(value, dict):
            raise _StepAside
        keys = {k for k in value if not (isinstance(k, str) and k.startswith("__"))}
        if "class_path" in keys:
            if keys - {"class_path", "init_args", "dict_kwargs"}:
                raise ConfigError(f"{where}method", shown, "class_path with its settings under init_args (e.g. "
                                  "{class_path: CCFC, init_args: {lam: 0.5}})")
            if not isinstance(value["class_path"], str):
                raise _StepAside
            self.set_class(value["class_path"], where)
            if "init_args" in keys:
                self.init_args(value["init_args"], where)
        elif "init_args" in keys:
            if keys - {"init_args", "dict_kwargs"}:
                raise ConfigError(f"{where}method", shown, "class_path and init_args (e.g. {class_path: CCFC, "
                                  "init_args: {lam: 0.5}})")
            self.init_args(value["init_args"], where)
        elif "dict_kwargs" in keys:
            raise _StepAside
        else:
            self.init_args(value, where)  # {lam: 0.5}: init args of the method chosen so far

    def set_class(self, path: str, where: str) -> None:
        name = path.rsplit(".", 1)[-1]
        entry = self.schema.classes.get(name)
        if entry is None:
            fedclust_path = path.startswith("fedclust.methods.") or "." not in path
            if "." not in path and _foreign_classes_possible():
                raise _StepAside  # in a process that imported methods of its own, a bare name may name one
            if not fedclust_path:
                self.cls = _UNKNOWN  # a user's own class: the real parser imports and judges it
                return
            from fedclust.registry import METHODS

            close = _closest(name, [*METHODS, *self.schema.classes])
            hint = f"closest: {_or(close)}; " if close else ""
            raise ConfigError(f"{where}method", path, f"a fedclust method ({hint}all: {', '.join(METHODS)})")
        self.cls = name if entry.get("params") is not None else _UNKNOWN

    def init_args(self, content, where: str) -> None:
        if not isinstance(content, dict):
            raise _StepAside
        for key, value in content.items():
            if not isinstance(key, str):
                raise _StepAside
            if not key.startswith("__"):
                self.param(key, where, obj=value)

    def method_key(self, event: _Event) -> None:
        """--method.KEY VALUE: KEY is init_args.NAME or NAME, class_path, init_args or dict_kwargs(.X)."""
        self.method_touched = True
        sub = event.name.split(".", 1)[1]
        if _helpish(sub):
            raise _StepAside
        if sub == "class_path":
            path = self.schema.load_yaml(event.value)
            if not isinstance(path, str):
                raise _StepAside
            self.set_class(path, "")
        elif sub == "init_args":
            self.init_args(self.schema.load_yaml(event.value), "")
        elif sub == "dict_kwargs" or sub.startswith("dict_kwargs."):
            return
        else:
            self.param(sub.removeprefix("init_args."), "", event=event)

    def param(self, key: str, where: str, obj=_MISSING, event: _Event | None = None) -> None:
        if self.cls is _UNKNOWN:
            return
        name = self.cls or self.schema.base
        params = self.schema.classes[name].get("params")
        if params is None:
            return
        field = f"{where}method.init_args.{key}"
        value = event.value if event is not None else obj
        head = key.split(".", 1)[0]
        if head in params and head != key:
            return  # a key inside a nested argument: not judged here
        if head not in params:
            if self.cls is None:
                raise ConfigError(field, value, "an init argument given after the method is chosen (put --config "
                                  "or --method before it)")
            raise ConfigError(field, value, f"an init argument of {name} ({_closest_hint(head, params)}; "
                              f"`fedclust fit --method.help {name}` lists them)")
        spec = params[key]
        ok = (self.schema.accepts(spec, tokens=event.tokens) if event is not None
              else self.schema.accepts(spec, obj=obj))
        if not ok:
            raise _invalid(field, value, spec)


def _closest_hint(word: str, choices) -> str:
    close = _closest(word, choices)
    return f"closest: {_or(close)}" if close else "valid: " + ", ".join(sorted(choices))


def _fit(schema: _Schema, args: list[str]) -> None:
    _Fit(schema).run(args)


# ---- evaluate, sweep, compare ------------------------------------------------------------------------------

def _simple(schema: _Schema, command: str, args: list[str]) -> tuple[dict[str, _Event], list[str] | None]:
    """Options checked by type; the last event of each option and the positional values."""
    cmd = schema.command(command)
    argv = _Argv(command, cmd["options"])
    seen: dict[str, list[_Event]] = {}
    positional = None
    for event in argv.events(args):
        if isinstance(event, tuple):
            if cmd["positional"] is None:
                raise argv.stray(event[1])
            positional = event[1]
            continue
        spec = cmd["options"][event.name]
        if spec["kind"] != "value":
            raise _StepAside
        _value(schema, event.name, spec, event)
        seen.setdefault(event.name, []).append(event)
    required = [o for o, s in cmd["options"].items() if s.get("required") and o not in seen]
    if required:
        raise FedclustError(f"{', '.join(dict.fromkeys(required))} is required (`fedclust {command} --help` lists "
                            "the options).")
    if cmd["positional"] and cmd["positional"]["required"] and not positional:
        dest = cmd["positional"]["dest"]
        raise FedclustError(f"{dest} is required: one or more folders (`fedclust {command} RUN_DIR ...`; "
                            f"`fedclust {command} --help` lists the options).")
    return seen, positional


def _path_value(event: _Event) -> str:
    if event.value in ("null", "Null", "NULL", "~", ""):
        raise _StepAside  # the parser reads these as None
    return event.value


def _evaluate(schema: _Schema, args: list[str]) -> None:
    seen, _ = _simple(schema, "evaluate", args)
    run = Path(_path_value(seen["--run"][-1]))
    if not (run / CHECKPOINT).exists() or not (run / "config.yaml").is_file():  # as run_folder.load_run
        raise ConfigError("run", str(run), f"a run folder holding config.yaml and {CHECKPOINT}")


def _compare(schema: _Schema, args: list[str]) -> None:
    seen, runs = _simple(schema, "compare", args)
    for folder in map(Path, runs or []):  # as compare.runs.load_runs
        if (folder / "config.yaml").is_file():
            continue
        inner = folder.is_dir() and any((f / "config.yaml").is_file() and ".incomplete-" not in f.name
                                        for f in folder.iterdir())
        if not inner:
            raise ConfigError("runs", str(folder), "a run folder holding config.yaml (written by `fedclust fit`) or a "
                              "folder of such run folders")
    if "--output" in seen and Path(_path_value(seen["--output"][-1])).is_dir():
        raise ConfigError("output", seen["--output"][-1].value, "a file path for the HTML page, not a folder")


def _sweep(schema: _Schema, args: list[str]) -> None:
    import yaml

    seen, _ = _simple(schema, "sweep", args)
    config = _path_value(seen["--config"][-1])
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
    if count > _MAX_SWEEP_POINTS:
        raise _StepAside
    for combo in itertools.product(*(axes[k] for k in keys)):  # as sweep.expand and sweep.check
        overrides = dict(zip(keys, combo))
        point_config = str(overrides.pop("config", config))
        if not Path(point_config).is_file():
            raise ConfigError("config", point_config, "a config file that exists")
        argv = ["--config", point_config]
        for key, value in overrides.items():
            argv += [f"--{key}", value if isinstance(value, str) else json.dumps(value)]
        try:
            _Fit(schema).run(argv)
        except FedclustError as error:
            shown = ", ".join(f"{k}={v}" for k, v in overrides.items()) or f"config={point_config}"
            raise FedclustError(f"grid point {shown} is refused by `fedclust fit`: {error}") from None


_CHECKS = {"fit": _fit, "evaluate": _evaluate, "sweep": _sweep, "compare": _compare}

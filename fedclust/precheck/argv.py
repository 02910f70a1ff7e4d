"""The command line split the way argparse and jsonargparse split it: `--key=value`, abbreviations, `-3` as a
value, `--method.init_args.KEY` routed to the method, help wherever it stands."""

from __future__ import annotations

import re

from fedclust.errors import ConfigError, FedclustError
from fedclust.precheck.values import REFUSED, Schema, StepAside, closest, either, invalid, plural

NEGATIVE_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")  # argparse's: such a token is a value, not an option


class Event:
    """One option as argparse consumes it: its name, the tokens a one-option parser should see, the values."""

    def __init__(self, kind: str, name: str, explicit: str | None, values: list[str], index: int):
        self.kind, self.name, self.explicit, self.values, self.index = kind, name, explicit, values, index

    @property
    def tokens(self) -> list[str]:
        return [f"--v={self.explicit}"] if self.explicit is not None else ["--v", *self.values]

    @property
    def value(self) -> str:
        return self.explicit if self.explicit is not None else " ".join(self.values)


class Argv:
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
            raise StepAside
        if not token or token[0] != "-":
            return ("A",)
        base, sep, explicit = token.partition("=")
        explicit = explicit if sep else None
        if token.startswith("--") and "." in base and base not in self.options:
            parent = self._typed_parent(base[2:])
            if parent is not None:
                if self.options[parent]["kind"] == "method":
                    return ("M", base[2:], explicit)
                raise StepAside  # a key inside a dict-typed value (--data.options.size 64)
        if token in self.options:
            return ("O", token, "" if self.options[token]["kind"] == "print_config" else None)
        if len(token) == 1:
            return ("A",)
        if sep and base in self.options:
            return ("O", base, explicit)
        if token.startswith("--"):
            matches = [o for o in self.options if o.startswith(base)]
            if len(matches) > 1:
                raise FedclustError(f"{base} is ambiguous: it could be {either(sorted(matches))} (give the whole "
                                    "name).")
            if len(matches) == 1:
                if self.options[matches[0]]["kind"] == "print_config" and explicit is None:
                    raise StepAside  # an abbreviated --print_config takes the next token as its flags
                return ("O", matches[0], explicit)
        elif token.startswith("-h"):
            raise StepAside  # argparse reads -hX as -h
        if NEGATIVE_NUMBER.match(token) or " " in token:
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
            if kind == "M" and helpish(rest[0].split(".", 1)[1]):
                return True
        return False

    def events(self, args: list[str]) -> list:
        """The options in order, and the positional values (first chunk only) as ("P", values)."""
        if self.steps_aside(args):
            raise StepAside
        out, positional, chunks, i = [], [], 0, 0
        previous_was_value = False
        while i < len(args):
            kind, *rest = self.classify(args[i])
            if kind == "A":
                if not previous_was_value:
                    chunks += 1
                    if chunks > 1:
                        raise StepAside  # argparse takes positionals in one chunk; leave the rest to it
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
                raise StepAside
            nargs = spec.get("nargs") if spec.get("kind") == "value" else None
            if spec.get("kind") == "print_config":
                out.append(Event("O", name, explicit, [], i))
                i += 1
                continue
            if explicit is not None:
                out.append(Event(kind, name, explicit, [], i))
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
            out.append(Event(kind, name, None, values, i))
            i = j
        if positional:
            out.append(("P", positional))
        return out

    def unknown(self, name: str) -> FedclustError:
        close = closest(name, [o for o in self.options if o.startswith("--")])
        hint = f"closest: {either(close)}; " if close else ""
        return FedclustError(f"{name} is not an option of `fedclust {self.command}` ({hint}`fedclust {self.command} "
                             "--help` lists them all).")

    def stray(self, values: list[str]) -> FedclustError:
        return FedclustError(f"{values[0]!r} is not an option of `fedclust {self.command}`: options start with -- and "
                             f"take their value after them (`fedclust {self.command} --help` lists them all).")


def helpish(key: str) -> bool:
    """--method.help and what argparse or jsonargparse might take for it."""
    return "help".startswith(key) or key.startswith("help")


def option_value(schema: Schema, option: str, spec: dict, event: Event):
    """The value an option's tokens make, or a ConfigError naming what is valid."""
    value = schema.value(spec["type"], spec.get("nargs"), tokens=event.tokens)
    if value is not REFUSED:
        return value
    if spec.get("nargs") == "+":
        raise ConfigError(option.lstrip("-"), event.value, f"one or more {plural(spec['type'])} after {option}, "
                          f"separated by spaces (e.g. {option} 3 5 7)")
    raise invalid(option.lstrip("-"), event.value, spec["type"])

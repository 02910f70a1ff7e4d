"""One `fedclust fit` command line against the schema: its config files and options in order, the method class as
it changes, and the values the run would get (handed to the range checks of fedclust/precheck/ranges.py)."""

from __future__ import annotations

from pathlib import Path

from fedclust.errors import ConfigError, FedclustError
from fedclust.precheck import ranges
from fedclust.precheck.argv import Argv, Event, helpish, option_value
from fedclust.precheck.values import (
    MISSING,
    REFUSED,
    UNKNOWN,
    Schema,
    StepAside,
    closest,
    closest_hint,
    either,
    invalid,
)


class Fit:
    """`ranges=False` checks names and types only (a sweep's points: `fedclust sweep` runs them before any
    range check, and reports a point that fails as a failed run)."""

    def __init__(self, schema: Schema, ranges: bool = True):
        self.schema, self.ranges = schema, ranges
        self.options = schema.command("fit")["options"]
        self.cls: object = None  # None: no class yet (jsonargparse then judges init args by the base class)
        self.method_touched = False
        self.print_config = False
        self.values: dict[str, object] = {}  # "data.p" -> the value the run gets (UNKNOWN: not judged)
        self.init_values: dict[str, object] = {}  # the method's init args given so far, as parsed

    def run(self, args: list[str]) -> None:
        argv = Argv("fit", self.options)
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
                    raise StepAside  # a path to a group's file, or something the real parser will judge
                self.section(event.name[2:], content, "")  # merged into the group, as jsonargparse does
            elif kind == "method":
                self.method_obj(self.schema.load_yaml(event.value), "", event.value)
            elif kind == "value":
                self.values[event.name[2:]] = option_value(self.schema, event.name, spec, event)
            else:
                raise StepAside
        if not self.method_touched and not self.print_config:
            raise FedclustError("--method is required (e.g. --config quickstart; `fedclust configs` lists the packaged "
                                "configs).")
        if self.ranges and not self.print_config and isinstance(self.cls, str):  # --print_config runs no check
            ranges.fit(self.options, self.values, self.init_values, self.schema.classes[self.cls],
                       self.schema.raw.get("datasets"))

    # config files and sections

    def config_file(self, path: str) -> None:
        content = self.schema.config_file(path)
        if content is None:
            return
        if not isinstance(content, dict):
            raise StepAside
        where = f"{Path(path).name}: "
        top = [o[2:] for o in self.options if o.startswith("--") and "." not in o[2:]]
        for key, value in content.items():
            if not isinstance(key, str):
                raise StepAside
            if key.startswith("__"):
                continue  # jsonargparse's own keys (__path__)
            spec = self.options.get("--" + key)
            if key == "method":
                self.method_obj(value, where)
            elif spec is None:
                raise ConfigError(f"{where}{key}", value, "a fit setting (" + closest_hint(key, top) + ")")
            elif spec["kind"] == "value":
                self.values[key] = self.yaml_value(spec["type"], value, f"{where}{key}")
            elif spec["kind"] == "group" and isinstance(value, dict):
                self.section(key, value, where)
            else:
                raise StepAside

    def section(self, group: str, content: dict, where: str) -> None:
        keys = [o[len(group) + 3:] for o in self.options if o.startswith(f"--{group}.")]
        for key, value in content.items():
            if not isinstance(key, str):
                raise StepAside
            if key.startswith("__"):
                continue
            spec = self.options.get(f"--{group}.{key}")
            if spec is None:
                raise ConfigError(f"{where}{group}.{key}", value,
                                  f"a {group} setting ({closest_hint(key, keys)})")
            if spec["kind"] == "value":
                self.values[f"{group}.{key}"] = self.yaml_value(spec["type"], value, f"{where}{group}.{key}")
            elif spec["kind"] == "group" and isinstance(value, dict):
                self.section(f"{group}.{key}", value, where)
            else:
                raise StepAside

    def yaml_value(self, spec, value, field: str):
        parsed = self.schema.value(spec, obj=value)
        if parsed is REFUSED:
            raise invalid(field, value, spec)
        return parsed

    # the method

    def method_obj(self, value, where: str, shown: object = MISSING) -> None:
        """`method:` in a config or `--method VALUE`: a class path, or a dict (jsonargparse's three shapes)."""
        self.method_touched = True
        shown = value if shown is MISSING else shown
        if isinstance(value, str):
            self.set_class(value, where)
            return
        if not isinstance(value, dict):
            raise StepAside
        keys = {k for k in value if not (isinstance(k, str) and k.startswith("__"))}
        if "class_path" in keys:
            if keys - {"class_path", "init_args", "dict_kwargs"}:
                raise ConfigError(f"{where}method", shown, "class_path with its settings under init_args (e.g. "
                                  "{class_path: CCFC, init_args: {lam: 0.5}})")
            if not isinstance(value["class_path"], str):
                raise StepAside
            self.set_class(value["class_path"], where)
            if "init_args" in keys:
                self.init_args(value["init_args"], where)
        elif "init_args" in keys:
            if keys - {"init_args", "dict_kwargs"}:
                raise ConfigError(f"{where}method", shown, "class_path and init_args (e.g. {class_path: CCFC, "
                                  "init_args: {lam: 0.5}})")
            self.init_args(value["init_args"], where)
        elif "dict_kwargs" in keys:
            raise StepAside
        else:
            self.init_args(value, where)  # {lam: 0.5}: init args of the method chosen so far

    def set_class(self, path: str, where: str) -> None:
        from fedclust import precheck  # looked up there at each call, so a test can stand in for a fresh process

        name = path.rsplit(".", 1)[-1]
        entry = self.schema.classes.get(name)
        if entry is None:
            fedclust_path = path.startswith("fedclust.methods.") or "." not in path
            if "." not in path and precheck._foreign_classes_possible():
                raise StepAside  # in a process that imported methods of its own, a bare name may name one
            if not fedclust_path:
                self.cls, self.init_values = UNKNOWN, {}  # a user's own class: the real parser imports and judges it
                return
            from fedclust.registry import METHODS

            close = closest(name, [*METHODS, *self.schema.classes])
            hint = f"closest: {either(close)}; " if close else ""
            raise ConfigError(f"{where}method", path, f"a fedclust method ({hint}all: {', '.join(METHODS)})")
        # jsonargparse keeps the init args given so far that the new class takes too (none given before any class)
        params = entry.get("params")
        keep = params is not None and isinstance(self.cls, str)
        self.init_values = {k: v for k, v in self.init_values.items() if keep and k in params}
        self.cls = name if params is not None else UNKNOWN

    def init_args(self, content, where: str) -> None:
        if not isinstance(content, dict):
            raise StepAside
        for key, value in content.items():
            if not isinstance(key, str):
                raise StepAside
            if not key.startswith("__"):
                self.param(key, where, obj=value)

    def method_key(self, event: Event) -> None:
        """--method.KEY VALUE: KEY is init_args.NAME or NAME, class_path, init_args or dict_kwargs(.X)."""
        self.method_touched = True
        sub = event.name.split(".", 1)[1]
        if helpish(sub):
            raise StepAside
        if sub == "class_path":
            path = self.schema.load_yaml(event.value)
            if not isinstance(path, str):
                raise StepAside
            self.set_class(path, "")
        elif sub == "init_args":
            self.init_args(self.schema.load_yaml(event.value), "")
        elif sub == "dict_kwargs" or sub.startswith("dict_kwargs."):
            return
        else:
            self.param(sub.removeprefix("init_args."), "", event=event)

    def param(self, key: str, where: str, obj=MISSING, event: Event | None = None) -> None:
        if self.cls is UNKNOWN:
            return
        name = self.cls or self.schema.base
        params = self.schema.classes[name].get("params")
        if params is None:
            return
        field = f"{where}method.init_args.{key}"
        value = event.value if event is not None else obj
        head = key.split(".", 1)[0]
        if head in params and head != key:
            self.init_values[head] = UNKNOWN  # a key inside a nested argument: not judged here
            return
        if head not in params:
            if self.cls is None:
                raise ConfigError(field, value, "an init argument given after the method is chosen (put --config "
                                  "or --method before it)")
            raise ConfigError(field, value, f"an init argument of {name} ({closest_hint(head, params)}; "
                              f"`fedclust fit --method.help {name}` lists them)")
        spec = params[key]
        parsed = (self.schema.value(spec, tokens=event.tokens) if event is not None
                  else self.schema.value(spec, obj=obj))
        if parsed is REFUSED:
            raise invalid(field, value, spec)
        self.init_values[key] = parsed  # UNKNOWN too: given, but not judged (not the default either)

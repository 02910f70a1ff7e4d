"""jsonargparse's parse errors as one sentence that names the field, the value and what is valid, with the
nearest valid names for a typo (the CLI prints no usage block and no traceback)."""

from __future__ import annotations

import difflib
import importlib
import inspect
import re

from fedclust.config_files import nearest


def _options(parser) -> list[str]:
    return [s for action in parser._actions for s in action.option_strings if s.startswith("--")]


def _method_names() -> list[str]:
    from fedclust.registry import METHODS

    return list(METHODS)


def one_sentence(message: str, parser=None) -> str:
    text = " ".join(line.strip() for line in message.strip().splitlines() if line.strip())
    unknown = re.match(r"unrecognized arguments: (\S+)", text)
    if unknown and parser is not None:
        key = unknown.group(1).split("=", 1)[0]
        return f"{key} is not an option (closest: {nearest(key, _options(parser))}; --help lists them all)."
    in_config = re.fullmatch(r"Option '([\w.]+)' is not accepted", text)  # a config file's key
    if in_config and parser is not None:
        key = in_config.group(1)
        close = difflib.get_close_matches(key, [o[2:] for o in _options(parser)], n=3, cutoff=0.6)
        hint = f"closest: {', '.join(close)}; " if close else ""
        return f"{key} is not a setting ({hint}--help lists them all)."
    path = (re.search(r'Parser key "method".*?dot import path string: \'?([\w.]+)\'?', text)
            or re.search(r"Parser key \"method\".*?class_path '([\w.]+)': *(?:No module named|module '[\w.]+' has no "
                         r"attribute|.*not a subclass)", text))
    option = re.search(r"class_path '([\w.]+)': Option '(\w+)' is not accepted", text)
    if option:
        cls = _resolve(option.group(1))
        valid = [p for p in inspect.signature(cls.__init__).parameters if p != "self"] if cls else []
        return (f"method.init_args.{option.group(2)} is not an option of {option.group(1).rsplit('.', 1)[-1]} "
                f"(closest: {nearest(option.group(2), valid)}).")
    if path and "is not accepted" not in text:
        return (f"method.class_path = '{path.group(1)}' is not a fedclust method (closest: "
                f"{nearest(path.group(1), _method_names())}; all: {', '.join(_method_names())}).")
    if re.match(r"argument (--[\w.]+): expected one argument", text):
        return (f"{text} (a value that starts with '-', such as -1e-5, goes after an equals sign: "
                "--key=-1e-5).")
    required = re.match(r"the following arguments are required: (.+)", text)
    if required:
        names = [n.strip() for n in required.group(1).split(",")]
        hint = " (e.g. --config quickstart; `fedclust configs` lists the packaged configs)" if "method" in names else ""
        return f"{', '.join('--' + n for n in names)} is required{hint}."
    field = _field(text)
    literal = re.search(r"Expected a typing\.Literal\[(.*)\]\. Got value: (.*)$", text)
    if field and literal:
        choices = [c.strip().strip("'\"") for c in literal.group(1).split(",")]
        return (f"{field} = '{literal.group(2)}' is not valid: one of {', '.join(choices)} "
                f"(closest: {nearest(literal.group(2), choices)}).")
    single = re.search(r"Expected a <class '(\w+)'>\. Got value: (.*)$", text)
    union = re.search(r"Subtypes: \[(.*?)\].*Given value: (.*)$", text)
    if field and (single or union):
        kinds = re.findall(r"<class '(\w+)'>", union.group(1)) if union else [single.group(1)]
        valid = " or ".join(dict.fromkeys(_TYPE_WORDS.get(k, k) for k in kinds))
        return f"{field} = '{(union or single).group(2)}' is not valid: {valid}."
    key = re.match(r'Parser key "([\w.]+)": (.*)', text)
    if key:
        return f"{key.group(1)}: {key.group(2)}"
    return text


_TYPE_WORDS = {"int": "an integer", "float": "a number", "bool": "true or false", "str": "a string",
               "NoneType": "null", "dict": "a mapping ({key: value, ...})", "tuple": "a list ([...])",
               "list": "a list ([...])"}


def _field(text: str) -> str | None:
    """The dotted field a jsonargparse error is about; a method's init argument as method.init_args.NAME."""
    keys = re.findall(r'Parser key "([\w.]+)"', text)
    if not keys:
        return None
    if keys[0] == "method" and len(keys) > 1 and "Problem with given class_path" in text:
        return f"method.init_args.{keys[-1]}"
    return keys[-1]


def _resolve(dotted: str):
    module, _, name = dotted.rpartition(".")
    try:
        return getattr(importlib.import_module(module or "fedclust.methods"), name)
    except (ImportError, AttributeError):
        return None

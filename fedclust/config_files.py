"""The configs shipped with the package and how `--config` finds a file.

The configs live once, in the repository's top-level configs/; the wheel ships them as fedclust/configs/
(pyproject's package-dir), a checkout (editable install or PYTHONPATH) reads them where they are (fedclust/homes.py).

`--config quickstart` (a bare name) is the packaged config of that name, so a pip user needs no clone;
a path works as before. Config files are read as untrusted input: a missing, unreadable, binary or huge
file is refused with one sentence before anything heavy is imported. Plain Python, no torch: the CLI
answers `fedclust configs` and these errors at once.
"""

from __future__ import annotations

import difflib
from pathlib import Path

from fedclust.errors import ConfigError
from fedclust.homes import home

PACKAGED = home("configs")
MAX_CONFIG_BYTES = 1 << 20  # a config is a page of YAML; anything larger is not one


def packaged_configs() -> dict[str, Path]:
    """Name (file stem) -> path of every packaged config, sorted by name."""
    return {p.stem: p for p in sorted(PACKAGED.glob("*.yaml"))}


def description(path: Path) -> str:
    """A config's one-line description: its first comment line."""
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("#"):
            return line.lstrip("#").strip()
        if line.strip():
            break
    return ""


def nearest(word: str, choices, n: int = 3) -> str:
    """'a, b or c': the closest valid names, for error messages."""
    close = difflib.get_close_matches(word, list(choices), n=n, cutoff=0.6) or list(choices)[:n]
    return ", ".join(close[:-1]) + (" or " if len(close) > 1 else "") + close[-1] if close else ""


def resolve_config(value: str) -> Path:
    """The file `--config value` names: an existing path, or a packaged config's name (with or without .yaml)."""
    path = Path(value).expanduser()
    if not path.exists() and "/" not in value and "\\" not in value:
        packaged = packaged_configs().get(value.removesuffix(".yaml").removesuffix(".yml"))
        if packaged is not None:
            return packaged
        raise ConfigError("--config", value, "a YAML file's path or a packaged config's name (closest: "
                          f"{nearest(value.removesuffix('.yaml'), packaged_configs())}; `fedclust configs` lists them)")
    check_config_file(path, "--config")
    return path


def check_config_file(path: Path, field: str) -> None:
    """Refuse, in one sentence, a config file that cannot be a YAML config (before parsing it)."""
    if not path.is_file():
        raise ConfigError(field, str(path), "an existing YAML file" if not path.exists() else "a file, not a folder")
    if path.stat().st_size > MAX_CONFIG_BYTES:
        raise ConfigError(field, str(path), f"a YAML config of at most {MAX_CONFIG_BYTES >> 20} MiB")
    try:
        text = path.read_bytes().decode("utf-8")
    except PermissionError as error:
        raise ConfigError(field, str(path), "a file this user can read") from error
    except UnicodeDecodeError as error:
        raise ConfigError(field, str(path), "a UTF-8 text file (YAML); this one holds binary data") from error
    if "\x00" in text:
        raise ConfigError(field, str(path), "a UTF-8 text file (YAML); this one holds binary data")
    check_fit_yaml(text, path, field)


def check_fit_yaml(text: str, path: Path, field: str) -> None:
    """YAML syntax and the shape of a fit config (a mapping), checked before torch is imported. Its keys are
    judged next by fedclust/precheck/ against cli_schema.json, which holds fit()'s arguments as read off its
    parser (a hand-kept copy of them here would be one more list to forget)."""
    import yaml

    try:
        content = yaml.safe_load(text)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" (line {mark.line + 1}: {getattr(error, 'problem', '')})" if mark else ""
        raise ConfigError(field, str(path), f"valid YAML{where}") from None
    if content is None:
        return
    if not isinstance(content, dict):
        raise ConfigError(field, str(path), "a YAML mapping of fit settings (method:, data:, federation:, ...)")


def expand_config_args(argv: list[str]) -> list[str]:
    """argv with every `--config NAME` / `--config=NAME` replaced by the file it resolves to."""
    out, i = [], 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--config" and i + 1 < len(argv):
            out += [arg, str(resolve_config(argv[i + 1]))]
            i += 2
            continue
        if arg.startswith("--config="):
            arg = "--config=" + str(resolve_config(arg.split("=", 1)[1]))
        out.append(arg)
        i += 1
    return out

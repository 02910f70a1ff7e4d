"""The one registry of methods (fedclust/registry.py) agrees with the package, the configs, the method tables
(README.md, docs/methods.md) and the import-linter contracts (pyproject.toml)."""

import re
from pathlib import Path

import pytest

import fedclust.methods
from fedclust.contract import FederatedMethod
from fedclust.registry import METHODS, configs_of

ROOT = Path(__file__).resolve().parents[1]


def test_every_exported_method_is_registered_and_loads():
    exported = set(fedclust.methods.__all__) - {"FederatedMethod", "Stage"}
    assert exported == set(METHODS)
    for name, entry in METHODS.items():
        cls = entry.load()
        assert issubclass(cls, FederatedMethod) and cls.__name__ == name
        assert getattr(fedclust.methods, name) is cls


def test_every_method_file_is_registered():
    files = {path.stem for path in (ROOT / "fedclust" / "methods").glob("*.py")} - {"__init__"}
    assert files == {entry.module for entry in METHODS.values()}


def test_the_import_contracts_list_exactly_the_registered_methods():
    """pyproject.toml's two hand lists of method modules (TOML cannot read the registry) stay the registry's."""
    try:
        import tomllib
    except ImportError:  # Python 3.10
        tomllib = pytest.importorskip("tomli")
    contracts = {c["name"]: c for c in
                 tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]}
    modules = sorted(f"fedclust.methods.{entry.module}" for entry in METHODS.values())
    assert sorted(contracts["Methods are leaves: none imports another"]["modules"]) == modules
    assert sorted(contracts["Method families import no method"]["forbidden_modules"]) == modules


def test_the_recorded_embedding_fact_is_the_class_s():
    """`embeds` lets the torch-free first pass refuse `--diagnose true`; the run asks the class itself."""
    from fedclust.callbacks.diagnostics import has_embedding

    for name, entry in METHODS.items():
        cls = entry.load()
        assert entry.embeds == has_embedding(cls), f"{name}: registry says embeds={entry.embeds}"
        assert entry.class_path == f"{cls.__module__}.{cls.__qualname__}"
    without = {"KFED", "KMeans", "FCM", "FFCM", "SDAFC", "UIFCA", "Spectral"}
    assert {n for n, e in METHODS.items() if not e.embeds} == without


def test_every_method_has_a_config_and_every_config_a_registered_method():
    for name in METHODS:
        assert configs_of(name, ROOT / "configs"), f"{name} has no config in configs/"
    import yaml

    for path in (ROOT / "configs").glob("*.yaml"):
        method = yaml.safe_load(path.read_text())["method"]["class_path"].rsplit(".", 1)[-1]
        assert method in METHODS, f"{path.name} names {method}, which is not registered"


@pytest.mark.parametrize("page", ["README.md", "docs/methods.md"])
def test_the_method_tables_list_exactly_the_registered_methods(page):
    text = (ROOT / page).read_text()
    table = text[text.index("| method"):].split("\n\n")[0]
    names = {n for row in table.splitlines() if row.startswith("| `")
             for n in re.findall(r"`(\w+)`", row.split("|")[1])}
    assert names == set(METHODS)


@pytest.mark.parametrize("page", ["README.md", "docs/methods.md", "docs/architecture.md"])
def test_the_pages_link_the_one_recipe_for_adding_a_method(page):
    assert "adding_a_method.md" in (ROOT / page).read_text()


def test_top_level_help_lists_the_methods(capsys):
    from fedclust.__main__ import main

    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in METHODS)


def test_every_registered_method_has_a_tiny_setting():
    from tests.helpers.tiny import TINY_METHODS

    assert set(TINY_METHODS) == set(METHODS)


def test_the_readme_method_table_names_each_method_s_packaged_configs_exactly():
    """Each row's configs (brace and * patterns) are exactly the configs whose method is that row's."""
    import fnmatch

    def expand(pattern: str) -> list[str]:
        brace = re.search(r"\{([^}]*)\}", pattern)
        if not brace:
            return [pattern]
        return [name for alt in brace.group(1).split(",")
                for name in expand(pattern[:brace.start()] + alt + pattern[brace.end():])]

    text = (ROOT / "README.md").read_text()
    every = [path.stem for path in (ROOT / "configs").glob("*.yaml")]
    for row in text[text.index("## Methods"):text.index("## Results")].splitlines():
        if row.startswith("| `"):
            cells = row.split("|")
            (name,) = re.findall(r"`(\w+)`", cells[1])
            patterns = [e for p in re.findall(r"`([^`]+)`", cells[2]) for e in expand(p)]
            listed = {c for e in patterns for c in fnmatch.filter(every, e)}
            assert listed == set(configs_of(name, ROOT / "configs")), name

"""docs/adding_a_method.md is the one recipe, and it works: this test adds its toy method as the page says (the
method file, the config, the registry line, each taken from the page's own blocks) and runs it."""

import gc
import re
import sys
from pathlib import Path

import pytest

import fedclust
import fedclust.methods
from fedclust.contract import FederatedMethod
from fedclust.registry import METHODS, MethodEntry, configs_of

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "docs" / "adding_a_method.md"


def _block(name: str) -> str:
    """The fenced block that follows `<!-- recipe: NAME -->` in the recipe."""
    found = re.search(rf"<!-- recipe: {name} -->\n```\w+\n(.*?)```", RECIPE.read_text(), re.S)
    assert found, f"docs/adding_a_method.md has no block marked {name!r}"
    return found.group(1)


@pytest.fixture
def toy(tmp_path, monkeypatch):
    """The recipe's three steps, in a temporary folder that fedclust.methods reads as its own."""
    folder = tmp_path / "methods"
    folder.mkdir()
    entry = eval(_block("registry line").strip().rstrip(","), {"MethodEntry": MethodEntry})  # the line as written
    (folder / f"{entry.module}.py").write_text(_block("method file"))
    configs = tmp_path / "configs"
    configs.mkdir()
    (configs / f"{entry.module}_digits.yaml").write_text(_block("config"))
    monkeypatch.setattr(fedclust.methods, "__path__", [*fedclust.methods.__path__, str(folder)])
    monkeypatch.setitem(METHODS, entry.name, entry)
    yield entry, configs
    module = f"fedclust.methods.{entry.module}"
    sys.modules.pop(module, None)
    if hasattr(fedclust.methods, entry.module):
        delattr(fedclust.methods, entry.module)
    gc.collect()  # the toy class leaves FederatedMethod's subclasses, which jsonargparse searches by name


def test_the_recipe_s_toy_method_registers_and_runs(toy, tmp_path, capsys):
    entry, configs = toy
    cls = entry.load()
    assert issubclass(cls, FederatedMethod) and entry.class_path == f"{cls.__module__}.{cls.__qualname__}"
    assert configs_of(entry.name, configs) == [f"{entry.module}_digits"]

    from fedclust.__main__ import main

    assert main(["--help"]) == 0
    assert entry.name in capsys.readouterr().out.split("methods (--method NAME):")[1]

    result = fedclust.fit(str(configs / f"{entry.module}_digits.yaml"), {"progress": False},
                          run_dir=str(tmp_path / "run"))
    assert type(result.model) is cls
    assert result.metrics["nmi"] > 0.5  # k-means of 8x8 digits' cluster means finds the digits
    assert len(result.assignments["cluster"]) == 1797 and result.centroids.shape == (10, 64)

"""Who imports fedclust.callbacks: never the building blocks, the engine or the methods, directly or through
another module, the rule pyproject's import-linter contracts held while fedclust/callbacks was a link.

The callbacks' one home is the top-level callbacks/ folder (package-dir maps it to fedclust.callbacks), so
lint-imports, which reads the modules under fedclust/, cannot see an import of fedclust.callbacks: this test
finds those imports in the source and asks lint-imports' own graph (grimp) for the chains that reach them.
"""

from __future__ import annotations

import ast
from pathlib import Path

import grimp  # import-linter's graph library (the dev extra)
import pytest

import fedclust

PACKAGE = Path(fedclust.__file__).resolve().parent  # the tree grimp reads: the fedclust imported here
# the sources of pyproject's contracts "Building blocks ...", "The engine ..." and "Methods never reach ..."
NEVER = ["fedclust.data", "fedclust.nn", "fedclust.losses", "fedclust.clustering", "fedclust.seeding",
         "fedclust.errors", "fedclust.federation", "fedclust.contract", "fedclust.methods"]
CALLBACKS = "fedclust.callbacks"


def imports_callbacks(source: str, module: str, is_package: bool = False) -> bool:
    """Whether this module's source imports fedclust.callbacks or one of its modules (function-level and
    relative imports included)."""
    package = module if is_package else module.rpartition(".")[0]
    names = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
            start = ".".join([*base, *([node.module] if node.module else [])])
            names += [start, *(f"{start}.{alias.name}" for alias in node.names)]
    return any(name == CALLBACKS or name.startswith(CALLBACKS + ".") for name in names)


def callbacks_importers() -> set[str]:
    """Every module under fedclust/ that imports fedclust.callbacks itself."""
    found = set()
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        is_package = parts[-1] == "__init__"
        module = ".".join(parts[:-1] if is_package else parts)
        if imports_callbacks(path.read_text(encoding="utf-8"), module, is_package):
            found.add(module)
    return found


@pytest.mark.parametrize(("source", "module", "expected"), [
    ("from fedclust.callbacks.csv_metrics import CSVMetrics", "fedclust.api", True),
    ("def f():\n    import fedclust.callbacks.checkpoint", "fedclust.data.derived", True),
    ("from ..callbacks import base", "fedclust.methods.ccfc", True),
    ("from . import callbacks", "fedclust.run", True),
    ("from .callbacks_like import x\nimport fedclust.run", "fedclust.api", False),
    ("from ..data import callbacks", "fedclust.methods.ccfc", False),
])
def test_an_import_of_the_callbacks_is_seen_however_it_is_written(source, module, expected):
    assert imports_callbacks(source, module) is expected


def test_the_building_blocks_the_engine_and_the_methods_never_reach_the_callbacks():
    importers = callbacks_importers()
    assert "fedclust.run" in importers  # the run level wires them; the scan sees its imports
    graph = grimp.build_graph("fedclust", cache_dir=None)
    for source in NEVER:
        for importer in importers:
            assert importer != source and not importer.startswith(source + "."), f"{importer} imports {CALLBACKS}"
            chain = graph.find_shortest_chain(importer=source, imported=importer, as_packages=True)
            assert chain is None, f"{source} reaches {CALLBACKS}: {' -> '.join([*chain, CALLBACKS])}"

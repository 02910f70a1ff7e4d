"""Where the callbacks and the configs live: one home each, at the top of the repository.

callbacks/ (the package imported as `fedclust.callbacks`) and configs/ (the YAML configs `--config NAME` finds)
sit beside fedclust/, not inside it, and nothing links or copies them there. pyproject's package-dir puts them at
fedclust/callbacks and fedclust/configs in the wheel, and setuptools' editable finder maps `fedclust.callbacks`
for `pip install -e .`. A checkout imported through PYTHONPATH alone (the helpers, benchmarks comparing clones of
older commits, the GPU protocol) has no such mapping, so `fedclust/__init__.py` puts the small finder below first
whenever fedclust runs from a checkout: it agrees with the editable finder of the same checkout, and keeps a
checkout on PYTHONPATH from taking the callbacks of another checkout's editable install. The alternatives were a
link (a second place) or the repository root on fedclust's __path__ (which would also import tests/, benchmarks/
and every other top-level folder as fedclust.*). Plain Python, no torch.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent


def home(name: str) -> Path:
    """The folder `name` (callbacks or configs): inside the installed package (a wheel), else the checkout's."""
    inside = PACKAGE / name
    return inside if inside.is_dir() else PACKAGE.parent / name


class CheckoutCallbacks:
    """Imports `fedclust.callbacks` from the checkout's callbacks/ folder; its modules then follow its __path__."""

    NAME = "fedclust.callbacks"

    def __init__(self, folder: Path):
        self.folder = folder

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.NAME:
            return None
        return importlib.util.spec_from_file_location(fullname, self.folder / "__init__.py",
                                                      submodule_search_locations=[str(self.folder)])


def find_checkout_callbacks() -> None:
    """In a checkout (no callbacks/ inside the package, the repository's beside it), make `fedclust.callbacks`
    that folder, ahead of any other finder; an installed wheel has its own and gets nothing."""
    folder = PACKAGE.parent / "callbacks"
    if (PACKAGE / "callbacks").is_dir() or not (folder / "__init__.py").is_file():
        return
    if not any(isinstance(finder, CheckoutCallbacks) for finder in sys.meta_path):
        sys.meta_path.insert(0, CheckoutCallbacks(folder))

"""fedclust: federated clustering research on PyTorch Lightning + Fabric.

The Python API (docs/python_api.md), imported on first use so that `import fedclust` (and the command line's
`--help`) stays free of torch:

    fedclust.fit(config, overrides, **objects) -> FitResult     a run from a config name/path or from objects
    fedclust.FederatedClustering(method, n_clusters, ...)       scikit-learn-style: fit / fit_predict / predict
    fedclust.DataConfig, FederationConfig, FabricConfig          the sections of a config, as objects
    fedclust.FedclustError, ConfigError                          what every user error raises
"""

import importlib
import os

from fedclust.homes import find_checkout_callbacks

# FAISS and torch each bring an OpenMP runtime; with the default active waiting their idle threads spin
# and starve each other (seen while developing: a small FAISS k-means slowed by two orders of magnitude
# next to a torch job). Must be set before either library loads, hence here.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

__version__ = "0.1.0"

# callbacks/ lives at the top of the repository; a checkout on PYTHONPATH imports it as fedclust.callbacks
# through this finder (fedclust/homes.py says why; a wheel ships it inside the package and skips this).
find_checkout_callbacks()

# name -> the module that defines it (the command line's `fit` command lives in fedclust/run.py, so that no
# submodule shadows the API's `fedclust.fit`)
_LAZY = {
    "fit": "fedclust.api",
    "FitResult": "fedclust.api",
    "FederatedClustering": "fedclust.estimator",
    "DataConfig": "fedclust.data.config",
    "FederationConfig": "fedclust.federation.config",
    "FabricConfig": "fedclust.run",
    "FedclustError": "fedclust.errors",
    "ConfigError": "fedclust.errors",
}

__all__ = ["__version__", *_LAZY]


def __getattr__(name: str):
    """The API's names, imported when first asked for (PEP 562)."""
    if name not in _LAZY:
        raise AttributeError(f"module 'fedclust' has no attribute {name!r}")
    module = importlib.import_module(_LAZY[name])
    return getattr(module, name)


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})

"""Every method of fedclust, one file each, exported here under its class name as the registry
(fedclust/registry.py) lists it: configs name a method by its class name alone (`method: {class_path: CCFC}`)
and `from fedclust.methods import CCFC` works. Adding a method adds no line here (docs/adding_a_method.md)."""

from fedclust.contract import FederatedMethod, Stage
from fedclust.registry import METHODS

globals().update({name: entry.load() for name, entry in METHODS.items()})

__all__ = ["FederatedMethod", "Stage", *METHODS]

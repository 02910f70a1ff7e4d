"""The method contract: what the engine (fedclust/federation) and the run level know of a method.

It lives outside methods/ so that they depend on the contract, never on a method, and every file in methods/
is a leaf. Three parts:
- method.py: FederatedMethod, what every method implements (stages, assign; training_step and
  configure_optimizers when it trains) and the one attribute the engine sets (`session`);
- hooks.py: the optional hooks with their defaults, and where each is called in a round;
- context.py: what the engine hands a method (Stage, ClientContext, ClientSession, ClientUpdate,
  RoundContext) and `local_weights(state)`.
"""

from fedclust.contract.context import (
    LOCAL_WEIGHTS,
    OPTIMIZER,
    ClientContext,
    ClientSession,
    ClientUpdate,
    RoundContext,
    Stage,
    local_weights,
)
from fedclust.contract.hooks import OptionalHooks, sendable_keys
from fedclust.contract.method import FederatedMethod, missing_hooks
from fedclust.data.info import DataInfo

__all__ = ["LOCAL_WEIGHTS", "OPTIMIZER", "ClientContext", "ClientSession", "ClientUpdate", "DataInfo",
           "FederatedMethod", "OptionalHooks", "RoundContext", "Stage", "local_weights", "missing_hooks",
           "sendable_keys"]

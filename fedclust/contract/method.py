"""What every method implements: a FederatedMethod is a LightningModule with a schedule (`stages`) and a
clustering (`assign`); a method whose stages train also has `training_step` and `configure_optimizers`.
Everything else is an optional hook (fedclust/contract/hooks.py)."""

from __future__ import annotations

from typing import Any

import lightning as L
import torch
from torch import Tensor

from fedclust.contract.context import ClientContext, ClientSession, Stage
from fedclust.contract.hooks import OptionalHooks


class FederatedMethod(OptionalHooks, L.LightningModule):
    """Base class of every method. Subclasses build networks in `build`, not in `__init__`, because the
    input shape is known only once the data is loaded."""

    def __init__(self, num_clusters: int | None = None, batch_size: int = 128):
        super().__init__()
        self.num_clusters = num_clusters
        self.batch_size = batch_size
        self.session: ClientSession | None = None  # set by the engine while it visits a client, else None

    # --- required -------------------------------------------------------------------------------
    def stages(self) -> list[Stage]:
        """The schedule: blocks of rounds, each with its local epochs (0: no gradient step)."""
        raise NotImplementedError

    def assign(self, x: Tensor) -> Tensor:
        """Cluster ids of a batch under the global model."""
        raise NotImplementedError

    # training_step(batch, batch_idx) -> loss (LightningModule's) and, for a method that trains:
    def configure_optimizers(self) -> torch.optim.Optimizer | list[torch.optim.Optimizer] | None:
        """One optimizer (the engine steps it on the loss training_step returns), or several with
        `self.automatic_optimization = False` (GANs): training_step then steps them itself through
        `self.optimizers()` and `self.manual_backward(loss)`, as in Lightning's manual optimization."""
        return None

    # --- what the engine lends while a client trains --------------------------------------------
    @property
    def ctx(self) -> ClientContext | None:
        """The client being visited (None on the server and in evaluation)."""
        return self.session.ctx if self.session is not None else None

    def optimizers(self, use_pl_optimizer: bool = True):  # noqa: ANN201 (Lightning's signature)
        """The engine's optimizers while a client trains; Lightning's when run by a Trainer."""
        if self.session is not None and self.session.optimizers:
            found = self.session.optimizers
            return found[0] if len(found) == 1 else found
        return super().optimizers(use_pl_optimizer)

    def manual_backward(self, loss: Tensor, *args: Any, **kwargs: Any) -> None:
        if self.session is not None:
            loss.backward(*args, **kwargs)
        else:
            super().manual_backward(loss, *args, **kwargs)


def missing_hooks(method: FederatedMethod) -> list[str]:
    """The required hooks `method` leaves to the base class (stages and assign; training_step and
    configure_optimizers too when one of its stages trains)."""
    cls = type(method)
    missing = [name for name in ("stages", "assign") if getattr(cls, name) is getattr(FederatedMethod, name)]
    if "stages" in missing:
        return missing
    if any(stage.local_epochs and stage.rounds for stage in method.stages()):
        missing += [name for name in ("training_step", "configure_optimizers")
                    if getattr(cls, name) is getattr(FederatedMethod, name)]
    return missing

"""What the engine hands a method: the schedule's stages, one client's context, one client's update, the round,
and the session lent to a method while one client trains."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

if TYPE_CHECKING:
    from fedclust.data.client_data import ClientData


# Entries the engine keeps in every client's state dict beside the method's own (methods read the first through
# `local_weights(state)`, never write either):
LOCAL_WEIGHTS = "_local_weights"  # the client's non-communicated state-dict entries
OPTIMIZER = "_optimizer"  # {"stage": index, "states": [...]}: the client's optimizer state unless "reset"


def local_weights(client_state: dict[str, Any]) -> dict[str, Tensor] | None:
    """The weights a client kept for itself (its non-communicated state-dict entries) when it last trained;
    None if it never trained or keeps none. For methods that predict or recluster through each client's own
    model (CCFC standalone, Single-Training, SDA-FC)."""
    return client_state.get(LOCAL_WEIGHTS)


@dataclass(frozen=True)
class Stage:
    """A block of communication rounds with one local objective (CCFC: pretrain, then cluster)."""

    name: str
    rounds: int
    local_epochs: int = 1  # 0: the clients take no gradient step (k-FED, FFCM, k-means)


@dataclass
class ClientContext:
    """Everything a method may see of one client during one round."""

    client_id: int
    stage: Stage
    stage_index: int
    round: int  # round within the stage
    data: ClientData
    state: dict[str, Any]  # persistent per-client state owned by the method, saved in checkpoints
    seed: int
    min_summary_size: int = 1  # the run's floor: every summary row sent aggregates at least this many samples

    def generator(self, purpose: str, device: torch.device | str | None = None) -> torch.Generator:
        """A generator seeded by (seed, stage, round, client, purpose): order-independent randomness."""
        from fedclust.seeding import generator

        device = self.data.device if device is None else device
        return generator(self.seed, self.stage_index, self.round, self.client_id, purpose, device=device)


@dataclass
class ClientSession:
    """What the engine lends a method while one client is visited, from on_client_start to on_client_end:
    the one attribute the engine sets on a method (`method.session`, None otherwise). `method.ctx` and
    `method.optimizers()` read it."""

    ctx: ClientContext
    optimizers: list[torch.optim.Optimizer] = field(default_factory=list)


@dataclass
class ClientUpdate:
    """What one client sends to the server besides its communicated weights (those are folded into a
    running sum by the engine). Payloads are summaries (centroids, means) with their counts, never samples,
    unless the method's paper shares synthetic data and says so; their keys are the method's `summary_keys`."""

    client_id: int
    num_samples: int
    payload: dict[str, Tensor] = field(default_factory=dict)
    key_weights: dict[str, float] | None = None  # per-prefix FedAvg weights (see aggregation_weights)


@dataclass(frozen=True)
class RoundContext:
    stage: Stage
    stage_index: int
    round: int
    seed: int

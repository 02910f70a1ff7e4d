"""The `federation:` section of a config.

Torch-free (Stage is only named in a type hint), so fedclust.precheck builds a FederationConfig from the
command line's values and calls `validate` before torch is imported; fit() calls the same `validate`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Literal

from fedclust.errors import ConfigError

if TYPE_CHECKING:
    from fedclust.contract import Stage


@dataclass
class FederationConfig:
    """How rounds run.

    Args:
        rounds: Total communication rounds. None keeps the method's schedule; a number rescales every
            stage in proportion (each stage keeps at least one round, one with none keeps none), e.g. CCFC
            100+30 -> 5 gives 4+1.
        local_epochs: Local epochs per round for stages that train; None keeps the method's.
        fraction: Share of clients sampled each round.
        disconnect_rate: Share of clients that miss a round (device failures).
        disconnect_mode: "per_round" draws the failed clients anew each round; "fixed" draws them once
            for the whole run, as in CCFC's device-failure experiment.
        average_bn_buffers: Average BatchNorm running statistics with the weights (CCFC's code does);
            False keeps them on each client (FedBN-style).
        optimizer_state: "persist" keeps each client's optimizer state across the rounds of a stage and
            starts every stage with a fresh one (CCFC's code creates a new Adam for the cluster stage);
            "persist_across_stages" keeps it for the whole run; "reset" starts every round afresh.
        server_lr: The server's step on the clients' average change (FedOpt, Reddi et al. ICLR 2021): the new
            global weights are the old ones plus server_lr times it (1: FedAvg's average itself).
        server_momentum: Momentum of that step (FedAvgM, Hsu et al. 2019; 0: none). Trainable parameters only;
            buffers keep the plain average.
        min_summary_size: The privacy floor: every summary a client sends besides model weights (a centroid, a
            group mean) aggregates at least this many of its samples and says how many; the engine refuses a
            smaller one, and methods adapt (k-FED merges a local cluster below it into its nearest).
        dp_epsilon: None, or differential privacy for the summaries: each is clipped and sent with Gaussian noise
            (sums and counts) calibrated so that a client's summaries over the whole run are (dp_epsilon,
            dp_delta)-DP, as computed by Google's dp-accounting (RDP); the run writes privacy.json.
        dp_delta: The delta of dp_epsilon.
        clients_together: Train a round's clients together (stacked parameters under torch.func.vmap, each with its
            own batches, BatchNorm statistics and Adam state; fedclust/federation/together.py) rather than one after
            another: the same result up to float rounding. "auto": together on CUDA for methods that split their
            training step (batched_inputs / loss_from_inputs: FedSpectral, CCFC, CCFC++), one by one on the CPU,
            where it is no faster; "on": together wherever the method allows it; "off": always one by one.
        eval_every: Score the global model every N rounds (and always after the last round).
        checkpoint_every: Write the resumable checkpoint every N rounds (and after the last round).
    """

    rounds: int | None = None
    local_epochs: int | None = None
    fraction: float = 1.0
    disconnect_rate: float = 0.0
    disconnect_mode: Literal["per_round", "fixed"] = "per_round"
    average_bn_buffers: bool = True
    optimizer_state: Literal["persist", "persist_across_stages", "reset"] = "persist"
    server_lr: float = 1.0
    server_momentum: float = 0.0
    min_summary_size: int = 20
    dp_epsilon: float | None = None
    dp_delta: float = 1e-5
    clients_together: Literal["auto", "on", "off"] = "auto"
    eval_every: int = 1
    checkpoint_every: int = 10

    def validate(self) -> None:
        if not 0 < self.fraction <= 1:
            raise ConfigError("federation.fraction", self.fraction, "a number in (0, 1]")
        if not 0 <= self.disconnect_rate < 1:
            raise ConfigError("federation.disconnect_rate", self.disconnect_rate, "a number in [0, 1)")
        if not 0 < self.server_lr < math.inf:
            raise ConfigError("federation.server_lr", self.server_lr, "a positive finite number (1 is FedAvg)")
        if not 0 <= self.server_momentum < 1:
            raise ConfigError("federation.server_momentum", self.server_momentum, "a number in [0, 1) (0 is none)")
        if self.rounds is not None and self.rounds < 1:
            raise ConfigError("federation.rounds", self.rounds, "a positive integer or null")
        if self.local_epochs is not None and self.local_epochs < 0:
            raise ConfigError("federation.local_epochs", self.local_epochs, "a non-negative integer or null")
        if self.min_summary_size < 1:
            raise ConfigError("federation.min_summary_size", self.min_summary_size,
                              "a positive integer (the fewest samples a sent summary may aggregate)")
        if self.dp_epsilon is not None and not 0 < self.dp_epsilon < math.inf:
            raise ConfigError("federation.dp_epsilon", self.dp_epsilon,
                              "a positive finite number, or null for no noise")
        if not 0 < self.dp_delta < 1:
            raise ConfigError("federation.dp_delta", self.dp_delta, "a number in (0, 1)")
        if self.clients_together not in ("auto", "on", "off"):
            raise ConfigError("federation.clients_together", self.clients_together, "auto, on or off")
        for name in ("eval_every", "checkpoint_every"):
            if getattr(self, name) < 1:
                raise ConfigError(f"federation.{name}", getattr(self, name), "a positive integer")

    def schedule(self, stages: list[Stage]) -> list[Stage]:
        """The method's stages with this config's overrides applied."""
        if self.local_epochs is not None:
            stages = [replace(s, local_epochs=self.local_epochs if s.local_epochs else 0) for s in stages]
        if self.rounds is None:
            return stages
        total = sum(s.rounds for s in stages)  # a stage the method gives no round keeps none
        counts = [max(1, round(self.rounds * s.rounds / total)) if s.rounds else 0 for s in stages]
        while sum(counts) > max(self.rounds, sum(map(bool, counts))):  # rounding overshoot: trim the largest
            counts[counts.index(max(counts))] -= 1
        while sum(counts) < self.rounds:
            counts[counts.index(max(counts))] += 1
        return [replace(s, rounds=n) for s, n in zip(stages, counts)]

"""The optional hooks of the method contract, each with the default that most methods want.

A method overrides only the hooks its paper needs; tests/test_contract_hooks.py runs a toy method through
each one. Where a hook is called in a round:

    server: on_round_start(round) -> for each client:
        client: load global weights (+ the client's own keys) -> on_client_start(ctx)
                -> E epochs of training_step over client_batches(ctx, epoch)
                   (clients trained together: each client's batched_inputs(batch), drawn in turn, then
                   loss_from_inputs over the stacked clients)
                -> on_client_end(ctx) -> payload -> aggregation_weights(ctx)
    server: aggregate(averaged weights, updates, round) -> the new global model and server_state()
    evaluation: predict(data, client states) (default: assign per batch), embed(x), metric_groups(data)
    the Python API (fedclust/api.py): global_centroids()
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, ClassVar

import torch
from torch import Tensor

from fedclust.contract.context import ClientContext, ClientUpdate, RoundContext
from fedclust.data.info import DataInfo

if TYPE_CHECKING:
    from fedclust.data.client_data import FederatedData


def sendable_keys(method: OptionalHooks) -> set[str]:
    """Every payload key a method may send: its summaries, their counts, and "synthetic" for a method whose paper
    shares generated samples."""
    keys = set(method.summary_keys) | set(method.summary_keys.values())
    return keys | {"synthetic"} if method.shares_synthetic_data else keys


class OptionalHooks:
    """Hooks with defaults. Mixed into FederatedMethod (a torch module), whose state dict they use."""

    # What on_client_end may send, as {summary key: the key of its counts}. A summary is one row per group of
    # the client's samples (a centroid, a mean) and its count says how many samples the row aggregates. The engine
    # refuses any other key and any row below the run's floor, federation.min_summary_size (DESIGN.md's privacy
    # boundary; fedclust/federation/client.py); a method adapts to the floor (ClientContext.min_summary_size).
    summary_keys: ClassVar[dict[str, str]] = {}

    # True only for methods whose paper shares synthetic samples (SDA-FC, PPFC-GAN): they may send a
    # sample-shaped payload, under the key "synthetic" and no other (tests/methods/test_privacy_boundary.py).
    shares_synthetic_data: ClassVar[bool] = False

    # --- set-up -------------------------------------------------------------------------------
    def build(self, info: DataInfo) -> None:
        """Create the networks for this data; called once before the first round (the input shape is
        known only then). The default only fills num_clusters from the data's classes."""
        if self.num_clusters is None:
            self.num_clusters = info.num_classes

    def validate(self, info: DataInfo, num_clients: int) -> None:
        """Raise ConfigError for requests this method cannot serve (before any work)."""

    def bf16_by_default(self) -> bool:
        """True where `fabric.precision: auto` may train this method in bf16 autocast (on devices with native
        bf16): only for networks measured to keep their clustering quality within seed noise of fp32 and to
        run faster so (fedclust/nn/precision.py). Default False: fp32 until measured."""
        return False

    def local_clusters(self) -> int | None:
        """Clusters each client computes from its own samples (CCFC's, k-FED's local k-means): every client
        must hold at least this many samples, checked before any work. None: no local clustering."""
        return None

    def summary_norm_bound(self) -> float | None:
        """The largest L2 norm of one sample's vector in the method's summaries (1 for unit-normalised features),
        which makes each summary row a mean of bounded vectors: the engine's optional differential privacy
        (federation.dp_epsilon, fedclust/federation/privacy.py) needs it. None (default): no bound is known, and a
        run asking for differential privacy is refused."""
        return None

    # --- communication --------------------------------------------------------------------------
    def communicated(self) -> list[str]:
        """State-dict keys that travel to the server and are averaged; the rest stays on the client."""
        return list(self.state_dict().keys())

    # --- the round ------------------------------------------------------------------------------
    def on_round_start(self, ctx: RoundContext) -> None:
        """Server side, once per round, with the global weights loaded (e.g. snapshot the global model)."""

    def on_client_start(self, ctx: ClientContext) -> None:
        """Client side, with the global weights (and this client's local keys) loaded."""

    def client_batches(self, ctx: ClientContext, epoch: int) -> Iterable[Any]:
        """The batches of one local epoch (default: the client's data, shuffled by a seeded generator).
        Methods that sample differently (UIFCA: M steps, one batch per cluster set) override this."""
        return ctx.data.batches(ctx.generator(f"shuffle-{epoch}", device="cpu"))

    # Training a round's clients together (federation.clients_together, fedclust/federation/together.py) splits a
    # step in two: what is drawn for the client (made client by client from its own generators, as training_step
    # does) and a pure loss that torch.func.vmap runs over every client's stacked parameters and buffers. A method
    # that overrides both writes training_step as loss_from_inputs(batched_inputs(batch)), so the two paths cannot
    # drift; one that does not is trained client by client. What on_client_start prepares for the client's steps
    # (a generator, pseudo-labels) must sit in attributes it assigns (self._x = ...): the engine keeps those per
    # client while it visits them in turn.
    def batched_inputs(self, batch: Any) -> dict[str, Tensor]:
        """The tensors one training step of the visited client needs, every random draw done here (views from the
        client's generators, its pseudo-labels looked up): the step's only per-client randomness."""
        raise NotImplementedError(f"{type(self).__name__} does not split its training step (batched_inputs)")

    def loss_from_inputs(self, inputs: dict[str, Tensor]) -> Tensor:
        """The step's loss from what batched_inputs drew, as a pure function of the module's parameters, buffers
        and ``inputs``: no random draw, no shape that depends on values, no .item() or other host sync (it runs
        under torch.func.vmap). BatchNorm in training mode may update its running statistics."""
        raise NotImplementedError(f"{type(self).__name__} does not split its training step (loss_from_inputs)")

    def on_client_end(self, ctx: ClientContext) -> dict[str, Tensor]:
        """Client side, after local training: the payload to send (local centroids and their counts, ...), keyed by
        `summary_keys` and their count keys; every row aggregates at least ctx.min_summary_size samples."""
        return {}

    def aggregation_weights(self, ctx: ClientContext) -> dict[str, float] | None:
        """Client side: FedAvg weights per state-dict key prefix for this client's update (UIFCA weights
        cluster model k by the client's count of samples assigned to k; weight 0 leaves a key out).
        None: every communicated key is weighted by the client's sample count."""
        return None

    def aggregate(self, averaged: dict[str, Tensor] | None, updates: list[ClientUpdate],
                  ctx: RoundContext) -> None:
        """Server side: turn the averaged weights and the payloads into the new global state
        (default: FedAvg, the averaged weights become the global model)."""
        if averaged:
            self.load_state_dict(averaged, strict=False)

    # --- server state, saved in checkpoints -----------------------------------------------------
    def server_state(self) -> dict[str, Any]:
        """Global state that is not in the state dict (global centroids, mappings)."""
        return {}

    def load_server_state(self, state: dict[str, Any]) -> None:
        """Restore what server_state returned (resume, evaluate)."""

    def global_centroids(self) -> Tensor | None:
        """The global cluster centres, one row per cluster in the space `embed` maps to (the input itself for
        the classic methods), or None for a method without centres (UIFCA, the cluster-head methods). Read by
        the Python API (FitResult.centroids, FederatedClustering.cluster_centers_), never by the engine. The
        default finds them under server_state()'s conventional key "centroids"; a method keeping them under
        another key overrides this."""
        centroids = self.server_state().get("centroids")
        return centroids if isinstance(centroids, Tensor) else None

    # --- evaluation -----------------------------------------------------------------------------
    def embed(self, x: Tensor) -> Tensor:
        """Representations of a batch under the global model (default: the flattened input)."""
        return x.flatten(1)

    def metric_groups(self, data: FederatedData) -> Tensor | None:
        """None (default): the metrics score one labelling of every sample. A group id per sample (-1: not
        scored) makes them the mean over groups of each group's metrics (FedPNP's Single-Training reports
        the mean over clients of each client's own clustering)."""
        return None

    @torch.no_grad()
    def predict(self, data: FederatedData, client_states: dict[int, dict[str, Any]]) -> Tensor:
        """Cluster ids of every sample of `data`. The default labels each sample with `assign`;
        methods whose paper labels a point through its client (k-FED) override this."""
        self.eval()
        return torch.cat([self.assign(batch) for batch in data.iter_all()])

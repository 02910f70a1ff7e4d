"""The round loop of DESIGN.md: stages of rounds; in a round, each participating client loads the global
weights into the one working model, trains, reports; the server folds the reports into a running sum and
lets the method turn it into the new global state; then the global model is scored.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field
from typing import Any

import torch
from lightning.fabric import Fabric
from torch import Tensor

from fedclust.clustering.metrics import (
    LABEL_FREE_METRICS,
    LABEL_METRICS,
    grouped_cluster_metrics,
    label_free_metrics,
)
from fedclust.contract import (
    LOCAL_WEIGHTS,
    OPTIMIZER,
    ClientContext,
    ClientSession,
    ClientUpdate,
    FederatedMethod,
    RoundContext,
    Stage,
    missing_hooks,
)
from fedclust.data.client_data import FederatedData
from fedclust.errors import ConfigError, FedclustError, NotFittedError
from fedclust.federation.aggregate import ServerStep, WeightedSum, is_finite
from fedclust.federation.client import as_optimizer_list, check_payload, local_fit, to_cpu, to_device
from fedclust.federation.config import FederationConfig
from fedclust.federation.distributed import (
    all_reduce_sum,
    broadcast_object,
    gather_objects,
    my_clients,
    world_size,
)
from fedclust.federation.privacy import SummaryNoise, add_summary_noise, calibrate
from fedclust.federation.sampling import participants
from fedclust.federation.setup import check_summary_floor
from fedclust.federation.together import clients_together, train_together
from fedclust.nn.optim import reset_optimizer

log = logging.getLogger("fedclust")


def loss_is_usable(loss: float, stage: Stage) -> bool:
    """nan is the loss of a client that took no step (a stage without local epochs); after steps, or inf,
    it means the client diverged."""
    return math.isfinite(loss) or (math.isnan(loss) and stage.local_epochs == 0)


@dataclass
class Progress:
    """Where a run stands; saved in checkpoints. `done` counts completed rounds over all stages."""

    done: int = 0
    history: list[dict[str, float]] = field(default_factory=list)
    last_metrics: dict[str, float] = field(default_factory=dict)


class Orchestrator:
    def __init__(self, fabric: Fabric, method: FederatedMethod, data: FederatedData,
                 federation: FederationConfig, seed: int, callbacks: list | None = None):
        self.fabric, self.method, self.data = fabric, method, data
        self.federation, self.seed = federation, seed
        self.callbacks = callbacks or []
        missing = missing_hooks(method)
        if missing:
            raise FedclustError(f"{type(method).__name__} does not implement {', '.join(missing)}: every method "
                                "implements stages and assign, and a method that trains training_step and "
                                "configure_optimizers (fedclust/contract/method.py)")
        self.stages: list[Stage] = federation.schedule(method.stages())
        self.client_states: dict[int, dict[str, Any]] = {c: {} for c in range(data.num_clients)}
        self.progress = Progress()
        self.last_clusters: Tensor | None = None  # rank 0: every sample's cluster at the last evaluation
        self.optimizers = as_optimizer_list(method.configure_optimizers())
        training = [s.name for s in self.stages if s.local_epochs and s.rounds]
        if training and not self.optimizers:  # it would train nothing and every client would look diverged
            raise FedclustError(f"{type(method).__name__} has local epochs in stage {training[0]!r} but "
                                "configure_optimizers() returns no optimizer: return one, or use local_epochs 0")
        keys = set(method.communicated())
        if not federation.average_bn_buffers:
            keys -= batchnorm_buffer_keys(method)
        self.communicated = [k for k in method.state_dict() if k in keys]
        self._communicated_set = set(self.communicated)
        self.server_step = ServerStep(federation.server_lr, federation.server_momentum)
        self._trainable = {name for name, p in method.named_parameters() if p.requires_grad}
        check_summary_floor(method, [len(part) for part in data.parts], federation.min_summary_size)
        self.noise = summary_noise(method, federation, self.total_rounds)
        # a round's clients trained together (federation/together.py) or one by one (train_client)
        self.together = clients_together(federation.clients_together, method, self.optimizers, fabric.device)

    @property
    def total_rounds(self) -> int:
        return sum(s.rounds for s in self.stages)

    # --- the run -----------------------------------------------------------------------------------
    def run(self) -> dict[str, float]:
        self._call("on_fit_start", self)
        position = 0
        for stage_index, stage in enumerate(self.stages):
            for rnd in range(stage.rounds):
                position += 1
                if position <= self.progress.done:  # resumed: this round is already in the checkpoint
                    continue
                record = self.run_round(RoundContext(stage, stage_index, rnd, self.seed))
                self.progress.done = position
                last = position == self.total_rounds
                if last or position % self.federation.eval_every == 0:
                    start = time.perf_counter()
                    scores = self.evaluate()
                    record.update(scores)
                    record["eval_seconds"] = time.perf_counter() - start
                    record["seconds"] += record["eval_seconds"]
                    self.progress.last_metrics = dict(scores)
                self.progress.history.append(record)
                self._call("on_round_end", self, record)
        self._call("on_fit_end", self)
        return dict(self.progress.last_metrics)

    def run_round(self, ctx: RoundContext) -> dict[str, float]:
        start = time.perf_counter()
        method, fed = self.method, self.federation
        alive, failed = participants(self.data.num_clients, fraction=fed.fraction,
                                     disconnect_rate=fed.disconnect_rate, disconnect_mode=fed.disconnect_mode,
                                     seed=self.seed, stage_index=ctx.stage_index, round=ctx.round)
        method.on_round_start(ctx)
        global_state = {k: v.detach().clone() for k, v in method.state_dict().items()}
        total = WeightedSum()
        updates: list[ClientUpdate] = []
        losses, rejected = [], []
        self._call("on_round_start", self, ctx, alive)
        mine = my_clients(alive, self.fabric)  # all of them in one process; a disjoint share per DDP rank
        if self.together and ctx.stage.local_epochs and mine:
            trained = train_together(method, self.optimizers[0], self.fabric, mine, ctx.stage.local_epochs,
                                     lambda cid: self.start_client(cid, ctx, global_state), self.finish_client)
        else:
            trained = ((cid, self.train_client(cid, ctx, global_state)) for cid in mine)
        for client_id, (update, state, loss) in trained:  # each client's result is used before the next is made
            if not (loss_is_usable(loss, ctx.stage) and is_finite(state, update.payload)):
                log.warning("client %d sent a non-finite update in %s round %d: left out of this round",
                            client_id, ctx.stage.name, ctx.round)
                rejected.append(client_id)
            else:
                total.add(state, float(update.num_samples), update.key_weights)
                updates.append(update)
                losses.append(loss)
            self._call("on_client_end", self, client_id)
        peak = peak_memory_mb(self.fabric.device)
        trained_at = time.perf_counter()
        if world_size(self.fabric) > 1:
            total = all_reduce_sum(self.fabric, total, {k: global_state[k] for k in self.communicated})
            trained = {cid: self.client_states[cid] for cid in mine}
            parts = gather_objects(self.fabric, (updates, losses, rejected, trained, peak))
            updates = [to_device(u, self.fabric.device) for part in parts for u in part[0]]
            losses = [v for part in parts for v in part[1]]
            rejected = sorted(c for part in parts for c in part[2])
            for part in parts:  # every rank keeps every client's state: any rank may train it next
                self.client_states.update(part[3])
            peak = max(part[4] for part in parts)
        method.load_state_dict(global_state)  # the server's copy, before the clients' updates
        if updates:
            updates.sort(key=lambda u: u.client_id)  # the server step must not depend on arrival order
            # every rank takes the server's step on the same all-reduced average: their momenta stay equal
            averaged = self.server_step(total.average(), global_state, self._trainable) if total else None
            if self.fabric.is_global_zero:  # the server step (k-means, ...) runs once
                method.aggregate(averaged, updates, ctx)
            self._share_global_state()
        else:
            log.warning("no client update in %s round %d: the global state is unchanged", ctx.stage.name, ctx.round)
        finite = [v for v in losses if not math.isnan(v)]
        return {"stage": ctx.stage_index, "stage_round": ctx.round, "round": self.progress.done + 1,
                "loss": sum(finite) / len(finite) if finite else math.nan, "clients": len(updates),
                "failed": len(failed), "rejected": len(rejected), "summaries": summary_rows(method, updates),
                "seconds": time.perf_counter() - start, "train_seconds": trained_at - start,
                "server_seconds": time.perf_counter() - trained_at, "eval_seconds": 0.0, "peak_memory_mb": peak}

    def _share_global_state(self) -> None:
        """Rank 0's new global state (weights and server state) on every rank."""
        if world_size(self.fabric) == 1:
            return
        shared = broadcast_object(self.fabric, {"model": self.method.state_dict(),
                                                "server": self.method.server_state()}
                                  if self.fabric.is_global_zero else None)
        if not self.fabric.is_global_zero:
            self.method.load_state_dict(shared["model"])
            self.method.load_server_state(shared["server"])

    def train_client(self, client_id: int, ctx: RoundContext,
                     global_state: dict[str, Tensor]) -> tuple[ClientUpdate, dict[str, Tensor], float]:
        """One client's visit: start, local epochs on the one working model, finish."""
        try:
            client = self.start_client(client_id, ctx, global_state)
            loss = local_fit(self.method, client, self.optimizers, self.fabric, ctx.stage.local_epochs)
            return self.finish_client(client, loss)
        finally:
            self.method.session = None

    def start_client(self, client_id: int, ctx: RoundContext, global_state: dict[str, Tensor]) -> ClientContext:
        """A client's visit begins: the global weights and its own keys in the working model, its optimizer state
        loaded (or reset), the session lent to the method (the caller withdraws it), on_client_start."""
        method, state = self.method, self.client_states[client_id]
        method.load_state_dict(global_state)
        if LOCAL_WEIGHTS in state:
            method.load_state_dict(state[LOCAL_WEIGHTS], strict=False)
        saved = state.get(OPTIMIZER)
        persist = saved is not None and self.federation.optimizer_state != "reset" and (
            saved["stage"] == ctx.stage_index or self.federation.optimizer_state == "persist_across_stages")
        for i, optimizer in enumerate(self.optimizers):
            if persist:
                optimizer.load_state_dict(saved["states"][i])
            else:
                reset_optimizer(optimizer)
        client = ClientContext(client_id, ctx.stage, ctx.stage_index, ctx.round,
                               self.data.client(client_id, method.batch_size), state, self.seed,
                               self.federation.min_summary_size)
        method.session = ClientSession(client, self.optimizers)  # the one attribute the engine sets on a method
        method.on_client_start(client)
        return client

    def finish_client(self, client: ClientContext,
                      loss: float) -> tuple[ClientUpdate, dict[str, Tensor], float]:
        """A client's visit ends, its trained weights and optimizer state in the working model and optimizers (its
        session still lent): its payload judged at the privacy boundary, its own keys and optimizer state saved."""
        method, state = self.method, client.state
        method.eval()
        if loss_is_usable(loss, client.stage):
            payload = method.on_client_end(client)
            check_payload(method, payload, self.federation.min_summary_size)
            if self.noise is not None:
                payload = add_summary_noise(payload, method.summary_keys, self.noise,
                                            client.generator("dp-noise", device="cpu"))
            key_weights = method.aggregation_weights(client)
        else:  # diverged: its payload (local k-means on NaN features, ...) is never computed; run() rejects it
            payload, key_weights = {}, None
        weights = method.state_dict()
        local = {k: v for k, v in weights.items() if k not in self._communicated_set}
        if local:
            state[LOCAL_WEIGHTS] = to_cpu(local)
        if self.optimizers and self.federation.optimizer_state != "reset":
            state[OPTIMIZER] = {"stage": client.stage_index,
                                "states": [to_cpu(optimizer.state_dict()) for optimizer in self.optimizers]}
        sent = {k: weights[k] for k in self.communicated}
        return ClientUpdate(client.client_id, len(client.data), payload, key_weights), sent, loss

    # --- scoring -------------------------------------------------------------------------------------
    @torch.no_grad()
    def predict(self) -> Tensor:
        """Every sample's cluster; -1 for all while the method has no clustering yet (no client took part)."""
        try:
            return self.method.predict(self.data, self.client_states).cpu()
        except NotFittedError as error:
            log.warning("no clustering to assign with yet: %s", error)
            return torch.full((len(self.data),), -1, dtype=torch.long)

    def evaluate(self) -> dict[str, float]:
        """Scored once, on rank 0; every rank gets the metrics (nan while there is no clustering yet). Data
        without labels get the label-free scores, in the method's representation space (metrics.py)."""
        metrics = None
        labelled = self.data.dataset.has_labels
        if self.fabric.is_global_zero:
            try:
                clusters = self.method.predict(self.data, self.client_states).cpu()
                self.last_clusters = clusters
                groups = self.method.metric_groups(self.data)
                if labelled:
                    metrics = grouped_cluster_metrics(clusters, self.data.labels.cpu(), groups)
                else:
                    self.method.eval()
                    with torch.no_grad():
                        z = torch.cat([self.method.embed(x).float().cpu() for x in self.data.iter_all()])
                    metrics = grouped_cluster_metrics(clusters, z, groups, score=label_free_metrics)
            except NotFittedError as error:
                self.last_clusters = None
                log.warning("round not scored: %s", error)
                metrics = dict.fromkeys(LABEL_METRICS if labelled else LABEL_FREE_METRICS, math.nan)
        return broadcast_object(self.fabric, metrics)

    # --- checkpoints -----------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {"model": to_cpu(self.method.state_dict()), "server": to_cpu(self.method.server_state()),
                "server_step": self.server_step.state_dict(),
                "clients": self.client_states, "done": self.progress.done, "history": self.progress.history,
                "last_metrics": self.progress.last_metrics}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.method.load_state_dict(state["model"])
        self.method.load_server_state(state["server"])
        shapes = {name: p.shape for name, p in self.method.named_parameters() if name in self._trainable}
        self.server_step.load_state_dict(state.get("server_step", {}), shapes)  # absent before FedAvgM
        self.client_states = state["clients"]
        self.progress = Progress(state["done"], state["history"], state["last_metrics"])

    def _call(self, hook: str, *args: Any) -> None:
        for callback in self.callbacks:
            getattr(callback, hook, lambda *a: None)(*args)


def summary_rows(method: FederatedMethod, updates: list[ClientUpdate]) -> int:
    """How many summaries (centroids, group means; counted once per count vector) crossed to the server in a round."""
    counts = set(method.summary_keys.values())
    return sum(len(u.payload[key]) for u in updates for key in counts if key in u.payload)


def summary_noise(method: FederatedMethod, federation: FederationConfig, rounds: int) -> SummaryNoise | None:
    """The run's calibrated noise for the summaries, when federation.dp_epsilon asks for it (privacy.py)."""
    if federation.dp_epsilon is None:
        return None
    bound = method.summary_norm_bound()
    if not method.summary_keys or bound is None:
        raise ConfigError("federation.dp_epsilon", federation.dp_epsilon,
                          f"null: {type(method).__name__} does not bound the norms of what it sends "
                          "(summary_norm_bound), which the noise is calibrated to")
    return calibrate(federation.dp_epsilon, federation.dp_delta, rounds, bound)


def batchnorm_buffer_keys(model: torch.nn.Module) -> set[str]:
    """State-dict keys of BatchNorm running statistics (kept local when average_bn_buffers is False)."""
    keys = set()
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.modules.batchnorm._BatchNorm):
            prefix = f"{name}." if name else ""
            keys.update(prefix + b for b, _ in module.named_buffers(recurse=False))
    return keys


def peak_memory_mb(device: torch.device) -> float:
    """Peak memory of the process so far: CUDA allocator peak on a GPU, max resident set size on CPU."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

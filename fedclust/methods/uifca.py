"""UIFCA: federated unsupervised clustering with generative models (Chung, Lee & Ramchandran, "Federated
Unsupervised Clustering with Generative Models", AAAI 2022 workshop), Algorithms 2-4, with label-free restarts.

K normalizing flows. Cluster round t (T of them) = tau communication rounds with the cluster sets fixed: each client
takes M local steps on every model k with N of its samples assigned to k (Algorithm 4), and the server averages model
k weighted by |S_{i,k}| (Algorithm 3, through `aggregation_weights`); the next cluster round starts with each client
re-assigning every sample to its most likely model (Algorithm 2). Sent: the flows' weights and, with restarts, one
log-likelihood total per start; the assignments never leave a client.

Choices the paper leaves open (ours; what decided each: docs/findings/uifca.md):
- One stage of T * tau rounds; the models are warm-started across cluster rounds (`reinit_models` re-draws them).
- Initial models: one random flow plus N(0, init_noise^2) noise per copy (the paper's synthetic set-up). The first
  assignment: `random` is the paper's "initial random cluster assignment" (each sample's cluster uniform over the K,
  independently); `models` takes each sample's most likely perturbed copy; `kfed` is k-FED + UIFCA (one k-FED round).
- `restarts` R: R independent starts (own models, own first assignment) trained side by side, K * R flows. At each
  re-assignment a client sends per start the sum over its samples of the best model's log-likelihood (UIFCA's
  objective, negated), counted as its sample count (the privacy floor); the server keeps the start with the highest
  total and predicts with it. After `restart_rounds` cluster rounds that start alone trains on; without it all train
  to the end and one last round, training nothing, scores the final models. No label is read.
- Affine flows (x = W z + b, the paper's "planar" map; `affine_triangular` = lower-triangular W, the same densities)
  train stacked, on each batch's moments with the analytic gradient; a step's batch is the next N samples of a
  per-round shuffle of S_{i,k}. Images: RealNVP with cyclic (paper) or checkerboard masks, dequantised.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any, Literal

import torch
from torch import Tensor, nn

from fedclust.clustering.kfed import central_kfed_starts, local_kfed_starts
from fedclust.contract import ClientContext, ClientUpdate, DataInfo, FederatedMethod, RoundContext, Stage
from fedclust.data.transforms import dequantize
from fedclust.errors import ConfigError, MethodArgError
from fedclust.nn.affine_stack import batch_nll, shares_stack, stack_parameters
from fedclust.nn.flow_starts import (
    flow_starts,
    is_affine,
    log_probs,
    member_batches,
    membership,
    redraw_,
    score_and_assign,
    start_slice,
)
from fedclust.nn.flows import AffineFlow, PlanarFlow, RealNVP
from fedclust.nn.optim import CpuAdam
from fedclust.seeding import SERVER, generator, int_seed

FLOWS = ("affine", "affine_triangular", "planar", "realnvp")


class UIFCA(FederatedMethod):
    """UIFCA with normalizing-flow cluster models.

    Args:
        num_clusters: K; None takes the number of classes of the data.
        flow: "affine" (the paper's synthetic model), "affine_triangular", "planar" (Rezende-Mohamed), or
            "realnvp" (images).
        masking: RealNVP masks: "cyclic" (the paper's choice) or "checkerboard".
        num_couplings: RealNVP coupling layers.
        hidden_channels: Width of RealNVP's scale/shift nets.
        num_blocks: Residual blocks in RealNVP's scale/shift nets.
        dilation: Dilation growth of those nets' convs (2 lets a cyclic-mask coupling see farther into the
            quadrant it reads; 1 = the standard net).
        cluster_rounds: T, cluster rounds (re-assignments).
        communication_rounds: tau, FedAvg rounds per cluster round.
        local_steps: M, local gradient steps per model and round.
        batch_size: N, samples per model and step.
        optimizer: "sgd" or "adam".
        lr: Learning rate.
        init: First assignment: "random" (the paper's: each sample's cluster uniform over the K), "models" (by
            likelihood under the initial, slightly perturbed copies), or "kfed" (k-FED + UIFCA).
        init_noise: Std of the noise added to each copy of a start's first random model.
        reinit_models: Re-draw the models at the start of every cluster round.
        kfed_k_local: Local clusters of the k-FED initialisation (None: K).
        restarts: R independent starts trained side by side; predict uses the one whose models give the data the
            highest total log-likelihood (summed over the clients).
        restart_rounds: Cluster rounds the R starts train side by side; after them the start with the highest
            total continues alone. None: all T, the start chosen on the final models.
    """

    # the k-FED start's local centres and their clusters' sizes; with restarts, each start's log-likelihood total
    summary_keys = {"centres": "centre_counts", "log_likelihood": "log_likelihood_counts"}

    def __init__(self, num_clusters: int | None = None,
                 flow: Literal["affine", "affine_triangular", "planar", "realnvp"] = "affine",
                 masking: Literal["checkerboard", "cyclic"] = "cyclic", num_couplings: int = 8,
                 hidden_channels: int = 64, num_blocks: int = 2, dilation: int = 1, cluster_rounds: int = 20,
                 communication_rounds: int = 100, local_steps: int = 100, batch_size: int = 100,
                 optimizer: Literal["sgd", "adam"] = "sgd", lr: float = 0.01,
                 init: Literal["models", "random", "kfed"] = "models", init_noise: float = 0.01,
                 reinit_models: bool = False,
                 kfed_k_local: int | None = None, restarts: int = 1, restart_rounds: int | None = None):
        super().__init__(num_clusters, batch_size)
        self.save_hyperparameters()
        self.client_maps: list[dict[int, Tensor]] = []  # k-FED start, per start: local centre -> global cluster
        self.best_restart = 0
        self.restart_log_likelihood: Tensor | None = None  # the last totals the clients sent, one per start
        self.start_fixed = False  # after restart_rounds: the kept start alone trains on
        self._stacked: dict[str, Tensor] = {}  # affine flows: each parameter of all flows as one tensor

    # --- set-up -------------------------------------------------------------------------------------
    def validate(self, info: DataInfo, num_clients: int) -> None:
        hp = self.hparams
        if hp.flow not in FLOWS:
            raise MethodArgError("flow", hp.flow, "one of " + ", ".join(FLOWS))
        if (hp.flow == "realnvp") != info.is_image:
            valid = "realnvp for image data" if info.is_image else "affine, affine_triangular or planar for vectors"
            raise MethodArgError("flow", hp.flow, valid)
        if info.is_image and info.input_size % 2:
            raise ConfigError("data", f"{info.input_size}x{info.input_size} images", "an even image side")
        if hp.init_noise < 0:
            raise MethodArgError("init_noise", hp.init_noise, "a number >= 0")
        for name in ("cluster_rounds", "communication_rounds", "local_steps", "batch_size", "restarts"):
            if hp[name] < 1:
                raise MethodArgError(name, hp[name], "a positive integer")
        if hp.restart_rounds is not None and hp.restart_rounds < 1:
            raise MethodArgError("restart_rounds", hp.restart_rounds,
                              "a positive integer, or null for all T")

    def build(self, info: DataInfo) -> None:
        super().build(info)
        self._is_image, self._info = info.is_image, info
        self.flows = flow_starts(lambda: self._make_flow(info), self.num_clusters, self.hparams.restarts,
                                 self.hparams.init_noise)  # flow j: start j // K's model j % K
        self._affine = is_affine(self.flows)

    def _make_flow(self, info: DataInfo) -> nn.Module:
        hp = self.hparams
        if hp.flow == "realnvp":
            return RealNVP(info.in_channels, info.input_size, hp.masking, hp.num_couplings, hp.hidden_channels,
                           hp.num_blocks, dilation=hp.dilation)
        if hp.flow == "planar":
            return PlanarFlow(info.num_features)
        return AffineFlow(info.num_features, triangular=hp.flow == "affine_triangular")

    def _start(self, r: int) -> slice:
        return start_slice(r, self.num_clusters)

    def stages(self) -> list[Stage]:
        hp = self.hparams
        stages = [Stage("kfed-init", 1, local_epochs=0)] if hp.init == "kfed" else []
        stages.append(Stage("uifca", hp.cluster_rounds * hp.communication_rounds, local_epochs=1))
        if hp.restarts > 1 and not self._prunes():  # the clients score the final models: the start is chosen on them
            stages.append(Stage("select", 1, local_epochs=0))
        return stages

    def _prunes(self) -> bool:
        """Whether the best start continues alone after restart_rounds cluster rounds (else all train to the end)."""
        rounds = self.hparams.restart_rounds
        return self.hparams.restarts > 1 and rounds is not None and rounds < self.hparams.cluster_rounds

    def configure_optimizers(self) -> torch.optim.Optimizer:
        hp = self.hparams
        make = torch.optim.SGD if hp.optimizer == "sgd" else CpuAdam
        if self._affine and not shares_stack(self.flows, self._stacked):
            self._stacked = stack_parameters(self.flows)  # one optimizer step moves all K * R flows
        params = list(self._stacked.values()) if self._affine else self.flows.parameters()
        return make(params, lr=hp.lr, foreach=True)

    # --- server ---------------------------------------------------------------------------------------
    def on_round_start(self, ctx: RoundContext) -> None:
        tau = self.hparams.communication_rounds
        if self.hparams.reinit_models and ctx.stage.name == "uifca" and ctx.round % tau == 0 and ctx.round:
            with torch.random.fork_rng(devices=[]):  # a seeded draw that leaves the global RNG alone
                torch.manual_seed(int_seed(ctx.seed, "reinit", ctx.stage_index, ctx.round))
                redraw_(self.flows, lambda: self._make_flow(self._info).to(self.device), self.num_clusters,
                        self.hparams.init_noise)

    def aggregate(self, averaged: dict[str, Tensor] | None, updates: list[ClientUpdate],
                  ctx: RoundContext) -> None:
        if not self.start_fixed:
            self._keep_best_start(updates)
            cluster_round = ctx.round // self.hparams.communication_rounds
            self.start_fixed = self._prunes() and ctx.stage.name == "uifca" and (
                cluster_round >= self.hparams.restart_rounds)  # those totals scored the models after restart_rounds
        if ctx.stage.name == "kfed-init":
            self._central_kfed(updates, ctx)
        elif ctx.stage.name == "uifca":
            super().aggregate(averaged, updates, ctx)  # FedAvg of model k weighted by |S_{i,k}|

    def _keep_best_start(self, updates: list[ClientUpdate]) -> None:
        """The start whose models give the clients' data the highest total log-likelihood (no label is read)."""
        totals = [u.payload["log_likelihood"].double().cpu() for u in updates if "log_likelihood" in u.payload]
        if totals:
            self.restart_log_likelihood = torch.stack(totals).sum(0)
            self.best_restart = int(torch.nan_to_num(self.restart_log_likelihood, nan=-math.inf).argmax())

    def _central_kfed(self, updates: list[ClientUpdate], ctx: RoundContext) -> None:
        """k-FED's server step once per start, on the rows of that start's block in each client's centres."""
        keys = ("central-kfed", ctx.stage_index, ctx.round, SERVER)
        generators = [generator(ctx.seed, *keys, *((r,) if r else ())) for r in range(self.hparams.restarts)]
        per_start = central_kfed_starts([u.payload["centres"] for u in updates],
                                        [u.payload["centre_counts"] for u in updates], self.num_clusters,
                                        self._kfed_width(), generators)
        self.client_maps = [{u.client_id: m.cpu() for u, m in zip(updates, maps) if m is not None}
                            for maps in per_start]  # a client below the floor: no map, the models' choice

    def server_state(self) -> dict[str, Any]:
        return {"client_maps": self.client_maps, "best_restart": self.best_restart,
                "restart_log_likelihood": self.restart_log_likelihood, "start_fixed": self.start_fixed}

    def load_server_state(self, state: dict[str, Any]) -> None:
        self.client_maps = [dict(maps) for maps in state["client_maps"]]
        self.best_restart = int(state.get("best_restart", 0))
        self.restart_log_likelihood = state.get("restart_log_likelihood")
        self.start_fixed = bool(state.get("start_fixed", False))

    # --- client ---------------------------------------------------------------------------------------
    def on_client_start(self, ctx: ClientContext) -> None:
        self._x = ctx.data.all_x()
        self._noise_gen = ctx.generator("dequantize")
        self._scores = None  # this visit's log-likelihood totals, one per start, when it computes them
        if self._affine and self._stacked and not shares_stack(self.flows, self._stacked):
            raise RuntimeError("UIFCA's flows no longer share memory with the tensors its optimizer steps (was the "
                               "method moved or copied after configure_optimizers?): build it again")
        if ctx.stage.name == "kfed-init":
            return
        if ctx.stage.name == "select":
            self._scores, _ = self._score_and_assign(self._x)
            return
        t = ctx.round // self.hparams.communication_rounds
        if ctx.state.get("cluster_round") != t:  # a new cluster round: re-assign (Algorithm 2, line 8)
            self._scores, by_models = self._score_and_assign(self._x)
            ctx.state["assignment"] = self._initial_assignment(ctx, by_models) if t == 0 else by_models
            ctx.state["cluster_round"] = t
        self._members = membership(ctx.state["assignment"], self.num_clusters)
        if self.start_fixed:  # the server broadcast which start continues: the others' flows train no more
            self._members[:self._start(self.best_restart).start] = False
            self._members[self._start(self.best_restart).stop:] = False
        self._active = self._members.any(1).nonzero().flatten()  # the flows this client trains

    def _initial_assignment(self, ctx: ClientContext, by_models: Tensor) -> Tensor:
        """Each start's S^0 (R, n): the models' choice, uniform labels, or its k-FED clusters."""
        hp = self.hparams
        if hp.init == "random":
            return torch.randint(self.num_clusters, by_models.shape, generator=ctx.generator("init-assignment", "cpu"))
        if hp.init == "kfed":
            first = by_models.clone()
            for r, local in enumerate(ctx.state["local_labels"]):
                mapping = self.client_maps[r].get(ctx.client_id) if r < len(self.client_maps) else None
                if mapping is not None and not bool((local < 0).any()):  # else it sent no centres: the models' choice
                    first[r] = mapping[local]
            return first
        return by_models

    def _score_and_assign(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """Per start, the sum over x of its best model's log-likelihood (R,) and each sample's best model (R, n)."""
        self.eval()
        return score_and_assign(self.flows, x, self.hparams.restarts)

    def client_batches(self, ctx: ClientContext, epoch: int) -> Iterator[tuple[Tensor, Tensor]]:
        """M steps; a step gives every flow j with samples the next N samples of a random order of S_{i,j}
        (Algorithm 4's random subset, drawn without replacement within the round), as (x (J', N, ...), weights
        (J', N)) over those J' flows (self._active): each flow's weights sum to 1 (its batch mean), 0 on padding."""
        picks, weights = member_batches(self._members[self._active], self.batch_size, self.hparams.local_steps,
                                        ctx.generator(f"steps-{epoch}", device="cpu"))
        picks, weights = picks.to(self._x.device), weights.to(self._x.device)  # (M, J', N), (J', N)
        for step in range(len(picks)):
            yield self._x[picks[step]], weights

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        x, weights = batch
        if self._affine:  # the flows with samples at once (a flow without any would have a zero gradient)
            return batch_nll(self._stacked, self._active, x, weights)
        # Models share no parameter, so one step on the sum is one step of each model on its own loss.
        loss = torch.zeros((), device=self.device)
        for row, j in enumerate(self._active.tolist()):
            xj = dequantize(x[row], self._noise_gen) if self._is_image else x[row]
            loss = loss + (self.flows[j].nll(xj) * weights[row]).sum()
        return loss

    def on_client_end(self, ctx: ClientContext) -> dict[str, Tensor]:
        x, self._x = self._x, None  # the working model must not keep the last client's samples alive
        if ctx.stage.name == "kfed-init":  # k-FED's client step once per start; the labels stay on the client
            generators = [ctx.generator("local-kfed" if r == 0 else f"local-kfed-{r}", device="cpu")
                          for r in range(self.hparams.restarts)]
            centres, counts, ctx.state["local_labels"] = local_kfed_starts(x, self._kfed_width(), generators,
                                                                           ctx.min_summary_size)
            return {"centres": centres, "centre_counts": counts}
        if self._scores is None or self.hparams.restarts == 1 or self.start_fixed or len(x) < ctx.min_summary_size:
            return {}  # nothing (more) to choose; below the floor a client's total may not leave it
        return {"log_likelihood": self._scores,
                "log_likelihood_counts": torch.full_like(self._scores, float(len(x)))}

    def _kfed_width(self) -> int:
        return self.hparams.kfed_k_local or self.num_clusters

    def aggregation_weights(self, ctx: ClientContext) -> dict[str, float] | None:
        if ctx.stage.name != "uifca":
            return {"flows.": 0.0}  # no model was trained: nothing to average
        return {f"flows.{j}.": float(n) for j, n in enumerate(self._members.sum(1).tolist())}

    # --- evaluation ----------------------------------------------------------------------------------
    @torch.no_grad()
    def assign(self, x: Tensor) -> Tensor:
        """The cluster of the kept start's model with the highest likelihood (lowest loss)."""
        return log_probs(self.flows, x)[self._start(self.best_restart)].argmax(0)

"""UIFCA: federated unsupervised clustering with generative models (Chung, Lee & Ramchandran, "Federated
Unsupervised Clustering with Generative Models", AAAI 2022 workshop), Algorithms 2-4.

K cluster models, each a normalizing flow. Cluster round t (T of them) = tau communication rounds with the
cluster sets S^(t) fixed: in each, every client takes M local steps (Algorithm 4) on every model k with a
random batch of N of its samples assigned to k, and the server averages model k over the clients weighted by
|S_{i,k}| (Algorithm 3, through the contract's `aggregation_weights`). At the start of the next cluster round
each client re-assigns its samples to the model of the highest likelihood (Algorithm 2). Communicated: the K
flows' weights only; the assignments never leave a client.

Choices the paper leaves open (ours):
- Rounds: one stage of T * tau rounds; cluster round t = round // tau (`federation.rounds` rescales T).
- Models are not re-initialised between cluster rounds (Algorithm 3 line 3 says "initialize randomly", the
  text says the clients train "the received model parameters"); `reinit_models: true` re-draws them. Measured
  on Table 1 (benchmarks/results/uifca_table1.md): re-drawn models need the paper's 10,000 steps a cluster round to
  fit; at 200 they are still half-trained when the samples are re-assigned and no cell reaches 100 %.
- Initialisation: one random model plus N(0, init_noise^2) noise per parameter and copy (the paper's
  synthetic set-up). The initial assignment S^0 (an input of Algorithm 2) is by likelihood under these
  initial models (`init: models`, our reading: the paper perturbs the copies so that no model "gets most
  datapoints assigned", which only matters if S^0 comes from the models; it splits the space into
  coherent regions), uniform at random (`init: random`, the text's "initial random cluster assignment";
  measured to stall in local optima on the Gaussian set), or k-FED's (`init: kfed`: one k-FED round
  first, a point takes the global cluster of its local centre).
- The synthetic flow is the affine map x = W z + b the paper writes (it calls it "planar", see
  fedclust.nn.flows.AffineFlow); `flow: affine_triangular` uses its Cholesky-style parametrisation.
  Images use RealNVP with checkerboard or cyclic masks (the paper adopts cyclic); uint8 images are
  dequantised with uniform noise during training. Optimizer: SGD (the paper's MNIST lr is 1e-4; it gives
  none for the synthetic sets).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any, Literal

import torch
from torch import Tensor, nn

from fedclust.clustering.floor import floored_groups
from fedclust.clustering.kfed import central_kfed, local_kfed
from fedclust.contract import ClientContext, ClientUpdate, DataInfo, FederatedMethod, RoundContext, Stage
from fedclust.data.transforms import dequantize
from fedclust.errors import ConfigError
from fedclust.nn.flows import AffineFlow, PlanarFlow, RealNVP, stack_log_prob
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
        init: Initial assignment: "models" (by likelihood under the initial, slightly perturbed copies),
            "random" (uniform labels), or "kfed" (k-FED + UIFCA).
        init_noise: Std of the noise added to each copy of the first random model.
        reinit_models: Re-draw the models at the start of every cluster round.
        kfed_k_local: Local clusters of the k-FED initialisation (None: K).
    """

    summary_keys = {"centres": "centre_counts"}  # k-FED start: local centres and their clusters' sizes

    def __init__(self, num_clusters: int | None = None,
                 flow: Literal["affine", "affine_triangular", "planar", "realnvp"] = "affine",
                 masking: Literal["checkerboard", "cyclic"] = "cyclic", num_couplings: int = 8,
                 hidden_channels: int = 64, num_blocks: int = 2, dilation: int = 1, cluster_rounds: int = 20,
                 communication_rounds: int = 100, local_steps: int = 100, batch_size: int = 100,
                 optimizer: Literal["sgd", "adam"] = "sgd", lr: float = 0.01,
                 init: Literal["models", "random", "kfed"] = "models", init_noise: float = 0.01,
                 reinit_models: bool = False,
                 kfed_k_local: int | None = None):
        super().__init__(num_clusters, batch_size)
        self.save_hyperparameters()
        self.client_maps: dict[int, Tensor] = {}  # k-FED initialisation: local centre -> global cluster

    # --- set-up -------------------------------------------------------------------------------------
    def validate(self, info: DataInfo, num_clients: int) -> None:
        hp = self.hparams
        if hp.flow not in FLOWS:
            raise ConfigError("method.flow", hp.flow, "one of " + ", ".join(FLOWS))
        if (hp.flow == "realnvp") != info.is_image:
            valid = "realnvp for image data" if info.is_image else "affine, affine_triangular or planar for vectors"
            raise ConfigError("method.flow", hp.flow, valid)
        if info.is_image and info.input_size % 2:
            raise ConfigError("data", f"{info.input_size}x{info.input_size} images", "an even image side")
        if hp.init_noise < 0:
            raise ConfigError("method.init_noise", hp.init_noise, "a number >= 0")
        for name in ("cluster_rounds", "communication_rounds", "local_steps", "batch_size"):
            if hp[name] < 1:
                raise ConfigError(f"method.{name}", hp[name], "a positive integer")

    def build(self, info: DataInfo) -> None:
        super().build(info)
        self._is_image = info.is_image
        first = self._make_flow(info)
        self.flows = nn.ModuleList([first] + [copy.deepcopy(first) for _ in range(self.num_clusters - 1)])
        self._perturb(torch.default_generator)
        self._info = info

    def _make_flow(self, info: DataInfo) -> nn.Module:
        hp = self.hparams
        if hp.flow == "realnvp":
            return RealNVP(info.in_channels, info.input_size, hp.masking, hp.num_couplings, hp.hidden_channels,
                           hp.num_blocks, dilation=hp.dilation)
        if hp.flow == "planar":
            return PlanarFlow(info.num_features)
        return AffineFlow(info.num_features, triangular=hp.flow == "affine_triangular")

    @torch.no_grad()
    def _perturb(self, g: torch.Generator) -> None:
        """Each copy = the first random model + small noise, so no model starts with a much lower loss."""
        for flow in self.flows:
            for p in flow.parameters():
                p.add_(self.hparams.init_noise * torch.randn(p.shape, generator=g, device=g.device).to(p))

    def stages(self) -> list[Stage]:
        hp = self.hparams
        train = Stage("uifca", hp.cluster_rounds * hp.communication_rounds, local_epochs=1)
        return [Stage("kfed-init", 1, local_epochs=0), train] if hp.init == "kfed" else [train]

    def configure_optimizers(self) -> torch.optim.Optimizer:
        hp = self.hparams
        make = torch.optim.SGD if hp.optimizer == "sgd" else torch.optim.Adam
        return make(self.flows.parameters(), lr=hp.lr, foreach=True)

    # --- server ---------------------------------------------------------------------------------------
    def on_round_start(self, ctx: RoundContext) -> None:
        tau = self.hparams.communication_rounds
        if self.hparams.reinit_models and ctx.stage.name == "uifca" and ctx.round % tau == 0 and ctx.round:
            with torch.random.fork_rng(devices=[]):  # a seeded draw that leaves the global RNG alone
                torch.manual_seed(int_seed(ctx.seed, "reinit", ctx.stage_index, ctx.round))
                fresh = self._make_flow(self._info).to(self.device)
                for flow in self.flows:
                    flow.load_state_dict(fresh.state_dict())
                self._perturb(torch.default_generator)

    def aggregate(self, averaged: dict[str, Tensor] | None, updates: list[ClientUpdate],
                  ctx: RoundContext) -> None:
        if ctx.stage.name == "kfed-init":
            g = generator(ctx.seed, "central-kfed", ctx.stage_index, ctx.round, SERVER)
            updates = [u for u in updates if len(u.payload["centres"])]  # a client below the floor sent none
            _, maps = central_kfed([u.payload["centres"] for u in updates], self.num_clusters, g)
            self.client_maps = {u.client_id: m.cpu() for u, m in zip(updates, maps)}
            return
        super().aggregate(averaged, updates, ctx)  # FedAvg of model k weighted by |S_{i,k}|

    def server_state(self) -> dict[str, Any]:
        return {"client_maps": self.client_maps}

    def load_server_state(self, state: dict[str, Any]) -> None:
        self.client_maps = dict(state["client_maps"])

    # --- client ---------------------------------------------------------------------------------------
    def on_client_start(self, ctx: ClientContext) -> None:
        self._x = ctx.data.all_x()
        self._noise_gen = ctx.generator("dequantize")
        if ctx.stage.name == "kfed-init":
            return
        t = ctx.round // self.hparams.communication_rounds
        if ctx.state.get("cluster_round") != t:  # a new cluster round: re-assign (Algorithm 2, line 8)
            ctx.state["assignment"] = self._initial_assignment(ctx) if t == 0 else self._assign_all(self._x)
            ctx.state["cluster_round"] = t
        assignment = ctx.state["assignment"]
        self._members = [torch.nonzero(assignment == k).flatten() for k in range(self.num_clusters)]

    def _initial_assignment(self, ctx: ClientContext) -> Tensor:
        if self.hparams.init == "kfed":
            local, mapping = ctx.state["local_labels"], self.client_maps.get(ctx.client_id)
            if mapping is None or bool((local < 0).any()):  # it sent no centres (the floor): its models' choice
                return self._assign_all(self._x)
            return mapping[local]
        if self.hparams.init == "models":
            return self._assign_all(self._x)
        return torch.randint(self.num_clusters, (len(self._x),), generator=ctx.generator("init-assignment", "cpu"))

    @torch.no_grad()
    def _assign_all(self, x: Tensor) -> Tensor:
        self.eval()
        return torch.cat([self.assign(chunk) for chunk in x.split(1024)]).cpu()

    def client_batches(self, ctx: ClientContext, epoch: int) -> Iterator[list[Tensor | None]]:
        """M steps; step j holds one random subset of N samples of S_{i,k} per model k (Algorithm 4)."""
        g = ctx.generator(f"steps-{epoch}", device="cpu")
        for _ in range(self.hparams.local_steps):
            batch = []
            for members in self._members:
                if len(members) == 0:
                    batch.append(None)
                    continue
                pick = members[torch.randperm(len(members), generator=g)[:self.batch_size]]
                batch.append(self._x[pick.to(self._x.device)])
            yield batch

    def training_step(self, batch: list[Tensor | None], batch_idx: int) -> Tensor:
        # Models share no parameter, so one step on the sum is one step of each model on its own loss.
        loss = torch.zeros((), device=self.device)
        for k, x in enumerate(batch):
            if x is None:
                continue
            if self._is_image:
                x = dequantize(x, self._noise_gen)
            loss = loss + self.flows[k].nll(x).mean()
        return loss

    def on_client_end(self, ctx: ClientContext) -> dict[str, Tensor]:
        x, self._x = self._x, None  # the working model must not keep the last client's samples alive
        if ctx.stage.name == "kfed-init":
            k_local = min(self.hparams.kfed_k_local or self.num_clusters, len(x))
            _, labels = local_kfed(x.flatten(1), k_local, ctx.generator("local-kfed", device="cpu"))
            centres, counts, labels = floored_groups(x.flatten(1), labels, ctx.min_summary_size)  # privacy floor
            ctx.state["local_labels"] = labels.cpu()  # stays on the client: only the centres are sent
            return {"centres": centres, "centre_counts": counts}
        return {}

    def aggregation_weights(self, ctx: ClientContext) -> dict[str, float] | None:
        if ctx.stage.name == "kfed-init":
            return {"flows.": 0.0}  # no model was trained: nothing to average
        return {f"flows.{k}.": float(len(m)) for k, m in enumerate(self._members)}

    # --- evaluation ----------------------------------------------------------------------------------
    def assign(self, x: Tensor) -> Tensor:
        """The cluster of the model with the highest likelihood (lowest loss)."""
        return stack_log_prob(self.flows, x.float()).argmax(0)

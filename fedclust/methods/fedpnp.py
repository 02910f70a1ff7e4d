"""FedPNP: federated Contrastive Clustering with a past negatives pool (Miao & Koyuncu, "Resource-efficient
federated clustering with past negatives pool", papers/fedpnp-past-negatives-pool.txt, Sec. 2.3-2.4).

FedCC (fedclust/methods/fedcc.py) with two changes to the local loss of client k in round r:
- Instance level, eqs. (3), (5), (6): the negatives of sample i are only the samples j of the batch whose
  past soft labels are far from i's: P_i = {j != i : s(y_i^o, y_j^o) < mu for both views o in {a, b}},
  with y^o the cluster-head outputs of the client's past local model on the current views, s a Gaussian
  similarity and mu = 0.999. In round 1 there is no past model: y comes from the current model.
- The total is L_I^PNP + alpha * L_C (eq. 8), alpha = 2 in round 1 and 0.1 afterwards (Sec. 3.1).
Everything else is FedCC: FedAvg of all weights, Adam 3e-4, tau_I 0.5, tau_C 1.0, cluster = argmax of the
global cluster head.

Choices the paper leaves open, and what is done here:
- Similarity s (eq. 3). The text prints "Gaussian similarity s(u, v) = exp(uv)"; exp(u.v) of two softmax
  vectors is >= 1, so no pair would ever fall below mu = 0.999 and the pool would always be empty. The
  Gaussian kernel s(u, v) = exp(-||u - v||^2) (bandwidth 1) is used: s in (0, 1], s = 1 for identical
  soft labels, and s < 0.999 means ||u - v||^2 > 1.0005e-3. With mu = 0.999 only pairs with almost
  identical soft labels (confidently the same cluster, or both near-uniform) are removed from the negatives.
  Measured consequence (benchmarks/results/fedpnp_ablation_fmnist_test.md, Fashion-MNIST, first 10 rounds): under
  IID the pool keeps 99.7-99.9 % of a batch's pairs from round 2 (under Dirichlet 0.1, measured with alpha 1,
  99.6-99.8 % from round 3), so FedPNP's difference from FedCC there is alpha; the pool acts only once the
  cluster head is confident (with alpha 1 under IID the kept share falls to 98.8 % by round 10).
  `pool_threshold` lowers mu for users who want a wider pool (mu 0.9 keeps 39-87 %).
- The pool is per batch and index-based: P is an n x n mask shared by both views; an anchor of view a has
  as negatives u_j and v_j for j in P_i (eq. 5), as in NT-Xent. Both views act as anchors (mean over
  2n anchors, as CC and `nt_xent`).
- The positive stays in the denominator of eq. (5) (SimCLR's NT-Xent, which eq. (4) cites): then the PNP
  loss equals CC's instance loss when P_i = all j != i, and an anchor with an empty pool contributes
  log 1 = 0 instead of an undefined term.
- "Past local model" = the client's own model at the end of its previous local training (after local
  training, before aggregation: "soft labels ... from the past local model in last communication round").
  With partial participation it is the last round this client trained; a client that has not trained yet
  uses its current model (the paper's round-1 rule) but with alpha = 0.1 after the first round.
- "Past features": the past model is run (no gradient, eval mode: BatchNorm uses its running statistics)
  on the *current* batch's two views (Fig. 2: "two augmented samples pass through ... local models in the
  previous round"); its soft labels only select negatives. The sentence after eq. (8) says the cluster
  term "depends only on the current parameters", and eq. (7) is written with the current round's
  assignments, so by default L_C is CC's cluster loss on the current model's outputs of both views.
  Sec. 2.4 also says the ordinary loss is applied "on both past and current cluster features"; the
  option `past_cluster_loss=True` reads it literally and adds 1/2 [L(c^a, c_past^b) + L(c^b, c_past^a)]
  (eq. 4 with tau_C between the current and the past cluster columns, past side without gradient).
- Round 1: the pool comes from the current model's soft labels of the same forward pass (detached), so it
  costs nothing extra. alpha follows the round number of the run (round 1 of the schedule: alpha = 2).
- What is computed when: per batch, two views; from round 2 one extra forward of the past backbone +
  cluster head per view (about +1/3 of a step's compute, no activations kept); the pool mask (n x n) and
  the losses. At the end of local training the client saves its backbone + cluster head.
- Memory: ctx.state["past"] holds one copy of the backbone and cluster head per client, on CPU (the
  instance head is not needed: only soft labels are). ResNet-18 + cluster head: about 45 MB per client,
  saved in the checkpoint. Only one working copy of the past network lives on the device at a time.
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from fedclust.contract import ClientContext
from fedclust.errors import ConfigError
from fedclust.losses.contrastive import cluster_contrastive_loss, nt_xent
from fedclust.methods.families.contrastive import ContrastiveClustering

PAST = "past"  # ctx.state key: the client's past backbone + cluster head (CPU state dict)


def gaussian_similarity(y: Tensor) -> Tensor:
    """s(y_i, y_j) = exp(-||y_i - y_j||^2) for every pair of rows of (n, K) soft labels."""
    return torch.exp(-torch.cdist(y, y).pow(2))


def pnp_pool(y_a: Tensor, y_b: Tensor, threshold: float = 0.999) -> Tensor:
    """Eq. (3): (n, n) bool mask, True where j is a negative of i: j != i and s < threshold in both views."""
    pool = (gaussian_similarity(y_a.float()) < threshold) & (gaussian_similarity(y_b.float()) < threshold)
    return pool & ~torch.eye(len(y_a), dtype=torch.bool, device=pool.device)


def pnp_contrastive_loss(u: Tensor, v: Tensor, pool: Tensor, temperature: float = 0.5) -> Tensor:
    """Eq. (5): NT-Xent whose negatives of anchor i (of either view) are u_j and v_j for j in pool[i].

    Cosine similarities over temperature; positive v_i for u_i (and u_i for v_i), kept in the denominator;
    mean over the 2n anchors."""
    n = u.shape[0]
    z = F.normalize(torch.cat([u, v]), dim=1)
    sim = z @ z.T / temperature
    positives = torch.cat([torch.arange(n, 2 * n), torch.arange(0, n)]).to(z.device)
    keep = pool.repeat(2, 2)
    keep[torch.arange(2 * n, device=z.device), positives] = True
    return F.cross_entropy(sim.masked_fill(~keep, float("-inf")), positives)


class FedPNP(ContrastiveClustering):
    """FedCC + the past negatives pool (FedPNP).

    Args (besides FedCC's):
        pool_threshold: mu of eq. (3) (0.999).
        alpha_first: alpha of eq. (8) in round 1 (2).
        alpha: alpha of eq. (8) from round 2 on (0.1).
        past_cluster_loss: Also contrast the current cluster columns with the past model's (see above).
    """

    def __init__(self, num_clusters: int | None = None, backbone: str = "convnet28", resize: int | None = None,
                 rounds: int = 100, local_epochs: int = 5, batch_size: int = 128, lr: float = 3e-4,
                 instance_dim: int = 128, instance_temperature: float = 0.5, cluster_temperature: float = 1.0,
                 crop_scale: tuple[float, float] = (0.08, 1.0), memory_efficient_chunk: int | None = None,
                 pool_threshold: float = 0.999, alpha_first: float = 2.0, alpha: float = 0.1,
                 past_cluster_loss: bool = False):
        super().__init__(num_clusters, backbone, resize, rounds, local_epochs, batch_size, lr, instance_dim,
                         instance_temperature, cluster_temperature, crop_scale, memory_efficient_chunk)
        if not 0 < pool_threshold <= 1:
            raise ConfigError("method.pool_threshold", pool_threshold, "a number in (0, 1] (s is in (0, 1])")
        for name, value in (("alpha_first", alpha_first), ("alpha", alpha)):
            if not value >= 0:
                raise ConfigError(f"method.{name}", value, "a non-negative number")
        self._alpha = alpha_first
        self._has_past = False
        self._past_soft: tuple[Tensor, Tensor] | None = None

    def build(self, info) -> None:
        super().build(info)
        # The working copy of a client's past network: kept in a dict so it is neither a submodule nor
        # part of the communicated state; refilled from ctx.state for each client.
        past = nn.Sequential(copy.deepcopy(self.backbone), copy.deepcopy(self.cluster_head))
        self._past = {"net": past.requires_grad_(False)}

    @property
    def past_network(self) -> nn.Module:
        """The working copy of a client's past backbone + cluster head (loaded from ctx.state[PAST])."""
        return self._past["net"]

    def past_keys(self) -> dict[str, str]:
        """State-dict keys of the working model that form the past network (backbone + cluster head)."""
        names = {"backbone.": "0.", "cluster_head.": "1."}
        return {k: names[p] + k.removeprefix(p) for k in self.state_dict() for p in names if k.startswith(p)}

    def on_client_start(self, ctx: ClientContext) -> None:
        super().on_client_start(ctx)
        self._alpha = self.hparams.alpha_first if ctx.stage_index == 0 and ctx.round == 0 else self.hparams.alpha
        self._has_past = PAST in ctx.state
        if self._has_past:
            net = self.past_network.to(self.device)
            net.load_state_dict(ctx.state[PAST])
            net.eval()

    def before_loss(self, x_a: Tensor, x_b: Tensor) -> None:
        self._past_soft = None
        if self._has_past:
            net = self.past_network
            with torch.no_grad():
                self._past_soft = (net(x_a), net(x_b))

    def batch_loss(self, z_a: Tensor, c_a: Tensor, z_b: Tensor, c_b: Tensor) -> Tensor:
        hp = self.hparams
        # round 1 (no past model): the current model's soft labels of this forward select the negatives
        y_a, y_b = self._past_soft if self._past_soft is not None else (c_a.detach(), c_b.detach())
        pool = pnp_pool(y_a, y_b, hp.pool_threshold)
        loss_i = pnp_contrastive_loss(z_a, z_b, pool, hp.instance_temperature)
        loss_c = cluster_contrastive_loss(c_a, c_b, hp.cluster_temperature)
        if hp.past_cluster_loss and self._past_soft is not None:
            loss_c = loss_c + 0.5 * (nt_xent(c_a.T, y_b.T, hp.cluster_temperature)
                                     + nt_xent(c_b.T, y_a.T, hp.cluster_temperature))
        return loss_i + self._alpha * loss_c

    def on_client_end(self, ctx: ClientContext) -> dict[str, Tensor]:
        weights = self.state_dict()
        ctx.state[PAST] = {new: weights[old].detach().to("cpu", copy=True) for old, new in self.past_keys().items()}
        return {}

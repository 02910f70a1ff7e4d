"""FedPNP: federated Contrastive Clustering with a past negatives pool (Miao & Koyuncu, "Resource-efficient
federated clustering with past negatives pool", papers/fedpnp-past-negatives-pool.txt, Sec. 2.3-2.4).

FedCC (fedclust/methods/fedcc.py: FedAvg of every weight, Adam 3e-4, tau_I 0.5, tau_C 1.0, cluster = argmax of the
global cluster head; every weight is what a client sends) with two changes to client k's local loss in round r:
- Instance level, eqs. (3), (5), (6): the negatives of sample i are only the batch samples j whose past soft labels
  are far from i's, P_i = {j != i : s(y_i^o, y_j^o) < mu for both views o}, y^o the cluster head's outputs of the
  client's past local model on the current views, mu = 0.999.
- The total is L_I^PNP + alpha * L_C (eq. 8), alpha = 2 in round 1 and 0.1 afterwards (Sec. 3.1).

Choices the paper leaves open (measured in docs/findings/fedpnp.md):
- s is the Gaussian kernel exp(-||u - v||^2): the printed exp(uv) of two softmax vectors is >= 1, so no pair would
  fall below mu and the pool would always be empty. With mu = 0.999 the pool keeps 99.7-99.9 % of a batch's pairs
  on Fashion-MNIST, so FedPNP's difference from FedCC there is alpha; `pool_threshold` widens it.
- The pool is a per-batch n x n mask shared by both views; both views are anchors, and the positive stays in the
  denominator of eq. (5) (SimCLR's NT-Xent, which eq. (4) cites), so an empty pool gives FedCC's instance loss.
- "Past local model" is the client's own backbone + cluster head at the end of its last local training, run without
  gradient in eval mode on the current batch's views (about +1/3 of a step's compute from round 2); a client that
  has not trained yet uses its current model (the paper's round-1 rule). It lives in the client's state on the CPU
  (ResNet-18 + head: about 45 MB a client, saved in the checkpoint).
- L_C is CC's cluster loss on the current model's outputs (eq. 7, "depends only on the current parameters");
  `past_cluster_loss` also contrasts the current cluster columns with the past model's, reading Sec. 2.4's "on
  both past and current cluster features" literally.
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from fedclust.contract import ClientContext
from fedclust.errors import MethodArgError
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
            raise MethodArgError("pool_threshold", pool_threshold, "a number in (0, 1] (s is in (0, 1])")
        for name, value in (("alpha_first", alpha_first), ("alpha", alpha)):
            if not value >= 0:
                raise MethodArgError(name, value, "a non-negative number")
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

"""DCN: deep clustering network (Yang, Fu, Sidiropoulos & Hong, "Towards K-means-friendly Spaces: Simultaneous
Deep Learning and Clustering", ICML 2017), the server step of PPFC-GAN.

1. Pretrain the autoencoder on reconstruction, ||x - g(f(x))||^2.
2. k-means on the embeddings f(x) gives centroids M and assignments s.
3. Joint epochs. Per mini-batch (DCN Algorithm 1): one step on ||x - g(f(x))||^2 + lam/2 ||f(x) - M s||^2 with
   s fixed; then every sample of the batch is re-assigned to its nearest centroid under the updated f;
   then each centroid moves by the running-mean rule m_k <- m_k - (1/c_k)(m_k - f(x_i)), c_k counting the
   samples assigned to k so far.

Choices, stated: both losses are summed over features and averaged over the batch; the centroid counts
start at the initial k-means cluster sizes (so the running mean continues the k-means means); the
running-mean update is applied once per batch with the batch's sums, which equals the per-sample rule
applied in sequence except that the batch's assignments use the centroids of before the batch; Adam for
both phases (a fresh one for the joint phase); end-to-end pretraining instead of DCN's layer-wise
stacked denoising autoencoders.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from fedclust.clustering.kmeans import assign_nearest, kmeans
from fedclust.nn.optim import CpuAdam


@dataclass
class DCNResult:
    """centroids (k, latent) in the embedding space; labels (n,) of the training points at the end; the mean
    loss of every pretraining and joint epoch."""

    centroids: Tensor
    labels: Tensor
    pretrain_losses: list[float] = field(default_factory=list)
    cluster_losses: list[float] = field(default_factory=list)


def _batches(n: int, batch_size: int, generator: torch.Generator, device: torch.device) -> Iterator[Tensor]:
    order = torch.randperm(n, generator=generator).to(device)
    for start in range(0, n, batch_size):
        yield order[start:start + batch_size]


@torch.no_grad()
def embed(autoencoder: nn.Module, x: Tensor, batch_size: int = 4096) -> Tensor:
    return torch.cat([autoencoder.encoder(xb) for xb in x.split(batch_size)])


def train_dcn(x: Tensor, k: int, autoencoder: nn.Module, generator: torch.Generator, *, lam: float = 0.05,
              pretrain_epochs: int = 50, cluster_epochs: int = 50, batch_size: int = 256, lr: float = 1e-3,
              kmeans_seed: int = 0, kmeans_redo: int = 10) -> DCNResult:
    """Train `autoencoder` (an nn.Module with .encoder and .decoder, forward -> (z, reconstruction)) in place
    on the rows of `x` (n, ...) flattened, and return the DCN centroids. Shuffling draws from `generator`
    (a CPU generator), k-means is seeded by `kmeans_seed`."""
    x = x.flatten(1)
    n, result = x.shape[0], DCNResult(torch.empty(0), torch.empty(0))
    autoencoder.train()
    with torch.enable_grad():
        opt = CpuAdam(autoencoder.parameters(), lr=lr)
        for _ in range(pretrain_epochs):
            total = 0.0
            for idx in _batches(n, batch_size, generator, x.device):
                xb = x[idx]
                loss = (autoencoder(xb)[1] - xb).pow(2).sum(1).mean()
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                total += float(loss.detach()) * len(idx)
            result.pretrain_losses.append(total / n)

        km = kmeans(embed(autoencoder, x), k, niter=100, nredo=kmeans_redo, seed=kmeans_seed)
        centroids, labels = km.centroids.clone(), km.labels.clone()
        counts = torch.bincount(labels, minlength=k).to(centroids.dtype)
        opt = CpuAdam(autoencoder.parameters(), lr=lr)
        for _ in range(cluster_epochs):
            total = 0.0
            for idx in _batches(n, batch_size, generator, x.device):
                xb = x[idx]
                z, rec = autoencoder(xb)
                loss = ((rec - xb).pow(2).sum(1).mean()
                        + 0.5 * lam * (z - centroids[labels[idx]]).pow(2).sum(1).mean())
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                total += float(loss.detach()) * len(idx)
                with torch.no_grad():
                    z = autoencoder.encoder(xb)
                    new = assign_nearest(z, centroids)
                    labels[idx] = new
                    added = torch.bincount(new, minlength=k).to(centroids.dtype)
                    sums = torch.zeros_like(centroids).index_add_(0, new, z)
                    moved = added > 0
                    counts += added
                    centroids[moved] += (sums[moved] - added[moved, None] * centroids[moved]) / counts[moved, None]
            result.cluster_losses.append(total / n)
    result.centroids, result.labels = centroids, labels
    return result

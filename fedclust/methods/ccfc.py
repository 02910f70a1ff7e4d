"""CCFC: cluster-contrastive federated clustering (Yan et al., "CCFC: Bridging Federated Clustering and
Contrastive Learning", papers/ccfc-cluster-contrastive-federated-clustering.md; Algorithm 1, eqs. 1-8).

Settings follow the paper and its reference code (REFERENCE.md): encoder = backbone + projector
(Linear-BN-ReLU-Linear-BN without affine), predictor with a 16-wide bottleneck, Adam lr 1e-3, batch 128,
one local epoch per round, each client's Adam state kept across rounds, BatchNorm statistics averaged.

Stage "pretrain" (100 rounds): SimSiam on two augmented views + lambda * the model-contrastive term
against the frozen global model (eval mode). Stage "cluster" (30 rounds): the cluster-contrastive loss on
the un-augmented images, grouped by pseudo-labels = argmax cosine between the global model's normalised z
and the global centroids, + lambda * the model-contrastive term. Every round each client runs k-means
(k clusters) on its own L2-normalised z from its trained local model and sends the centroids; the server
runs k-means on the m*k local centroids. A point is assigned to the global centroid of highest cosine.

Choices and differences, stated:
- The cluster-contrastive loss follows the reference code (pairs i = j included, groups averaged without
  weights); `exclude_self=True` gives eqs. (1)-(2) exactly as printed.
- The reference code starts round 1 of stage 1 from each client's own random initialisation (its clients
  load the global model only from round 2); by default every client starts from the one global
  initialisation (the algorithm as printed, Algorithm 1 line 7); `sync_init=False` does what the code does.
- Variants: `scfc=True` keeps the SimSiam loss in the second stage (SCFC, Sec. 4.3.1); `lam=0` drops the
  model-contrastive term (CCFC-dagger, Table 4); `standalone=True` averages nothing: each client trains
  its own model, labels its points with its own model and local centroids, and the server maps local
  centroids to global clusters by k-means on them (CCFC-double-dagger, Table 4).
Communicated: the whole state dict (nothing when standalone) + k local centroids per client and their sizes.
Measured (the settings rule, the official code, brightness in z on Fashion-MNIST): docs/findings/ccfc.md.
"""

from __future__ import annotations

from fedclust.methods.families.cluster_contrastive import ClusterContrastiveFC


class CCFC(ClusterContrastiveFC):
    """CCFC and its ablations (SCFC, lambda = 0, standalone): the family's method as the paper prints it; its
    arguments are ClusterContrastiveFC's."""

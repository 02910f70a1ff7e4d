"""FedMCC: federated momentum contrastive clustering (Miao & Koyuncu, papers/fedmcc-momentum-contrastive-
clustering.md, Section III, Algorithms 1-2, eqs. 7-9; memory-efficient gradients Section VI).

Each client runs MCC's networks (Fig. 2): online encoder f^O, instance projector g_I^O, cluster projector g_C^O, and
a target of the same shape by EMA (m = 0.99); both views go through both (four representations, eq. 7).
Stage "representation" (Algorithm 1, 100 rounds x 5 epochs): f, g_I descend eq. (8), the targets follow by EMA, the
server averages f and g_I. Stage "cluster" (Algorithm 2, 10 rounds): f frozen, g_C descends eq. (9) and g_C^T
follows; the server averages g_C alone. A point's cluster is argmax g_C*(f*(x)). Sent: those averaged weights only;
the targets stay on the clients (`average_target: true` is Table VII's "Update Both" ablation).

Choices the paper leaves open (measured in docs/findings/fedmcc.md):
- L is CC's official NT-Xent (both sides anchors, the positive in the denominator), not eq. (1) as printed; the
  entropy terms are CC's log K - H(marginal): eq. (3)'s "+H" would reward collapse.
- Targets start as copies of the global online initialisation; they run in training mode without gradients.
- Stage 2 keeps both encoders frozen in eval mode; the target path encodes with the client's own f_k^T, as eq. (7)
  writes it (`cluster_target_encoder: global` uses f*: an ablation, 0.47 either way on the Fashion-MNIST whole
  schedule). g_C^T starts as g_C's global initialisation. Stage 2 communicates g_C only and uses E local epochs.
- Adam 3e-4, no weight decay, both stages (Section IV-A); the configs recreate it every round, as EasyFL
  (`federation.optimizer_state: reset`). Heads are CC's (Linear + ReLU + Linear, no BatchNorm).
- One m (0.99) for every target, as Section II-B; `cluster_ema_decay` gives g_C^T its own (0 lifted the
  Fashion-MNIST whole schedule's stage 2 from NMI 0.454 to 0.539).
- Views as CC's code (crop, flip, jitter with s = `color_strength`, 0.5 for CIFAR and 1.0 for STL-10 and
  ImageNet-10, grayscale; `blur` for ImageNet-10); the paper says only "similar to the CC scheme".
- `memory_efficient_chunk`: Section VI's chunked gradients, exact for per-sample networks; BatchNorm in training
  mode sees chunk statistics (stage 1 with a BN backbone), stage 2 (g_C only) is exact.
"""

from __future__ import annotations

from fedclust.methods.families.momentum import MomentumContrastiveClustering


class FedMCC(MomentumContrastiveClustering):
    """FedMCC (Algorithms 1-2): targets stay on the clients (`average_target: true` averages them, Table VII);
    its arguments are MomentumContrastiveClustering's."""

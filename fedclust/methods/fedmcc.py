"""FedMCC: federated momentum contrastive clustering (Miao & Koyuncu, papers/fedmcc-momentum-contrastive-
clustering.md, Section III, Algorithms 1-2, eqs. 7-9; memory-efficient gradients Section VI).

Each client runs the MCC architecture (Fig. 2): an online network — encoder f^O, instance projector g_I^O,
cluster projector g_C^O — and a target network of the same shape updated by EMA (m = 0.99). Both views
of a sample go through both networks: four representations z^{a,O}, z^{b,O}, z^{a,T}, z^{b,T} (eq. 7).

Stage "representation" (Algorithm 1, 100 rounds x E = 5 epochs): the online f, g_I descend eq. (8),
    L_I = 1/2 (L(z^{a,O}, z^{b,T}) + L(z^{a,T}, z^{b,O})), then f^T, g_I^T follow by EMA; the server
    averages f and g_I (line 7).
Stage "cluster" (Algorithm 2, 10 rounds): f is frozen; the online g_C descends eq. (9),
    L_C = 1/2 (L(c^{a,O}, c^{b,T}) + L(c^{a,T}, c^{b,O})) + H(c^{a,O}) + H(c^{b,O}) + H(c^{a,T}) + H(c^{b,T}),
    then g_C^T follows by EMA; the server averages g_C only (lines 4, 7). A point's cluster is
    argmax g_C*(f*(x)) (line 10).

Target networks are the client's: they are not in `communicated()`, so the engine keeps them as each
client's local weights from round to round, and never averages them. `average_target: true` is Section V's
"Update Both" ablation (Table VII: averaging them costs a lot): the targets are averaged too, each with its
online twin's stage (f^T, g_I^T in stage 1, g_C^T in stage 2).

Views (CC's official code, Contrastive-Clustering train.py / train_STL10.py / modules/transform.py): crop,
flip, ColorJitter(0.8 s, 0.8 s, 0.8 s, 0.2 s) with p 0.8, grayscale p 0.2; s = `color_strength`, 0.5 for
CIFAR (the default), 1.0 for STL-10 and ImageNet-10; `blur: true` adds CC's ImageNet-10 Gaussian blur
(p 0.5, sigma U[0.1, 2] pixels and 23 taps on 224 x 224 views, scaled by H / 224 on views of another size
H). The FedMCC paper says only "similar to the CC scheme".

Choices the paper leaves open, stated:
- L(u, v; tau) is CC's official NT-Xent (fedclust/losses/contrastive.py: both sides are anchors, the
  positive is in the denominator), not eq. (1) as printed (anchors u only, positive left out of the
  denominator); the entropy terms are CC's log K - H(marginal): eq. (3) with "+H" as printed would
  reward collapse, the opposite of what the text says they are for.
- Round 1: every client's target is a copy of the global online initialisation (BYOL's target = online at
  the start); a client seen for the first time later starts from that same copy.
- Target networks run in training mode (BatchNorm batch statistics) without gradients; EMA moves their
  parameters; their BatchNorm running statistics come from their own forward passes.
- Stage 2 keeps both encoders frozen in eval mode: the online encoder is the global f* (line 3 of
  Algorithm 2's input), the target path uses the client's own target encoder f_k^T as eq. (7) writes it
  (Algorithm 2 line 14 moves only g_C^T by EMA, so f_k^T no longer moves). g_C^T starts as the global
  initialisation of g_C (it was never trained in stage 1).
  `cluster_target_encoder: global` runs the target path through f* instead (an ablation: on the
  Fashion-MNIST whole schedule both readings end at NMI 0.45-0.47; benchmarks/results/whole_schedule_findings.md).
- Stage 2 communicates g_C only (weight 0 for f and g_I in `aggregation_weights`); stage 1 leaves g_C
  out. Stage 2 uses E local epochs like stage 1 (the paper gives 10 rounds, not its E).
- Optimiser: Adam 3e-4, no weight decay (Section IV-A), the same for both stages. EasyFL (the FedU code
  the paper builds on) creates the optimiser anew every round: the configs set
  `federation.optimizer_state: reset`.
- Heads: CC's (Linear(rep, h) + ReLU + Linear(h, out), no BatchNorm; h = rep unless `head_hidden`).
- One m (0.99) for every target network, as Section II-B writes it. `cluster_ema_decay` gives stage 2's g_C^T
  its own m (an ablation: g_C^T starts as a random head and at m 0.99 still holds 0.99^160 = 20% of it after
  the 160 steps a client of the Fashion-MNIST whole schedule takes in stage 2; m 0 lifted that run's NMI from
  0.454 to 0.539 in the same 10 rounds; benchmarks/results/whole_schedule_findings.md).

`memory_efficient_chunk`: gradients by `chunked_backward` (Section VI): equal to ordinary back-propagation
for per-sample networks; BatchNorm in training mode sees chunk statistics (stage 1 with a BN backbone).
Stage 2 runs the chunks through g_C only (no BatchNorm), so there it is exact.
"""

from __future__ import annotations

from fedclust.methods.families.momentum import MomentumContrastiveClustering


class FedMCC(MomentumContrastiveClustering):
    """FedMCC (Algorithms 1-2): targets stay on the clients (`average_target: true` averages them, Table VII);
    its arguments are MomentumContrastiveClustering's."""

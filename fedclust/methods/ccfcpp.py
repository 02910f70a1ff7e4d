"""CCFC++: CCFC with a feature-decorrelation regulariser on the local objective (Yan, Liu, Ning & Zhang, "CCFC++:
Enhancing Federated Clustering through Feature Decorrelation", arXiv 2402.12852; papers/README.md).

The paper's abstract: data heterogeneity aggravates dimensional collapse in CCFC (the dimensions of the learned
representation become correlated), and a decorrelation regulariser added to each client's local objective lifts
NMI by up to 0.32. Its full text and code are not public; its wording follows FedDecorr (Shi et al., ICLR 2023),
whose regulariser fedclust/losses/decorrelation.py implements. Everything else is CCFC
(fedclust/methods/ccfc.py, the family fedclust/methods/families/cluster_contrastive.py), with CCFC's settings.

Choices the abstract leaves open, and what is done here:
- Which tensor: z, the projector's output, the representation CCFC clusters and the one whose collapse was
  measured here (90 % of z's variance in 3 of 64 directions on Fashion-MNIST,
  docs/findings/ccfc.md). FedDecorr regularises the penultimate features of a
  classifier; in CCFC the analogue is z.
- Normalisation: FedDecorr's, per batch: each dimension centred and scaled to unit variance, the correlation
  matrix's squared off-diagonal entries summed and divided by d^2.
- Views: in the SimSiam stage the term is the mean over the two views' z (each view's loss gets it, and
  SimSiam's loss is the mean of the two views' terms); in the cluster stage, the one un-augmented view's z.
- Stages: both by default (the abstract speaks of "the local objective"); `decorrelation_stages` restricts it.
- Weight: `decorrelation_weight` (FedDecorr's default 0.1 is on its own N-scaled loss, about 0.1 x batch size in
  these units); the configs' value was chosen on 10,000 images of Fashion-MNIST's training split, never on the
  test split it is reported on (benchmarks/results/heterogeneity_fmnist.md says which runs chose it).
"""

from __future__ import annotations

from typing import Literal

from torch import Tensor

from fedclust.errors import MethodArgError
from fedclust.losses.decorrelation import decorrelation_loss
from fedclust.methods.families.cluster_contrastive import ClusterContrastiveFC


class CCFCPlusPlus(ClusterContrastiveFC):
    """CCFC + FedDecorr's decorrelation term on z. Besides CCFC's arguments:

    Args:
        decorrelation_weight: Weight of the decorrelation term (0 is CCFC).
        decorrelation_stages: Where the term is added: both stages, or only pretrain / only cluster.
    """

    def __init__(self, num_clusters: int | None = None, backbone: str = "convnet28", latent_dim: int = 64,
                 projector_hidden: int = 256, predictor_hidden: int = 16, lam: float = 1.0,
                 pretrain_rounds: int = 100, cluster_rounds: int = 30, local_epochs: int = 1,
                 batch_size: int = 128, lr: float = 1e-3, augment: Literal["simsiam28", "color"] = "simsiam28",
                 crop_scale: tuple[float, float] = (0.5, 1.0), blur_sigma: tuple[float, float] = (0.1, 2.0),
                 jitter: float = 0.0, resize: int | None = None, scfc: bool = False, standalone: bool = False,
                 exclude_self: bool = False, kmeans_niter: int = 100, kmeans_redo: int = 3,
                 sync_init: bool = True, decorrelation_weight: float = 1.0,
                 decorrelation_stages: Literal["both", "pretrain", "cluster"] = "both"):
        super().__init__(num_clusters, backbone, latent_dim, projector_hidden, predictor_hidden, lam,
                         pretrain_rounds, cluster_rounds, local_epochs, batch_size, lr, augment, crop_scale,
                         blur_sigma, jitter, resize, scfc, standalone, exclude_self, kmeans_niter, kmeans_redo,
                         sync_init)
        if not decorrelation_weight >= 0:
            raise MethodArgError("decorrelation_weight", decorrelation_weight, "a non-negative number")

    def regulariser(self, zs: list[Tensor]) -> Tensor | None:
        hp = self.hparams
        stage = self.ctx.stage.name if self.ctx is not None else None
        if not hp.decorrelation_weight or hp.decorrelation_stages not in ("both", stage):
            return None
        return hp.decorrelation_weight * sum(decorrelation_loss(z) for z in zs) / len(zs)

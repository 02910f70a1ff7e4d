"""t-SNE of the learned representations, coloured by cluster and by client, with each client's
Calinski-Harabasz score (CCFC Figs. 4-5: representation learning separates the clusters inside every
client). Saved in the run folder (embedding.png, embedding.json) at the end of the run, and sent to W&B
when W&B logs the run.

t-SNE comes from scikit-learn (already a dependency); it is quadratic-ish in the points, so a seeded
subsample (``points``) is drawn. The CH scores are computed in the representation space itself, on every
sample of each client, not on the 2-D picture.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from fedclust.clustering.metrics import calinski_harabasz

from .base import Callback


class EmbeddingPlot(Callback):
    def __init__(self, folder: Path, points: int = 2000, seed: int = 0):
        self.folder, self.points, self.seed = Path(folder), points, seed

    def on_fit_end(self, orch) -> None:
        data, method = orch.data, orch.method
        clusters = orch.predict()
        client = torch.full((len(data),), -1, dtype=torch.long)
        for cid, part in enumerate(data.parts):
            client[part.cpu()] = cid
        method.eval()
        with torch.no_grad():
            z = torch.cat([method.embed(x).float().cpu() for x in data.iter_all()])
        scores = {str(cid): calinski_harabasz(z[part.cpu()], clusters[part.cpu()])
                  for cid, part in enumerate(data.parts) if len(part) > 1}
        g = torch.Generator().manual_seed(self.seed)
        pick = torch.randperm(len(data), generator=g)[:self.points].sort().values
        xy = tsne(z[pick], self.seed)
        png = self.folder / "embedding.png"
        draw(xy, clusters[pick], client[pick], scores, png)
        (self.folder / "embedding.json").write_text(json.dumps({
            "points": int(len(pick)), "calinski_harabasz_per_client": scores,
            "calinski_harabasz_mean": sum(scores.values()) / max(len(scores), 1)}, indent=2))
        for logger in orch.fabric.loggers:
            if hasattr(logger, "log_image"):  # W&B
                logger.log_image(key="embedding", images=[str(png)])


def tsne(z: torch.Tensor, seed: int):
    from sklearn.manifold import TSNE

    perplexity = float(min(30, max(2, (len(z) - 1) // 3)))
    return TSNE(n_components=2, init="pca", perplexity=perplexity, random_state=seed).fit_transform(z.numpy())


def draw(xy, clusters: torch.Tensor, clients: torch.Tensor, scores: dict[str, float], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 5.5))
    for ax, colour, title in ((axes[0], clusters, "by cluster"), (axes[1], clients, "by client")):
        ax.scatter(xy[:, 0], xy[:, 1], c=colour.numpy(), cmap="tab10" if int(colour.max()) < 10 else "tab20",
                   s=4, linewidths=0)
        ax.set_title(f"t-SNE of the representations, {title}")
        ax.set_xticks([])
        ax.set_yticks([])
    mean = sum(scores.values()) / max(len(scores), 1)
    fig.suptitle(f"Calinski-Harabasz per client: mean {mean:.1f} (" +
                 ", ".join(f"{c}: {s:.0f}" for c, s in list(scores.items())[:10]) + ")", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)

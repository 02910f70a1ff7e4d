"""t-SNE of the learned representations and the per-client Calinski-Harabasz scores of CCFC Figs. 4-5.
Saved in the run folder (embedding.png, embedding.json) at the end of the run, and sent to W&B when W&B
logs the run.

The CH score is CCFC's Fig. 5 measure (papers/ccfc-cluster-contrastive-federated-clustering.md, Sec. 4.4:
"the latent representations learned by the local models ... their CH scores based on the true labels"):
each client's samples embedded by that client's LOCAL model as it stood after its last local training, scored
against the TRUE labels. It is computed per client ("calinski_harabasz_per_client", with their mean) and over
all clients' samples together ("calinski_harabasz_pooled", the figure's one score per panel). A client that
holds a single class has no CH score (null). The measure fedclust reported before — the GLOBAL model's
representations scored against the PREDICTED clusters — stays as "calinski_harabasz_predicted_global_*".

How the local models are seen, through the callback hooks only: the engine calls `on_client_end` right after
a client's local training, while the working model still holds that client's weights; the clients' sampling
is a function of (seed, stage, round) (fedclust.federation.sampling), so the callback knows in advance each
client's last round and embeds its data then, once (one extra forward pass over the data per run). Clients
trained before a resume, or by another DDP process (callbacks run on rank 0 only), are not seen: null.

t-SNE comes from scikit-learn (already a dependency); it is quadratic-ish in the points, so a seeded
subsample (``points``) is drawn. The CH scores are computed in the representation space itself, on every
sample, not on the 2-D picture.
"""

from __future__ import annotations

from pathlib import Path

import torch

from fedclust.clustering.metrics import calinski_harabasz
from fedclust.federation.sampling import participants
from fedclust.run_folder import write_json

from .base import Callback


class EmbeddingPlot(Callback):
    def __init__(self, folder: Path, points: int = 2000, seed: int = 0):
        self.folder, self.points, self.seed = Path(folder), points, seed
        self._last: dict[int, tuple[int, int]] = {}  # client -> (stage index, round) of its last training
        self._now: tuple[int, int] | None = None
        self._local: dict[int, torch.Tensor] = {}  # client -> its samples embedded by its local model (CPU)

    def on_fit_start(self, orch) -> None:
        fed = orch.federation
        for stage_index, stage in enumerate(orch.stages):
            for rnd in range(stage.rounds):
                alive, _ = participants(orch.data.num_clients, fraction=fed.fraction,
                                        disconnect_rate=fed.disconnect_rate, disconnect_mode=fed.disconnect_mode,
                                        seed=orch.seed, stage_index=stage_index, round=rnd)
                self._last.update(dict.fromkeys(alive, (stage_index, rnd)))

    def on_round_start(self, orch, ctx, clients: list[int]) -> None:
        self._now = (ctx.stage_index, ctx.round)

    def on_client_end(self, orch, client_id: int) -> None:
        if self._last.get(client_id) != self._now:
            return
        method, data = orch.method, orch.data
        method.eval()
        with torch.no_grad():
            self._local[client_id] = torch.cat([method.embed(x).float().cpu()
                                                for x in data.iter_indices(data.parts[client_id].cpu())])

    def on_fit_end(self, orch) -> None:
        data, method = orch.data, orch.method
        labels = data.labels.cpu()
        parts = [p.cpu() for p in data.parts]
        clusters = orch.predict()
        client = torch.full((len(data),), -1, dtype=torch.long)
        for cid, part in enumerate(parts):
            client[part] = cid
        method.eval()
        with torch.no_grad():
            z = torch.cat([method.embed(x).float().cpu() for x in data.iter_all()])
        predicted_global = {str(cid): calinski_harabasz(z[part], clusters[part])
                            for cid, part in enumerate(parts) if len(part) > 1}
        local, unscored = self._local_scores(parts, labels)
        pooled, z_local = self._pooled(parts, labels, z.shape[1])

        g = torch.Generator().manual_seed(self.seed)
        pick = torch.randperm(len(data), generator=g)[:self.points].sort().values
        xy = tsne(z[pick], self.seed)
        seen = pick[torch.isfinite(z_local[pick, 0])]  # samples whose client's local model was seen
        xy_local = tsne(z_local[seen], self.seed) if len(seen) > 3 else None
        png = self.folder / "embedding.png"
        draw(xy, clusters[pick], client[pick], xy_local, labels[seen], local, pooled, png)
        scored = [v for v in local.values() if v is not None]
        write_json(self.folder / "embedding.json", {  # strict JSON: a score that could not be computed is null
            "points": int(len(pick)),
            "measure": "Calinski-Harabasz of the true labels, each client's samples embedded by its own local "
                       "model after its last local training (CCFC Fig. 5)",
            "calinski_harabasz_per_client": local,
            "calinski_harabasz_mean": sum(scored) / len(scored) if scored else None,
            "calinski_harabasz_pooled": pooled,
            "calinski_harabasz_unscored_clients": unscored,
            "calinski_harabasz_predicted_global_per_client": predicted_global,
            "calinski_harabasz_predicted_global_mean": sum(predicted_global.values()) / max(len(predicted_global), 1),
        })
        for logger in orch.fabric.loggers:
            if hasattr(logger, "log_image"):  # W&B
                logger.log_image(key="embedding", images=[str(png)])

    def _local_scores(self, parts, labels) -> tuple[dict[str, float | None], dict[str, str]]:
        scores, unscored = {}, {}
        for cid, part in enumerate(parts):
            reason = None
            if cid not in self._local:
                reason = ("never trained" if cid not in self._last
                          else "local model not seen (trained before a resume, or by another DDP process)")
            elif len(torch.unique(labels[part])) < 2:
                reason = "holds a single class"
            scores[str(cid)] = None if reason else calinski_harabasz(self._local[cid], labels[part])
            if reason:
                unscored[str(cid)] = reason
        return scores, unscored

    def _pooled(self, parts, labels, dim: int) -> tuple[float | None, torch.Tensor]:
        """CH of the true labels over every sample a local model embedded; the local embedding of every
        sample (nan rows where none)."""
        n = len(labels)
        dim = next(iter(self._local.values())).shape[1] if self._local else dim
        z_local = torch.full((n, dim), float("nan"))
        for cid, zc in self._local.items():
            z_local[parts[cid]] = zc
        seen = torch.isfinite(z_local[:, 0])
        if len(torch.unique(labels[seen])) < 2:
            return None, z_local
        return calinski_harabasz(z_local[seen], labels[seen]), z_local


def tsne(z: torch.Tensor, seed: int):
    from sklearn.manifold import TSNE

    perplexity = float(min(30, max(2, (len(z) - 1) // 3)))
    return TSNE(n_components=2, init="pca", perplexity=perplexity, random_state=seed).fit_transform(z.numpy())


def draw(xy, clusters: torch.Tensor, clients: torch.Tensor, xy_local, classes: torch.Tensor,
         scores: dict[str, float | None], pooled: float | None, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    panels = [(xy, clusters, "global model, by cluster"), (xy, clients, "global model, by client")]
    if xy_local is not None:
        panels.append((xy_local, classes, "local models, by true class (CCFC Fig. 5)"))
    fig, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 5.5))
    for ax, (points, colour, title) in zip(axes, panels):
        ax.scatter(points[:, 0], points[:, 1], c=colour.numpy(),
                   cmap="tab10" if int(colour.max()) < 10 else "tab20", s=4, linewidths=0)
        ax.set_title(f"t-SNE, {title}", fontsize=10)
        ax.set_xticks([])
        ax.set_yticks([])
    shown = [f"{c}: {s:.0f}" for c, s in scores.items() if s is not None][:10]
    title = (f"Calinski-Harabasz of the true labels on the local models: pooled {pooled:.1f}"
             if pooled is not None else "Calinski-Harabasz: no local model seen")
    fig.suptitle(title + ("\nper client " + ", ".join(shown) if shown else ""), fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)

"""Re-cluster a trained FedSpectral run's data offline under other server and client settings (issue 22).

FedSpectral's last steps -- each client's summaries, the server's spectral clustering of them, the clients' labels
-- depend on three settings (summary_size, neighbors, vote_neighbors) but not on training, so they can be chosen on
one trained model without retraining. This script loads a run folder's last checkpoint, embeds the run's own data
with the model, and for every setting and seed redoes those steps with the method's own functions, printing NMI.
It also prints, as a ceiling, spectral clustering of every sample (sklearn, a symmetric kNN graph), which no
federated method can do. Labels are read only to score: run it on a TRAINING-split run (`data.split: train`),
never on the split you report; it refuses a test-split run.

Usage: python -m benchmarks.fedspectral_recluster RUN_FOLDER... [--sizes 10 20] [--neighbors 5] [--votes 0 5 10 20]
           [--seeds 3] [--backbone-weights 1 1.4 2] [--label-by summary own-nearest all-nearest]
           [--ceiling [5 20]] [--purity] [--spread 0.9 0.99] [--draws 1 3 5] [--anchored 0.99 [--own-shares 0.05]]
           [--cluster-space input+mid+backbone]
The figures behind configs/fedspectral_fmnist.yaml's settings (vm, 2 cores; models of the training split's 10,000
images, p = 0 after 50 rounds and p = 1 after 30) are in benchmarks/results/fedspectral_recluster.md.
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
import yaml
from sklearn.cluster import SpectralClustering
from sklearn.metrics import normalized_mutual_info_score
from sklearn.neighbors import kneighbors_graph

from fedclust.clustering.knn_vote import nearest_neighbors, vote
from fedclust.clustering.label_spreading import label_spreading
from fedclust.clustering.metrics import purity
from fedclust.clustering.spectral import spectral_clustering
from fedclust.clustering.summaries import local_summaries
from fedclust.methods.fedspectral import CLUSTER_SPACES, FedSpectral
from fedclust.run import load_run


def load(run: Path):
    """The run's data and partition and its trained method (fedclust.run.load_run: the checkpoint read with the safe
    loader); refuses a test-split run and any other method's."""
    saved = load_run(run, torch.device("cpu"))
    if saved.data_cfg.split == "test":
        raise SystemExit(f"{run}: data.split is test; choose settings on another split (e.g. data.split: train).")
    if not isinstance(saved.method, FedSpectral):
        raise SystemExit(f"{run}: a {type(saved.method).__name__} run; this re-clusters FedSpectral runs.")
    saved.method.eval()
    return saved.data, saved.method


def embed(data, method: FedSpectral, backbone_weight: float | None = None) -> torch.Tensor:
    """The model's embedding of every sample, with the run's own backbone_weight or ``backbone_weight``."""
    if backbone_weight is not None:
        method.hparams.backbone_weight = backbone_weight
    with torch.no_grad():
        return torch.cat([method.embed(x) for x in data.iter_all()])


def central_spectral_nmi(z: torch.Tensor, labels, k: int, neighbors: int) -> float:
    """NMI of sklearn's spectral clustering of every sample of ``z`` on its symmetric ``neighbors``-NN graph: the
    ceiling of a space, which no federated method reaches (labels only score)."""
    graph = kneighbors_graph(z.numpy(), neighbors, include_self=False)
    found = SpectralClustering(k, affinity="precomputed", random_state=0).fit_predict(0.5 * (graph + graph.T))
    return normalized_mutual_info_score(labels, found)


def client_summaries(data, h: torch.Tensor, size: int, seed: int, min_size: int = 5) -> list:
    """Every client's (summaries, member, sizes) as FedSpectral's clients make them (k-means groups of ``size``)."""
    return [local_summaries(h[idx], size, min(min_size, size), seed * 100 + cid, "kmeans")
            for cid, idx in enumerate(data.parts)]


def summary_purity(data, made: list) -> float:
    """The share of samples whose summary's majority class is their own (labels read only to score): each client's
    summaries scored as clusters of its samples, weighted by its size."""
    agree = sum(purity(member, data.labels[idx]) * len(idx) for (_, member, _), idx in zip(made, data.parts))
    return agree / sum(len(idx) for idx in data.parts)


LABEL_BY = ("summary", "own-nearest", "all-nearest")


def recluster(data, h: torch.Tensor, k: int, made: list, neighbors: int, seed: int, kernel: str = "self_tuning",
              label_by: str = "summary") -> torch.Tensor:
    """The clients' summaries (``made``, client_summaries) -> the server's spectral clustering -> each sample's label:
    its summary's (``summary``, what FedSpectral does), the majority of its 3 nearest summaries of its own client
    (``own-nearest``), or of its 3 nearest summaries of every client (``all-nearest``: the server would have to
    send every client's summaries to every client -- an alternative measured, not a FedSpectral option)."""
    points, sizes = torch.cat([m[0] for m in made]), torch.cat([m[2] for m in made])
    server = spectral_clustering(points, k, neighbors=neighbors, weights=sizes, seed=seed, kernel=kernel)
    out, offset = torch.empty(len(h), dtype=torch.long), 0
    for (summaries, member, _), idx in zip(made, data.parts):
        mine = server[offset:offset + len(summaries)]
        if label_by == "summary":
            out[idx] = mine[member]
        else:
            pool, labels = (summaries, mine) if label_by == "own-nearest" else (points, server)
            nearest = (h[idx] @ F.normalize(pool, dim=1).T).topk(min(3, len(pool)), dim=1).indices
            out[idx] = F.one_hot(labels[nearest], k).sum(1).argmax(1)
        offset += len(summaries)
    return out


def recluster_draws(data, h: torch.Tensor, k: int, size: int, draws: int, seed: int, graphs: list[torch.Tensor],
                    alpha: float) -> np.ndarray:
    """Each client sends ``draws`` independent groupings of its samples into summaries (seeds apart), the server
    clusters all of them in one spectral clustering (so their labels agree), each sample starts from the share of
    its ``draws`` summaries in each cluster and the client spreads that over its own graph (``graphs``, alpha):
    whether averaging out the summaries' own randomness helps (``draws`` 1 is FedSpectral)."""
    made = [client_summaries(data, h, size, seed * 100 + r) for r in range(draws)]
    points = torch.cat([m[0] for each in made for m in each])
    sizes = torch.cat([m[2] for each in made for m in each])
    server = spectral_clustering(points, k, neighbors=5, weights=sizes, seed=seed, kernel="self_tuning")
    start, offset = torch.zeros(len(h), k), 0
    for each in made:
        for (summaries, member, _), idx in zip(each, data.parts):
            start[idx] += F.one_hot(server[offset:offset + len(summaries)][member], k).float() / draws
            offset += len(summaries)
    out = torch.empty(len(h), dtype=torch.long)
    for idx, graph in zip(data.parts, graphs):
        out[idx] = label_spreading(graph, start[idx], k, alpha)
    return out.numpy()


def anchored_spread(data, h: torch.Tensor, k: int, made: list, seed: int, alpha: float,
                    neighbors: int = 5, own_share: float | None = None) -> np.ndarray:
    """Label spreading over each client's graph of its own samples AND every client's summaries (the server would
    send all labelled summaries back to every client: an alternative measured, not a FedSpectral option): the
    summaries of other clients stand in the client's graph as labelled landmarks of the whole federation's data."""
    points, sizes = torch.cat([m[0] for m in made]), torch.cat([m[2] for m in made])
    server = spectral_clustering(points, k, neighbors=5, weights=sizes, seed=seed, kernel="self_tuning")
    anchors = F.normalize(points, dim=1)
    out, offset = torch.empty(len(h), dtype=torch.long), 0
    for (summaries, member, _), idx in zip(made, data.parts):
        mine = server[offset:offset + len(summaries)][member]
        offset += len(summaries)
        keep = torch.ones(len(server), dtype=torch.bool)
        if own_share is not None:  # only the summaries of clusters the client's own labels hold (> own_share)
            share = torch.bincount(mine, minlength=k).float() / len(mine)
            keep = (share > own_share)[server]
        nodes = torch.cat([h[idx], anchors[keep]])
        graph = nearest_neighbors(nodes, neighbors)
        found = label_spreading(graph, torch.cat([mine, server[keep]]), k, alpha)
        out[idx] = found[:len(idx)]
    return out.numpy()


def client_vote(data, graphs: list[torch.Tensor] | None, labels: torch.Tensor, k: int) -> np.ndarray:
    """Each client's local kNN vote over its own neighbour graph (FedSpectral's vote_neighbors; None: no vote)."""
    out = labels.clone()
    for idx, graph in zip(data.parts, graphs or []):
        out[idx] = vote(labels[idx], graph, k)
    return out.numpy()


def client_spread(data, graphs: list[torch.Tensor], labels: torch.Tensor, alpha: float, k: int) -> np.ndarray:
    """Label spreading (fedclust.clustering.label_spreading) over each client's own neighbour graph (``graphs``, one
    per client, as FedSpectral saves it): local, as the vote, no extra communication."""
    out = labels.clone()
    for idx, graph in zip(data.parts, graphs):
        out[idx] = label_spreading(graph, labels[idx], k, alpha)
    return out.numpy()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path, nargs="+",
                    help="training-split FedSpectral run folders (several: also their aggregate per p)")
    ap.add_argument("--sizes", type=int, nargs="+", default=[10, 20])
    ap.add_argument("--neighbors", type=int, nargs="+", default=[5])
    ap.add_argument("--votes", type=int, nargs="+", default=[0, 5, 10, 20])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--backbone-weights", type=float, nargs="+", default=[None],
                    help="input+backbone runs: the trunk block's weights to try (default: the run's own)")
    ap.add_argument("--label-by", nargs="+", default=["summary"], choices=LABEL_BY,
                    help="how a sample takes the server's labels (summary: FedSpectral's own)")
    ap.add_argument("--ceiling", type=int, nargs="*", metavar="NEIGHBORS",
                    help="also spectral clustering of every sample (slow), with these graph neighbours (bare: 5)")
    ap.add_argument("--purity", action="store_true",
                    help="also the share of samples in a summary of their own majority class")
    ap.add_argument("--spread", type=float, nargs="+", default=[], metavar="ALPHA",
                    help="also label spreading over each client's 5-NN graph instead of the vote, with these alphas")
    ap.add_argument("--draws", type=int, nargs="+", default=[], metavar="R",
                    help="also R draws of every client's summaries clustered together, then spreading with the "
                         "first --spread alpha (5 server neighbours, self-tuning graph)")
    ap.add_argument("--anchored", type=float, nargs="+", default=[], metavar="ALPHA",
                    help="also label spreading over each client's samples and every client's summaries, with these "
                         "alphas (5 neighbours)")
    ap.add_argument("--own-shares", type=float, nargs="+", default=[], metavar="SHARE",
                    help="with --anchored: also with only the anchors of clusters holding over SHARE of the client's "
                         "own labels")
    ap.add_argument("--cluster-space", choices=CLUSTER_SPACES,
                    help="re-cluster in this space instead of the run's own (training does not depend on it)")
    args = ap.parse_args(argv)
    if args.draws and not args.spread:
        raise SystemExit("--draws spreads its labels: give --spread ALPHA too.")
    torch.set_num_threads(1)
    collected: dict[str, list[tuple[float, float]]] = defaultdict(list)  # setting -> (p, mean over seeds) a model
    for run in args.run:
        recluster_run(run, args, collected)
    if len(args.run) > 1:
        print(f"over the {len(args.run)} models (each setting's seed means; per p the mean over its models):")
        for setting, found in collected.items():
            by_p: dict[float, list[float]] = defaultdict(list)
            for p, mean in found:
                by_p[p].append(mean)
            means = {p: float(np.mean(v)) for p, v in sorted(by_p.items())}
            print(f"  {setting}: per p " + " / ".join(f"{p:g} {m:.3f}" for p, m in means.items())
                  + f"; worse p {min(means.values()):.3f}; mean of the {len(found)} models "
                  f"{np.mean([m for _, m in found]):.4f}", flush=True)


def recluster_run(run: Path, args: argparse.Namespace, collected: dict) -> None:
    """Every setting of ``args`` on one run; each setting's seed mean goes into ``collected`` with the run's p."""
    data, method = load(run)
    p = float(load_run_p(run))
    if args.cluster_space:
        method.hparams.cluster_space = args.cluster_space
    y, k = data.labels.numpy(), method.num_clusters

    def line(setting: str, scores: list[float]) -> None:
        collected[setting].append((p, float(np.mean(scores))))
        print(f"{setting}  NMI " + " / ".join(f"{s:.4f}" for s in scores) + f"  (mean {np.mean(scores):.4f})",
              flush=True)

    for weight in args.backbone_weights:
        h = embed(data, method, weight)
        print(f"{run}: {len(y)} samples, {data.num_clients} clients, cluster space "
              f"{method.hparams.cluster_space}, backbone_weight {method.hparams.get('backbone_weight', 1.0)}")
        # each client's graph, once per embedding and neighbour count (the vote's, and spreading's 5)
        counts = {v for v in args.votes if v > 0} | ({5} if args.spread else set())
        graphs = {v: [nearest_neighbors(h[idx], v) for idx in data.parts] for v in counts}
        for size in args.sizes:
            made = [client_summaries(data, h, size, seed) for seed in range(args.seeds)]  # once for every setting
            if args.purity:
                scores = [summary_purity(data, m) for m in made]
                print(f"summary_size {size:3d}  summary purity " + " / ".join(f"{s:.3f}" for s in scores), flush=True)
            for nb in args.neighbors:
                rows = {(by, f"vote_neighbors {v:2d}"): [] for by in args.label_by for v in args.votes}
                rows |= {(by, f"spread alpha {a:g}"): [] for by in args.label_by for a in args.spread}
                for seed in range(args.seeds):
                    for by in args.label_by:
                        labels = recluster(data, h, k, made[seed], nb, seed, label_by=by)
                        for v in args.votes:
                            found = client_vote(data, graphs.get(v), labels, k)
                            rows[by, f"vote_neighbors {v:2d}"].append(normalized_mutual_info_score(y, found))
                        for a in args.spread:
                            found = client_spread(data, graphs[5], labels, a, k)
                            rows[by, f"spread alpha {a:g}"].append(normalized_mutual_info_score(y, found))
                for (by, step), scores in rows.items():
                    line(f"summary_size {size:3d}  neighbors {nb:2d}  label_by {by:11s}  {step}", scores)
            for a, share in [(a, s) for a in args.anchored for s in [None, *args.own_shares]]:
                line(f"summary_size {size:3d}  anchored spread alpha {a:g} own share {share}",
                     [normalized_mutual_info_score(y, anchored_spread(data, h, k, made[seed], seed, a,
                                                                      own_share=share))
                      for seed in range(args.seeds)])
            for draws in args.draws:
                line(f"summary_size {size:3d}  draws {draws}  spread alpha {args.spread[0]:g}",
                     [normalized_mutual_info_score(y, recluster_draws(data, h, k, size, draws, seed, graphs[5],
                                                                      args.spread[0]))
                      for seed in range(args.seeds)])
        for nb in [5] if args.ceiling == [] else args.ceiling or []:  # bare --ceiling: 5 neighbours
            print(f"ceiling: spectral clustering of every sample, {nb} neighbours: NMI "
                  f"{central_spectral_nmi(h, y, k, nb):.4f}", flush=True)


def load_run_p(run: Path) -> float:
    """The heterogeneity p of a run folder's data (its config.yaml)."""
    with open(run / "config.yaml") as f:
        return float(yaml.safe_load(f)["data"]["p"])


if __name__ == "__main__":
    main()

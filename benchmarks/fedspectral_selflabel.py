"""Would a self-labelling stage lift FedSpectral? A FedAvg prototype on a trained run (issue 22, exploratory).

SCAN (Van Gansbeke et al., ECCV 2020) follows its clustering with self-labelling: the network learns to predict the
clusters it found. This script tries the federated form on a trained FedSpectral run of the TRAINING split (the
recluster script's loader refuses a test-split run): the pipeline's labels (summaries of 10, spectral clustering,
the clients' vote of 5) become fixed targets; every round each client trains the trunk and a new linear head for
one epoch on two augmented views of its own samples (cross-entropy to its samples' targets, plus FedSpectral's
NT-Xent and decorrelation terms so the representation keeps its spread), and the server averages the weights by
sample count (the engine's FedAvg sum, fedclust.federation.aggregate.WeightedSum). Each round prints the NMI of
the head's argmax and of the pipeline re-run on the new trunk.

Usage: python -m benchmarks.fedspectral_selflabel RUN_FOLDER [--rounds 15] [--lr 0.001]
Result (2026-11-26, benchmarks/results/fedspectral_recluster.md): the head converges to its targets' NMI and no
higher.
"""

from __future__ import annotations

import argparse
import copy
from pathlib import Path

import torch
import torch.nn.functional as F
from sklearn.metrics import normalized_mutual_info_score
from torch import nn

from benchmarks.fedspectral_recluster import client_summaries, client_vote, embed, load, recluster
from fedclust.federation.aggregate import WeightedSum


def pipeline_labels(data, h: torch.Tensor, k: int):
    """FedSpectral's labels at the shipped settings (summaries of 10, 5 graph neighbours, a vote of 5), seed 0."""
    return client_vote(data, h, recluster(data, h, k, client_summaries(data, h, 10, 0), 5, 0), 5, k)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--lr", type=float, default=1e-3)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    torch.manual_seed(0)
    data, method = load(args.run)
    h = embed(data, method)
    y, k = data.labels.numpy(), method.num_clusters
    x_all = torch.cat(list(data.iter_all()))
    targets = torch.as_tensor(pipeline_labels(data, h, k))
    print(f"{args.run}: targets (the pipeline's labels) NMI {normalized_mutual_info_score(y, targets.numpy()):.4f}")
    model = nn.ModuleDict({"trunk": method.trunk, "head": nn.Linear(method.trunk.out_dim, k),
                           "projector": method.projector})
    views = torch.Generator().manual_seed(1)

    def report(tag: str) -> None:
        model.eval()
        with torch.no_grad():
            logits = torch.cat([model["head"](model["trunk"](x)) for x in x_all.split(1000)])
            emb = torch.cat([method.embed(x) for x in x_all.split(1000)])
        pipeline = pipeline_labels(data, emb, k)
        print(f"{tag}: head NMI {normalized_mutual_info_score(y, logits.argmax(1).numpy()):.4f}  pipeline NMI "
              f"{normalized_mutual_info_score(y, pipeline):.4f}", flush=True)
        model.train()

    report("start")
    for r in range(args.rounds):
        start, fedavg = copy.deepcopy(model.state_dict()), WeightedSum()
        for idx in data.parts:
            model.load_state_dict(start)
            opt = torch.optim.Adam(model.parameters(), lr=args.lr)
            order = idx[torch.randperm(len(idx), generator=views)]
            for batch in order.split(128):
                x = x_all[batch]
                t1, t2 = model["trunk"](method.views(x, views)), model["trunk"](method.views(x, views))
                loss = (0.5 * (F.cross_entropy(model["head"](t1), targets[batch])
                               + F.cross_entropy(model["head"](t2), targets[batch]))
                        + method.representation_loss(model["projector"](t1), model["projector"](t2)))
                opt.zero_grad()
                loss.backward()
                opt.step()
            fedavg.add(model.state_dict(), float(len(idx)))
        model.load_state_dict(fedavg.average())
        report(f"round {r + 1}")


if __name__ == "__main__":
    main()

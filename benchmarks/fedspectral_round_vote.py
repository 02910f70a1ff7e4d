"""Would each client's vote over its last rounds' labels lift FedSpectral? (issue 22, exploratory probe)

FedSpectral's NMI scatters from round to round (std 0.005-0.015 over rounds 11-30: every round draws new
summaries and clusters them anew), and the reported figure is the final round, one draw. A client could keep its
samples' labels of the last R rounds (its own, nothing crosses the boundary) and give each sample the label most
of those rounds gave it. Cluster ids are the server's and change from round to round, so each earlier round's
ids are first mapped to the final round's by the client's own samples (an id goes to the final id most of its
samples carry: no labels of the data, only the two labelings; fedclust/clustering/label_history.py). What this
probe measured is now FedSpectral's ``round_vote`` (fedspectral_recluster.md, eighth pass).

    python -m benchmarks.fedspectral_round_vote record RUN_DIR -- FIT_ARGS...
        runs `fedclust fit FIT_ARGS... --run_dir RUN_DIR` with every scoring's labels kept in RUN_DIR/round_labels.pt
    python -m benchmarks.fedspectral_round_vote score RUN_DIR [--last 1 3 5 10]
        each round's NMI, then the final round's with the vote over its last R rounds (training split only)

The labels of the scored data are used only to print NMI on a training-split run (the score step refuses a run
of the test split), as every probe of fedspectral_recluster.md.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
from sklearn.metrics import normalized_mutual_info_score

from fedclust.clustering.label_history import vote_over_labellings


def record(run_dir: Path, fit_args: list[str]) -> int:
    from fedclust.__main__ import main as fedclust_main
    from fedclust.methods.fedspectral import FedSpectral

    kept: dict = {"labels": [], "parts": None}
    predict = FedSpectral.predict

    def predict_and_keep(self, data, client_states):
        labels = predict(self, data, client_states)
        kept["labels"].append(labels.clone())
        if kept["parts"] is None:
            kept["parts"] = [part.cpu().clone() for part in data.parts]
        torch.save(kept, run_dir / "round_labels.pt")
        return labels

    FedSpectral.predict = predict_and_keep
    run_dir.mkdir(parents=True, exist_ok=True)
    return fedclust_main(["fit", *fit_args, "--run_dir", str(run_dir)])


def round_vote(rounds: list[torch.Tensor], parts: list, k: int) -> torch.Tensor:
    """Each client's samples voted over the given rounds, as FedSpectral's round_vote does."""
    voted = rounds[-1].clone()
    for part in parts:
        voted[part] = vote_over_labellings([labels[part] for labels in rounds], k)
    return voted


def kept_rounds(run_dir: Path) -> tuple[list[torch.Tensor], list]:
    """Every round's labels a recorded run kept (round_labels.pt) and its client parts; the run's last scoring and
    its assignments.csv label the same model alike, so a label vector repeated at once is kept once."""
    kept = torch.load(run_dir / "round_labels.pt", weights_only=True)
    rounds: list[torch.Tensor] = []
    for labels in kept["labels"]:
        if not rounds or not torch.equal(labels, rounds[-1]):
            rounds.append(labels)
    return rounds, kept["parts"]


def score(run_dir: Path, last: list[int]) -> None:
    from benchmarks.fedspectral_recluster import load  # refuses a test-split run

    data, _ = load(run_dir)
    y = data.labels.numpy()
    rounds, parts = kept_rounds(run_dir)
    k = int(max(int(r.max()) for r in rounds)) + 1
    nmi = [normalized_mutual_info_score(y, r.numpy()) for r in rounds]
    late = nmi[len(nmi) // 3:]
    print(f"{run_dir}: {len(rounds)} rounds; NMI of the last {len(late)}: mean {sum(late) / len(late):.4f}; "
          f"last five {' '.join(f'{v:.4f}' for v in nmi[-5:])}")
    for r in last:
        voted = round_vote(rounds[-r:], parts, k)
        print(f"  vote over the last {r:2d} rounds: NMI {normalized_mutual_info_score(y, voted.numpy()):.4f}")


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["record"]:
        split = argv.index("--")
        return record(Path(argv[1]), argv[split + 1:])
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("command", choices=["score"])
    ap.add_argument("run", type=Path, nargs="+")
    ap.add_argument("--last", type=int, nargs="+", default=[1, 3, 5, 10])
    args = ap.parse_args(argv)
    for run in args.run:
        score(run, args.last)
    return 0


if __name__ == "__main__":
    sys.exit(main())

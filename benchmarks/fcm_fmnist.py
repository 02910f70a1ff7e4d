"""Fuzzy c-means (FCM) and federated fuzzy c-means (FFCM) on Fashion-MNIST next to CCFC's Tables 1-2.

    nice -n 10 python benchmarks/fcm_fmnist.py [run conditions]    # about an hour on 2 shared CPU cores

Cosine geometry throughout (pixels in [0, 1], L2-normalised per image; REFERENCE.md). Centralized FCM at
m = 1.1 (three seeds with one start each, and the config's 5 starts) and m = 2. FFCM with both servers
(avg, kmeans) at p = 0, .25, .5, .75, 1, with m = 2 (the official FFCM code's default) and m = 1.1
(SDA-FC's FCM setting); at most 100 rounds (10 at m = 1.1), stopping once the global centres move less
than 1e-4. Scores are taken once, after the last round (federation.eval_every 1000), because rounds
after convergence are no-ops. Writes benchmarks/results/fcm_fmnist.md.
"""

from __future__ import annotations

import sys

import numpy as np
import torch
from common import RESULTS, RUNS, machine, run_config
from sklearn.metrics import adjusted_rand_score

PS = [0.0, 0.25, 0.5, 0.75, 1.0]
PAPER = {  # CCFC Table 1 (NMI) and Table 2 (Kappa), Fashion-MNIST
    "ffcm_nmi": [0.5786, 0.5995, 0.6173, 0.6139, 0.5855], "ffcm_kappa": [0.4974, 0.5180, 0.4974, 0.4995, 0.4672],
    "fcm_nmi": 0.6026, "fcm_kappa": 0.5212,
}
FCM_RUNS = [(1.1, 66, 1), (1.1, 1, 1), (1.1, 2, 1), (1.1, 66, 5), (2.0, 66, 1)]  # (m, seed, starts)
FFCM_MS = [2.0, 1.1]
MAX_ROUNDS = {2.0: 100, 1.1: 10}  # m = 1.1 local runs take up to 10x the iterations (70-85 s a round at p = 1)
COMMAND = "nice -n 10 python benchmarks/fcm_fmnist.py"


def run_facts(name: str) -> tuple[str, int]:
    """(round the global centres converged at, or '-'; local FCM iterations summed over clients and rounds)."""
    state = torch.load(RUNS / name / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    done = state["server"].get("converged_round")
    iterations = sum(int(s.get("fcm_iterations", s.get("n_iter", 0))) for s in state["clients"].values())
    rounds = len(state["history"])
    return (str(done) if done else f"not by {rounds}"), iterations


def cells(name: str, m: dict) -> str:
    """NMI, Kappa, ACC from the run; ARI recomputed by scikit-learn from assignments.csv, because
    torchmetrics' adjusted_rand_score overflows on very unbalanced clusterings of 70,000 points (measured:
    -0.318 where scikit-learn gives 0.158)."""
    a = np.loadtxt(RUNS / name / "assignments.csv", delimiter=",", skiprows=1, dtype=np.int64)
    return f"{m['nmi']:.4f} | {m['kappa']:.4f} | {m['acc']:.4f} | {adjusted_rand_score(a[:, 2], a[:, 3]):.4f}"


def main() -> None:
    note = " ".join(sys.argv[1:])
    lines = ["# FCM and FFCM on Fashion-MNIST (70,000 images, train + test, cosine geometry)", "",
             f"Machine: {machine()}", "", f"Command: `{COMMAND}` (configs fcm_fmnist.yaml and ffcm_fmnist.yaml "
             "with the overrides named in each table; 10 clients, c = 10, data.normalize l2).", "",
             "ARI is recomputed with scikit-learn from each run's assignments.csv: the ARI fedclust logs "
             "(torchmetrics) reads -0.318 where scikit-learn gives 0.158 on the collapsed m = 2 runs, whose "
             "clusters are very unbalanced; NMI, Kappa and ACC are the logged values.", ""]
    if note:
        lines += [f"Run conditions: {note}", ""]
    lines += ["## Centralized FCM (FCM column, p has no effect)", "",
              "Random initial memberships (the fuzzy-c-means package's start), at most 150 iterations, "
              "tol 1e-4 on the Frobenius norm of the membership change; with several starts the lowest "
              "objective wins (the config's setting: 5 starts).", "",
              "| m | seed | starts | NMI | Kappa | ACC | ARI | paper NMI | paper Kappa | iterations | wall s |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
    for m, seed, starts in FCM_RUNS:
        name = f"fcm_l2_m{m}_seed{seed}" + (f"_n{starts}" if starts > 1 else "")
        r = run_config("configs/fcm_fmnist.yaml", name, ["--method.init_args.m", str(m), "--method.init_args.init",
                                                           "random", "--method.init_args.n_init", str(starts),
                                                           "--seed", str(seed)])
        _, iterations = run_facts(name)
        lines.append(f"| {m} | {seed} | {starts} | {cells(name, r['metrics'])} | {PAPER['fcm_nmi']} | "
                     f"{PAPER['fcm_kappa']} | {iterations} | {r.get('wall_seconds', float('nan')):.0f} |")
    lines += ["", "## FFCM", "",
              "Global centres start uniform in [0, 1)^784; local FCM m as given, at most 1000 iterations, tol "
              "1e-4; global tol 1e-4; seed 66. Round budget: 100 for m = 2; 10 for m = 1.1, because its local "
              "runs take up to 10x the iterations (70-85 s a round at p = 1 here). The m = 1.1 avg runs at "
              "p <= .75 were made with a budget of 100 and converged by round 7, so the budget of 10 gives the "
              "same result (deterministic; rounds after convergence are no-ops). 'converged' is the round after "
              "which the global centres moved less than 1e-4; 'local it.' sums the local FCM iterations of all "
              "clients over all rounds.", "",
              "| m | server | p | NMI | Kappa | ACC | ARI | paper NMI | paper Kappa | converged | local it. | wall s |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    summary = []
    for m in FFCM_MS:
        for server in ("avg", "kmeans"):
            nmis = []
            for i, p in enumerate(PS):
                name = f"ffcm_l2_m{m}_{server}_p{p}"
                r = run_config("configs/ffcm_fmnist.yaml", name,
                               ["--method.init_args.m", str(m), "--method.init_args.server", server,
                                "--method.init_args.max_rounds", str(MAX_ROUNDS[m]), "--data.p", str(p),
                                "--federation.eval_every", "1000"])
                done, iterations = run_facts(name)
                nmis.append(r["metrics"]["nmi"])
                lines.append(f"| {m} | {server} | {p} | {cells(name, r['metrics'])} | {PAPER['ffcm_nmi'][i]} | "
                             f"{PAPER['ffcm_kappa'][i]} | {done} | {iterations} | "
                             f"{r.get('wall_seconds', float('nan')):.0f} |")
            gap = sum(abs(a - b) for a, b in zip(nmis, PAPER["ffcm_nmi"])) / len(PS)
            summary.append(f"| {m} | {server} | {sum(nmis) / len(PS):.4f} | {gap:.4f} |")
    lines += ["", "## Which setting is closest to FFCM's row", "",
              f"Paper mean NMI over the five p: {sum(PAPER['ffcm_nmi']) / len(PS):.4f}.", "",
              "| m | server | mean NMI over p | mean abs. gap to the paper's NMI |", "|---|---|---|---|", *summary, "",
              "One run per cell unless a seed is named; the FFCM runs' seed spread is not measured.", "",
              "The configs take the settings closest to the paper: fcm_fmnist.yaml m = 1.1 with 5 starts, "
              "ffcm_fmnist.yaml m = 1.1 with the kmeans server. The FFCM class defaults stay the official "
              "code's (m = 2, avg)."]
    (RESULTS / "fcm_fmnist.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()

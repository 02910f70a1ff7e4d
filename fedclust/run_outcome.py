"""What a finished run's outcome says beyond its scores: a run that gave nothing usable (every client update of a
stage non-finite, or no finite final score) is refused in a sentence, and a model that found fewer clusters than
method.num_clusters asked gets a note. Pure functions of the run's history, stages and final scores, so `fedclust
fit` (run.py, which writes them) and the tests read them alike."""

from __future__ import annotations

import math

import torch

from fedclust.contract import FederatedMethod


def fewer_clusters(method: FederatedMethod, clusters: torch.Tensor) -> str | None:
    """A sentence when the final model puts the samples in fewer clusters than method.num_clusters asks (more than
    the server's summaries or samples can give: the quick start asked for 500 forms 152), else None."""
    asked = getattr(method, "num_clusters", None)
    if not isinstance(asked, int):
        return None
    found = int(torch.unique(clusters[clusters >= 0]).numel())
    if found == 0 or found >= asked:  # (no clustering at all: the run says that itself)
        return None
    return (f"method.init_args.num_clusters asked for {asked} clusters and the final model puts the {len(clusters)} "
            f"samples in only {found} ({type(method).__name__} formed no more from what its server clusters: the "
            "clients' samples or summaries).")


def unusable_run(history: list[dict], stages: list, final: dict[str, float]) -> str | None:
    """Why a finished run gave nothing usable, as a statement of fact, or None: a stage in which the engine left
    out every client's update in every round (each was non-finite), or a final model with no finite score (it
    assigns no cluster). Rounds where only some clients diverged, or every client was disconnected, are not this."""
    all_rejected = [r for r in history if int(r.get("clients", 1)) == 0 and int(r.get("rejected", 0)) > 0]
    lost_stages = [stage.name for index, stage in enumerate(stages) if stage.rounds
                   and sum(int(r["stage"]) == index for r in all_rejected) == stage.rounds]
    facts = []
    if lost_stages:
        rounds = _ranges([int(r["round"]) for r in all_rejected])
        facts.append(f"every client update was non-finite in round{'s' if ',' in rounds or '-' in rounds else ''} "
                     f"{rounds} (all of stage{'s' if len(lost_stages) > 1 else ''} {', '.join(lost_stages)})")
    if not any(isinstance(v, (int, float)) and math.isfinite(v) for v in final.values()):
        facts.append("the final model gives no finite clustering score (every final metric is NaN)")
    return ", and ".join(facts) or None


def _ranges(numbers: list[int]) -> str:
    """[1, 2, 3, 7] -> '1-3, 7'."""
    spans: list[list[int]] = []
    for n in sorted(numbers):
        if spans and n == spans[-1][1] + 1:
            spans[-1][1] = n
        else:
            spans.append([n, n])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)

"""One labelling from several labellings of the same samples whose label ids need not agree (a vote over rounds).

A federated clustering that re-clusters every round names its clusters anew each time: cluster 3 of one round
may be cluster 7 of the next. To combine a client's last few labellings of its own samples, each earlier
labelling's ids are renamed to the ids of the latest by overlap (an id becomes the latest id most of its samples
carry), then every sample takes the label most labellings give it. This needs nothing but the labellings: no
ground truth, no other client's data. (Plain majority mapping rather than Hungarian matching: a client under
label skew holds few clusters, and two earlier ids that both landed mostly in one latest cluster should both map
there, which a one-to-one matching forbids.)
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from fedclust.clustering.kept_state import valid_indices


def renamed_to(earlier: Tensor, latest: Tensor, num_labels: int) -> Tensor:
    """``earlier`` with each id replaced by the ``latest`` id most of its samples carry (ties: the smallest)."""
    overlap = torch.zeros(num_labels, num_labels, dtype=torch.long)
    overlap.index_put_((earlier, latest), torch.ones_like(latest), accumulate=True)
    return overlap.argmax(1)[earlier]


def vote_over_labellings(labellings: list[Tensor], num_labels: int) -> Tensor:
    """Each sample's most frequent label over ``labellings`` (each (n,), ids in [0, num_labels)), all renamed to the
    last one's ids; a tie goes to the last labelling's label. One labelling is returned as a copy."""
    latest = labellings[-1]
    if len(labellings) == 1:
        return latest.clone()
    rows = torch.arange(len(latest))
    votes = torch.zeros(len(latest), num_labels)
    for labels in labellings:
        votes[rows, renamed_to(labels, latest, num_labels)] += 1
    votes[rows, latest] += 0.5
    return votes.argmax(1)


def remember_and_vote(history: Any, labels: Tensor, round_index: int, keep: int,
                      num_labels: int) -> tuple[dict[int, Tensor], Tensor]:
    """A client's kept labellings {round: labels} with this round's ``labels`` added and only the last ``keep``
    rounds kept, and the vote over them. ``history`` comes from the client's (untrusted) state: an entry that is not
    an earlier round's valid labelling of these samples is dropped."""
    kept = {r: h for r, h in history.items() if isinstance(r, int) and r < round_index
            and valid_indices(h, labels.shape, num_labels)} if isinstance(history, dict) else {}
    kept[round_index] = labels
    kept = dict(sorted(kept.items())[-keep:])
    return kept, vote_over_labellings(list(kept.values()), num_labels)

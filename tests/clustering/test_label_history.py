"""A vote over labellings whose ids differ (fedclust.clustering.label_history)."""

import torch

from fedclust.clustering.label_history import remember_and_vote, renamed_to, vote_over_labellings


def test_earlier_ids_are_renamed_to_the_latest_by_overlap():
    latest = torch.tensor([0, 0, 0, 1, 1, 1, 2, 2])
    earlier = torch.tensor([2, 2, 1, 0, 0, 0, 1, 1])  # 2 -> 0, 0 -> 1, 1 mostly -> 2
    assert torch.equal(renamed_to(earlier, latest, 3), torch.tensor([0, 0, 2, 1, 1, 1, 2, 2]))


def test_a_sample_the_latest_round_flipped_goes_back_to_the_majority_whatever_the_ids():
    truth = torch.tensor([0] * 5 + [1] * 5 + [2] * 5)
    rounds = [(truth + shift) % 3 for shift in (1, 2, 0, 1)]  # the same partition under four namings
    last = rounds[-1].clone()
    last[4] = last[7]  # the latest round put sample 4 with the second group
    voted = vote_over_labellings([*rounds[:-1], last], 3)
    assert torch.equal(voted, rounds[-1])  # back with its group, in the latest round's ids


def test_one_labelling_or_agreeing_ones_are_kept_and_ties_keep_the_latest():
    labels = torch.tensor([1, 1, 0, 2])
    assert torch.equal(vote_over_labellings([labels], 3), labels)
    assert torch.equal(vote_over_labellings([labels, labels.clone()], 3), labels)
    other = torch.tensor([1, 1, 0, 0])
    assert torch.equal(vote_over_labellings([other, labels], 3), labels)  # one against one: the latest wins


def test_remember_and_vote_keeps_the_last_rounds_and_drops_what_a_checkpoint_should_not_hold():
    a, b = torch.tensor([0, 0, 1, 1]), torch.tensor([1, 1, 0, 0])  # the same partition, ids swapped
    history = {0: a, 1: b, 2: torch.tensor([0, 0, 0]),  # wrong length
               3: torch.tensor([0, 0, 7, 1]),  # an id out of range
               "4": a, 9: a}  # not an int round; a round not before this one
    latest = torch.tensor([1, 1, 1, 0])
    kept, voted = remember_and_vote(history, latest, 5, keep=3, num_labels=2)
    assert list(kept) == [0, 1, 5] and kept[5] is latest
    assert torch.equal(voted, torch.tensor([1, 1, 0, 0]))  # two earlier rounds outvote the latest on sample 2
    kept, voted = remember_and_vote(kept, latest, 6, keep=2, num_labels=2)
    assert list(kept) == [5, 6] and torch.equal(voted, latest)
    assert list(remember_and_vote("nonsense", latest, 0, 3, 2)[0]) == [0]

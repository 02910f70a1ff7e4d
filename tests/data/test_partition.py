"""Partitioners: hand-computed Prepare / Execute / Assert cases."""

from __future__ import annotations

import pytest
import torch

from fedclust.data.partition import (
    DirichletPartitioner,
    IidPartitioner,
    PathologicalPartitioner,
    PShiftPartitioner,
    class_counts,
    format_class_counts,
    natural_partition,
)
from fedclust.errors import ConfigError


def assert_disjoint_cover(parts, n):
    everything = torch.cat(parts)
    assert len(everything) == n and torch.equal(everything.sort().values, torch.arange(n))
    for p in parts:
        assert p.dtype == torch.int64 and torch.equal(p, p.sort().values)


def two_classes():
    return torch.tensor([0] * 10 + [1] * 10)


# ---------------------------------------------------------------- pshift (CCFC)


def test_pshift_half():
    labels = two_classes()  # s = 10: 5 own samples first, then a chunk of 5 from the shuffled pool

    parts = PShiftPartitioner(0.5)(labels, 2, seed=0)

    assert_disjoint_cover(parts, 20)
    assert [len(p) for p in parts] == [10, 10]
    assert set(range(0, 5)) <= set(parts[0].tolist())  # the first 5 of class 0, in dataset order
    assert set(range(10, 15)) <= set(parts[1].tolist())
    pooled = set(range(5, 10)) | set(range(15, 20))
    assert set(parts[0].tolist()) - set(range(0, 5)) <= pooled
    assert set(parts[1].tolist()) - set(range(10, 15)) <= pooled


def test_pshift_one_gives_each_client_its_class():
    labels = torch.tensor([1, 0, 1, 0, 0, 1, 1])

    parts = PShiftPartitioner(1.0)(labels, 2, seed=0)

    assert parts[0].tolist() == [1, 3, 4] and parts[1].tolist() == [0, 2, 5, 6]


def test_pshift_zero_gives_equal_sizes():
    labels = torch.arange(30) % 3

    parts = PShiftPartitioner(0.0)(labels, 3, seed=0)

    assert_disjoint_cover(parts, 30)
    assert [len(p) for p in parts] == [10, 10, 10]


def test_pshift_leftover_goes_to_first_clients():
    labels = torch.tensor([0] * 7 + [1] * 6)  # N = 13, p = 0: s = 6.5, chunks of round(6.5) = 6, 1 left over

    parts = PShiftPartitioner(0.0)(labels, 2, seed=0)

    assert_disjoint_cover(parts, 13)
    assert [len(p) for p in parts] == [7, 6]


def test_pshift_rejects_bad_requests():
    with pytest.raises(ConfigError, match="data.p"):
        PShiftPartitioner(1.5)
    with pytest.raises(ConfigError, match="data.p"):
        PShiftPartitioner(-0.1)
    with pytest.raises(ConfigError, match="data.num_clients"):
        PShiftPartitioner(0.5)(two_classes(), 3, seed=0)
    with pytest.raises(ConfigError, match="data.num_clients"):
        PShiftPartitioner(0.5).validate(5, 10)


def test_pshift_is_deterministic_by_seed():
    labels = torch.arange(1000) % 10
    a, b = PShiftPartitioner(0.3)(labels, 10, 7), PShiftPartitioner(0.3)(labels, 10, 7)
    c = PShiftPartitioner(0.3)(labels, 10, 8)
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    assert not all(torch.equal(x, y) for x, y in zip(a, c))


# ---------------------------------------------------------------- iid


def test_iid_near_equal_and_seeded():
    labels = torch.arange(23) % 4

    parts = IidPartitioner()(labels, 5, seed=1)

    assert_disjoint_cover(parts, 23)
    assert sorted(len(p) for p in parts) == [4, 4, 5, 5, 5]
    assert all(torch.equal(x, y) for x, y in zip(parts, IidPartitioner()(labels, 5, seed=1)))
    with pytest.raises(ConfigError, match="data.num_clients"):
        IidPartitioner()(labels, 24, seed=1)
    with pytest.raises(ConfigError, match="data.num_clients"):
        IidPartitioner()(labels, 0, seed=1)


@pytest.mark.parametrize("m", [2, 3, 5, 7])
def test_balanced_iid_deals_every_class_evenly(m):
    """Pins the class-balanced IID split (FedPNP Sec. 3.1, FedMCC Sec. IV-A: each client holds the same number of
    images of every class): per class, client counts differ by at most one, and so do the totals. Unequal
    class sizes (37, 23, 51, 9) leave remainders that the deal must spread."""
    labels = torch.cat([torch.full((n,), c) for c, n in enumerate([37, 23, 51, 9])])
    labels = labels[torch.randperm(len(labels), generator=torch.Generator().manual_seed(0))]

    parts = IidPartitioner(balanced=True)(labels, m, seed=4)

    assert_disjoint_cover(parts, len(labels))
    counts = class_counts(labels, parts, 4)
    assert (counts.max(0).values - counts.min(0).values).max() <= 1
    assert counts.sum(1).max() - counts.sum(1).min() <= 1
    again = IidPartitioner(balanced=True)(labels, m, seed=4)
    assert all(torch.equal(x, y) for x, y in zip(parts, again))
    other = IidPartitioner(balanced=True)(labels, m, seed=5)
    assert any(not torch.equal(x, y) for x, y in zip(parts, other))


def test_random_iid_is_not_class_balanced_and_the_config_names_the_balanced_one():
    """`partition: iid` stays flwr-datasets' random split (class counts left to chance); `iid_balanced` is the
    balanced one, on the real 8x8 digits with 5 clients."""
    from fedclust.data.config import DataConfig
    from fedclust.data.datasets import load_dataset

    y = load_dataset("digits").y
    spread = {}
    for name in ("iid", "iid_balanced"):
        partitioner = DataConfig(name="digits", num_clients=5, partition=name).partitioner()
        counts = class_counts(y, partitioner(y, 5, seed=0), 10)
        spread[name] = int((counts.max(0).values - counts.min(0).values).max())
    assert spread["iid_balanced"] <= 1 < spread["iid"]


# ---------------------------------------------------------------- dirichlet


def skew(parts, labels, num_classes):
    """Mean over clients of the largest class share."""
    counts = class_counts(labels, parts, num_classes).double()
    return (counts.max(1).values / counts.sum(1)).mean().item()


def test_dirichlet_min_size_and_skew():
    labels = torch.arange(2000) % 10

    small = DirichletPartitioner(0.1, min_partition_size=20)(labels, 10, seed=0)
    large = DirichletPartitioner(100.0, min_partition_size=20)(labels, 10, seed=0)

    for parts in (small, large):
        assert_disjoint_cover(parts, 2000)
        assert min(len(p) for p in parts) >= 20
    assert skew(small, labels, 10) > skew(large, labels, 10) + 0.3


def test_dirichlet_self_balancing_covers_everything():
    labels = torch.arange(2000) % 10
    parts = DirichletPartitioner(0.5, min_partition_size=10, self_balancing=True)(labels, 10, seed=0)
    assert_disjoint_cover(parts, 2000)


def test_dirichlet_impossible_requests():
    labels = torch.arange(100) % 10
    with pytest.raises(ConfigError, match="data.alpha"):
        DirichletPartitioner(0.0)
    with pytest.raises(ConfigError, match="data.min_partition_size"):
        DirichletPartitioner(1.0, min_partition_size=11)(labels, 10, seed=0)
    with pytest.raises(ConfigError, match="data.alpha"):  # every client needs all 10 samples: never met
        DirichletPartitioner(0.01, min_partition_size=10, max_tries=2)(labels, 10, seed=0)
    with pytest.raises(ConfigError, match="data.alpha"):
        DirichletPartitioner([1.0, 2.0]).validate(3, 10)


# ---------------------------------------------------------------- pathological


@pytest.mark.parametrize("mode", ["first-deterministic", "deterministic", "random"])
def test_pathological_classes_per_client(mode):
    labels = torch.arange(600) % 10

    parts = PathologicalPartitioner(3, class_assignment_mode=mode)(labels, 10, seed=0)

    counts = class_counts(labels, parts, 10)
    assert ((counts > 0).sum(1) == 3).all()
    if mode != "random":
        assert all(counts[i, i] > 0 for i in range(10))  # client i holds class i


def test_pathological_deterministic_hand_case():
    labels = torch.tensor([0, 1, 2, 0, 1, 2])  # client 0: classes 0, 1; client 1: 1, 2; client 2: 2, 0

    parts = PathologicalPartitioner(2, "deterministic")(labels, 3, seed=0)

    # class 0 (indices 0, 3) is split between clients 0 and 2, class 1 (1, 4) between 0 and 1, ...
    assert [p.tolist() for p in parts] == [[0, 1], [2, 4], [3, 5]]
    assert_disjoint_cover(parts, 6)


def test_pathological_impossible_requests():
    with pytest.raises(ConfigError, match="data.num_classes_per_partition"):
        PathologicalPartitioner(11).validate(10, 10)
    with pytest.raises(ConfigError, match="data.class_assignment_mode"):
        PathologicalPartitioner(2, "sorted")


# ---------------------------------------------------------------- class counts


def test_class_counts_and_table():
    labels = torch.tensor([0, 0, 1, 2, 2, 2])
    parts = [torch.tensor([0, 3]), torch.tensor([1, 2, 4, 5])]

    counts = class_counts(labels, parts, 3)

    assert counts.tolist() == [[1, 0, 1], [1, 1, 2]]
    table = format_class_counts(counts).splitlines()
    assert table[0].split() == ["client", "0", "1", "2", "total"]
    assert table[1].split() == ["0", "1", "0", "1", "2"]
    assert table[2].split() == ["1", "1", "1", "2", "4"]


def test_pathological_leaves_out_classes_no_client_holds():
    labels = torch.arange(50) % 5  # 2 clients, 1 class each, deterministic: classes 2, 3, 4 unused

    with pytest.warns(UserWarning, match=r"\[2, 3, 4\]"):
        parts = PathologicalPartitioner(1, "deterministic")(labels, 2, seed=0)

    assert parts[0].tolist() == list(range(0, 50, 5)) and parts[1].tolist() == list(range(1, 50, 5))


def test_pathological_disjoint_gives_each_client_all_of_its_classes():
    labels = torch.arange(60) % 6  # FedMCC's non-IID split: 3 clients x 2 classes = 6 classes

    parts = PathologicalPartitioner(2, "disjoint")(labels, 3, seed=0)

    held = [sorted(set(labels[p].tolist())) for p in parts]
    assert held == [[0, 1], [2, 3], [4, 5]]
    assert all(len(p) == 20 for p in parts)  # every sample of the held classes, none of the others
    assert_disjoint_cover(parts, 60)
    with pytest.raises(ConfigError, match="data.num_classes_per_partition"):
        PathologicalPartitioner(2, "disjoint").validate(2, 6)  # 2 x 2 != 6


def test_data_config_passes_the_class_assignment_mode():
    from fedclust.data.config import DataConfig

    partitioner = DataConfig(partition="pathological", class_assignment_mode="disjoint").partitioner()
    assert partitioner.mode == "disjoint"


# ---------------------------------------------------------------- natural clients, data without labels


def test_natural_partition_keeps_the_clients_the_data_name():
    clients = torch.tensor([2, 0, 2, 1, 0, 2])

    parts = natural_partition(clients, None, "features")

    assert [p.tolist() for p in parts] == [[1, 4], [3], [0, 2, 5]]
    assert [p.tolist() for p in natural_partition(clients, 3, "features")] == [[1, 4], [3], [0, 2, 5]]
    with pytest.raises(ConfigError, match=r"data.num_clients = 4 .*3, the number of distinct client ids"):
        natural_partition(clients, 4, "features")
    with pytest.raises(ConfigError, match="data.partition = 'natural'.*client_column"):
        natural_partition(None, None, "folder")


def test_only_iid_splits_data_without_labels():
    unlabelled = torch.full((12,), -1)

    parts = IidPartitioner()(unlabelled, 3, seed=0)

    assert_disjoint_cover(parts, 12)
    assert not IidPartitioner().needs_labels
    for partitioner in (IidPartitioner(balanced=True), PShiftPartitioner(0.5), DirichletPartitioner(0.5),
                        PathologicalPartitioner(2)):
        assert partitioner.needs_labels


def test_class_counts_without_labels_are_client_sizes():
    parts = [torch.tensor([0, 3]), torch.tensor([1, 2, 4])]

    counts = class_counts(torch.full((5,), -1), parts, 0)

    assert counts.tolist() == [[2], [3]]
    table = format_class_counts(counts, labelled=False).splitlines()
    assert table[0].split() == ["client", "samples"] and table[2].split() == ["1", "3"]

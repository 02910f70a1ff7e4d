"""Seeded partitioners: labels -> one sorted int64 index tensor per client.

Labels are used only to simulate heterogeneity. Names and parameters follow flwr-datasets where the
idea is the same (IidPartitioner, DirichletPartitioner, PathologicalPartitioner); PShiftPartitioner is
CCFC's p scheme. Every draw comes from ``numpy_rng(seed, "partition")``, so a partition depends only
on (labels, number of clients, seed). Data without labels can only be split by IidPartitioner (``needs_labels``);
`natural_partition` is no simulation: it keeps the clients the data name.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor

from fedclust.data.checks import (
    PATHOLOGICAL_MODES,
    check_alpha,
    check_classes_per_partition,
    check_clients_fit_samples,
    check_min_partition_size,
    check_min_partition_size_fits,
    check_num_clients,
    check_p,
    check_pathological_classes,
    check_pshift_clients,
    pshift_shares,
)
from fedclust.errors import ConfigError
from fedclust.seeding import numpy_rng


class Partitioner:
    """Base class: ``parts = partitioner(labels, num_partitions, seed)``; subclasses write ``_split``."""

    needs_labels = True  # False: it splits data without labels too (their labels are all -1)

    def validate(self, num_partitions: int, num_classes: int) -> None:
        """Raise ConfigError if no partition into `num_partitions` clients can be made."""
        check_num_clients(num_partitions)

    def __call__(self, labels: Tensor, num_partitions: int, seed: int) -> list[Tensor]:
        y = labels.detach().cpu().numpy().astype(np.int64, copy=False)
        num_classes = int(y.max()) + 1 if len(y) else 0
        self.validate(num_partitions, num_classes)
        check_clients_fit_samples(num_partitions, len(y))
        parts = self._split(y, int(num_partitions), num_classes, numpy_rng(seed, "partition"))
        return [torch.from_numpy(np.sort(np.asarray(p, dtype=np.int64))) for p in parts]

    def _split(self, y: np.ndarray, m: int, num_classes: int, rng: np.random.Generator) -> list[np.ndarray]:
        raise NotImplementedError


class IidPartitioner(Partitioner):
    """Shuffle, then cut into near-equal parts (the first N mod m clients get one sample more).

    ``balanced=True`` (config ``partition: iid_balanced``) is the class-balanced IID split of FedPNP
    (Sec. 3.1) and FedMCC (Sec. IV-A), "each client contains the same number of images from all classes":
    each class's samples are shuffled and dealt round-robin, the deal running on from class to class, so
    every client's count of every class, and its total, is within one of every other client's. flwr-datasets
    has no such partitioner; its IidPartitioner (``balanced=False``) leaves class counts to chance.
    """

    def __init__(self, balanced: bool = False):
        self.balanced = balanced
        self.needs_labels = balanced

    def _split(self, y, m, num_classes, rng):
        if not self.balanced:
            return np.array_split(rng.permutation(len(y)), m)
        dealt = np.concatenate([rng.permutation(np.flatnonzero(y == label)) for label in np.unique(y)])
        return [dealt[i::m] for i in range(m)]


class DirichletPartitioner(Partitioner):
    """Per class, shares over clients ~ Dir(alpha); redrawn until every client has min_partition_size.

    flwr-datasets semantics: a class's samples (in dataset order) are cut at floor(cumsum(share) * n_k);
    with ``self_balancing`` a client already above N / m samples gets no share of later classes. After
    ``max_tries`` redraws (flwr: 10) it gives up with a ConfigError. ``alpha`` may be one number or
    one per client.
    """

    def __init__(
        self,
        alpha: float | Sequence[float],
        min_partition_size: int = 10,
        self_balancing: bool = False,
        max_tries: int = 10,
    ):
        self.alpha = check_alpha(alpha)
        check_min_partition_size(min_partition_size)
        self.min_partition_size = min_partition_size
        self.self_balancing, self.max_tries = self_balancing, max_tries

    def validate(self, num_partitions, num_classes):
        super().validate(num_partitions, num_classes)
        if len(self.alpha) not in (1, num_partitions):
            valid = f"one number or a list of {num_partitions} (one per client)"
            raise ConfigError("data.alpha", self.alpha.tolist(), valid)

    def _split(self, y, m, num_classes, rng):
        n = len(y)
        check_min_partition_size_fits(self.min_partition_size, n, m)
        alpha = np.broadcast_to(self.alpha, (m,))
        by_class = [np.flatnonzero(y == k) for k in np.unique(y)]
        for _ in range(self.max_tries + 1):
            parts: list[list[np.ndarray]] = [[] for _ in range(m)]
            sizes = np.zeros(m, dtype=np.int64)
            for idx in by_class:
                share = rng.dirichlet(alpha)
                if self.self_balancing:
                    balanced = np.where(sizes > n / m, 0.0, share)
                    share = balanced / balanced.sum() if balanced.sum() > 0 else share
                cuts = (np.cumsum(share) * len(idx)).astype(np.int64)[:-1]
                for i, chunk in enumerate(np.split(idx, cuts)):
                    parts[i].append(chunk)
                    sizes[i] += len(chunk)
            if sizes.min() >= self.min_partition_size:
                return [np.concatenate(p) for p in parts]
        valid = (
            f"large enough that every client gets min_partition_size = {self.min_partition_size} samples "
            f"(failed in {self.max_tries + 1} draws; raise data.alpha or lower data.min_partition_size)"
        )
        raise ConfigError("data.alpha", self.alpha.tolist(), valid)


class PathologicalPartitioner(Partitioner):
    """Each client holds exactly `num_classes_per_partition` classes, each split evenly among its holders.

    Modes (flwr-datasets): "deterministic": client i holds classes i, i+1, ... (mod C);
    "first-deterministic": client i holds class i mod C plus random others (the original paper's
    setting); "random": distinct random classes. A class no client holds is left out (with a warning),
    so then not every sample is in a client. "disjoint" (FedMCC's non-IID split, Section IV-A: "each
    client has all the samples of C/K classes and no other sample"): client i holds all samples of the
    classes [i*k, (i+1)*k) of the sorted class list; it needs num_clients * k == number of classes.
    """

    MODES = PATHOLOGICAL_MODES

    def __init__(self, num_classes_per_partition: int, class_assignment_mode: str = "first-deterministic"):
        check_classes_per_partition(num_classes_per_partition, class_assignment_mode)
        self.k, self.mode = num_classes_per_partition, class_assignment_mode

    def validate(self, num_partitions, num_classes):
        super().validate(num_partitions, num_classes)
        check_pathological_classes(self.k, self.mode, num_partitions, num_classes)

    def _assign(self, classes: np.ndarray, m: int, rng: np.random.Generator) -> list[list[int]]:
        c = len(classes)
        if self.mode == "disjoint":
            if m * self.k != c:  # a class absent from the labels (validate counted max label + 1)
                valid = f"num_clients ({m}) x num_classes_per_partition = the classes present ({c}) (disjoint)"
                raise ConfigError("data.num_classes_per_partition", self.k, valid)
            return [classes[i * self.k:(i + 1) * self.k].tolist() for i in range(m)]
        if self.mode == "deterministic":
            return [[int(classes[(i + j) % c]) for j in range(self.k)] for i in range(m)]
        if self.mode == "random":
            return [rng.choice(classes, size=self.k, replace=False).tolist() for _ in range(m)]
        held = []
        for i in range(m):
            mine = [int(classes[i % c])]
            while len(mine) < self.k:
                label = int(rng.choice(classes))
                if label not in mine:
                    mine.append(label)
            held.append(mine)
        return held

    def _split(self, y, m, num_classes, rng):
        classes = np.unique(y)
        if self.k > len(classes):
            valid = f"at most the number of classes present ({len(classes)})"
            raise ConfigError("data.num_classes_per_partition", self.k, valid)
        held = self._assign(classes, m, rng)
        parts: list[list[np.ndarray]] = [[] for _ in range(m)]
        unused = []
        for label in classes.tolist():
            holders = [i for i in range(m) if label in held[i]]
            idx = np.flatnonzero(y == label)
            if not holders:
                unused.append(label)
                continue
            if len(holders) > len(idx):
                valid = f"small enough that no class has more holders than samples (class {label})"
                raise ConfigError("data.num_classes_per_partition", self.k, valid)
            for i, chunk in zip(holders, np.array_split(idx, len(holders))):
                parts[i].append(chunk)
        if unused:
            message = f"pathological partition: classes {unused} are held by no client and left out"
            warnings.warn(message, stacklevel=3)
        return [np.concatenate(p) for p in parts]


class PShiftPartitioner(Partitioner):
    """CCFC's scheme: m = number of classes clients, client l holds at least a share p of class l.

    With s = N / m: for p < 1 client l first takes the first round(s * p) samples of class l (dataset
    order; all of them if the class is smaller), the remaining samples are pooled, shuffled and dealt
    in consecutive chunks of round(s * (1 - p)) to clients 0, 1, ...; what is left after m chunks (N not
    divisible, or rounding) goes one sample each to clients 0, 1, ... in turn. For p = 1 client l holds
    all of class l. ``round`` is Python's (ties to even).
    """

    def __init__(self, p: float):
        self.p = check_p(p)

    def validate(self, num_partitions, num_classes):
        super().validate(num_partitions, num_classes)
        check_pshift_clients(num_partitions, num_classes)

    def _split(self, y, m, num_classes, rng):
        if self.p == 1:
            return [np.flatnonzero(y == label) for label in range(m)]
        take, chunk = pshift_shares(len(y), m, self.p)  # the precheck sizes the clients from the same shares
        own = [np.flatnonzero(y == label)[:take] for label in range(m)]
        free = np.ones(len(y), dtype=bool)
        free[np.concatenate(own)] = False
        pool = rng.permutation(np.flatnonzero(free))
        rest = pool[m * chunk :]
        return [np.concatenate([own[i], pool[i * chunk : (i + 1) * chunk], rest[i::m]]) for i in range(m)]


def natural_partition(clients: Tensor | None, num_clients: int | None, name: str) -> list[Tensor]:
    """The clients the data name: client ids 0..m-1 (fedclust/data/own_data.py encodes any ids so), each client
    its samples in data order. `num_clients` None takes m from the data; a number must equal m."""
    if clients is None:
        raise ConfigError("data.partition", "natural", f"a simulated partition (iid, ...): {name} data name no "
                          "client per sample (features and hf take data.options.client_column)")
    m = int(clients.max()) + 1 if len(clients) else 0
    if num_clients is not None and num_clients != m:
        raise ConfigError("data.num_clients", num_clients, f"{m}, the number of distinct client ids in the data, "
                          "or unset (null) to take it from the data")
    order = torch.argsort(clients.cpu(), stable=True)
    return [part.clone() for part in torch.split(order, torch.bincount(clients.cpu(), minlength=m).tolist())]


def class_counts(labels: Tensor, parts: list[Tensor], num_classes: int) -> Tensor:
    """Samples of each class held by each client: int64 (clients x classes). Data without labels (every label
    -1, num_classes 0) give one column: each client's number of samples."""
    y = labels.detach().cpu().long()
    if num_classes == 0 and bool((y < 0).all()):
        return torch.tensor([[len(p)] for p in parts], dtype=torch.int64).reshape(len(parts), 1)
    rows = [torch.bincount(y[p.cpu()], minlength=num_classes) for p in parts]
    return torch.stack(rows) if rows else torch.zeros(0, num_classes, dtype=torch.int64)


def format_class_counts(counts: Tensor, labelled: bool = True) -> str:
    """A text table: a header of class ids, one row per client, and a total column (labelled False: the one
    column of class_counts for data without labels, headed "samples")."""
    counts = counts.detach().cpu().long()
    if not labelled:
        width = max(len(str(int(v))) for v in counts.flatten().tolist() + [0]) + 1
        return "\n".join(["client" + "samples".rjust(max(width, 8)),
                          *(str(i).rjust(6) + str(int(row[0])).rjust(max(width, 8)) for i, row in enumerate(counts))])
    totals = counts.sum(dim=1)
    cells = [str(int(v)) for v in counts.flatten()] + [str(int(v)) for v in totals] + ["total"]
    width = max(len(c) for c in cells + [str(counts.shape[1] - 1)]) + 1
    header = "client" + "".join(str(c).rjust(width) for c in range(counts.shape[1])) + "total".rjust(width)
    rows = [
        str(i).rjust(6) + "".join(str(int(v)).rjust(width) for v in row) + str(int(t)).rjust(width)
        for i, (row, t) in enumerate(zip(counts, totals))
    ]
    return "\n".join([header, *rows])

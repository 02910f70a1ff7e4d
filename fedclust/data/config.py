"""The `data:` section of a config and the function that turns it into a FederatedData."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import torch

from fedclust.data.checks import check_data_settings
from fedclust.data.client_data import FederatedData
from fedclust.data.datasets import load_dataset
from fedclust.data.partition import (
    DirichletPartitioner,
    IidPartitioner,
    Partitioner,
    PathologicalPartitioner,
    PShiftPartitioner,
)
from fedclust.errors import ConfigError

# Bytes of device memory the samples may take before they stay on the host (DataLoader path).
DEVICE_DATA_BUDGET = 4 * 2**30


@dataclass
class DataConfig:
    """Which data, how it is split over clients, and where it lives.

    Args:
        name: Data set: digits, fmnist, mnist, cifar10, cifar100, cifar100_20, stl10, imagenet10, gaussian, subspace.
        root: Folder holding the data set files (torchvision layout); None uses the default places.
        split: "all" concatenates train and test (what the papers do), or "train" / "test" alone.
        num_clients: Number of simulated clients.
        partition: pshift (CCFC's p scheme), iid, dirichlet or pathological (flwr-datasets meanings), or
            iid_balanced (every client holds the same number of samples of every class, within one).
        p: pshift: share of each client's data drawn from "its" class, in [0, 1].
        alpha: dirichlet: concentration; small is more heterogeneous.
        min_partition_size: dirichlet: resample until every client has at least this many samples.
        num_classes_per_partition: pathological: classes held by each client.
        class_assignment_mode: pathological: which classes a client holds: first-deterministic,
            deterministic, random (flwr-datasets), or disjoint (client i holds all samples of classes
            [i*k, (i+1)*k): FedMCC's non-IID split; needs num_clients * k = number of classes).
        normalize: "none", or "l2" to scale every sample to unit norm (cosine geometry of the
            classic baselines' reported numbers, REFERENCE.md).
        placement: "auto" keeps the samples on the compute device when they fit, "device" forces it,
            "host" keeps them in host memory and feeds batches through a DataLoader.
        num_workers: DataLoader workers for the host placement.
        eval_batch_size: Batch size for embedding and assigning all samples.
        options: Data-set specific options (image_size for imagenet10; num_clusters,
            points_per_cluster, dim for the synthetic sets).
    """

    name: str = "digits"
    root: str | None = None
    split: Literal["all", "train", "test"] = "all"
    num_clients: int = 10
    partition: Literal["pshift", "iid", "iid_balanced", "dirichlet", "pathological"] = "pshift"
    p: float = 0.0
    alpha: float = 0.5
    min_partition_size: int = 10
    num_classes_per_partition: int = 2
    class_assignment_mode: Literal["first-deterministic", "deterministic", "random", "disjoint"] = \
        "first-deterministic"
    normalize: Literal["none", "l2"] = "none"
    placement: Literal["auto", "device", "host"] = "auto"
    num_workers: int = 0
    eval_batch_size: int = 1024
    options: dict[str, Any] = field(default_factory=dict)

    def partitioner(self) -> Partitioner:
        if self.partition == "pshift":
            return PShiftPartitioner(self.p)
        if self.partition in ("iid", "iid_balanced"):
            return IidPartitioner(balanced=self.partition == "iid_balanced")
        if self.partition == "dirichlet":
            return DirichletPartitioner(self.alpha, self.min_partition_size)
        if self.partition == "pathological":
            return PathologicalPartitioner(self.num_classes_per_partition, self.class_assignment_mode)
        raise ConfigError("data.partition", self.partition, "one of pshift, iid, iid_balanced, dirichlet, pathological")


def build_federated_data(cfg: DataConfig, device: torch.device, seed: int) -> FederatedData:
    """Load, partition and place the data. Raises FedclustError before any work on a bad request."""
    check_data_settings(cfg.partition, cfg.num_clients, cfg.p, cfg.alpha, cfg.min_partition_size,
                        cfg.num_classes_per_partition, cfg.class_assignment_mode)  # also in fedclust.precheck
    dataset = load_dataset(cfg.name, root=cfg.root, split=cfg.split, **cfg.options)
    partitioner = cfg.partitioner()
    partitioner.validate(cfg.num_clients, dataset.num_classes)
    parts = partitioner(dataset.y, cfg.num_clients, seed)
    empty = [i for i, part in enumerate(parts) if len(part) == 0]
    if empty:
        raise ConfigError("data.num_clients", cfg.num_clients,
                          f"at most a number that leaves no client empty (clients {empty[:5]} got no sample)")
    fits = dataset.x.numel() * dataset.x.element_size() <= DEVICE_DATA_BUDGET
    on_device = cfg.placement == "device" or (cfg.placement == "auto" and fits)
    if on_device:
        dataset.x = dataset.x.to(device)
    return FederatedData(dataset, parts, device, normalize=cfg.normalize, eval_batch_size=cfg.eval_batch_size,
                         host_workers=cfg.num_workers, on_device=on_device)

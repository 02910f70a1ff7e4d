"""The `data:` section of a config and the function that turns it into a FederatedData."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
from torch import Tensor

from fedclust.data.checks import check_data_settings, check_subsample, simulated_num_clients
from fedclust.data.client_data import FederatedData
from fedclust.data.datasets import Dataset, load_dataset
from fedclust.data.partition import (
    DirichletPartitioner,
    IidPartitioner,
    Partitioner,
    PathologicalPartitioner,
    PShiftPartitioner,
    natural_partition,
)
from fedclust.errors import ConfigError
from fedclust.seeding import generator

# Bytes of device memory the samples may take before they stay on the host (DataLoader path).
DEVICE_DATA_BUDGET = 4 * 2**30


@dataclass
class DataConfig:
    """Which data, how it is split over clients, and where it lives.

    Args:
        name: Data set: digits, fmnist, mnist, cifar10, cifar100, cifar100_20, stl10, imagenet10, gaussian,
            subspace, rotated, representations, hog (an image set's histograms of oriented gradients as vectors:
            options source and cell); your own data (docs/own_data.md): folder (an image folder, one
            sub-folder per class or flat), features (.npy, .npz, .csv or .parquet file), hf (a Hugging Face data
            set by hub name or local folder).
        root: Folder holding the data set files (torchvision layout); for folder the image folder, for features
            the file, for hf the hub name or folder. None uses the default places.
        split: "all" concatenates train and test (what the papers do), or "train" / "test" alone.
        subsample: Keep a random subset of this many samples of the split, the same subset for every seed (e.g.
            10,000 images of Fashion-MNIST's training split, to choose settings on other images than the test
            split a method is reported on); None keeps every sample.
        num_clients: Number of clients; None (default): 10 for the simulated partitions, and for natural the
            number of distinct client ids in the data (a number given must equal it).
        partition: pshift (CCFC's p scheme), iid, dirichlet or pathological (flwr-datasets meanings),
            iid_balanced (every client holds the same number of samples of every class, within one), or
            natural (the clients the data name: data.options.client_column of features and hf).
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
        eval_batch_size: Batch size for embedding and assigning all samples in evaluation (a client embeds its own
            samples in its training batch).
        options: Data-set specific options (image_size for imagenet10; num_clusters, points_per_cluster (one
            number, or a list of one per cluster), dim for the synthetic sets; image_size, channels for folder;
            path, label_column, client_column, feature_columns for features; and path, split, image_column, ...
            for hf).
    """

    name: str = "digits"
    root: str | None = None
    split: Literal["all", "train", "test"] = "all"
    subsample: int | None = None
    num_clients: int | None = None
    partition: Literal["pshift", "iid", "iid_balanced", "dirichlet", "pathological", "natural"] = "pshift"
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
        """The simulated partition (natural is not simulated: see `split_into_clients`)."""
        if self.partition == "pshift":
            return PShiftPartitioner(self.p)
        if self.partition in ("iid", "iid_balanced"):
            return IidPartitioner(balanced=self.partition == "iid_balanced")
        if self.partition == "dirichlet":
            return DirichletPartitioner(self.alpha, self.min_partition_size)
        if self.partition == "pathological":
            return PathologicalPartitioner(self.num_classes_per_partition, self.class_assignment_mode)
        raise ConfigError("data.partition", self.partition, "one of pshift, iid, iid_balanced, dirichlet, pathological")


def subsample(dataset: Dataset, size: int) -> Dataset:
    """A random subset of ``size`` samples in data order, drawn by a generator that depends on nothing of the run
    (so every seed and method sees the same images)."""
    check_subsample(size, len(dataset))
    keep = torch.randperm(len(dataset), generator=generator(0, "data.subsample"))[:size].sort().values
    return dataclasses.replace(dataset, x=dataset.x[keep], y=dataset.y[keep], split=dataset.split[keep],
                               clients=None if dataset.clients is None else dataset.clients[keep])


def split_into_clients(cfg: DataConfig, dataset: Dataset, seed: int) -> list[Tensor]:
    """Each client's sample indices: the clients the data name (natural), or a simulated partition."""
    if cfg.partition == "natural":
        return natural_partition(dataset.clients, cfg.num_clients, dataset.name)
    partitioner = cfg.partitioner()
    if not dataset.has_labels and partitioner.needs_labels:
        raise ConfigError("data.partition", cfg.partition, f"iid or natural: {cfg.name} data without labels "
                          "cannot be split by class (set data.options.label_column if the data have labels)")
    num_clients = simulated_num_clients(cfg.num_clients)
    partitioner.validate(num_clients, dataset.num_classes)
    return partitioner(dataset.y, num_clients, seed)


def build_federated_data(cfg: DataConfig, device: torch.device, seed: int) -> FederatedData:
    """Load, partition and place the data. Raises FedclustError before any work on a bad request."""
    check_data_settings(cfg.partition, cfg.num_clients, cfg.p, cfg.alpha, cfg.min_partition_size,
                        cfg.num_classes_per_partition, cfg.class_assignment_mode)  # also in fedclust.precheck
    dataset = load_dataset(cfg.name, root=cfg.root, split=cfg.split, **cfg.options)
    if cfg.subsample is not None:
        dataset = subsample(dataset, cfg.subsample)
    parts = split_into_clients(cfg, dataset, seed)
    empty = [i for i, part in enumerate(parts) if len(part) == 0]
    if empty:
        raise ConfigError("data.num_clients", len(parts),
                          f"at most a number that leaves no client empty (clients {empty[:5]} got no sample)")
    fits = dataset.x.numel() * dataset.x.element_size() <= DEVICE_DATA_BUDGET
    on_device = cfg.placement == "device" or (cfg.placement == "auto" and fits)
    if on_device:
        dataset.x = dataset.x.to(device)
    return FederatedData(dataset, parts, device, normalize=cfg.normalize, eval_batch_size=cfg.eval_batch_size,
                         host_workers=cfg.num_workers, on_device=on_device)

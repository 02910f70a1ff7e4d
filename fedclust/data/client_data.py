"""The federated view of a data set: the samples live once (on the device when they fit) and every client
is an index tensor into them. Batches are gathered by indexing, so a client costs O(its indices).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import torch
from torch import Tensor

from fedclust.data.dataset import Dataset, prepare
from fedclust.data.info import DataInfo


class FederatedData:
    """A loaded data set, its partition into clients, and the placement of its samples."""

    def __init__(self, dataset: Dataset, parts: list[Tensor], device: torch.device, normalize: str = "none",
                 eval_batch_size: int = 1024, host_workers: int = 0, on_device: bool = True):
        self.dataset = dataset
        self.normalize = normalize
        self.device = device
        self.eval_batch_size = eval_batch_size
        self.host_workers = host_workers
        self.on_device = on_device  # False: batches come through a DataLoader from host memory
        self.labels = dataset.y
        self.parts = parts
        self.num_clients = len(parts)

    @property
    def x(self) -> Tensor:
        return self.dataset.x

    @property
    def info(self) -> DataInfo:
        x = self.dataset.x
        image = self.dataset.is_image
        return DataInfo(num_classes=self.dataset.num_classes, in_channels=x.shape[1] if image else 0,
                        input_size=x.shape[-1] if image else 0, num_features=x[0].numel(), is_image=image,
                        min_client_size=min((len(p) for p in self.parts), default=0),
                        has_labels=self.dataset.has_labels)

    def __len__(self) -> int:
        return len(self.labels)

    def gather(self, idx: Tensor) -> Tensor:
        """Float samples at `idx`, on the compute device."""
        return prepare(self.x[idx.to(self.x.device)].to(self.device, non_blocking=True), self.normalize)

    def iter_all(self, batch_size: int | None = None) -> Iterator[Tensor]:
        """Every sample once, in dataset order (evaluation and prediction)."""
        yield from self.iter_indices(torch.arange(len(self)), batch_size)

    def iter_indices(self, idx: Tensor, batch_size: int | None = None) -> Iterator[Tensor]:
        step = batch_size or self.eval_batch_size
        idx = idx.to(self.x.device)  # one copy of the indices, not one per batch (a no-op on the CPU)
        for start in range(0, len(idx), step):
            yield self.gather(idx[start:start + step])

    def client(self, client_id: int, batch_size: int) -> ClientData:
        return ClientData(self, client_id, self.parts[client_id], batch_size)


@dataclass
class ClientData:
    """One client's share: an index tensor plus the batching rules."""

    source: FederatedData
    client_id: int
    indices: Tensor
    batch_size: int

    @property
    def device(self) -> torch.device:
        return self.source.device

    def __len__(self) -> int:
        return len(self.indices)

    def batches(self, generator: torch.Generator, shuffle: bool = True,
                drop_last: bool = False) -> Iterator[dict[str, Tensor]]:
        """One epoch of {"x", "index"} batches in an order drawn from `generator` (a CPU generator).

        A final batch of one sample is dropped: BatchNorm cannot train on it."""
        order = self.indices
        if shuffle:
            order = order[torch.randperm(len(order), generator=generator)]
        n = len(order)
        stop = n - n % self.batch_size if drop_last else n
        if self.source.on_device or self.source.host_workers == 0:
            # samples on the accelerator: the epoch's order goes there once, so neither gather nor a method reading
            # batch["index"] copies indices host-to-device per batch (a no-op where the samples are on the CPU)
            order = order.to(self.source.x.device)
            for start in range(0, stop, self.batch_size):
                idx = order[start:start + self.batch_size]
                if len(idx) > 1:
                    yield {"x": self.source.gather(idx), "index": idx}
            return
        yield from self._loader_batches(order[:stop])

    def _loader_batches(self, order: Tensor) -> Iterator[dict[str, Tensor]]:
        """DataLoader path for data kept on the host: workers gather and convert while the device trains."""
        from torch.utils.data import DataLoader

        chunks = list(order.split(self.batch_size))
        x = self.source.x
        loader = DataLoader(chunks, batch_size=None, num_workers=self.source.host_workers,
                            collate_fn=lambda idx: (x[idx], idx), pin_memory=torch.cuda.is_available())
        for xb, idx in loader:
            if len(idx) > 1:
                yield {"x": prepare(xb.to(self.device, non_blocking=True), self.source.normalize), "index": idx}

    def iter_all(self, batch_size: int | None = None) -> Iterator[Tensor]:
        """The client's samples once, in index order (local embeddings, local k-means), in batches of its training
        batch size unless told otherwise: a client is sized for its training batches, and embedding its whole share
        in one eval batch of 1,024 raised FedSpectral's peak by 30-60 MB (benchmarks/results/memory_peaks.md)."""
        yield from self.source.iter_indices(self.indices, batch_size or self.batch_size)

    def all_x(self) -> Tensor:
        """All the client's samples as one float tensor (for methods without a network)."""
        return torch.cat(list(self.iter_all()))

"""Linear evaluation: a linear classifier trained on frozen representations (FedMCC Tables III-IV).

FedMCC (Section V-C) states only: "We train a linear classifier on top of the frozen representation trained
by FedMCC and measure the Top 1% [top-1] accuracy", and compares with the numbers of FedCA [22], FedU [23]
and FedEMA [24]. So we follow the protocol of those works' public code (FedU/FedEMA's
EasyFL applications/fedssl/linear_evaluation.py), which the compared numbers come from:

- the representations are computed once (the encoder is frozen and sees no augmentation) and used as
  they are: **no feature normalisation** beyond what ``method.embed`` does itself;
- one ``Linear(d, num_classes)`` with bias, cross-entropy, **Adam, lr 3e-3, no weight decay**,
  **200 epochs**, **mini-batches of 2048** representations; the final classifier is scored (no early
  stopping, no test-set model selection);
- top-1 accuracy on the test split.

Our departures, for determinism and soundness: the train representations are shuffled every epoch by a
generator seeded from ``seed`` (EasyFL iterates them in a fixed order), and the classifier's initial weights
come from the same seeded generator (PyTorch's default Linear initialisation, U(-1/sqrt(d), 1/sqrt(d))),
never from the global RNG.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from fedclust.errors import ConfigError
from fedclust.nn.optim import CpuAdam
from fedclust.seeding import generator

EPOCHS, LR, BATCH_SIZE = 200, 3e-3, 2048  # FedU / FedEMA's linear evaluation (see the module docstring)


@dataclass(frozen=True)
class LinearProbeResult:
    test_accuracy: float
    train_accuracy: float  # of the final classifier on the train representations
    epochs: int
    lr: float
    batch_size: int
    optimizer: str = "Adam (no weight decay)"
    normalisation: str = "none (representations as method.embed returns them)"

    def as_dict(self) -> dict:
        return asdict(self)


def linear_probe(train_x: Tensor, train_y: Tensor, test_x: Tensor, test_y: Tensor, num_classes: int | None = None,
                 seed: int = 0, epochs: int = EPOCHS, lr: float = LR,
                 batch_size: int = BATCH_SIZE) -> LinearProbeResult:
    """Train a linear classifier on (train_x, train_y) and return its top-1 accuracy on (test_x, test_y).

    Deterministic given ``seed`` on a given device (initialisation and batch order come from seeded
    generators). ``num_classes`` defaults to max label + 1 over both splits.
    """
    if epochs < 1:
        raise ConfigError("linear_epochs", epochs, "a positive integer")
    if batch_size < 1:
        raise ConfigError("linear_batch_size", batch_size, "a positive integer")
    device = train_x.device
    train_x, test_x = train_x.flatten(1).float(), test_x.flatten(1).float().to(device)
    train_y, test_y = train_y.to(device).long(), test_y.to(device).long()
    if num_classes is None:
        num_classes = int(max(train_y.max(), test_y.max())) + 1
    dim = train_x.shape[1]
    g = generator(seed, "linear-probe")  # CPU generator: the same draws on every device
    bound = 1.0 / math.sqrt(dim)
    weight = ((torch.rand(num_classes, dim, generator=g) * 2 - 1) * bound).to(device).requires_grad_(True)
    bias = ((torch.rand(num_classes, generator=g) * 2 - 1) * bound).to(device).requires_grad_(True)
    opt = CpuAdam([weight, bias], lr=lr, weight_decay=0.0)
    with torch.enable_grad():
        for _ in range(epochs):
            order = torch.randperm(len(train_x), generator=g).to(device)
            for start in range(0, len(order), batch_size):
                idx = order[start:start + batch_size]
                loss = F.cross_entropy(F.linear(train_x[idx], weight, bias), train_y[idx])
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
    with torch.no_grad():
        train_acc = _accuracy(train_x, train_y, weight, bias, batch_size)
        test_acc = _accuracy(test_x, test_y, weight, bias, batch_size)
    return LinearProbeResult(test_acc, train_acc, epochs, lr, batch_size)


def _accuracy(x: Tensor, y: Tensor, weight: Tensor, bias: Tensor, batch_size: int) -> float:
    correct = sum(int((F.linear(x[s:s + batch_size], weight, bias).argmax(1) == y[s:s + batch_size]).sum())
                  for s in range(0, len(x), batch_size))
    return correct / len(x)

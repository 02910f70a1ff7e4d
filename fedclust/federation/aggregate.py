"""Aggregation maths, in one functional module (variants only configure it).

FedAvg is a running weighted sum, so the server holds O(model) memory however many clients report.
"""

from __future__ import annotations

import torch
from torch import Tensor

from fedclust.errors import ConfigError


class WeightedSum:
    """Running sum of weight * state for the communicated keys, normalised by the total weight per key.

    The sums live in one contiguous float64 buffer allocated at the first client (``sums[key]`` are views
    of it) and every later client is added in place (``add_(value, alpha=weight)``: no float64 copy of the
    client's state, no new tensor per key), which is what keeps a round of many small clients cheap.
    Integer buffers (BatchNorm's num_batches_tracked) are summed in float64 too and rounded back."""

    def __init__(self) -> None:
        self.sums: dict[str, Tensor] = {}
        self.totals: dict[str, float] = {}
        self.dtypes: dict[str, torch.dtype] = {}
        self.count = 0

    @torch.no_grad()
    def add(self, state: dict[str, Tensor], weight: float, key_weights: dict[str, float] | None = None) -> None:
        """Fold one client's state in. key_weights overrides the weight for keys starting with a prefix
        (UIFCA weights cluster model k by the client's count of samples assigned to k)."""
        weights = {key: _weight_for(key, weight, key_weights) for key in state}
        if not self.sums:
            self._allocate({k: v for k, v in state.items() if weights[k] != 0})
        for key, value in state.items():
            w = weights[key]
            if w == 0:
                continue
            if key in self.sums:
                self.sums[key].add_(value.detach(), alpha=w)
                self.totals[key] += w
            else:  # a key the first clients did not weigh: a tensor of its own
                self.sums[key], self.totals[key], self.dtypes[key] = value.detach().double() * w, w, value.dtype
        self.count += 1

    def _allocate(self, state: dict[str, Tensor]) -> None:
        """Zeroed float64 sums for these keys: views of one buffer when they share a device."""
        if not state:
            return
        devices = {v.device for v in state.values()}
        if len(devices) == 1:
            flat = torch.zeros(sum(v.numel() for v in state.values()), dtype=torch.float64, device=devices.pop())
            views = flat.split([v.numel() for v in state.values()])
            zeros = {key: view.view(v.shape) for view, (key, v) in zip(views, state.items())}
        else:
            zeros = {key: torch.zeros(v.shape, dtype=torch.float64, device=v.device) for key, v in state.items()}
        for key, value in state.items():
            self.sums[key], self.totals[key], self.dtypes[key] = zeros[key], 0.0, value.dtype

    def average(self) -> dict[str, Tensor]:
        out = {}
        for key, total in self.totals.items():
            mean = self.sums[key] / total
            dtype = self.dtypes[key]
            out[key] = (mean.round() if not dtype.is_floating_point else mean).to(dtype)
        return out

    def __bool__(self) -> bool:
        return self.count > 0


class ServerStep:
    """The server's optimizer on the clients' average change (FedOpt: Reddi et al., "Adaptive Federated
    Optimization", ICLR 2021), here its SGD-with-momentum member, FedAvgM (Hsu, Qi & Brown, "Measuring the Effects
    of Non-Identical Data Distribution for Federated Visual Classification", 2019):

        m <- momentum * m + (average - global);   global <- global + lr * m

    lr 1 and momentum 0 are FedAvg (the average is returned untouched). Only ``keys`` (the model's trainable
    parameters) take the step: buffers such as BatchNorm's running statistics keep the plain average, which a
    momentum could push out of their range. The momentum is the server's state: it is checkpointed with the run."""

    def __init__(self, lr: float = 1.0, momentum: float = 0.0) -> None:
        self.lr, self.momentum = lr, momentum
        self.buffers: dict[str, Tensor] = {}

    @property
    def is_fedavg(self) -> bool:
        return self.lr == 1.0 and self.momentum == 0.0

    @torch.no_grad()
    def __call__(self, averaged: dict[str, Tensor], global_state: dict[str, Tensor],
                 keys: set[str]) -> dict[str, Tensor]:
        if self.is_fedavg:
            return averaged
        out = dict(averaged)
        for key, mean in averaged.items():
            if key not in keys or not mean.is_floating_point():
                continue
            delta = mean.double() - global_state[key].double()
            buffer = self.buffers.get(key)
            buffer = delta if buffer is None else buffer.to(delta.device).mul_(self.momentum).add_(delta)
            self.buffers[key] = buffer
            out[key] = (global_state[key].double() + self.lr * buffer).to(mean.dtype)
        return out

    def state_dict(self) -> dict[str, Tensor]:
        return {key: value.cpu() for key, value in self.buffers.items()}

    def load_state_dict(self, state: object, shapes: dict[str, torch.Size]) -> None:
        """The momentum a checkpoint saved (untrusted: one tensor of the parameter's shape per trainable key)."""
        if not isinstance(state, dict) or any(
                not isinstance(v, Tensor) or k not in shapes or v.shape != shapes[k] for k, v in state.items()):
            raise ConfigError("checkpoint", "server_step", "the server momentum of this model's trainable "
                              "parameters (one tensor of each parameter's shape), as fedclust writes it")
        self.buffers = {key: value.double() for key, value in state.items()}


def _weight_for(key: str, weight: float, key_weights: dict[str, float] | None) -> float:
    if key_weights:
        for prefix, w in key_weights.items():
            if key.startswith(prefix):
                return w
    return weight


def is_finite(*states: dict[str, Tensor]) -> bool:
    """True when every floating tensor of the given states/payloads is finite (non-finite updates are left
    out). One device sync per call, not one per tensor.

    Checked through each tensor's sum: a NaN or an infinity anywhere makes the sum non-finite, and a sum is
    far cheaper than an elementwise isfinite over the whole model; only a tensor whose sum is not finite
    (possibly an overflow of finite values) gets the elementwise check."""
    tensors = [v for state in states for v in state.values() if isinstance(v, Tensor) and v.is_floating_point()]
    if not tensors:
        return True
    sums = torch.isfinite(torch.stack([t.detach().sum().to(torch.float64) for t in tensors]))
    if bool(sums.all().item()):
        return True
    return all(bool(torch.isfinite(tensors[i]).all().item()) for i in (~sums).nonzero().flatten().tolist())

"""Aggregation maths, in one functional module (variants only configure it).

FedAvg is a running weighted sum, so the server holds O(model) memory however many clients report.
"""

from __future__ import annotations

import torch
from torch import Tensor


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

"""What a client keeps between rounds (its fixed groups, its graph, its past labels), read back from its state.

A client's state comes back from a checkpoint, which is untrusted: a kept index tensor is used only if it is an
int64 tensor of the expected shape with every entry in range, and anything else is made again, as on the client's
first round (indexing with a wrong one would fail far from its cause, or read the wrong samples silently).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor


def valid_indices(value: Any, shape: tuple[int, ...], high: int) -> bool:
    """Whether ``value`` is a non-empty int64 tensor of this shape with every entry in [0, high)."""
    return (isinstance(value, Tensor) and value.dtype == torch.long and value.shape == shape and value.numel() > 0
            and int(value.min()) >= 0 and int(value.max()) < high)


def kept_or_made(state: dict[str, Any], key: str, shape: tuple[int, ...], high: int,
                 make: Callable[[], Tensor]) -> Tensor:
    """``state[key]`` if it is valid indices of this shape and range, else ``make()`` (kept there, on the CPU)."""
    value = state.get(key)
    if not valid_indices(value, shape, high):
        value = make().cpu()
        state[key] = value
    return value

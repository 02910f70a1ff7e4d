"""Optimizer helpers shared by the engine and the methods that step their own optimizers."""

from __future__ import annotations

import collections

import torch


def reset_optimizer(optimizer: torch.optim.Optimizer) -> None:
    """Forget Adam moments etc. (a fresh optimizer for this client) without rebuilding the object."""
    optimizer.state = collections.defaultdict(dict)


class CpuAdam(torch.optim.Adam):
    """torch's Adam without its CUDA-graph capture check while no parameter is on a GPU: without CUDA that check asks
    NVML again at every step (2.0 ms a step on this 2-core CPU against 0.44 ms for the update itself)."""

    def _accelerator_graph_capture_health_check(self) -> None:
        if any(p.is_cuda for group in self.param_groups for p in group["params"]):
            super()._accelerator_graph_capture_health_check()

"""Local training of one client on the one working model (no copy per client)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import torch
from lightning.fabric import Fabric

from fedclust.contract import ClientContext, FederatedMethod, sendable_keys
from fedclust.errors import FedclustError


def local_fit(method: FederatedMethod, ctx: ClientContext, optimizers: list[torch.optim.Optimizer],
              fabric: Fabric, epochs: int) -> float:
    """Run `epochs` local epochs of method.training_step; return the mean loss (nan if no step).

    With automatic optimization the engine steps the one optimizer on the returned loss; otherwise the
    method steps its optimizers itself (method.optimizers() / manual_backward, which read the ClientSession the
    engine lent it) and returns a loss to log."""
    if not optimizers or epochs == 0:
        return math.nan
    method.train()
    automatic = method.automatic_optimization
    if automatic and len(optimizers) > 1:
        raise ValueError(f"{type(method).__name__} returns {len(optimizers)} optimizers: set "
                         "self.automatic_optimization = False and step them in training_step")
    total, steps = torch.zeros((), device=fabric.device), 0
    for epoch in range(epochs):
        for batch_idx, batch in enumerate(method.client_batches(ctx, epoch)):
            with fabric.autocast():
                out = method.training_step(batch, batch_idx)
            loss = out["loss"] if isinstance(out, dict) else out
            if automatic:
                optimizers[0].zero_grad(set_to_none=True)
                loss.backward()
                optimizers[0].step()
            total += loss.detach().float()
            steps += 1
    return (total / max(steps, 1)).item() if steps else math.nan


def check_payload(method: FederatedMethod, payload: dict[str, torch.Tensor], floor: int = 1) -> None:
    """A payload crosses the privacy boundary (DESIGN.md), so this is the one place that judges it: only the keys
    the method declares may cross, every summary comes with one count per row, and no row aggregates fewer than
    ``floor`` samples (federation.min_summary_size). A refusal is a defect of the method, named in one sentence."""
    name = type(method).__name__
    undeclared = sorted(set(payload) - sendable_keys(method))
    if undeclared:
        raise FedclustError(f"{name}.on_client_end sent {undeclared} but declares summary_keys = "
                            f"{dict(method.summary_keys)!r}: declare every key a client sends")
    for key, count_key in method.summary_keys.items():
        if key not in payload:
            continue
        rows, counts = payload[key], payload.get(count_key)
        if counts is None or counts.ndim != 1 or len(counts) != len(rows):
            raise FedclustError(f"{name}.on_client_end sent {key!r} without one count per row under {count_key!r}: "
                                "every summary declares how many samples each row aggregates")
        below = counts < floor
        empty = counts == 0  # a row that aggregates nothing carries nothing: zeros (FFCM's centre a client lacks)
        if bool((below & ~empty).any()) or bool(rows[empty].any()):
            smallest = float(counts[below].min())
            raise FedclustError(f"{name}.on_client_end sent a row of {key!r} that aggregates {smallest:g} samples, "
                                f"below the run's floor federation.min_summary_size = {floor}: a client sends only "
                                "aggregates of at least that many of its samples (or a row of zeros counted 0)")


def as_optimizer_list(configured: Any) -> list[torch.optim.Optimizer]:
    """configure_optimizers() may return None, one optimizer, or a list/tuple of them."""
    if configured is None:
        return []
    return list(configured) if isinstance(configured, list | tuple) else [configured]


def map_tensors(tree: Any, fn: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    """``fn`` applied to every tensor of a nested structure (dicts, lists, tuples, dataclasses such as
    ClientUpdate); everything else is kept as is."""
    if isinstance(tree, torch.Tensor):
        return fn(tree)
    if isinstance(tree, dict):
        return {k: map_tensors(v, fn) for k, v in tree.items()}
    if isinstance(tree, list | tuple):
        return type(tree)(map_tensors(v, fn) for v in tree)
    if dataclasses.is_dataclass(tree) and not isinstance(tree, type):
        return dataclasses.replace(tree, **{f.name: map_tensors(getattr(tree, f.name), fn)
                                            for f in dataclasses.fields(tree) if f.init})
    return tree


def to_cpu(tree: Any) -> Any:
    """Deep copy of a (nested) state onto the CPU: per-client state must not pin device memory."""
    return map_tensors(tree, lambda t: t.detach().to("cpu", copy=True))


def to_device(tree: Any, device: torch.device) -> Any:
    """Tensors of a (nested) object, e.g. gathered on the CPU, on the working device."""
    return map_tensors(tree, lambda t: t.to(device))

"""R independent starts of K normalizing flows, side by side (UIFCA's cluster models with label-free restarts,
fedclust/methods/uifca.py): flow j is start j // K's model j % K. The set scores samples, picks each sample's most
likely model per start, and draws the batches each flow trains on. It knows nothing of clients or rounds.

Functions over a plain ModuleList, so a method holding it as `flows` keeps the state-dict keys `flows.{j}.` that
its aggregation and checkpoints name.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence

import torch
from torch import Tensor, nn

from fedclust.nn.affine_stack import stacked_log_probs
from fedclust.nn.flows import AffineFlow, stack_log_prob

SCORE_LIMIT = 1e30  # totals clamped to +-this: a diverged start must not make a client's update non-finite


def flow_starts(make_flow: Callable[[], nn.Module], num_models: int, restarts: int, init_noise: float) -> nn.ModuleList:
    """R starts of K flows, each start one random flow and K - 1 copies of it, every copy plus N(0, init_noise^2)
    noise, so no model starts with a much lower loss (UIFCA's synthetic set-up). Drawn from torch's global RNG."""
    flows = nn.ModuleList()
    for _ in range(restarts):
        first = make_flow()
        copies = [first] + [copy.deepcopy(first) for _ in range(num_models - 1)]
        perturb_(copies, init_noise)
        flows.extend(copies)
    return flows


def start_slice(r: int, num_models: int) -> slice:
    """Start r's K flows in the set."""
    return slice(r * num_models, (r + 1) * num_models)


def is_affine(flows: Sequence[nn.Module]) -> bool:
    """Affine flows are scored and trained stacked (fedclust/nn/affine_stack.py)."""
    return isinstance(flows[0], AffineFlow)


@torch.no_grad()
def perturb_(flows: Sequence[nn.Module], init_noise: float) -> None:
    for flow in flows:
        for p in flow.parameters():
            p.add_(init_noise * torch.randn(p.shape).to(p))


@torch.no_grad()
def redraw_(flows: nn.ModuleList, make_flow: Callable[[], nn.Module], num_models: int, init_noise: float) -> None:
    """Every start's K models drawn again in place: one fresh flow per start loaded into each copy, then perturbed."""
    for start in range(len(flows) // num_models):
        fresh, copies = make_flow(), list(flows[start_slice(start, num_models)])
        for flow in copies:
            flow.load_state_dict(fresh.state_dict())
        perturb_(copies, init_noise)


def log_probs(flows: Sequence[nn.Module], x: Tensor) -> Tensor:
    """log p_j(x_b) for every flow j, (J, B); affine flows all at once (fedclust/nn/affine_stack.py)."""
    return (stacked_log_probs if is_affine(flows) else stack_log_prob)(flows, x.float())


@torch.no_grad()
def score_and_assign(flows: Sequence[nn.Module], x: Tensor, restarts: int) -> tuple[Tensor, Tensor]:
    """Per start, the sum over x of its best model's log-likelihood (R,), float64 and clamped to +-SCORE_LIMIT,
    and each sample's best model (R, n)."""
    best, choice = [], []
    for chunk in x.split(1024):
        values, index = log_probs(flows, chunk).unflatten(0, (restarts, -1)).max(1)
        best.append(values.double().sum(1))
        choice.append(index.cpu())
    totals = torch.stack(best).sum(0).nan_to_num(nan=-SCORE_LIMIT).clamp(-SCORE_LIMIT, SCORE_LIMIT)
    return totals, torch.cat(choice, 1)


def membership(assignment: Tensor, num_models: int) -> Tensor:
    """(K * R, n) bool from each start's assignment (R, n) of K models: sample b is in flow j's cluster set."""
    labels = assignment + num_models * torch.arange(len(assignment))[:, None]
    return nn.functional.one_hot(labels, num_models * len(assignment)).sum(0).T.bool()


def member_batches(members: Tensor, batch_size: int, steps: int, g: torch.Generator) -> tuple[Tensor, Tensor]:
    """`steps` batches for each of J flows from its members (J, n): step s gives flow j the next N samples of a
    random order of its members (drawn without replacement within the steps, cycling when it has fewer than
    steps * N). Returns the sample indices (steps, J, N) and weights (J, N) that sum to 1 per flow, 0 on the
    padding of a flow with fewer than N members."""
    counts = members.sum(1)
    order = torch.rand(members.shape, generator=g).masked_fill_(~members, 2.0).argsort(1)  # members first
    width = min(batch_size, members.shape[1])
    offsets = torch.arange(steps * width).view(steps, 1, width)
    picks = order.expand(steps, -1, -1).gather(2, offsets % counts[:, None])
    weights = (offsets[0] < counts[:, None]) / counts.clamp_max(width)[:, None]
    return picks, weights

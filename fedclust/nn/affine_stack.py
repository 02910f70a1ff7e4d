"""J affine flows (fedclust.nn.flows.AffineFlow, x = W z + b) stacked as one set of tensors: every flow's log-density
of a batch at once, and the weighted NLL of each flow's own batch with its analytic gradient. UIFCA trains its K * R
flows this way (a Gaussian's NLL depends on a batch only through its moments).

`stack_parameters` makes the flows' parameters views of the stacked rows, so an optimizer steps J flows as one
tensor per parameter name; `batch_nll` is the training loss on the stack, `stacked_log_probs` the scores.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor, nn

from fedclust.nn.flows import LOG_2PI


def _affine_parts(params: dict[str, Tensor]) -> tuple[Tensor, Tensor, Tensor]:
    """W (J, d, d), its inverse A and log|det W| (J,) of J stacked affine flows (fedclust.nn.flows.AffineFlow)."""
    if "log_diag" in params:  # triangular: W = strictly-lower part + diag(exp(log_diag))
        w = params["lower"].tril(-1) + torch.diag_embed(params["log_diag"].exp())
        eye = torch.eye(w.shape[-1], dtype=w.dtype, device=w.device).expand_as(w)
        return w, torch.linalg.solve_triangular(w, eye, upper=False), params["log_diag"].sum(1)
    w = params["weight"]
    return w, torch.linalg.inv(w), torch.linalg.slogdet(w).logabsdet


def affine_log_probs(params: dict[str, Tensor], x: Tensor) -> Tensor:
    """log p_j(x_b) of every stacked affine flow j and sample b of x (B, d): shape (J, B)."""
    _, a, log_det = _affine_parts(params)
    z = torch.matmul(x[None] - params["bias"][:, None], a.transpose(1, 2))
    return -0.5 * (z.pow(2).sum(2) + x.shape[1] * LOG_2PI) - log_det[:, None]


class AffineBatchNLL(torch.autograd.Function):
    """Sum over J affine flows of the weighted NLL of each flow's batch, from the batch's moments about the flow's
    bias b, with the analytic gradient (a Gaussian's NLL depends on a batch only through them; 3x faster than
    autograd through a batched triangular solve). Flow j's moments: s = sum w, m = sum w (x - b),
    C = sum w (x - b)(x - b)^T, with w its batch weights; the loss is 0.5 tr(A C A^T) + s log|det W| + s d log(2 pi)
    / 2, A = W^-1."""

    @staticmethod
    def forward(ctx: Any, s: Tensor, m: Tensor, c: Tensor, names: tuple[str, ...], *tensors: Tensor) -> Tensor:
        params = dict(zip(names, tensors))
        _, a, log_det = _affine_parts(params)
        inner = a @ c @ a.transpose(1, 2)  # sum w z z^T
        ctx.save_for_backward(s, m, a, inner, *tensors)
        ctx.names = names
        constant = 0.5 * c.shape[-1] * LOG_2PI * s.sum()  # the NLL in nats, as AffineFlow.nll gives it
        return 0.5 * torch.diagonal(inner, dim1=1, dim2=2).sum() + (s * log_det).sum() + constant

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
        s, m, a, inner, *tensors = ctx.saved_tensors
        params = dict(zip(ctx.names, tensors))
        at = a.transpose(1, 2)
        grad_w = -(at @ inner)  # d/dW of 0.5 tr(A C A^T)
        grads = {"bias": -(at @ (a @ m[..., None])).squeeze(-1)}  # d/db: C = sum w (x - b)(x - b)^T moves with b
        if "log_diag" in params:
            grads["lower"] = grad_w.tril(-1)
            grads["log_diag"] = torch.diagonal(grad_w, dim1=1, dim2=2) * params["log_diag"].exp() + s[:, None]
        else:
            grads["weight"] = grad_w + s[:, None, None] * at  # d log|det W| / dW = W^-T
        return (None, None, None, None, *(grad * grads[name] for name in ctx.names))


def stack_parameters(flows: Sequence[nn.Module]) -> dict[str, Tensor]:
    """Each parameter of the J flows as one (J, ...) leaf tensor, for an optimizer to step, the flows' own parameters
    becoming views of its rows: their state dict (what FedAvg weighs per flow) is unchanged, and one optimizer step
    costs 3 tensors instead of 3 * J (10x faster on a CPU at 32 flows)."""
    names = [name for name, _ in flows[0].named_parameters()]
    stacked = {name: torch.stack([getattr(f, name).detach() for f in flows]).requires_grad_() for name in names}
    for j, flow in enumerate(flows):
        for name in names:
            setattr(flow, name, nn.Parameter(stacked[name].data[j]))
    return stacked


def shares_stack(flows: Sequence[nn.Module], stacked: dict[str, Tensor]) -> bool:
    """Whether every flow's parameters are still views of `stacked`'s rows (moving or copying the flows breaks
    that, and the optimizer would then step tensors no flow reads); False for an empty stack."""
    return bool(stacked) and all(getattr(flow, name).data_ptr() == tensor.data[j].data_ptr()
                                 for name, tensor in stacked.items() for j, flow in enumerate(flows))


def batch_nll(stacked: dict[str, Tensor], active: Tensor, x: Tensor, weights: Tensor) -> Tensor:
    """The summed weighted NLL of the stacked flows `active` (J' indices into the stack), flow active[i] on its batch
    x[i] (J', N, d) with weights[i] (J', N), through `AffineBatchNLL` (the gradient reaches `stacked`)."""
    names = tuple(stacked)
    every = len(active) == len(stacked[names[0]])  # all flows: the leaves themselves, no gather
    params = [stacked[n] if every else stacked[n][active] for n in names]
    centred = x - params[names.index("bias")].detach()[:, None]  # moments about b: no cancellation
    weighted = centred * weights[..., None]
    moments = weights.sum(1), weighted.sum(1), weighted.transpose(1, 2) @ centred
    return AffineBatchNLL.apply(*moments, names, *params)


def stacked_log_probs(flows: Sequence[nn.Module], x: Tensor) -> Tensor:
    """log p_j(x_b) of every affine flow j and sample b of x (B, d), shape (J, B), from the flows' own parameters
    (stacked afresh, so it holds whether or not they view a `stack_parameters` stack)."""
    names = [name for name, _ in flows[0].named_parameters()]
    return affine_log_probs({name: torch.stack([getattr(f, name) for f in flows]) for name in names}, x)

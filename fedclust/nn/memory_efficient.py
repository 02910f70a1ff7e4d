"""Memory-efficient gradients for batch-coupled losses (FedMCC Section VI, after Gao et al. 2021's
gradient cache).

A contrastive loss couples every sample of the batch, so ordinary back-propagation keeps the whole
batch's computation graph: memory grows with the batch size. Here a first pass computes the
representations without a graph, the loss on them, and the loss's gradient with respect to each
representation (the paper's alpha_{i,j}); a second pass re-encodes one chunk at a time with a graph and
back-propagates that chunk's share of those gradients. The parameter gradients are the ordinary ones
(a sum over samples of d rep_i / d theta . alpha_i), and peak memory is one chunk's graph.

Equality holds when the encoder treats samples independently. BatchNorm in training mode does not: it
normalises by the chunk's statistics instead of the batch's, so with BatchNorm the result is the
chunked-BN gradient (and the running statistics are updated once per chunk). FedMCC's Section VI assumes
per-sample networks; we do not work around this, we state it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor

Encode = Callable[[Tensor], Tensor | tuple[Tensor, ...]]


def _as_tuple(out: Tensor | tuple[Tensor, ...]) -> tuple[Tensor, ...]:
    return out if isinstance(out, tuple) else (out,)


def chunked_backward(encode: Encode, inputs: Sequence[Tensor], loss_fn: Callable[..., Tensor],
                     chunk_size: int) -> Tensor:
    """Back-propagate ``loss_fn`` of the representations of ``inputs`` one chunk at a time.

    ``encode(x)`` maps a batch to one representation tensor or a tuple of them (e.g. instance
    projection and cluster probabilities); ``inputs`` are the batches to encode (e.g. the two views);
    ``loss_fn`` receives, for each input in order, its representations (unpacked, so a tuple output of
    two tensors and two inputs gives four arguments: ``loss_fn(z_a, c_a, z_b, c_b)``). Gradients are
    accumulated into the parameters' ``.grad`` exactly as ``loss.backward()`` would; the detached loss
    is returned. ``encode`` must be deterministic (views are drawn before, not inside, ``encode``).
    """
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be a positive integer, got {chunk_size}")
    with torch.no_grad():  # pass 1: representations without any graph
        reps = [_chunked_encode(encode, x, chunk_size) for x in inputs]
    leaves = [tuple(r.detach().requires_grad_(True) for r in rep) for rep in reps]
    with torch.enable_grad():
        loss = loss_fn(*[r for rep in leaves for r in rep])
        grads = torch.autograd.grad(loss, [r for rep in leaves for r in rep], allow_unused=True)
    per_input = iter(grads)
    for x, rep in zip(inputs, leaves):  # pass 2: one chunk's graph at a time
        g = [next(per_input) for _ in rep]
        g = [torch.zeros_like(r) if gi is None else gi for r, gi in zip(rep, g)]
        for start in range(0, x.shape[0], chunk_size):
            out = _as_tuple(encode(x[start:start + chunk_size]))
            torch.autograd.backward(out, [gi[start:start + chunk_size] for gi in g])
    return loss.detach()


def _chunked_encode(encode: Encode, x: Tensor, chunk_size: int) -> tuple[Tensor, ...]:
    parts = [_as_tuple(encode(x[s:s + chunk_size])) for s in range(0, x.shape[0], chunk_size)]
    return tuple(torch.cat(p) for p in zip(*parts))

"""A round's clients trained together (federation.clients_together): every client's parameters, BatchNorm buffers
and Adam state stacked along a leading client dimension, each step's loss run over the clients at once by
torch.func.vmap on torch.func.functional_call, rather than one client after another on the one working model.

What stays client by client, exactly as the sequential path (local_fit in federation/client.py) does it: the
engine's start and finish of a client's visit (weights and optimizer state loaded, on_client_start; on_client_end,
the privacy boundary, the client's own keys and optimizer state saved), its batches (client_batches) and every random
draw of a step (method.batched_inputs: the views, from the client's own generators). What runs together: the
method's pure loss (method.loss_from_inputs), its backward pass and Adam's update, the maths of torch.optim.Adam on
the stacked tensors with a step count per client. The result equals the sequential one up to float rounding
(tests/federation/test_together.py states the tolerance).

Steps. Step t trains every client that has a t-th batch; a client whose batches have run out takes no step, and its
weights, buffers and Adam state do not move. Clients whose step inputs have the same shapes run in one vmap call. A
client's last, shorter batch usually has a size of its own, so it runs in a group of its own (or with the clients
whose last batch has the same size): nothing is padded or masked, so no loss, BatchNorm statistic or decorrelation
term ever sees a sample that is not the client's, at the price of one small call per distinct remainder.

BatchNorm. Each client's running statistics are its own slice of the stacked buffers, which functional_call lends
the module and BatchNorm updates in place, as it does for one client at a time; they are averaged (or kept) with
the weights after the round exactly as before.

Per-client attributes. What on_client_start prepares for the client's steps (a generator, pseudo-labels) lives in
attributes of the one method object; each client's are kept after its start and put back whenever it is visited
again (to draw a batch, and for on_client_end).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from lightning.fabric import Fabric
from torch import Tensor, nn
from torch.func import functional_call, vmap

from fedclust.contract import ClientContext, ClientSession, ClientUpdate, FederatedMethod, OptionalHooks
from fedclust.nn.optim import CpuAdam

log = logging.getLogger("fedclust")

# Attributes of the method that are not a client's: the engine's session, the train/eval flag, the module's tables.
_NOT_PER_CLIENT = {"session", "training", "_parameters", "_buffers", "_modules"}
Trained = tuple[ClientUpdate, dict[str, Tensor], float]


def unsupported(method: FederatedMethod, optimizers: list[torch.optim.Optimizer]) -> str | None:
    """Why ``method``'s clients cannot be trained together (None: they can)."""
    cls, name = type(method), type(method).__name__
    if any(getattr(cls, hook) is getattr(OptionalHooks, hook) for hook in ("batched_inputs", "loss_from_inputs")):
        return f"{name} does not split its training step (batched_inputs, loss_from_inputs)"
    if _defined_in(cls, "training_step") is not _defined_in(cls, "loss_from_inputs"):
        return f"{name} overrides training_step apart from loss_from_inputs"
    if not method.automatic_optimization or len(optimizers) != 1:
        return f"{name} steps its own optimizers"
    optimizer = optimizers[0]
    if type(optimizer) not in (torch.optim.Adam, CpuAdam) or len(optimizer.param_groups) != 1:  # CpuAdam: Adam's maths
        return f"{name}'s optimizer is not one torch.optim.Adam over one parameter group"
    group = optimizer.param_groups[0]
    if [id(p) for p in group["params"]] != [id(p) for p in method.parameters()]:
        return f"{name}'s Adam does not hold every parameter of the method, in order"
    if (group["amsgrad"] or group["maximize"] or group["differentiable"] or group["capturable"] or group["fused"]
            or isinstance(group["lr"], Tensor)):
        return f"{name}'s Adam asks for amsgrad, maximize, differentiable, capturable, fused or a tensor lr"
    return None


def clients_together(setting: str, method: FederatedMethod, optimizers: list[torch.optim.Optimizer],
                     device: torch.device) -> bool:
    """federation.clients_together resolved for this run: "auto" is on CUDA only (on the CPU, training the clients
    together measured 11 % slower: docs/findings/engine.md), "on" wherever the method allows it."""
    if setting == "off":
        return False
    reason = unsupported(method, optimizers)
    if setting == "on" and reason is not None:
        log.info("federation.clients_together is on, but %s: its clients train one by one", reason)
    return reason is None and (setting == "on" or device.type == "cuda")


def _defined_in(cls: type, name: str) -> type:
    return next(base for base in cls.__mro__ if name in vars(base))


@dataclass
class _Client:
    """One client's visit while the round's clients train together."""

    ctx: ClientContext
    session: ClientSession
    attributes: dict[str, Any]  # the method's attributes as on_client_start left them
    batches: Iterator[Any] | None = None
    loss: Tensor | None = None
    steps: int = 0
    adam: dict[int, dict[str, Tensor]] = field(default_factory=dict)


def train_together(method: FederatedMethod, optimizer: torch.optim.Optimizer, fabric: Fabric, client_ids: list[int],
                   epochs: int, start: Callable[[int], ClientContext],
                   finish: Callable[[ClientContext, float], Trained]) -> Iterator[tuple[int, Trained]]:
    """Train ``client_ids`` together for ``epochs`` local epochs; yield (client id, what ``finish`` returns) in
    their order, one at a time: ``finish`` leaves the client's trained weights in the one working model, so the
    caller uses each result before asking for the next. ``start(client_id)`` begins a client's visit as the
    sequential path does (weights, optimizer state, session, on_client_start); ``finish(ctx, loss)`` ends it."""
    clients, snapshots = [], []
    for client_id in client_ids:
        ctx = start(client_id)
        clients.append(_Client(ctx, method.session,
                               {k: v for k, v in vars(method).items() if k not in _NOT_PER_CLIENT}))
        snapshots.append(_snapshot(method, optimizer))
        method.session = None
    stacked = _Stacked(method, optimizer, snapshots)
    del snapshots
    try:
        method.train()
        _train(method, fabric, clients, stacked, epochs)
        for index, client in enumerate(clients):
            stacked.load(index, method, optimizer)
            _visit(method, client)
            loss = (client.loss / client.steps).item() if client.steps else float("nan")
            result = finish(client.ctx, loss)
            method.session = None
            yield client.ctx.client_id, result
    finally:
        method.session = None


def _visit(method: FederatedMethod, client: _Client) -> None:
    """The method as client's on_client_start left it: its attributes and its session."""
    vars(method).update(client.attributes)
    method.session = client.session


def _train(method: FederatedMethod, fabric: Fabric, clients: list[_Client], stacked: _Stacked, epochs: int) -> None:
    """Every client's steps: each step's inputs drawn client by client, then one stacked step per group of clients
    whose inputs have the same shapes."""
    for client in clients:
        client.batches = _epochs(method, client.ctx, epochs)
    pending = list(range(len(clients)))
    while pending:
        groups: dict[tuple, list[tuple[int, dict[str, Tensor]]]] = defaultdict(list)
        for index in pending:
            _visit(method, clients[index])
            batch = next(clients[index].batches, None)
            if batch is None:  # this client's epochs are done: it takes no further step
                continue
            with fabric.autocast():  # as local_fit runs the whole training_step, views included
                inputs = method.batched_inputs(batch)
            groups[tuple((k, tuple(v.shape), v.dtype) for k, v in sorted(inputs.items()))].append((index, inputs))
        method.session = None
        pending = [index for group in groups.values() for index, _ in group]
        pending.sort()
        for group in groups.values():
            members = [index for index, _ in group]
            method.session = clients[members[0]].session  # the round's stage, for a loss that reads self.ctx
            inputs = {k: torch.stack([drawn[k] for _, drawn in group]) for k in group[0][1]}
            losses = stacked.step(method, fabric, members, inputs)
            method.session = None
            for index, loss in zip(members, losses):
                client = clients[index]
                client.loss = loss if client.loss is None else client.loss + loss
                client.steps += 1


def _epochs(method: FederatedMethod, ctx: ClientContext, epochs: int) -> Iterator[Any]:
    """The client's batches of every local epoch; each epoch's are asked for when the one before is done (while the
    client is visited), as local_fit asks for them."""
    for epoch in range(epochs):
        yield from method.client_batches(ctx, epoch)


def _snapshot(method: FederatedMethod, optimizer: torch.optim.Optimizer) -> tuple[list, dict, list]:
    """A started client's parameters, buffers and Adam state (copies: the next client's start overwrites them)."""
    params = [p.detach().clone() for p in method.parameters()]
    buffers = {name: b.detach().clone() for name, b in method.named_buffers()}
    adam = [{k: v.detach().clone() for k, v in optimizer.state[p].items()} if optimizer.state.get(p) else None
            for p in method.parameters()]
    return params, buffers, adam


class _LossOf(nn.Module):
    """The method's loss_from_inputs as a module's forward, for functional_call."""

    def __init__(self, method: FederatedMethod):
        super().__init__()
        self.method = method

    def forward(self, inputs: dict[str, Tensor]) -> Tensor:
        return self.method.loss_from_inputs(inputs)


class _Stacked:
    """The clients' parameters, buffers and Adam state, stacked along a leading client dimension."""

    def __init__(self, method: FederatedMethod, optimizer: torch.optim.Optimizer, snapshots: list):
        group = optimizer.param_groups[0]
        self.lr, (self.beta1, self.beta2) = group["lr"], group["betas"]
        self.eps, self.weight_decay = group["eps"], group["weight_decay"]
        self.names = [f"method.{name}" for name, _ in method.named_parameters()]
        self.trainable = [p.requires_grad for p in method.parameters()]
        self.params = [torch.stack(ps) for ps in zip(*(s[0] for s in snapshots))]
        self.buffers = {f"method.{name}": torch.stack([s[1][name] for s in snapshots])
                        for name in snapshots[0][1]} if snapshots else {}
        self.exp_avg, self.exp_avg_sq, self.steps, self.has_state = [], [], [], []
        for i, p in enumerate(self.params):
            states = [s[2][i] for s in snapshots]
            self.has_state.append(torch.tensor([s is not None for s in states], device=p.device))
            self.steps.append(torch.tensor([float(s["step"]) if s else 0.0 for s in states], dtype=torch.float64,
                                           device=p.device))
            self.exp_avg.append(torch.stack([s["exp_avg"] if s else torch.zeros_like(p[0]) for s in states]))
            self.exp_avg_sq.append(torch.stack([s["exp_avg_sq"] if s else torch.zeros_like(p[0]) for s in states]))
        self.size = len(snapshots)
        self.loss_of = _LossOf(method)

    def step(self, method: FederatedMethod, fabric: Fabric, members: list[int], inputs: dict[str, Tensor]) -> Tensor:
        """One training step of the clients ``members`` (increasing indices) on their stacked ``inputs``; their
        losses, detached, in float."""
        whole = len(members) == self.size  # every client: work on the stacked tensors themselves, no copy
        idx = None if whole else torch.tensor(members, device=self.params[0].device)
        pick = (lambda t: t) if whole else (lambda t: t[idx])
        params = [pick(p).detach().requires_grad_(trainable) for p, trainable in zip(self.params, self.trainable)]
        buffers = {name: pick(b) for name, b in self.buffers.items()}  # BatchNorm updates these in place

        def loss_of(params: list[Tensor], buffers: dict[str, Tensor], inputs: dict[str, Tensor]) -> Tensor:
            return functional_call(self.loss_of, ({**dict(zip(self.names, params)), **buffers}), (inputs,))

        with fabric.autocast():
            losses = vmap(loss_of)(params, buffers, inputs)
        trained = [p for p, trainable in zip(params, self.trainable) if trainable]
        grads = iter(torch.autograd.grad(losses.sum(), trained, allow_unused=True))
        with torch.no_grad():
            for i, (p, trainable) in enumerate(zip(params, self.trainable)):
                grad = next(grads) if trainable else None
                if grad is not None:
                    self._adam(i, p, grad, idx)
                if not whole:
                    self.params[i][idx] = p
            if not whole:
                for name, b in buffers.items():
                    self.buffers[name][idx] = b
        return losses.detach().float()

    def _adam(self, i: int, p: Tensor, grad: Tensor, idx: Tensor | None) -> None:
        """torch.optim.Adam's update (no amsgrad) of parameter i of the clients at ``idx`` (None: all), in place on
        ``p``; the bias corrections from each client's own step count, in float64 as torch computes them. Written
        here because torch's functional adam takes one step count per tensor, not one per client of a stack."""
        pick = (lambda t: t) if idx is None else (lambda t: t[idx])
        exp_avg, exp_avg_sq, steps = pick(self.exp_avg[i]), pick(self.exp_avg_sq[i]), pick(self.steps[i]) + 1
        if self.weight_decay:
            grad = grad.add(p, alpha=self.weight_decay)
        exp_avg.lerp_(grad, 1 - self.beta1)
        exp_avg_sq.mul_(self.beta2).addcmul_(grad, grad, value=1 - self.beta2)
        shape = (-1,) + (1,) * (p.dim() - 1)
        step_size = (-self.lr / (1 - self.beta1 ** steps)).to(p.dtype).view(shape)
        correction2 = (1 - self.beta2 ** steps).sqrt().to(p.dtype).view(shape)
        p.add_(step_size * exp_avg / (exp_avg_sq.sqrt() / correction2 + self.eps))
        if idx is None:
            self.steps[i] = steps
            self.has_state[i].fill_(True)
        else:
            self.exp_avg[i][idx], self.exp_avg_sq[i][idx], self.steps[i][idx] = exp_avg, exp_avg_sq, steps
            self.has_state[i][idx] = True

    def load(self, index: int, method: FederatedMethod, optimizer: torch.optim.Optimizer) -> None:
        """Client ``index``'s trained parameters and buffers into the working model, its Adam state into the
        optimizer, in the form torch.optim.Adam keeps it."""
        with torch.no_grad():
            for p, stacked in zip(method.parameters(), self.params):
                p.copy_(stacked[index])
            for name, b in method.named_buffers():
                b.copy_(self.buffers[f"method.{name}"][index])
        optimizer.state = defaultdict(dict)
        for i, p in enumerate(method.parameters()):
            if bool(self.has_state[i][index]):
                optimizer.state[p] = {"step": torch.tensor(float(self.steps[i][index]), dtype=torch.float32),
                                      "exp_avg": self.exp_avg[i][index].clone(),
                                      "exp_avg_sq": self.exp_avg_sq[i][index].clone()}

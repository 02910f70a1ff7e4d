"""Prototype, not engine code (issue 13 point 4): train G tiny CCFC clients at once with torch.func.

    python benchmarks/many_clients_vmap.py --clients 100 --samples 10 --groups 10 25 100 --threads 1

One CCFC stage-1 round (SimSiam + lambda * the model-contrastive term against the frozen global model, one
local epoch, a fresh Adam per client, FedAvg of every weight and BatchNorm buffer) over `--clients` clients of
`--samples` Fashion-MNIST test images each, done two ways on the same views:

- sequential: the engine's way, one working model; per client: load the global weights, reset Adam, one
  step per mini-batch, fold the state into the running sum;
- vmapped: G clients at a time: every weight and buffer stacked G times (one copy per client), the clients'
  losses computed by ``vmap(functional_call(...))`` so that convolutions become grouped convolutions and
  linear layers batched matrix products, one backward of the summed losses (the clients are independent,
  so each one's gradient is its own), one foreach Adam over the stacked weights (Adam is elementwise, so
  that is G independent Adams), BatchNorm per client (its running statistics are stacked buffers updated
  inside vmap), and the FedAvg sum taken over the stacked dimension. The frozen global model is the same
  for every client, so it runs once on all G clients' views without vmap.

`--check` first compares the two on 4 clients (weights after the round: max difference). Reports seconds
per round for each G and the speed-up; peak memory grows with G (G copies of weights, gradients and Adam
state). Local k-means is left out of both (0.7 ms a client in the engine's profile); batching it is the
same idea (Lloyd's steps as batched matrix products over (G, n, d) embeddings).
"""

from __future__ import annotations

import argparse
import copy
import functools
import resource
import time

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.func import functional_call, vmap

from fedclust.data.config import DataConfig, build_federated_data
from fedclust.data.views import SimSiamViews28
from fedclust.losses.simsiam import model_contrastive_loss, simsiam_loss
from fedclust.methods import CCFC

LAM = 1.0
# CCFC's optimizer; --check swaps in plain SGD: Adam's first step is about lr * sign(gradient), so rounding-level
# gradient differences near zero would show as differences of up to 2 lr and hide real ones
OPTIMIZER = {"make": functools.partial(torch.optim.Adam, lr=1e-3, foreach=True)}


class Online(nn.Module):
    """CCFC's online network, returning z and p (the state-dict keys are enc.* and pred.*)."""

    def __init__(self, encoder: nn.Module, predictor: nn.Module):
        super().__init__()
        self.enc, self.pred = encoder, predictor

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        z = self.enc(x)
        return z, self.pred(z)


def client_loss(z1: Tensor, p1: Tensor, z2: Tensor, p2: Tensor, g1: Tensor, g2: Tensor) -> Tensor:
    loss = simsiam_loss(p1, p2, z1, z2)
    return loss + LAM * 0.5 * (model_contrastive_loss(p1, g1) + model_contrastive_loss(p2, g2))


def make_views(xs: Tensor, seed: int) -> tuple[Tensor, Tensor]:
    """Two augmented views of every client's images (clients, samples, 1, 28, 28), drawn once for both ways."""
    gen = torch.Generator().manual_seed(seed)
    views = SimSiamViews28()
    flat = xs.flatten(0, 1)
    return views(flat, gen).view_as(xs), views(flat, gen).view_as(xs)


def sequential_round(net: Online, frozen: nn.Module, global_state: dict[str, Tensor], v1: Tensor, v2: Tensor
                     ) -> tuple[dict[str, Tensor], list[dict[str, Tensor]]]:
    """The engine's loop on one working model (one mini-batch per client: samples <= batch size)."""
    sums = {k: torch.zeros(v.shape, dtype=torch.float64) for k, v in global_state.items()}
    finals = []
    opt = OPTIMIZER["make"](net.parameters())
    for c in range(len(v1)):
        net.load_state_dict(global_state)
        opt.state.clear()
        net.train()
        x1, x2 = v1[c], v2[c]
        with torch.no_grad():
            g1, g2 = frozen(x1), frozen(x2)
        z1, p1 = net(x1)
        z2, p2 = net(x2)
        loss = client_loss(z1, p1, z2, p2, g1, g2)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        state = net.state_dict()
        for k, v in state.items():
            sums[k].add_(v, alpha=float(len(x1)))
        if c < 4:
            finals.append({k: v.clone() for k, v in state.items()})
    return sums, finals


def vmapped_round(net: Online, frozen: nn.Module, global_state: dict[str, Tensor], v1: Tensor, v2: Tensor,
                  group: int) -> tuple[dict[str, Tensor], list[dict[str, Tensor]]]:
    """G clients at a time with torch.func: stacked weights and buffers, one step for the whole group."""
    sums = {k: torch.zeros(v.shape, dtype=torch.float64) for k, v in global_state.items()}
    names = {k for k, _ in net.named_parameters()}
    finals: list[dict[str, Tensor]] = []
    net.train()
    for start in range(0, len(v1), group):
        x1, x2 = v1[start:start + group], v2[start:start + group]
        g = len(x1)
        params = {k: global_state[k].expand(g, *global_state[k].shape).clone().requires_grad_()
                  for k in global_state if k in names}
        buffers = {k: global_state[k].expand(g, *global_state[k].shape).clone()
                   for k in global_state if k not in names}
        opt = OPTIMIZER["make"](list(params.values()))  # G independent Adams
        with torch.no_grad():  # the frozen global model is shared: one forward for the whole group
            g1 = frozen(x1.flatten(0, 1)).view(g, x1.shape[1], -1)
            g2 = frozen(x2.flatten(0, 1)).view(g, x2.shape[1], -1)

        def one_client(p: dict[str, Tensor], b: dict[str, Tensor], a1: Tensor, a2: Tensor, h1: Tensor, h2: Tensor
                       ) -> Tensor:
            z1, p1 = functional_call(net, (p, b), (a1,))
            z2, p2 = functional_call(net, (p, b), (a2,))
            return client_loss(z1, p1, z2, p2, h1, h2)

        losses = vmap(one_client, in_dims=(0, 0, 0, 0, 0, 0))(params, buffers, x1, x2, g1, g2)
        opt.zero_grad(set_to_none=True)
        losses.sum().backward()  # clients are independent: each stacked slice gets its own client's gradient
        opt.step()
        weights = torch.full((g,), float(x1.shape[1]), dtype=torch.float64)
        with torch.no_grad():
            for k, v in {**params, **buffers}.items():
                sums[k] += torch.tensordot(weights, v.double(), dims=1)
        for c in range(min(g, 4 - len(finals))):
            finals.append({k: v[c].detach().clone() for k, v in {**params, **buffers}.items()})
    return sums, finals


def _conv(x: Tensor, w: Tensor, b: Tensor, conv: nn.Conv2d) -> Tensor:
    """Per-client convolution as im2col + one batched matrix product: x (G, B, C, H, W), w (G, O, C, k, k)."""
    g, n = x.shape[:2]
    cols = F.unfold(x.flatten(0, 1), conv.kernel_size, padding=conv.padding, stride=conv.stride)  # (G*B, Ckk, L)
    ckk, length = cols.shape[1:]
    cols = cols.view(g, n, ckk, length).transpose(1, 2).reshape(g, ckk, n * length)
    out = torch.baddbmm(b.unsqueeze(2), w.view(g, w.shape[1], ckk), cols)  # (G, O, B*L)
    h = (x.shape[3] + 2 * conv.padding[0] - conv.kernel_size[0]) // conv.stride[0] + 1
    return out.view(g, -1, n, h, length // h).transpose(1, 2)


def _batch_norm(x: Tensor, p: dict[str, Tensor], prefix: str, bn: nn.modules.batchnorm._BatchNorm) -> Tensor:
    """Per-client BatchNorm in training mode: the clients folded into the channels (G*C), running statistics
    updated in place in the stacked buffers."""
    g, n, c = x.shape[:3]
    folded = x.transpose(1, 2).reshape(g * c, n, *x.shape[3:]).transpose(0, 1)  # (B, G*C, ...)
    weight = p[prefix + "weight"].reshape(-1) if bn.affine else None
    bias = p[prefix + "bias"].reshape(-1) if bn.affine else None
    p[prefix + "num_batches_tracked"].add_(1)
    out = F.batch_norm(folded, p[prefix + "running_mean"].view(-1), p[prefix + "running_var"].view(-1), weight,
                       bias, True, bn.momentum, bn.eps)
    return out.transpose(0, 1).reshape(g, c, n, *x.shape[3:]).transpose(1, 2)


def batched_forward(module: nn.Module, p: dict[str, Tensor], x: Tensor, prefix: str = "") -> Tensor:
    """``module`` (training mode) run for G clients at once on x (G, B, ...) with the stacked weights and buffers
    p (every entry (G, ...)); only the layer types of CCFC's ConvNet28, projector and predictor."""
    if isinstance(module, nn.Sequential):
        for name, child in module.named_children():
            x = batched_forward(child, p, x, f"{prefix}{name}.")
        return x
    if isinstance(module, nn.Conv2d):
        return _conv(x, p[prefix + "weight"], p[prefix + "bias"], module)
    if isinstance(module, nn.Linear):
        return torch.baddbmm(p[prefix + "bias"].unsqueeze(1), x, p[prefix + "weight"].transpose(1, 2))
    if isinstance(module, nn.modules.batchnorm._BatchNorm):
        return _batch_norm(x, p, prefix, module)
    if isinstance(module, nn.LeakyReLU):
        return F.leaky_relu(x, module.negative_slope)
    if isinstance(module, nn.ReLU):
        return F.relu(x)
    if isinstance(module, nn.Flatten):
        return x.flatten(2)
    if hasattr(module, "net"):  # ConvNet28
        return batched_forward(module.net, p, x, prefix + "net.")
    raise NotImplementedError(type(module).__name__)


def bmm_round(net: Online, frozen: nn.Module, global_state: dict[str, Tensor], v1: Tensor, v2: Tensor,
              group: int) -> tuple[dict[str, Tensor], list[dict[str, Tensor]]]:
    """As vmapped_round, with the batched layers written out (im2col + bmm convolutions, folded BatchNorm)
    instead of vmap's batching rules (whose grouped convolutions are slow on the CPU)."""
    sums = {k: torch.zeros(v.shape, dtype=torch.float64) for k, v in global_state.items()}
    names = {k for k, _ in net.named_parameters()}
    finals: list[dict[str, Tensor]] = []
    for start in range(0, len(v1), group):
        x1, x2 = v1[start:start + group], v2[start:start + group]
        g, n = x1.shape[:2]
        stacked = {k: v.expand(g, *v.shape).clone() for k, v in global_state.items()}
        params = [stacked[k].requires_grad_() for k in stacked if k in names]
        opt = OPTIMIZER["make"](params)
        with torch.no_grad():
            h1 = frozen(x1.flatten(0, 1)).view(g, n, -1)
            h2 = frozen(x2.flatten(0, 1)).view(g, n, -1)
        z1 = batched_forward(net.enc, stacked, x1, "enc.")
        p1 = batched_forward(net.pred, stacked, z1, "pred.")
        z2 = batched_forward(net.enc, stacked, x2, "enc.")
        p2 = batched_forward(net.pred, stacked, z2, "pred.")
        cos = functools.partial(F.cosine_similarity, dim=-1)  # per client: the mean over its own samples
        losses = (-0.5 * cos(p1, z2.detach()).mean(1) - 0.5 * cos(p2, z1.detach()).mean(1)
                  - LAM * 0.5 * (cos(p1, h1).mean(1) + cos(p2, h2).mean(1)))
        opt.zero_grad(set_to_none=True)
        losses.sum().backward()
        opt.step()
        weights = torch.full((g,), float(n), dtype=torch.float64)
        with torch.no_grad():
            for k, v in stacked.items():
                sums[k] += torch.tensordot(weights, v.double(), dims=1)
        for c in range(min(g, 4 - len(finals))):
            finals.append({k: v[c].detach().clone() for k, v in stacked.items()})
    return sums, finals


def main() -> None:
    args = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    args.add_argument("--clients", type=int, default=100)
    args.add_argument("--samples", type=int, default=10, help="images per client (one mini-batch)")
    args.add_argument("--groups", type=int, nargs="+", default=[10, 25, 100], help="clients trained at once")
    args.add_argument("--repeats", type=int, default=2, help="timed rounds per way (the minimum is reported)")
    args.add_argument("--threads", type=int, default=1)
    args.add_argument("--ways", nargs="+", default=["vmap", "bmm"], choices=["vmap", "bmm"])
    args.add_argument("--check", action="store_true", help="compare the two ways on 4 clients first")
    opts = args.parse_args()
    torch.set_num_threads(opts.threads)

    data = build_federated_data(DataConfig(name="fmnist", split="test", num_clients=1, partition="iid"),
                                torch.device("cpu"), 66)
    x = data.x[: opts.clients * opts.samples].float()
    x = (x / 255 if x.max() > 1 else x).view(opts.clients, opts.samples, *data.x.shape[1:])
    torch.manual_seed(66)
    method = CCFC(backbone="convnet28", latent_dim=64, lam=LAM)
    method.build(data.info)
    net = Online(method.encoder, method.predictor)
    frozen = copy.deepcopy(nn.Sequential(method.encoder, method.predictor)).requires_grad_(False).eval()
    global_state = {k: v.clone() for k, v in net.state_dict().items()}
    v1, v2 = make_views(x, 0)

    if opts.check:
        OPTIMIZER["make"] = functools.partial(torch.optim.SGD, lr=0.1)
        _, seq = sequential_round(net, frozen, global_state, v1[:4], v2[:4])
        for name, fn in (("vmap", vmapped_round), ("bmm", bmm_round)):
            _, other = fn(net, frozen, global_state, v1[:4], v2[:4], 4)
            diff = max((a[k].double() - b[k].double()).abs().max().item() for a, b in zip(seq, other) for k in a)
            step = max((a[k].double() - global_state[k].double()).abs().max().item() for a in seq for k in a
                       if a[k].is_floating_point())
            print(f"check ({name}, 4 clients, one SGD step): largest |difference| to the sequential clients' "
                  f"weights and buffers {diff:.2g} (largest change the step made: {step:.2g})")
        OPTIMIZER["make"] = functools.partial(torch.optim.Adam, lr=1e-3, foreach=True)

    def timed(fn, *a) -> float:
        best = float("inf")
        for _ in range(opts.repeats):
            start = time.perf_counter()
            fn(*a)
            best = min(best, time.perf_counter() - start)
        return best

    seq_s = timed(sequential_round, net, frozen, global_state, v1, v2)
    print(f"{opts.clients} clients x {opts.samples} images, {opts.threads} thread(s)")
    print("| way | clients at once | s per round | speed-up | peak RSS MB so far |")
    print("|---|---|---|---|---|")
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"| sequential (engine loop) | 1 | {seq_s:.2f} | 1.00x | {rss:.0f} |")
    for name, fn in (("vmap (torch.func)", vmapped_round), ("bmm (written out)", bmm_round)):
        if name.split()[0] not in opts.ways:
            continue
        for g in opts.groups:
            s = timed(fn, net, frozen, global_state, v1, v2, g)
            rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            print(f"| {name} | {g} | {s:.2f} | {seq_s / s:.2f}x | {rss:.0f} |", flush=True)


if __name__ == "__main__":
    main()

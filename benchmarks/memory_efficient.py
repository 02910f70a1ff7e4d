"""Peak memory and time of one CC training step: ordinary back-propagation vs `chunked_backward`.

    nice -n 10 python benchmarks/memory_efficient.py --batches 32 64 128 256 512 1024      # ~5 min, 2 CPU cores
    nice -n 10 python benchmarks/memory_efficient.py --backbones resnet18_cifar --batches 32 64 128 --repeats 1 \
        --tag _resnet18_cifar                                                             # ~5 min, 2 CPU cores
    python benchmarks/memory_efficient.py --backbones convnet28 resnet18_cifar --batches 32 64 128 256 512 1024 \
        --devices cuda                                                                    # on a GPU machine

FedMCC (Section VI) observes that the memory of a naive gradient step of CC's loss is linear in the batch size
n, because the instance and cluster losses couple every sample of the batch, and proposes computing the
loss's gradients with respect to the representations first, then back-propagating one input (here: one chunk)
at a time; fedclust/nn/memory_efficient.py implements it. This script measures the claim.

One step = zero_grad, forward of both views through the backbone and CC's two heads, CC's loss (instance
NT-Xent, tau 0.5, + cluster contrast, tau 1.0, + entropy term; fedclust.losses.contrastive), backward, Adam
step. Views are random tensors (augmentation does not change the memory of the step). Every setting runs in
a fresh subprocess, so one setting's allocator caches and high-water mark cannot leak into the next.

Peak memory, CPU: `resource.getrusage(RUSAGE_SELF).ru_maxrss` after the measured step minus its value just
before it. ru_maxrss is the kernel's high-water mark of the process's resident memory, so it sees every
allocation (torch's C++ allocator, oneDNN/MKL workspaces, glibc arenas); tracemalloc would see only the Python
allocator's blocks and miss tensor storage entirely. Before the baseline is read, the model, the inputs and a
warm-up step at batch 2 (which allocates the gradients, Adam's moments and the kernels' lazy state) are in
place, so the delta is what the batch itself costs: the graph and its activations. Granularity is a page;
memory freed by the warm-up and reused by the step lowers the delta by at most the warm-up's (tiny) graph.
CUDA: `torch.cuda.max_memory_allocated()` after the step minus `memory_allocated()` before it (peak stats
reset after the warm-up): the caching allocator's exact count of live tensor bytes.

Seconds per step: the median of `--repeats` further steps (after the measured one, so it excludes first-call
costs), synchronised on CUDA.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time

import torch
from common import RESULTS, RUNS, machine
from torch import nn

from fedclust.losses.contrastive import cluster_contrastive_loss, instance_contrastive_loss
from fedclust.nn.backbones import build_backbone
from fedclust.nn.heads import mlp_head
from fedclust.nn.memory_efficient import chunked_backward

INPUT = {"convnet28": (1, 28), "resnet18_cifar": (3, 32)}  # (channels, side) each backbone is benchmarked at


class CC(nn.Module):
    """A backbone with Contrastive Clustering's heads (Li et al. 2021; FedMCC eq. (2)): instance projector
    rep -> rep -> 128 and cluster projector rep -> rep -> K with a softmax, both without BatchNorm."""

    def __init__(self, backbone: str, clusters: int = 10, feature_dim: int = 128):
        super().__init__()
        channels, side = INPUT[backbone]
        self.backbone = build_backbone(backbone, channels, side)
        rep = int(self.backbone.out_dim)
        self.instance = mlp_head(rep, rep, feature_dim)
        self.cluster = mlp_head(rep, rep, clusters, softmax=True)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.backbone(x)
        return self.instance(h), self.cluster(h)


def cc_loss(z_a: torch.Tensor, c_a: torch.Tensor, z_b: torch.Tensor, c_b: torch.Tensor) -> torch.Tensor:
    return instance_contrastive_loss(z_a, z_b) + cluster_contrastive_loss(c_a, c_b)


def step(net: CC, opt: torch.optim.Optimizer, xa: torch.Tensor, xb: torch.Tensor, mode: str, chunk: int) -> None:
    opt.zero_grad(set_to_none=False)  # keep the .grad buffers, so the step allocates only its graph
    if mode == "ordinary":
        loss = cc_loss(*net(xa), *net(xb))
        loss.backward()
    else:
        chunked_backward(net, [xa, xb], cc_loss, chunk_size=chunk)
    opt.step()


def worker(args: argparse.Namespace) -> dict:
    """One setting, in this (fresh) process: warm up, read the baseline, one measured step, timed steps."""
    torch.manual_seed(0)
    device = torch.device(args.device)
    net = CC(args.backbone).to(device).train()
    opt = torch.optim.Adam(net.parameters(), lr=3e-4)
    channels, side = INPUT[args.backbone]
    g = torch.Generator(device=device).manual_seed(1)
    xa = torch.randn(args.batch, channels, side, side, generator=g, device=device)
    xb = torch.randn(args.batch, channels, side, side, generator=g, device=device)
    step(net, opt, xa[:2], xb[:2], args.mode, args.chunk)  # grads, Adam moments, lazy kernel state
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    else:
        base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    step(net, opt, xa, xb, args.mode, args.chunk)
    if cuda:
        torch.cuda.synchronize()
        peak_mib = (torch.cuda.max_memory_allocated() - base) / 2**20
        total_mib = torch.cuda.max_memory_allocated() / 2**20
    else:
        after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        peak_mib, total_mib = (after - base) / 1024, after / 1024
    times = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        step(net, opt, xa, xb, args.mode, args.chunk)
        if cuda:
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    params = sum(p.numel() for p in net.parameters())
    return {"backbone": args.backbone, "device": args.device, "mode": args.mode, "batch": args.batch,
            "chunk": args.chunk if args.mode == "chunked" else None, "step_mib": peak_mib,
            "process_peak_mib": total_mib, "seconds": statistics.median(times), "params": params}


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--backbones", nargs="+", default=["convnet28"], choices=list(INPUT))
    p.add_argument("--batches", type=int, nargs="+", default=[32, 64, 128, 256, 512])
    p.add_argument("--chunk", type=int, default=32, help="chunk size of chunked_backward")
    p.add_argument("--repeats", type=int, default=2, help="timed steps per setting (median reported)")
    p.add_argument("--devices", nargs="+", default=None, help="cpu and/or cuda (default: cpu, plus cuda if present)")
    p.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    p.add_argument("--tag", default="", help="suffix of the results file")
    # worker mode (one setting, called by the driver in a fresh process)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--backbone", default="convnet28", help=argparse.SUPPRESS)
    p.add_argument("--mode", default="ordinary", help=argparse.SUPPRESS)
    p.add_argument("--batch", type=int, default=32, help=argparse.SUPPRESS)
    p.add_argument("--device", default="cpu", help=argparse.SUPPRESS)
    return p.parse_args()


def run_setting(args: argparse.Namespace, backbone: str, device: str, mode: str, batch: int) -> dict:
    cmd = [sys.executable, __file__, "--worker", "--backbone", backbone, "--device", device, "--mode", mode,
           "--batch", str(batch), "--chunk", str(args.chunk), "--repeats", str(args.repeats),
           "--threads", str(args.threads)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def write_results(args: argparse.Namespace, rows: list[dict], wall: float) -> None:
    tag = f" ({args.tag.strip('_')})" if args.tag else ""
    lines = [f"# Memory-efficient gradients (FedMCC Section VI): one CC step, ordinary vs chunked{tag}", "",
             f"Machine: {machine()}", "",
             f"Command: `{' '.join(['python benchmarks/memory_efficient.py', *sys.argv[1:]])}`", "",
             "Settings: one training step of CC's loss (instance NT-Xent tau 0.5 + cluster contrast tau 1.0 + "
             "entropy; two views of random inputs) through the backbone and CC's heads (mlp_head rep->rep->128 and "
             f"rep->rep->10 + softmax), Adam lr 3e-4; chunked = `chunked_backward(..., chunk_size={args.chunk})`; "
             f"{args.threads} torch threads on CPU; every setting in a fresh subprocess. step MiB: peak memory of the "
             "step above the memory held before it (model, gradients, Adam state, inputs). CPU: ru_maxrss delta "
             "(the resident-set high-water mark, which sees torch's C++ allocations, unlike tracemalloc); CUDA: "
             "torch.cuda.max_memory_allocated delta. s/step: median of "
             f"{args.repeats} steps after the measured one. Wall time of the whole run: {wall:.0f} s.", ""]
    for (backbone, device) in dict.fromkeys((r["backbone"], r["device"]) for r in rows):
        sub = [r for r in rows if r["backbone"] == backbone and r["device"] == device]
        params = sub[0]["params"]
        side = INPUT[backbone][1]
        lines += [f"## {backbone} at {side}x{side}, {device} ({params / 1e6:.2f} M parameters)",
                  "", "| batch | ordinary step MiB | chunked step MiB | ordinary / chunked | ordinary s/step | "
                  "chunked s/step | chunked / ordinary time | process peak MiB (ord. / chunk.) |",
                  "|---|---|---|---|---|---|---|---|"]
        for batch in args.batches:
            o = next((r for r in sub if r["batch"] == batch and r["mode"] == "ordinary"), None)
            c = next((r for r in sub if r["batch"] == batch and r["mode"] == "chunked"), None)
            if o is None or c is None:
                continue
            lines.append(f"| {batch} | {o['step_mib']:.1f} | {c['step_mib']:.1f} | "
                         f"{o['step_mib'] / max(c['step_mib'], 1e-9):.2f} | {o['seconds']:.3f} | {c['seconds']:.3f} | "
                         f"{c['seconds'] / o['seconds']:.2f} | "
                         f"{o['process_peak_mib']:.0f} / {c['process_peak_mib']:.0f} |")
        lines.append("")
    path = RESULTS / f"memory_efficient{args.tag}.md"
    notes = ""
    if path.exists() and "## Notes" in path.read_text():  # keep the hand-written notes across reruns
        notes = path.read_text()[path.read_text().index("## Notes"):]
    path.write_text("\n".join(lines) + ("\n" + notes if notes else ""))
    print(f"wrote {path}")


def main() -> None:
    args = parse()
    torch.set_num_threads(args.threads)
    if args.worker:
        print(json.dumps(worker(args)))
        return
    devices = args.devices or ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    RUNS.mkdir(parents=True, exist_ok=True)
    rows, start = [], time.perf_counter()
    for device in devices:
        for backbone in args.backbones:
            for batch in args.batches:
                for mode in ("ordinary", "chunked"):
                    row = run_setting(args, backbone, device, mode, batch)
                    rows.append(row)
                    print(json.dumps(row), flush=True)
    (RUNS / f"memory_efficient{args.tag}.json").write_text(json.dumps(rows, indent=2))
    write_results(args, rows, time.perf_counter() - start)


if __name__ == "__main__":
    main()

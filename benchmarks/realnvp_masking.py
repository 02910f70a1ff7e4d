"""UIFCA's Table 2 ablation: RealNVP masking (checkerboard / cyclic) x randomized background, two classes.

    nice -n 10 python benchmarks/realnvp_masking.py            # the budget in the results file, ~30 min
    python benchmarks/realnvp_masking.py --train-per-class 200 --epochs 1 --test-per-class 100 --tag smoke

For each configuration (Default = checkerboard; RB = randomized background + checkerboard; CM = cyclic mask;
RB+CM) one RealNVP is trained by maximum likelihood on class A's training images and one on class B's; every
held-out test image of both classes goes to the flow with the higher log-likelihood, and the accuracy of
that assignment is reported next to UIFCA's Table 2 (Chung, Lee & Ramchandran; MNIST digits 2 and 3 there,
Fashion-MNIST classes here because MNIST is not available offline).

With RB the background of training images is randomized afresh in every batch, and that of the test images
once (seeded), both flows scoring the same randomized test image (the paper's Figure 4 randomizes the
images themselves). All images are dequantized (x + U[0, 1) / 256) in training and, with a fixed seed, in
evaluation. Each configuration's result is kept in benchmarks/runs/realnvp_masking<tag>/ (git-ignored) and
reused on a rerun; results go to benchmarks/results/realnvp_masking<tag>.md.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time

import torch
from common import RESULTS, RUNS, machine

from fedclust.data.dataset import to_float
from fedclust.data.datasets import load_dataset
from fedclust.data.transforms import dequantize, randomize_background
from fedclust.nn.flows import RealNVP, stack_log_prob
from fedclust.seeding import derive_seed, generator

CONFIGS = {"Default": ("checkerboard", False), "RB": ("checkerboard", True), "CM": ("cyclic", False),
           "RB+CM": ("cyclic", True)}
PAPER = {"Default": 50.7, "RB": 95.09, "CM": 99.0, "RB+CM": 98.6}  # UIFCA Table 2, MNIST digits 2 vs 3
FMNIST_NAMES = ["T-shirt/top", "trouser", "pullover", "dress", "coat", "sandal", "shirt", "sneaker", "bag",
                "ankle boot"]


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--classes", type=int, nargs=2, default=[2, 3], help="Fashion-MNIST classes A and B")
    p.add_argument("--train-per-class", type=int, default=2000, help="first N training images of each class")
    p.add_argument("--test-per-class", type=int, default=1000, help="first N test images of each class (all: 1000)")
    p.add_argument("--epochs", type=int, default=6)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--couplings", type=int, default=8)
    p.add_argument("--hidden", type=int, default=16)
    p.add_argument("--blocks", type=int, default=2)
    p.add_argument("--dilation", type=int, default=2)
    p.add_argument("--threads", type=int, default=1, help="torch threads (1 is fastest on a busy 2-core machine)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    p.add_argument("--tag", default="", help="suffix of the run folder and results file")
    p.add_argument("--fresh", action="store_true", help="retrain configurations that have a stored result")
    return p.parse_args()


def bits_per_dim(nll: torch.Tensor, dims: int) -> float:
    """Mean NLL of [0, 1] pixels in nats -> bits per dimension of 0..255 pixels (+ log2 256 per dimension)."""
    return nll.mean().item() / (dims * math.log(2)) + 8.0


def class_images(ds, cls: int, part: int, n: int) -> torch.Tensor:
    idx = torch.nonzero((ds.y == cls) & (ds.split == part)).squeeze(1)[:n]
    return ds.x[idx]


def train_flow(args, masking: str, rb: bool, images: torch.Tensor, name: str) -> tuple[RealNVP, dict]:
    torch.manual_seed(derive_seed(args.seed, "init", name))
    flow = RealNVP(1, 28, masking, num_couplings=args.couplings, hidden_channels=args.hidden,
                   num_blocks=args.blocks, dilation=args.dilation)
    opt = torch.optim.Adam(flow.parameters(), lr=args.lr)
    noise = generator(args.seed, "train-noise", name)
    start, history = time.perf_counter(), []
    for epoch in range(args.epochs):
        order = torch.randperm(len(images), generator=generator(args.seed, "order", name, epoch))
        total, count = 0.0, 0
        for i in range(0, len(images), args.batch_size):
            x = to_float(images[order[i:i + args.batch_size]])
            if rb:
                x = randomize_background(x, noise)
            loss = flow.nll(dequantize(x, noise)).mean()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            # a rare huge step would wreck a small flow; the bound is far above the typical norm
            torch.nn.utils.clip_grad_norm_(flow.parameters(), 100.0)
            opt.step()
            total, count = total + loss.item() * len(x), count + len(x)
        history.append(total / count / (784 * math.log(2)) + 8.0)
        print(f"  {name} epoch {epoch + 1}/{args.epochs}: train {history[-1]:.3f} bits/dim "
              f"({time.perf_counter() - start:.0f} s)", flush=True)
    return flow, {"train_bpd_per_epoch": history, "train_seconds": time.perf_counter() - start}


@torch.no_grad()
def scores(flows: list[RealNVP], x: torch.Tensor, chunk: int = 250) -> torch.Tensor:
    for f in flows:
        f.eval()
    return torch.cat([stack_log_prob(flows, x[i:i + chunk]) for i in range(0, len(x), chunk)], dim=1)


def run_config(args, ds, key: str, folder) -> dict:
    path = folder / f"{key.replace('+', '_')}.json"
    if path.exists() and not args.fresh:
        return json.loads(path.read_text())
    masking, rb = CONFIGS[key]
    a, b = args.classes
    print(f"{key}: masking={masking}, randomized background={rb}", flush=True)
    flows, info = [], {}
    for cls in (a, b):
        flow, stats = train_flow(args, masking, rb, class_images(ds, cls, 0, args.train_per_class), f"{key}-{cls}")
        flows.append(flow)
        info[str(cls)] = stats
    test = torch.cat([class_images(ds, a, 1, args.test_per_class), class_images(ds, b, 1, args.test_per_class)])
    labels = torch.cat([torch.zeros(args.test_per_class), torch.ones(args.test_per_class)]).long()
    x = to_float(test)
    noise = generator(args.seed, "eval-noise")  # the same noise in every configuration
    if rb:
        x = randomize_background(x, noise)
    x = dequantize(x, noise)
    start = time.perf_counter()
    ll = scores(flows, x)  # (2, N)
    pred = ll.argmax(0)
    result = {
        "config": key, "masking": masking, "rb": rb,
        "accuracy": (pred == labels).float().mean().item() * 100,
        "accuracy_a": (pred[labels == 0] == 0).float().mean().item() * 100,
        "accuracy_b": (pred[labels == 1] == 1).float().mean().item() * 100,
        "share_to_a": (pred == 0).float().mean().item() * 100,
        # bpd[k][c]: flow k's mean test bits/dim on class c's images (in-class on the diagonal)
        "test_bpd": [[bits_per_dim(-ll[k][labels == c], 784) for c in (0, 1)] for k in (0, 1)],
        "eval_seconds": time.perf_counter() - start,
        "train": info,
    }
    path.write_text(json.dumps(result, indent=2))
    print(f"{key}: accuracy {result['accuracy']:.2f} % (paper {PAPER[key]})", flush=True)
    return result


def main() -> None:
    args = parse()
    torch.set_num_threads(args.threads)
    folder = RUNS / f"realnvp_masking{args.tag}"
    folder.mkdir(parents=True, exist_ok=True)
    ds = load_dataset("fmnist", root=None)
    began = time.perf_counter()
    results = [run_config(args, ds, key, folder) for key in args.configs]
    a, b = args.classes
    na, nb = FMNIST_NAMES[a], FMNIST_NAMES[b]
    command = " ".join(["nice -n 10 python benchmarks/realnvp_masking.py", *sys.argv[1:]])
    lines = [
        f"# RealNVP masking ablation (UIFCA Table 2) on Fashion-MNIST {a} ({na}) vs {b} ({nb})", "",
        f"Machine: {machine()}", "",
        f"Command: `{command}`",
        "", "Settings (the CPU budget: 2 shared cores, ~30 min for all four configurations):", "",
        f"- data: Fashion-MNIST class {a} ({na}) and class {b} ({nb}) instead of the paper's MNIST digits 2 and 3 "
        f"(MNIST is not available offline); training: the first {args.train_per_class} training images of each "
        f"class; evaluation: the first {args.test_per_class} test images of each class "
        f"({2 * args.test_per_class} images), each assigned to the flow with the higher log-likelihood.",
        f"- flow: `RealNVP(1, 28, masking, num_couplings={args.couplings}, hidden_channels={args.hidden}, "
        f"num_blocks={args.blocks}, dilation={args.dilation})`, logit pre-transform alpha = 0.05, N(0, I) prior.",
        f"- training: Adam lr {args.lr}, batch {args.batch_size}, {args.epochs} epochs, gradient norm clipped at 100, "
        "uniform dequantization (x + U[0,1)/256) of every batch; RB: background (pixels < 0.01) replaced by U[0,1) "
        "noise, fresh in every batch for training and once (seeded, the same for both flows) for evaluation.",
        f"- seed {args.seed}; one run per configuration (seed variance not measured). "
        f"Wall time of this invocation: {time.perf_counter() - began:.0f} s (configurations reused from an "
        "earlier invocation count 0).", "",
        "| config | masking | RB | accuracy % | paper % (MNIST 2 vs 3) | acc. on A % | acc. on B % | "
        "share assigned to A % | bpd flow A on A / B | bpd flow B on B / A | train s (A + B) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        bpd = r["test_bpd"]
        train_s = sum(v["train_seconds"] for v in r["train"].values())
        lines.append(
            f"| {r['config']} | {r['masking']} | {'yes' if r['rb'] else 'no'} | {r['accuracy']:.2f} | "
            f"{PAPER[r['config']]} | {r['accuracy_a']:.1f} | {r['accuracy_b']:.1f} | {r['share_to_a']:.1f} | "
            f"{bpd[0][0]:.3f} / {bpd[0][1]:.3f} | {bpd[1][1]:.3f} / {bpd[1][0]:.3f} | {train_s:.0f} |")
    lines += ["", "bpd: mean test bits per dimension on the 0..255 scale (NLL of the dequantized [0, 1] image / "
              "(784 ln 2) + 8); with RB the randomized background pixels are part of the modelled image. "
              "Final-epoch training bpd per flow (class: bpd): " + "; ".join(
                  f"{r['config']} " + ", ".join(f"{c}: {v['train_bpd_per_epoch'][-1]:.3f}"
                                                for c, v in r["train"].items()) for r in results) + "."]
    out = RESULTS / f"realnvp_masking{args.tag}.md"
    out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()

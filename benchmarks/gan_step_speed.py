"""Where a GAN step's time goes on this CPU, and what makes it faster (issue 23, "Speed").

Times SDA-FC's GAN step (fedclust.nn.gan.GAN.train_step: D on real + detached fakes, then G on fresh fakes, two Adam
steps; the GAN of SDA-FC and PPFC-GAN, 1x28x28 images) at one torch thread under five settings, interleaved in
blocks so that load changes hit every setting alike, and reports each setting's fastest block (ms a step):

- fp32, eager;
- bf16 autocast + channels-last, eager (what the generative configs run: fabric.precision bf16-mixed);
- fp32 and bf16 with torch.compile (inductor) on the generator and the discriminator;
- the same step on a batch 10x larger, per 64 images: what batching the 10 clients' GANs into one could save at
  most (a lower bound on a batched step's cost: one model's weights, no per-client work).

Usage: python -m benchmarks.gan_step_speed [--steps 20] [--blocks 5] [--batch 64] [--no-compile]
Results: benchmarks/results/gan_step_speed.md.
"""

from __future__ import annotations

import argparse
import contextlib
import time

import torch

from fedclust.nn.gan import GAN

from .common import machine


def make(compiled: bool, channels_last: bool, seed: int = 0):
    torch.manual_seed(seed)
    gan = GAN()
    if channels_last:
        gan = gan.to(memory_format=torch.channels_last)
    opt_d = torch.optim.Adam(gan.discriminator.parameters(), lr=2e-4, betas=(0.5, 0.999), foreach=True)
    opt_g = torch.optim.Adam(gan.generator.parameters(), lr=2e-4, betas=(0.5, 0.999), foreach=True)
    if compiled:
        gan.generator = torch.compile(gan.generator)
        gan.discriminator = torch.compile(gan.discriminator)
    return gan, opt_d, opt_g


def timed_block(setting, x, steps: int) -> float:
    gan, opt_d, opt_g, bf16 = setting
    gen = torch.Generator().manual_seed(1)
    ctx = torch.autocast("cpu", dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()
    start = time.perf_counter()
    with ctx:
        for _ in range(steps):
            gan.train_step(x, opt_d, opt_g, gen)
    return (time.perf_counter() - start) / steps


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=20, help="steps a block")
    ap.add_argument("--blocks", type=int, default=5)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--no-compile", action="store_true")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    inputs = {1: torch.rand(args.batch, 1, 28, 28), 10: torch.rand(10 * args.batch, 1, 28, 28)}
    # name -> (gan, opt_d, opt_g, bf16, batch multiple); a 10x batch is timed per args.batch images
    settings = {"fp32": (*make(False, False), False, 1), "bf16 + channels-last": (*make(False, True), True, 1)}
    if not args.no_compile:
        settings["fp32 + compile"] = (*make(True, False), False, 1)
        settings["bf16 + channels-last + compile"] = (*make(True, True), True, 1)
    settings[f"fp32, batch {10 * args.batch}, per {args.batch}"] = (*make(False, False), False, 10)
    settings[f"bf16 + channels-last, batch {10 * args.batch}, per {args.batch}"] = (*make(False, True), True, 10)
    warm = {}
    for name, (*setting, times) in settings.items():  # warm-up (and compilation) outside the timed blocks
        start = time.perf_counter()
        timed_block(setting, inputs[times], 3)
        warm[name] = time.perf_counter() - start
    best = {name: float("inf") for name in settings}
    for _ in range(args.blocks):
        for name, (*setting, times) in settings.items():
            best[name] = min(best[name], timed_block(setting, inputs[times], args.steps) / times)
    base = best["fp32"]
    print(f"{machine()} | 1 thread | batch {args.batch}, {args.blocks} blocks of {args.steps} steps, fastest block")
    print("| setting | ms a step (per 64 images) | speed-up vs fp32 | first 3 steps (s, compile included) |")
    print("|---|---|---|---|")
    for name, t in best.items():
        print(f"| {name} | {1000 * t:.1f} | {base / t:.2f}x | {warm[name]:.1f} |")


if __name__ == "__main__":
    main()

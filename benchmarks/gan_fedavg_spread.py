"""How FedAvg slows a GAN down (issue 23, PPFC-GAN's collapse): K clients, each 1,000 Fashion-MNIST test images in
order (IID), train copies of the global SDA-FC GAN (fedclust/nn/gan.py) for `steps` steps of 64 with fresh Adam
(SDA-FC's learning rates, no decay), then the copies are averaged (every float tensor, BatchNorm statistics
included); after each round the global generator draws 500 images in eval mode and their mean per-pixel standard
deviation is printed (real images: 0.27). K = 1 is plain training. Kept as a script: it measures a GAN outside
the engine, which no declared experiment does (benchmarks/results/ppfc_gan_collapse.md).

Usage: python -m benchmarks.gan_fedavg_spread K ROUNDS STEPS [bf16]   (bf16: the local steps in bf16 autocast)
"""

import contextlib
import copy
import gzip
import sys
import time

import numpy as np
import torch

from fedclust.nn.gan import GAN, pixel_spread

IMAGES = "/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz"
PER_CLIENT, BATCH = 1000, 64


def main(clients: int, rounds: int, steps: int, bf16: bool) -> None:
    torch.set_num_threads(1)
    torch.manual_seed(66)
    raw = gzip.open(IMAGES).read()
    x = torch.from_numpy(np.frombuffer(raw, np.uint8, offset=16).reshape(-1, 1, 28, 28).astype(np.float32) / 255)
    global_gan, rng, start = GAN(), torch.Generator().manual_seed(0), time.time()
    for r in range(rounds):
        states = []
        for k in range(clients):
            gan = copy.deepcopy(global_gan)
            opt_d = torch.optim.Adam(gan.discriminator.parameters(), 2e-4, betas=(0.5, 0.999))
            opt_g = torch.optim.Adam(gan.generator.parameters(), 1.8e-3, betas=(0.5, 0.999))
            own = x[k * PER_CLIENT:(k + 1) * PER_CLIENT]
            order = torch.randperm(PER_CLIENT, generator=rng)
            for s in range(steps):
                at = (s * BATCH) % (PER_CLIENT - PER_CLIENT % BATCH)
                with torch.autocast("cpu", dtype=torch.bfloat16) if bf16 else contextlib.nullcontext():
                    gan.train_step(own[order[at:at + BATCH]], opt_d, opt_g, rng)
            states.append(gan.state_dict())
        global_gan.load_state_dict({key: sum(s[key] for s in states) / clients if value.is_floating_point() else value
                                    for key, value in states[0].items()})
        drawn = global_gan.synthesize(500, rng, torch.device("cpu"))
        print(f"K={clients}{' bf16' if bf16 else ''} round {r + 1} ({(r + 1) * steps} local steps): spread eval "
              f"{pixel_spread(drawn):.4f} mean {drawn.mean():.3f} ({time.time() - start:.0f}s)", flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:] == ["bf16"])

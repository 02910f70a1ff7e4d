"""Engine overhead per client: one CCFC stage-1 round over the same 1,000 images as 1 client x 1,000 images or as
100 clients x 10 images, at one thread (issue 13, point 4).

    python benchmarks/client_overhead.py 10 3       # 10-client split of the test set, fraction 0.1: 1 x 1,000
    python benchmarks/client_overhead.py 1000 3     # 1,000-client split, fraction 0.1: 100 x 10
    python benchmarks/client_overhead.py 1000 1 cumulative   # + a cProfile of one more round, sorted so
    python benchmarks/client_overhead.py 1000 3 --bf16       # in bf16 + channels-last (precision: auto here)

Builds the Orchestrator in this process (no run folder, no scoring) on the Fashion-MNIST test split, IID, CCFC with
configs/ccfc_fmnist.yaml's networks, optimizer state reset every round, and prints wall and CPU seconds of each
round (CPU seconds of the one thread are the figure to compare on a shared machine). The "Client scaling" table of
benchmarks/results/scale_fmnist_test.md was measured with this harness, before / after interleaved.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import time

import torch
from lightning.fabric import Fabric

from fedclust.contract import RoundContext
from fedclust.data.config import DataConfig, build_federated_data
from fedclust.federation.config import FederationConfig
from fedclust.federation.orchestrator import Orchestrator
from fedclust.methods import CCFC
from fedclust.nn.backbones import use_channels_last


def orchestrator(num_clients: int, bf16: bool = False) -> Orchestrator:
    fabric = Fabric(accelerator="cpu", devices=1, precision="bf16-mixed" if bf16 else "32-true")
    data = build_federated_data(DataConfig(name="fmnist", split="test", num_clients=num_clients, partition="iid"),
                                fabric.device, 66)
    torch.manual_seed(66)
    method = CCFC(backbone="convnet28", latent_dim=64, lam=1.0)
    method.build(data.info)
    method.to(fabric.device)
    if bf16:  # what fabric.precision: auto gives this network on a CPU with native bf16
        use_channels_last(method)
    federation = FederationConfig(fraction=0.1, optimizer_state="reset", eval_every=100)
    return Orchestrator(fabric, method, data, federation, 66)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("clients", type=int, choices=[10, 1000], help="10: 1 x 1,000 images; 1000: 100 x 10")
    parser.add_argument("rounds", type=int, nargs="?", default=2)
    parser.add_argument("--bf16", action="store_true", help="bf16 autocast + channels-last (fedclust's auto here)")
    parser.add_argument("profile_sort", nargs="?", default=None, help="cProfile one more round, sorted by this key")
    opts = parser.parse_args()
    torch.set_num_threads(1)
    orch = orchestrator(opts.clients, opts.bf16)
    stage = orch.stages[0]
    times = []
    for r in range(opts.rounds):
        wall, cpu = time.perf_counter(), time.process_time()
        record = orch.run_round(RoundContext(stage, 0, r, 66))
        times.append((time.perf_counter() - wall, time.process_time() - cpu))
    print(f"{opts.clients} clients, {record['clients']} trained per round; wall / CPU s per round:",
          ", ".join(f"{w:.2f} / {c:.2f}" for w, c in times), f"; loss {record['loss']:.4f}")
    if opts.profile_sort:
        profile = cProfile.Profile()
        profile.enable()
        orch.run_round(RoundContext(stage, 0, opts.rounds, 66))
        profile.disable()
        pstats.Stats(profile).sort_stats(opts.profile_sort).print_stats(45)


if __name__ == "__main__":
    main()

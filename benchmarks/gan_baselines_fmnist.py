"""SDA-FC-KM, SDA-FC-FCM and PPFC-GAN on Fashion-MNIST next to CCFC's Tables 1-2, under a compute budget.

    OMP_NUM_THREADS=1 nice -n 10 python benchmarks/gan_baselines_fmnist.py   # the CPU budget (defaults)
    python benchmarks/gan_baselines_fmnist.py --steps 0 --synthetic 0 --sdafc-epochs 50 --gan-rounds 50 \
        --dcn-epochs 50 --tag full                                                  # the paper's protocol (GPU)

Configs sdafc_km_fmnist.yaml, sdafc_fcm_fmnist.yaml, ppfc_gan_fmnist.yaml (10 clients, pshift p, seed 66,
70,000 images) with budget overrides: --steps caps the GAN steps of a local epoch (0: a full pass of
~110 steps of 64 images), --synthetic the images each client sends (0: as many as it holds, ~7,000),
--sdafc-epochs the local GAN epochs of SDA-FC, --gan-rounds the FedAvg rounds of PPFC-GAN (one local epoch
each), --dcn-epochs the DCN pretraining and joint epochs (each). SDA-FC-FCM reuses the GANs of the
SDA-FC-KM run of the same p (fedclust.methods.sdafc.recluster: same seed, so the same GANs and synthetic
images; only the server's clusterer differs), which halves the GAN cost and equals a separate FCM run.
Before the runs it times one full local GAN epoch of client 0 at p = 0 (7,000 images) and extrapolates
the full protocol from it. Writes benchmarks/results/<--output> after every p.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import time

import torch
from common import RESULTS, RUNS, machine, run_config

PS = [0.0, 0.25, 0.5, 0.75, 1.0]
PAPER = {  # CCFC Table 1 (NMI) and Table 2 (Kappa), Fashion-MNIST, p = 0 / .25 / .5 / .75 / 1
    "SDA-FC-KM": ([0.5947, 0.6052, 0.6063, 0.6077, 0.6065], [0.4640, 0.4763, 0.4826, 0.4774, 0.4825]),
    "SDA-FC-FCM": ([0.6027, 0.5664, 0.6022, 0.5791, 0.6026], [0.5252, 0.4962, 0.5258, 0.4955, 0.5323]),
    "PPFC-GAN": ([0.6091, 0.5975, 0.5784, 0.6103, 0.6467], [0.4857, 0.4721, 0.4552, 0.4774, 0.5745]),
}


def time_one_epoch() -> dict:
    """Seconds of one full local GAN epoch (client 0 at p = 0, batch 64, no synthesis), cached."""
    cache = RUNS / "gan_epoch_time.json"
    if cache.exists():
        return json.loads(cache.read_text())
    from lightning.fabric import Fabric

    from fedclust.contract import ClientContext, ClientSession, Stage
    from fedclust.data.config import DataConfig, build_federated_data
    from fedclust.federation.client import local_fit
    from fedclust.federation.setup import setup_method
    from fedclust.methods import SDAFC

    fabric = Fabric(accelerator="cpu", devices=1)
    data = build_federated_data(DataConfig(name="fmnist", num_clients=10, p=0.0), fabric.device, 66)
    method = SDAFC(epochs=1)
    setup_method(method, data, 66)
    client = data.client(0, method.batch_size)
    ctx = ClientContext(0, Stage("local-gan", 1, 1), 0, 0, client, {}, 66)
    optimizers = list(method.configure_optimizers())
    method.session = ClientSession(ctx, optimizers)  # as the engine lends it
    method.on_client_start(ctx)
    start = time.perf_counter()
    local_fit(method, ctx, optimizers, fabric, 1)
    out = {"seconds": time.perf_counter() - start, "images": len(client), "steps": -(-len(client) // 64),
           "threads": torch.get_num_threads(), "load_average": os.getloadavg()}
    cache.write_text(json.dumps(out, indent=2))
    return out


def recluster_cached(km_name: str, name: str) -> dict:
    from fedclust.fit import load_run
    from fedclust.methods.sdafc import recluster

    final = RUNS / name / "final.json"
    if final.exists():
        return json.loads(final.read_text())
    if final.parent.exists():
        shutil.rmtree(final.parent)
    start = time.perf_counter()
    metrics = recluster(load_run(RUNS / km_name, torch.device("cpu")), "fcm")
    result = {"metrics": metrics, "reused_gans_of": km_name, "wall_seconds": time.perf_counter() - start}
    final.parent.mkdir(parents=True)
    final.write_text(json.dumps(result, indent=2))
    return result


@torch.no_grad()
def synthetic_spread(run_name: str, n: int = 1000) -> tuple[float, float]:
    """Mean per-pixel std across n images from a PPFC-GAN run's global generator, and across n real images:
    near 0 means the generator draws near-identical images (the DCN then has nothing to cluster)."""
    from fedclust.fit import load_run

    saved = load_run(RUNS / run_name, torch.device("cpu"))
    fake = saved.method.gan.synthesize(n, torch.Generator().manual_seed(0), torch.device("cpu"))
    real = torch.cat(list(saved.data.iter_all()))[:n]
    return fake.flatten(1).std(0).mean().item(), real.flatten(1).std(0).mean().item()


def main() -> None:
    args = argparse.ArgumentParser()
    args.add_argument("--steps", type=int, default=8, help="GAN steps per local epoch (0: a full pass)")
    args.add_argument("--synthetic", type=int, default=1000, help="synthetic images per client (0: as many as held)")
    args.add_argument("--sdafc-epochs", type=int, default=1)
    args.add_argument("--gan-rounds", type=int, default=1)
    args.add_argument("--dcn-epochs", type=int, default=2)
    args.add_argument("--tag", default="budget")
    args.add_argument("--ps", type=float, nargs="+", default=PS)
    args.add_argument("--note", default="", help="conditions of the run (what else shared the machine)")
    args.add_argument("--output", default="gan_baselines_fmnist.md", help="file name under benchmarks/results")
    o = args.parse_args()
    budget = ([] if not o.steps else ["--method.init_args.max_steps_per_epoch", str(o.steps)]) + (
        [] if not o.synthetic else ["--method.init_args.synthetic_per_client", str(o.synthetic)])
    sdafc = [*budget, "--method.init_args.epochs", str(o.sdafc_epochs), "--method.init_args.kmeans_redo", "3"]
    ppfc = [*budget, "--method.init_args.gan_rounds", str(o.gan_rounds), "--method.init_args.pretrain_epochs",
            str(o.dcn_epochs), "--method.init_args.cluster_epochs", str(o.dcn_epochs)]
    epoch = time_one_epoch()
    sda_h = 50 * 10 * epoch["seconds"] / 3600
    steps = o.steps or epoch["steps"]
    lines = ["# SDA-FC-KM, SDA-FC-FCM and PPFC-GAN on Fashion-MNIST (70,000 images, train + test)", "",
             f"Machine: {machine()}", "",
             f"Command: `python benchmarks/gan_baselines_fmnist.py --steps {o.steps} --synthetic {o.synthetic} "
             f"--sdafc-epochs {o.sdafc_epochs} --gan-rounds {o.gan_rounds} --dcn-epochs {o.dcn_epochs} "
             f"--tag {o.tag} --ps {' '.join(map(str, o.ps))} --output {o.output}` "
             f"(with OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')})", "",
             "## Budget (the paper's protocol in brackets)", "",
             f"- SDA-FC: {o.sdafc_epochs} local GAN epoch(s) of {steps} steps of 64 images per client "
             f"[50 epochs of ~110 steps]; {o.synthetic or 'as many as held'} synthetic images per client [~7,000]; "
             "server k-means 3 restarts x 300 iterations [10 restarts] or FCM m = 1.1.",
             f"- PPFC-GAN: {o.gan_rounds} FedAvg round(s) of one local epoch of {steps} steps [50 rounds of a full "
             f"epoch, our reading]; same synthetic count; DCN {o.dcn_epochs} pretraining + {o.dcn_epochs} joint "
             "epochs [50 + 50] of the 784-500-500-2000-10 autoencoder, lam 0.05.",
             "- 10 clients, seed 66, one run per cell. SDA-FC-FCM reuses the GANs of the SDA-FC-KM run of the "
             "same p (identical to a separate run: same seed, same GANs; only the server's clusterer differs).", "",
             "## Speed", "",
             f"One full local GAN epoch (client 0, p = 0, {epoch['images']} images, {epoch['steps']} steps of 64, "
             f"{epoch['threads']} thread(s), load average at the time {epoch['load_average'][0]:.1f}): "
             f"**{epoch['seconds']:.0f} s** ({epoch['seconds'] / epoch['steps']:.2f} s per step).", "",
             f"Full-protocol estimate from it: SDA-FC trains 50 epochs x 10 clients = {sda_h:.1f} h per p "
             f"({5 * sda_h:.0f} h for the five p; KM and FCM can share the GANs); PPFC-GAN the same GAN compute "
             "(50 rounds x 10 clients x 1 epoch) plus its server DCN, 100 epochs on 70,000 synthetic images "
             "(see the PPFC-GAN run times below for the DCN cost at the budget).", "",
             "## Results", "",
             "| method | p | NMI | Kappa | ACC | ARI | paper NMI | paper Kappa | wall s |",
             "|---|---|---|---|---|---|---|---|---|"]
    rows: dict[str, list[str]] = {k: [] for k in PAPER}
    for p in o.ps:
        i = PS.index(p)
        km_name = f"sdafc_km_{o.tag}_p{p}"
        results = {"SDA-FC-KM": run_config("configs/sdafc_km_fmnist.yaml", km_name, [*sdafc, "--data.p", str(p)]),
                   "SDA-FC-FCM": recluster_cached(km_name, f"sdafc_fcm_{o.tag}_p{p}"),
                   "PPFC-GAN": run_config("configs/ppfc_gan_fmnist.yaml", f"ppfc_gan_{o.tag}_p{p}",
                                          [*ppfc, "--data.p", str(p)])}
        for name, result in results.items():
            m = result["metrics"]
            rows[name].append(f"| {name} | {p} | {m['nmi']:.4f} | {m['kappa']:.4f} | {m['acc']:.4f} | "
                              f"{m['ari']:.4f} | {PAPER[name][0][i]} | {PAPER[name][1][i]} | "
                              f"{result.get('wall_seconds', float('nan')):.0f} |")
        note = ["", f"Conditions: {o.note}"] if o.note else []
        table = [r for name in PAPER for r in rows[name]]
        (RESULTS / o.output).write_text("\n".join(lines + table + note) + "\n")
    spread = [synthetic_spread(f"ppfc_gan_{o.tag}_p{p}") for p in o.ps]
    table.append("\nPPFC-GAN synthetic spread (mean per-pixel std across 1,000 images of the global generator / "
                 "across 1,000 real images): "
                 + ", ".join(f"p = {p}: {f:.4f} / {r:.4f}" for p, (f, r) in zip(o.ps, spread)))
    (RESULTS / o.output).write_text("\n".join(lines + table + note) + "\n")
    print("\n".join(lines + table))


if __name__ == "__main__":
    main()

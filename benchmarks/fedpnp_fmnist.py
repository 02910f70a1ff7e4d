"""FedPNP vs FedCC vs FedBYOLCC vs Single-Training on Fashion-MNIST (FedPNP Table 1's comparison, which the
paper runs on CIFAR-10/100 only), 5 clients, IID / Dirichlet 0.5 / Dirichlet 0.1, NMI / ACC / ARI.

    python benchmarks/fedpnp_fmnist.py --rounds 3 --local-epochs 1      # the CPU budget used (results file)
    python benchmarks/fedpnp_fmnist.py --rounds 100 --local-epochs 5    # the paper's schedule (GPU)

Every other setting is configs/<method>_fmnist.yaml: the test split (10,000 images), ConvNet28, batch 128,
Adam 3e-4, tau_I 0.5, tau_C 1.0, crop scale 0.2-1, seed 0. --rounds / --local-epochs go through
federation.rounds / federation.local_epochs so they apply to every method alike. Single-Training is scored
as the paper does: the mean over clients of each client's metrics on its own data (from assignments.csv;
the engine's own metrics for it are those of the union of the clients' clusterings). A method whose config
or class is missing (FedBYOLCC is written separately) is listed as not run; re-running the script fills
it in and reuses the cached runs (benchmarks/runs/<name>/final.json).
Writes benchmarks/results/fedpnp_fmnist_r<rounds>e<epochs>.md after every run.
"""

from __future__ import annotations

import argparse
import csv
import importlib

import torch
import yaml
from common import RESULTS, ROOT, RUNS, machine, run_config

from fedclust.clustering.metrics import grouped_cluster_metrics
from fedclust.data.config import DataConfig, build_federated_data
from fedclust.methods import FedPNP
from fedclust.methods.fedpnp import PAST, pnp_pool

METHODS = [("FedPNP", "fedpnp"), ("FedCC", "fedcc"), ("FedBYOLCC", "fedbyolcc"), ("Single-Training", "single_simclr")]
# FedPNP differs from FedCC by the pool AND by alpha (0.1 after round 1, i.e. a 10x lighter cluster loss):
# the same pool with FedCC's weight 1 separates the two (IID only).
ABLATIONS = [("IID", "FedPNP, alpha 1 in every round", "fedpnp", "alpha1",
              ["--data.partition", "iid", "--method.init_args.alpha_first", "1", "--method.init_args.alpha", "1"])]
SETTINGS = [("IID", ["--data.partition", "iid"]),
            ("Dir 0.5", ["--data.partition", "dirichlet", "--data.alpha", "0.5"]),
            ("Dir 0.1", ["--data.partition", "dirichlet", "--data.alpha", "0.1"])]


def available(module: str) -> bool:
    if not (ROOT / "configs" / f"{module}_fmnist.yaml").exists():
        return False
    try:
        importlib.import_module(f"fedclust.methods.{module}")
    except ImportError:
        return False
    return True


def client_mean(folder) -> dict[str, float]:
    with open(folder / "assignments.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    col = {k: torch.tensor([int(r[k]) for r in rows]) for k in ("client", "label", "cluster")}
    return grouped_cluster_metrics(col["cluster"], col["label"], col["client"])


@torch.no_grad()
def pool_statistics(folder) -> tuple[float, float]:
    """On each client's first batch (two seeded views) under its saved past model: the share of the
    n(n-1) pairs the pool keeps as negatives, and the share of same-class pairs among those it removes
    (chance: about 1/10). Means over clients."""
    cfg = yaml.safe_load((folder / "config.yaml").read_text())
    data = build_federated_data(DataConfig(**cfg["data"]), torch.device("cpu"), cfg["seed"])
    method = FedPNP(**cfg["method"]["init_args"])
    method.build(data.info)
    net = method.past_network.eval()
    clients = torch.load(folder / "checkpoints" / "last.ckpt", weights_only=False)["clients"]
    kept, same = [], []
    for cid, state in clients.items():
        net.load_state_dict(state[PAST])
        client = data.client(cid, method.batch_size)
        x = next(iter(client.iter_all()))
        y = data.labels[client.indices[: len(x)]]
        g = torch.Generator().manual_seed(cid)
        pool = pnp_pool(net(method.views(x, g)), net(method.views(x, g)), method.hparams.pool_threshold)
        n = len(x)
        removed = ~pool & ~torch.eye(n, dtype=torch.bool)
        kept.append(pool.sum().item() / (n * (n - 1)))
        if removed.any():
            same.append((y[:, None] == y[None])[removed].float().mean().item())
    return sum(kept) / len(kept), (sum(same) / len(same) if same else float("nan"))


def write(lines: list[str], note: str, tag: str) -> None:
    extra = ["", f"Conditions: {note}"] if note else []
    (RESULTS / f"fedpnp_fmnist_{tag}.md").write_text("\n".join(lines + extra) + "\n")


def main() -> None:
    args = argparse.ArgumentParser()
    args.add_argument("--rounds", type=int, default=3)
    args.add_argument("--local-epochs", type=int, default=1)
    args.add_argument("--methods", nargs="+", default=[m for _, m in METHODS], help="modules to run")
    args.add_argument("--settings", nargs="+", default=[s for s, _ in SETTINGS], help='e.g. IID "Dir 0.1"')
    args.add_argument("--no-ablation", action="store_true", help="skip the alpha = 1 ablation")
    args.add_argument("--note", default="", help="conditions of the run (what else shared the machine)")
    opts = args.parse_args()
    tag = f"r{opts.rounds}e{opts.local_epochs}"
    selection = ""
    if opts.methods != [m for _, m in METHODS] or opts.settings != [s for s, _ in SETTINGS]:
        selection = " --methods " + " ".join(opts.methods) + " --settings " + " ".join(f'"{s}"' for s in opts.settings)
    selection += " --no-ablation" if opts.no_ablation else ""
    budget = ["--federation.rounds", str(opts.rounds), "--federation.local_epochs", str(opts.local_epochs)]
    lines = [f"# FedPNP vs baselines on Fashion-MNIST, {opts.rounds} rounds x {opts.local_epochs} local epoch(s)",
             "", f"Machine: {machine()}", "",
             f"Command: `python benchmarks/fedpnp_fmnist.py --rounds {opts.rounds} --local-epochs {opts.local_epochs}"
             f"{selection}`",
             "", "Budget: 5 clients, Fashion-MNIST test split (10,000 images), ConvNet28 backbone, batch 128, "
             "Adam 3e-4, one seed (0); paper: CIFAR, ResNet-18 at 224x224, 100 rounds x 5 local epochs.", "",
             "| setting | method | NMI | ACC | ARI | wall s |", "|---|---|---|---|---|---|"]
    pools: list[tuple[str, float, float]] = []
    for setting, overrides in (x for x in SETTINGS if x[0] in opts.settings):
        for label, module in (x for x in METHODS if x[1] in opts.methods):
            if not available(module):
                lines.append(f"| {setting} | {label} | not run (fedclust.methods.{module} or "
                             f"configs/{module}_fmnist.yaml missing) | | | |")
                write(lines, opts.note, tag)
                continue
            name = f"fedpnp_fmnist_{module}_{setting.replace(' ', '').lower()}_r{opts.rounds}e{opts.local_epochs}"
            result = run_config(f"configs/{module}_fmnist.yaml", name, [*overrides, *budget])
            m = client_mean(RUNS / name) if module == "single_simclr" else result["metrics"]
            if module == "fedpnp":
                pools.append((setting, *pool_statistics(RUNS / name)))
            extra = " (mean over clients)" if module == "single_simclr" else ""
            lines.append(f"| {setting} | {label}{extra} | {100 * m['nmi']:.1f} | {100 * m['acc']:.1f} | "
                         f"{100 * m['ari']:.1f} | {result.get('wall_seconds', float('nan')):.0f} |")
            write(lines, opts.note, tag)
    for setting, label, module, variant, overrides in [] if opts.no_ablation else ABLATIONS:
        name = f"fedpnp_fmnist_{module}_{variant}_{setting.replace(' ', '').lower()}_r{opts.rounds}e{opts.local_epochs}"
        m = run_config(f"configs/{module}_fmnist.yaml", name, [*overrides, *budget])
        lines.append(f"| {setting} | {label} (ablation) | {100 * m['metrics']['nmi']:.1f} | "
                     f"{100 * m['metrics']['acc']:.1f} | {100 * m['metrics']['ari']:.1f} | "
                     f"{m.get('wall_seconds', float('nan')):.0f} |")
        write(lines, opts.note, tag)
    lines += ["", "FedPNP's pool after the last round (past model, first batch of each client, mean over clients):", "",
              "| setting | negatives kept (% of pairs) | same class among removed pairs (%) |", "|---|---|---|"]
    lines += [f"| {s} | {100 * k:.2f} | {100 * c:.1f} |" for s, k, c in pools]
    write(lines, opts.note, tag)
    print("\n".join(lines))


if __name__ == "__main__":
    main()

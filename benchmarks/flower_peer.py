"""Peer benchmark (issue 13, item 1): the CCFC stage-1 workload on Flower against `fedclust fit`, A B A B.

    # flwr is only the optional `bench` extra; here it lives in its own virtual environment so that its
    # pins (protobuf, rich) never touch fedclust's:
    python -m venv --system-site-packages /work/flwr_venv
    /work/flwr_venv/bin/pip install "flwr[simulation]" psutil
    /work/flwr_venv/bin/python benchmarks/flower_peer.py --clients 10 100 --rounds 3       # the full measurement
    # what fitted on the shared machine (results file): --clients 10 100 --rounds 2 --pairs 2 1 --no-tune, then
    # --append --clients 10 --rounds 2 --pairs 1 --no-tune --fedclust-setting PASSIVE:1

Workload (both sides): Fashion-MNIST's 10,000-image test split, IID over N clients (fedclust's partitioner,
seed 66, so both sides hold the same samples per client), CCFC's ConvNet28 + projector + predictor (latent
64, lambda 1: configs/ccfc_fmnist.yaml), batch 128, one local epoch of SimSiam + the model-contrastive term
against the frozen global model, Adam 1e-3 started fresh each round (fedclust: `federation.optimizer_state
reset`), FedAvg of the whole state dict, then k-means (k = 10, 3 starts, 100 iterations) on each client's
normalised embeddings and on the server over the clients' centroids. NMI after the last round: global model,
argmax cosine to the server centroids, all 10,000 images.

The Flower side is written as Flower's own examples write it (quickstart-pytorch, the legacy NumPyClient
API that flwr 1.x still ships): a ClientApp whose client_fn builds a NumPyClient with a fresh network and a
DataLoader of PIL images under torchvision per-sample transforms (crop, rotation, PIL Gaussian blur as in the
SimSiam/CCFC reference code), get/set weights as numpy lists of the state dict, scikit-learn KMeans; a
ServerApp with a FedAvg subclass that strips the centroids off the clients' results and clusters them;
run_simulation on the Ray backend. The networks and the two loss functions are imported from fedclust, so
only the framework differs.

Measured per setting: seconds per round from the runs' own clocks (fedclust: metrics.csv `seconds`;
Flower: configure_fit to the end of aggregate_fit; both exclude scoring), round 1 reported apart as the
warm-up; peak memory of the whole process tree (RSS and PSS summed over the process and all its
descendants, Ray's raylet, GCS and actors included, polled every 0.25 s). First a tuning pass at the
smallest N picks each framework's fastest OpenMP setting (OMP_WAIT_POLICY PASSIVE / ACTIVE; Flower: 1 or
2 CPUs per Ray actor, i.e. 2 one-thread actors or one two-thread actor; fedclust: 2 torch threads), then
Flower and fedclust alternate A B A B at every N with those settings. Ray's workers run at nice 0 like
fedclust (RAY_worker_niceness=0; Ray's default 15 hands the CPU to any other work on a shared machine).
fedclust trains in its default precision (`fabric.precision: auto`: bf16 autocast + channels-last
convolutions for this ConvNet28 on a CPU with native bf16, which kept the NMI within seed noise of fp32,
benchmarks/results/precision_quality.md; `--fedclust-precision 32-true` for fp32), the tuning pass also
times it in fp32; Flower trains in fp32, as its examples do. Each fedclust row names the precision used.
Writes benchmarks/results/flower_peer.md (--append adds a measurement under the earlier ones).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from common import RESULTS, ROOT, RUNS, machine

WORK = RUNS / "flower_peer"
SEED, K, BATCH, LR, LAM, LATENT = 66, 10, 128, 1e-3, 1.0, 64


# --- Flower side (runs inside the flwr environment) -----------------------------------------------------
def flower_main(opts: argparse.Namespace) -> None:
    """One Flower simulation; writes per-round seconds and the final NMI to opts.out."""
    policy = os.environ.get("OMP_WAIT_POLICY")
    import fedclust  # noqa: F401  (fedclust sets OMP_WAIT_POLICY PASSIVE on import: undo it for the actors)

    if policy is None:
        os.environ.pop("OMP_WAIT_POLICY", None)
    import numpy as np
    import torch
    from flwr.client import ClientApp, NumPyClient
    from flwr.common import Context, ndarrays_to_parameters, parameters_to_ndarrays
    from flwr.server import ServerApp, ServerAppComponents, ServerConfig
    from flwr.server.strategy import FedAvg
    from flwr.simulation import run_simulation
    from PIL import Image, ImageFilter
    from sklearn.cluster import KMeans
    from sklearn.metrics import normalized_mutual_info_score
    from torch.utils.data import DataLoader, Dataset
    from torchvision import transforms

    from fedclust.losses.simsiam import model_contrastive_loss, simsiam_loss
    from fedclust.nn.backbones import build_backbone
    from fedclust.nn.heads import predictor, projector

    data = np.load(opts.data)
    images, labels, offsets = data["images"], data["labels"], data["offsets"]
    order = data["order"]

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            trunk = build_backbone("convnet28", 1, 28)
            self.encoder = torch.nn.Sequential(trunk, projector(trunk.out_dim, 256, LATENT))
            self.predictor = predictor(LATENT, 16)

    def get_weights(net):
        return [v.cpu().numpy() for v in net.state_dict().values()]

    def set_weights(net, weights):
        net.load_state_dict({k: torch.tensor(v) for k, v in zip(net.state_dict().keys(), weights)}, strict=True)

    def embed(net, imgs):
        net.eval()
        with torch.no_grad():
            x = torch.from_numpy(imgs).float().div(255).unsqueeze(1)
            return torch.cat([torch.nn.functional.normalize(net.encoder(b), dim=1) for b in x.split(1024)]).numpy()

    class PILGaussianBlur:  # the SimSiam / CCFC reference code's blur
        def __init__(self, sigma=(0.1, 2.0)):
            self.sigma = sigma

        def __call__(self, img):
            return img.filter(ImageFilter.GaussianBlur(radius=np.random.uniform(*self.sigma)))

    class TwoViews(Dataset):
        transform = transforms.Compose([
            transforms.RandomResizedCrop(28, scale=(0.5, 1.0)), transforms.RandomRotation(10),
            transforms.RandomApply([PILGaussianBlur()], p=0.5), transforms.ToTensor()])

        def __init__(self, imgs):
            self.imgs = imgs

        def __len__(self):
            return len(self.imgs)

        def __getitem__(self, i):
            img = Image.fromarray(self.imgs[i], mode="L")
            return self.transform(img), self.transform(img)

    class CCFCClient(NumPyClient):
        def __init__(self, imgs):
            self.net, self.imgs = Net(), imgs
            self.trainloader = DataLoader(TwoViews(imgs), batch_size=BATCH, shuffle=True)

        def fit(self, parameters, config):
            set_weights(self.net, parameters)
            frozen = copy.deepcopy(self.net).eval()
            self.net.train()
            optimizer = torch.optim.Adam(self.net.parameters(), lr=LR)
            for x1, x2 in self.trainloader:
                z1, z2 = self.net.encoder(x1), self.net.encoder(x2)
                p1, p2 = self.net.predictor(z1), self.net.predictor(z2)
                with torch.no_grad():
                    g1, g2 = frozen.predictor(frozen.encoder(x1)), frozen.predictor(frozen.encoder(x2))
                loss = simsiam_loss(p1, p2, z1, z2) + LAM * 0.5 * (model_contrastive_loss(p1, g1)
                                                                   + model_contrastive_loss(p2, g2))
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
            centroids = KMeans(K, n_init=3, max_iter=100).fit(embed(self.net, self.imgs)).cluster_centers_
            return get_weights(self.net) + [centroids.astype(np.float32)], len(self.imgs), {}

    def client_fn(context: Context):
        pid = int(context.node_config["partition-id"])
        return CCFCClient(images[order[offsets[pid]:offsets[pid + 1]]]).to_client()

    times: dict[int, list[float]] = {}
    result: dict = {"rounds": []}

    class CCFCFedAvg(FedAvg):
        """FedAvg of the weights; k-means of the clients' centroids (sent as the last array)."""

        centroids = None

        def configure_fit(self, server_round, parameters, client_manager):
            times[server_round] = [time.perf_counter()]
            return super().configure_fit(server_round, parameters, client_manager)

        def aggregate_fit(self, server_round, results, failures):
            local = []
            for _, res in results:
                arrays = parameters_to_ndarrays(res.parameters)
                local.append(arrays.pop())
                res.parameters = ndarrays_to_parameters(arrays)
            aggregated = super().aggregate_fit(server_round, results, failures)
            self.centroids = KMeans(K, n_init=3, max_iter=100).fit(np.concatenate(local)).cluster_centers_
            result["rounds"].append(time.perf_counter() - times[server_round][0])
            return aggregated

    def evaluate_fn(server_round, parameters, config):
        if server_round != opts.rounds:
            return None
        net = Net()
        set_weights(net, parameters)
        c = strategy.centroids / np.linalg.norm(strategy.centroids, axis=1, keepdims=True)
        result["nmi"] = float(normalized_mutual_info_score(labels, (embed(net, images) @ c.T).argmax(1)))
        return 0.0, {"nmi": result["nmi"]}

    torch.manual_seed(SEED)
    strategy = CCFCFedAvg(fraction_fit=1.0, fraction_evaluate=0.0, min_fit_clients=opts.clients,
                          min_available_clients=opts.clients, evaluate_fn=evaluate_fn,
                          initial_parameters=ndarrays_to_parameters(get_weights(Net())))

    def server_fn(context: Context):
        return ServerAppComponents(strategy=strategy, config=ServerConfig(num_rounds=opts.rounds))

    run_simulation(server_app=ServerApp(server_fn=server_fn), client_app=ClientApp(client_fn=client_fn),
                   num_supernodes=opts.clients,
                   backend_config={"client_resources": {"num_cpus": opts.cpus_per_client, "num_gpus": 0.0}})
    Path(opts.out).write_text(json.dumps(result))


# --- driver -------------------------------------------------------------------------------------------
def prepare_data(n: int) -> Path:
    """The fmnist test split and fedclust's IID partition for n clients (seed 66), as one npz."""
    import numpy as np
    import torch

    from fedclust.data.config import DataConfig, build_federated_data

    path = WORK / f"data_{n}.npz"
    if not path.exists():
        data = build_federated_data(DataConfig(name="fmnist", split="test", num_clients=n, partition="iid"),
                                    torch.device("cpu"), SEED)
        x = data.x.squeeze(1)
        images = (x * 255).round().to(torch.uint8) if x.is_floating_point() else x.to(torch.uint8)
        sizes = [len(p) for p in data.parts]
        np.savez(path, images=images.numpy(), labels=data.labels.numpy(), order=torch.cat(data.parts).numpy(),
                 offsets=np.concatenate([[0], np.cumsum(sizes)]))
    return path


def watch(cmd: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Run cmd; return the peak RSS and PSS (MB) summed over its whole process tree."""
    import psutil

    proc = psutil.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=open(WORK / "last.log", "w"))
    peak_rss = peak_pss = 0.0
    while proc.poll() is None:
        rss = pss = 0
        try:
            tree = [proc, *proc.children(recursive=True)]
        except psutil.Error:
            tree = []
        for p in tree:
            try:
                info = p.memory_full_info()
                rss, pss = rss + info.rss, pss + getattr(info, "pss", info.rss)
            except psutil.Error:
                pass
        peak_rss, peak_pss = max(peak_rss, rss / 2**20), max(peak_pss, pss / 2**20)
        time.sleep(0.25)
    if proc.returncode:
        raise RuntimeError(f"{cmd[:3]} failed; see {WORK / 'last.log'}")
    return peak_rss, peak_pss


def run_flower(n: int, rounds: int, policy: str, cpus: int, python: str) -> dict:
    out = WORK / f"flower_{n}.json"
    # Ray starts its workers at nice 15 (its worker_niceness default): on a shared machine they would lose the
    # CPU to everyone else's work while fedclust runs at nice 0. Same priority for both: RAY_worker_niceness=0.
    env = {**os.environ, "OMP_WAIT_POLICY": policy, "FLWR_TELEMETRY_ENABLED": "0", "RAY_DEDUP_LOGS": "0",
           "RAY_worker_niceness": "0"}
    rss, pss = watch([python, __file__, "flower", "--clients", str(n), "--rounds", str(rounds), "--cpus-per-client",
                      str(cpus), "--data", str(prepare_data(n)), "--out", str(out)], env)
    res = json.loads(out.read_text())
    return {"rounds": res["rounds"], "nmi": res["nmi"], "rss": rss, "pss": pss}


def run_fedclust(n: int, rounds: int, policy: str, threads: int, precision: str = "auto") -> dict:
    import csv

    from fedclust.resume import started_arithmetic

    folder = WORK / f"fedclust_{n}"
    env = {**os.environ, "OMP_WAIT_POLICY": policy, "OMP_NUM_THREADS": str(threads)}
    cmd = ["fedclust", "fit", "--config",
           str(ROOT / "configs/ccfc_fmnist.yaml"), "--run_dir", str(folder), "--progress", "false",
           "--data.split", "test", "--data.num_clients", str(n), "--data.partition", "iid",
           "--method.init_args.pretrain_rounds", str(rounds), "--method.init_args.cluster_rounds", "0",
           "--federation.optimizer_state", "reset", "--federation.eval_every", "1000",
           "--federation.checkpoint_every", "1000", "--fabric.precision", precision]
    if folder.exists():
        import shutil

        shutil.rmtree(folder)
    rss, pss = watch(cmd, env)
    with open(folder / "metrics.csv", newline="") as f:
        secs = [float(r["seconds"]) for r in csv.DictReader(f)]
    nmi = json.loads((folder / "final.json").read_text())["metrics"]["nmi"]
    # what `precision: auto` resolved to on this machine, as the run recorded it
    used = (started_arithmetic(folder) or (precision,))[0]
    return {"rounds": secs, "nmi": nmi, "rss": rss, "pss": pss, "precision": used}


def row(name: str, setting: str, r: dict) -> str:
    timed = r["rounds"][1:]
    return (f"| {name} | {setting} | {r['rounds'][0]:.1f} | {', '.join(f'{s:.1f}' for s in timed)} | "
            f"{statistics.median(timed):.1f} | {r['rss']:.0f} | {r['pss']:.0f} | {r['nmi']:.4f} |")


HEADER = ["| framework | setting | warm-up round s | timed rounds s | median s | peak RSS MB (tree) | "
          "peak PSS MB (tree) | NMI |", "|---|---|---|---|---|---|---|---|"]


def tune(n0: int, opts: argparse.Namespace, log) -> tuple[tuple, tuple]:
    """Each framework's fastest OpenMP setting at n0 clients: (median s, policy, CPUs per actor / threads)."""
    log(f"## 1. OpenMP setting of each framework ({n0} clients, {opts.tune_rounds} rounds, first = warm-up)")
    log("")
    for s in HEADER:
        log(s)
    best_f = best_c = None
    # ACTIVE with two one-thread actors is left out: their spinning pools starve each other (issue 13: 5-10x)
    for policy, cpus in [("PASSIVE", 1), ("PASSIVE", 2), ("ACTIVE", 2)]:
        r = run_flower(n0, opts.tune_rounds, policy, cpus, opts.flower_python)
        log(row("Flower", f"OMP_WAIT_POLICY={policy}, {cpus} CPU per actor ({2 // cpus} actors)", r))
        if best_f is None or statistics.median(r["rounds"][1:]) < best_f[0]:
            best_f = (statistics.median(r["rounds"][1:]), policy, cpus)
    # fedclust's default precision at each OpenMP setting, and fp32 at the first for reference
    chosen = opts.fedclust_precision
    for policy, threads, precision in [("PASSIVE", 2, chosen), ("ACTIVE", 2, chosen), ("PASSIVE", 1, chosen),
                                       ("PASSIVE", 2, "32-true")]:
        r = run_fedclust(n0, opts.tune_rounds, policy, threads, precision)
        log(row("fedclust", f"OMP_WAIT_POLICY={policy}, {threads} threads, {r['precision']}", r))
        if precision == chosen and (best_c is None or statistics.median(r["rounds"][1:]) < best_c[0]):
            best_c = (statistics.median(r["rounds"][1:]), policy, threads)
    log("")
    log(f"Fastest: Flower with OMP_WAIT_POLICY={best_f[1]}, {best_f[2]} CPU per actor; fedclust with "
        f"OMP_WAIT_POLICY={best_c[1]}, {best_c[2]} threads.")
    log("")
    return best_f, best_c


def driver(opts: argparse.Namespace) -> None:
    import flwr
    import ray
    import torch

    import fedclust

    WORK.mkdir(parents=True, exist_ok=True)
    src = Path(fedclust.__file__).parents[1]  # PYTHONPATH may point at a clean clone of a commit
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=src).stdout.strip()
    lines = ["# fedclust vs Flower, CCFC stage 1 on Fashion-MNIST (test split, 10,000 images)", "",
             f"Machine: {machine()}", "", f"flwr {flwr.__version__} (Ray {ray.__version__}), torch "
             f"{torch.__version__}, fedclust at commit {commit} ({src})", "",
             f"Command: `python {' '.join(sys.argv)}`", ""]
    if opts.note:
        lines += [f"Conditions: {opts.note}", ""]
    results = RESULTS / "flower_peer.md"
    if opts.append and results.exists():  # a further measurement under the earlier ones
        lines = [results.read_text().rstrip("\n"), "", "---", "", *lines[2:]]
    log = lambda s: (lines.append(s), print(s, flush=True))  # noqa: E731
    n0 = min(opts.clients)
    if opts.tune:
        best_f, best_c = tune(n0, opts, log)
    else:
        policy, cpus = opts.flower_setting.split(":")
        best_f = (None, policy, int(cpus))
        policy, threads = opts.fedclust_setting.split(":")
        best_c = (None, policy, int(threads))
        log(f"OpenMP settings as given (no tuning pass): Flower OMP_WAIT_POLICY={best_f[1]}, {best_f[2]} CPU per "
            f"actor; fedclust OMP_WAIT_POLICY={best_c[1]}, {best_c[2]} threads.")
        log("")
    pairs = opts.pairs + [opts.pairs[-1]] * (len(opts.clients) - len(opts.pairs))
    for n, npairs in zip(opts.clients, pairs):
        log(f"## {n} clients, {' '.join(['A B'] * npairs)} ({opts.rounds} rounds per run, first = warm-up)")
        log("")
        for s in HEADER:
            log(s)
        med = {"Flower": [], "fedclust": []}
        for _ in range(npairs):
            r = run_flower(n, opts.rounds, best_f[1], best_f[2], opts.flower_python)
            med["Flower"] += r["rounds"][1:]
            log(row("Flower", f"{best_f[1]}, {best_f[2]} CPU/actor", r))
            r = run_fedclust(n, opts.rounds, best_c[1], best_c[2], opts.fedclust_precision)
            med["fedclust"] += r["rounds"][1:]
            log(row("fedclust", f"{best_c[1]}, {best_c[2]} threads, {r['precision']}", r))
        ratio = statistics.median(med["Flower"]) / statistics.median(med["fedclust"])
        log("")
        log(f"Median timed round: Flower {statistics.median(med['Flower']):.1f} s, fedclust "
            f"{statistics.median(med['fedclust']):.1f} s: Flower / fedclust = **{ratio:.2f}** "
            "(above 1: fedclust faster).")
        log("")
        results.write_text("\n".join(lines) + "\n")  # partial results survive an interruption
    results.write_text("\n".join(lines) + "\n")


def main() -> None:
    args = argparse.ArgumentParser()
    sub = args.add_subparsers(dest="command")
    fl = sub.add_parser("flower", help="(internal) one Flower simulation")
    fl.add_argument("--clients", type=int, required=True)
    fl.add_argument("--rounds", type=int, required=True)
    fl.add_argument("--cpus-per-client", type=float, default=1)
    fl.add_argument("--data", required=True)
    fl.add_argument("--out", required=True)
    args.add_argument("--clients", type=int, nargs="+", default=[10, 100])
    args.add_argument("--rounds", type=int, default=3, help="rounds per A/B run (the first is the warm-up)")
    args.add_argument("--tune-rounds", type=int, default=2, help="rounds per run of the OpenMP tuning pass")
    args.add_argument("--pairs", type=int, nargs="+", default=[2], help="A B pairs per client count (last repeats)")
    args.add_argument("--append", action="store_true", help="add to benchmarks/results/flower_peer.md")
    args.add_argument("--no-tune", dest="tune", action="store_false", help="skip the OpenMP tuning pass")
    args.add_argument("--flower-setting", default="PASSIVE:1", help="without tuning: OMP_WAIT_POLICY:CPUs per actor")
    args.add_argument("--fedclust-setting", default="PASSIVE:2", help="without tuning: OMP_WAIT_POLICY:threads")
    args.add_argument("--fedclust-precision", default="auto",
                      help="fedclust's fabric.precision (auto: its default; bf16 for this network on native-bf16 CPUs)")
    args.add_argument("--flower-python", default=sys.executable, help="interpreter that has flwr[simulation]")
    args.add_argument("--note", default="", help="conditions of the run (what else shared the machine)")
    opts = args.parse_args()
    flower_main(opts) if opts.command == "flower" else driver(opts)


if __name__ == "__main__":
    main()

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

On a lent GPU (issue 46 items 3-4), `benchmarks/gpu_protocol.sh speed` runs the `gpu` command below: CCFC's paper
protocol end to end and cut to a few rounds, at 10 and 100 clients, in each speed mode; the local step eager, under
torch.compile and replayed as a CUDA graph; and this peer comparison with both sides on the GPU (`--legs peer`).
Every measurement is a row of benchmarks/results/gpu_speed.csv; a row already there for the same commit is not
measured again, and a protocol run cut off by the call's budget resumes from its checkpoint on the next call while
the machine is warm.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import csv
import json
import math
import os
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

from common import RESULTS, ROOT, RUNS, git_commit, machine

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
    device = torch.device(opts.device)  # as Flower's examples: the client's network and batches on the GPU if any

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
            return torch.cat([torch.nn.functional.normalize(net.encoder(b.to(device)), dim=1).cpu()
                              for b in x.split(1024)]).numpy()

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
            self.net, self.imgs = Net().to(device), imgs
            self.trainloader = DataLoader(TwoViews(imgs), batch_size=BATCH, shuffle=True)

        def fit(self, parameters, config):
            set_weights(self.net, parameters)
            frozen = copy.deepcopy(self.net).eval()
            self.net.train()
            optimizer = torch.optim.Adam(self.net.parameters(), lr=LR)
            for x1, x2 in self.trainloader:
                x1, x2 = x1.to(device), x2.to(device)
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
        net = Net().to(device)
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
                   backend_config={"client_resources": {"num_cpus": opts.cpus_per_client,
                                                        "num_gpus": opts.gpus_per_client}})
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


def gpu_memory_mb() -> float | None:
    """Memory in use on GPU 0 by every process (nvidia-smi), or None without one."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits", "-i", "0"],
                             capture_output=True, text=True, timeout=10).stdout
        return float(out.split()[0])
    except (OSError, ValueError, IndexError, subprocess.TimeoutExpired):
        return None


def gpu_name() -> str:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader", "-i", "0"],
                             capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        out = ""
    return out or "cuda"


def watch(cmd: list[str], env: dict[str, str], gpu: bool = False) -> tuple[float, float] | tuple[float, float, float]:
    """Run cmd; return the peak RSS and PSS (MB) summed over its whole process tree, and with gpu=True the peak GPU
    memory it added (nvidia-smi's memory in use, less what was in use before it started)."""
    import psutil

    WORK.mkdir(parents=True, exist_ok=True)
    idle = gpu_memory_mb() if gpu else None
    proc = psutil.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=open(WORK / "last.log", "w"))
    peak_rss = peak_pss = peak_gpu = 0.0
    while proc.poll() is None:
        used = gpu_memory_mb() if idle is not None else None
        peak_gpu = max(peak_gpu, used - idle) if used is not None else peak_gpu
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
    return (peak_rss, peak_pss, peak_gpu) if gpu else (peak_rss, peak_pss)


def run_flower(n: int, rounds: int, policy: str, cpus: float, python: str, device: str = "cpu", gpus: float = 0.0,
               pythonpath: str | None = None) -> dict:
    out = WORK / f"flower_{n}.json"
    # Ray starts its workers at nice 15 (its worker_niceness default): on a shared machine they would lose the
    # CPU to everyone else's work while fedclust runs at nice 0. Same priority for both: RAY_worker_niceness=0.
    env = {**os.environ, "OMP_WAIT_POLICY": policy, "FLWR_TELEMETRY_ENABLED": "0", "RAY_DEDUP_LOGS": "0",
           "RAY_worker_niceness": "0"}
    if pythonpath:  # Flower's stack unpacked for this run alone (the GPU machine's, benchmarks/gpu_wheels.sh)
        env["PYTHONPATH"] = pythonpath + os.pathsep + env.get("PYTHONPATH", "")
    start = time.perf_counter()
    peaks = watch([python, __file__, "flower", "--clients", str(n), "--rounds", str(rounds), "--cpus-per-client",
                   str(cpus), "--gpus-per-client", str(gpus), "--device", device, "--data", str(prepare_data(n)),
                   "--out", str(out)], env, gpu=device != "cpu")
    res = json.loads(out.read_text())
    return {"rounds": res["rounds"], "nmi": res["nmi"], "rss": peaks[0], "pss": peaks[1],
            "gpu_mb": peaks[2] if len(peaks) > 2 else None, "wall": time.perf_counter() - start}


def run_fedclust(n: int, rounds: int, policy: str, threads: int, precision: str = "auto",
                 accelerator: str = "auto") -> dict:
    from fedclust.resume import started_arithmetic

    folder = WORK / f"fedclust_{n}"
    env = {**os.environ, "OMP_WAIT_POLICY": policy, "OMP_NUM_THREADS": str(threads)}
    cmd = [sys.executable, "-m", "fedclust", "fit", "--config",
           str(ROOT / "configs/ccfc_fmnist.yaml"), "--run_dir", str(folder), "--progress", "false",
           "--data.split", "test", "--data.num_clients", str(n), "--data.partition", "iid",
           "--method.init_args.pretrain_rounds", str(rounds), "--method.init_args.cluster_rounds", "0",
           "--federation.optimizer_state", "reset", "--federation.eval_every", "1000",
           "--federation.checkpoint_every", "1000", "--fabric.precision", precision,
           "--fabric.accelerator", accelerator]
    if folder.exists():
        shutil.rmtree(folder)
    start = time.perf_counter()
    peaks = watch(cmd, env, gpu=accelerator == "cuda")
    with open(folder / "metrics.csv", newline="") as f:
        secs = [float(r["seconds"]) for r in csv.DictReader(f)]
    nmi = json.loads((folder / "final.json").read_text())["metrics"]["nmi"]
    # what `precision: auto` resolved to on this machine, as the run recorded it
    used = (started_arithmetic(folder) or (precision,))[0]
    return {"rounds": secs, "nmi": nmi, "rss": peaks[0], "pss": peaks[1], "precision": used,
            "gpu_mb": peaks[2] if len(peaks) > 2 else None, "wall": time.perf_counter() - start}


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


# --- GPU speed (issue 46 items 3-4): `benchmarks/gpu_protocol.sh speed` runs `gpu` on a lent GPU --------------------
SPEED_COLUMNS = ["method", "clients", "images", "rounds", "mode", "seconds_total", "seconds_per_round",
                 "peak_gpu_memory_mb", "nmi", "device", "commit"]
# a speed mode: its name in gpu_speed.csv -> the `fedclust fit` options it adds. fp32 is the papers' arithmetic, the
# clients one by one (the "before"); sequential is bf16 autocast where it was measured to pay, one by one; auto is
# fedclust's default, which on CUDA also trains a round's clients together (issue 46 item 2).
SPEED_MODES = {"fp32": ["--fabric.precision", "32-true", "--federation.clients_together", "off"],
               "sequential": ["--fabric.precision", "auto", "--federation.clients_together", "off"],
               "auto": ["--fabric.precision", "auto"]}
STEP_VARIANTS = ["eager:fp32", "eager:bf16", "compile:fp32", "compile:bf16", "reduce-overhead:bf16", "cudagraph:fp32",
                 "cudagraph:bf16"]
PEER_IMAGES = 10_000  # the peer workload: the Fashion-MNIST test split (flower_peer.py's own)


class SpeedTable:
    """gpu_speed.csv: the rows measured so far (any commit) and the ones this call adds, appended as they come."""

    def __init__(self, path: Path, out: Path | None, commit: str, device: str):
        self.path, self.out, self.commit, self.device = path, out, commit, device
        if not path.exists() or not path.read_text().strip():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(",".join(SPEED_COLUMNS) + "\n")
        with open(path, newline="") as f:
            self.rows = list(csv.DictReader(f))
        self.copy()

    def has(self, clients: int, images: int, rounds: int, mode: str) -> bool:
        """Whether this commit already measured it on this kind of device (then it is not measured again)."""
        want = {"method": "CCFC", "clients": str(clients), "images": str(images), "rounds": str(rounds), "mode": mode,
                "device": self.device, "commit": self.commit}
        return any(all(row.get(k) == v for k, v in want.items()) for row in self.rows)

    def add(self, clients: int, images: int, rounds: int, mode: str, seconds_total: float | None,
            seconds_per_round: float | None, peak_gpu_memory_mb: float | None, nmi: float | None) -> None:
        def num(value, digits):
            return "" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.{digits}f}"

        row = {"method": "CCFC", "clients": str(clients), "images": str(images), "rounds": str(rounds), "mode": mode,
               "seconds_total": num(seconds_total, 1), "seconds_per_round": num(seconds_per_round, 3),
               "peak_gpu_memory_mb": num(peak_gpu_memory_mb, 0), "nmi": num(nmi, 4), "device": self.device,
               "commit": self.commit}
        self.rows.append(row)
        with open(self.path, "a", newline="") as f:
            csv.DictWriter(f, SPEED_COLUMNS).writerow(row)
        print("row: " + ",".join(row[c] for c in SPEED_COLUMNS), flush=True)
        self.copy()

    def copy(self) -> None:
        if self.out is not None:  # the device's $OUT: what comes back from the call
            self.out.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(self.path, self.out / self.path.name)


def run_timed(cmd: list[str], env: dict[str, str], seconds: float, log: Path) -> tuple[int, float, float | None]:
    """Run cmd for at most `seconds` (then SIGINT: a fit keeps its last checkpoint; SIGKILL 60 s later); its exit
    code (124 when cut off), wall seconds and the peak GPU memory it added (nvidia-smi; None without a GPU)."""
    idle = gpu_memory_mb()
    start = time.perf_counter()
    with open(log, "a") as out:
        proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        peak, cut = None, False
        while proc.poll() is None:
            used = gpu_memory_mb() if idle is not None else None
            if used is not None:
                peak = max(peak or 0.0, used - idle)
            if not cut and time.perf_counter() - start > seconds:
                cut = True
                os.killpg(proc.pid, signal.SIGINT)
                try:
                    proc.wait(60)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
            time.sleep(0.5)
    return (124 if cut else proc.returncode), time.perf_counter() - start, peak


def fit_leg(table: SpeedTable, opts: argparse.Namespace, clients: int, mode: str, stages: tuple[int, int],
            seconds: float) -> None:
    """CCFC's packaged Fashion-MNIST config (the paper's protocol: 100 + 30 rounds, batch 128, one epoch, k-means of
    every client each round, NMI every round) at `clients` clients on the accelerator, in one speed mode; with
    fewer rounds for the per-round figures. A run cut off resumes from its checkpoint at the next call (the wall
    seconds of its calls add up in RUNS/<leg>.wall.json)."""
    rounds = sum(stages)
    if table.has(clients, opts.images, rounds, mode):
        print(f"skip {clients} clients, {rounds} rounds, {mode}: measured at this commit", flush=True)
        return
    folder = Path(opts.runs) / f"ccfc_c{clients}_r{stages[0]}+{stages[1]}_{mode}"
    walls = folder.with_name(folder.name + ".wall.json")
    if (folder / "checkpoints" / "last.ckpt").exists() and not (folder / "final.json").exists():
        target = ["--resume", str(folder)]
    else:
        shutil.rmtree(folder, ignore_errors=True)
        walls.unlink(missing_ok=True)
        target = ["--config", str(ROOT / "configs" / "ccfc_fmnist.yaml"), "--run_dir", str(folder),
                  *opts.fit_args, "--data.num_clients", str(clients),
                  "--method.init_args.pretrain_rounds", str(stages[0]),
                  "--method.init_args.cluster_rounds", str(stages[1]), "--fabric.accelerator", opts.accelerator,
                  "--kmeans_backend", "auto", "--federation.checkpoint_every", "1", *SPEED_MODES[mode]]
    cmd = [sys.executable, "-m", "fedclust", "fit", *target, "--progress", "false"]
    print(f"run {clients} clients, {stages[0]} + {stages[1]} rounds, {mode} ({seconds:.0f} s at most)", flush=True)
    folder.parent.mkdir(parents=True, exist_ok=True)
    rc, wall, _ = run_timed(cmd, dict(os.environ), seconds, folder.with_name(folder.name + ".log"))
    spent = json.loads(walls.read_text()) if walls.exists() else []
    walls.write_text(json.dumps([*spent, wall]))
    if not (folder / "final.json").exists():
        said = "cut off by the budget: the next call resumes it" if rc == 124 else "failed"
        print(f"  {said} (exit {rc}, {wall:.0f} s); log {folder}.log", flush=True)
        return
    with open(folder / "metrics.csv", newline="") as f:
        metrics = list(csv.DictReader(f))
    seconds_per_round = statistics.fmean(float(r["seconds"]) for r in metrics)
    peak = max(float(r["peak_memory_mb"]) for r in metrics) if opts.accelerator == "cuda" else None
    nmi = json.loads((folder / "final.json").read_text())["metrics"]["nmi"]
    table.add(clients, opts.images, len(metrics), mode, sum(spent) + wall, seconds_per_round, peak, nmi)


def step_leg(table: SpeedTable, opts: argparse.Namespace, seconds: float) -> None:
    """The local step of CCFC's stage 1 (two views, encoder and predictor on each, the frozen global model, SimSiam +
    model-contrastive loss, backward, Adam) eager, under torch.compile and replayed as a CUDA graph, in fp32 and
    bf16: seconds per step times the steps of one round (10 clients) as seconds_per_round, rounds 0."""
    clients = opts.clients[0]
    steps = math.ceil(opts.images / clients / 128) * clients  # a round's local steps over the clients
    todo = [v for v in opts.variants if not table.has(clients, opts.images, 0, f"step {v}")]
    if not todo:
        print("skip the local step: every variant measured at this commit", flush=True)
        return
    out = Path(opts.runs) / "step.json"
    out.unlink(missing_ok=True)
    cmd = [sys.executable, __file__, "gpu-step", "--device", "cuda" if opts.accelerator == "cuda" else "cpu",
           "--steps", str(opts.step_count), "--out", str(out), "--variants", *todo]
    print(f"run the local step: {', '.join(todo)} ({seconds:.0f} s at most)", flush=True)
    Path(opts.runs).mkdir(parents=True, exist_ok=True)
    run_timed(cmd, dict(os.environ), seconds, Path(opts.runs) / "step.log")
    for result in json.loads(out.read_text()) if out.exists() else []:
        if result.get("error"):
            print(f"  {result['variant']}: {result['error']}", flush=True)
            continue
        table.add(clients, opts.images, 0, f"step {result['variant']}", result["seconds_total"],
                  result["seconds_per_step"] * steps, result["peak_mb"], None)


def peer_leg(table: SpeedTable, opts: argparse.Namespace, clients: int) -> None:
    """flower_peer.py's workload (the test split, IID, stage 1 only, Adam reset each round) on the GPU: Flower's
    simulation (its clients' networks on the GPU, as its examples) and fedclust; seconds_per_round is the median
    of the rounds after the first (the warm-up), peak the GPU memory the whole run added (nvidia-smi)."""
    rounds, mode = opts.peer_rounds, opts.peer_mode
    todo = [m for m in ("peer Flower", f"peer fedclust {mode}")
            if not table.has(clients, PEER_IMAGES, rounds, m)]
    for name in todo:
        print(f"run {name}, {clients} clients, {rounds} rounds", flush=True)
        try:
            if name == "peer Flower":
                r = run_flower(clients, rounds, "PASSIVE", opts.flower_cpus, opts.flower_python,
                               device="cuda" if opts.accelerator == "cuda" else "cpu", gpus=opts.flower_gpus,
                               pythonpath=opts.flower_site)
            else:
                r = run_fedclust(clients, rounds, "PASSIVE", opts.threads, SPEED_MODES[mode][1], opts.accelerator)
        except (RuntimeError, OSError, ValueError) as error:
            print(f"  {name} failed: {error}", flush=True)
            continue
        table.add(clients, PEER_IMAGES, rounds, name, r["wall"], statistics.median(r["rounds"][1:] or r["rounds"]),
                  r["gpu_mb"], r["nmi"])


def gpu_main(opts: argparse.Namespace) -> None:
    """The legs in the order asked, each given what is left of the budget; a leg measured at this commit is
    skipped, one that does not finish is left for the next call."""
    deadline = time.perf_counter() + opts.budget
    device = gpu_name() if opts.accelerator == "cuda" else "cpu"  # nvidia-smi's: no CUDA context held here
    table = SpeedTable(Path(opts.csv), Path(opts.out) if opts.out else None, git_commit(), device)
    print(f"{device}, {os.cpu_count()} cores; commit {table.commit}; budget {opts.budget:.0f} s; legs "
          f"{' '.join(opts.legs)}", flush=True)

    def left() -> float:
        return deadline - time.perf_counter()

    for leg in opts.legs:
        if left() < 30:
            print(f"budget spent before the {leg} legs: the next call goes on", flush=True)
            break
        if leg == "short":
            for clients in opts.clients:
                for mode in opts.modes:
                    if left() > 30:
                        fit_leg(table, opts, clients, mode, tuple(opts.short_rounds), left() - 15)
        elif leg == "step":
            step_leg(table, opts, left() - 15)
        elif leg == "full":
            for clients in opts.clients:
                for mode in opts.full_modes:
                    if left() > 30:
                        fit_leg(table, opts, clients, mode, tuple(opts.full_rounds), left() - 15)
        elif leg == "peer":
            for clients in opts.clients:
                peer_leg(table, opts, clients)
    print(f"done: {len(table.rows)} rows in {table.path}", flush=True)


def step_main(opts: argparse.Namespace) -> None:
    """One CCFC client's stage-1 step, timed per variant (kind:precision) on one batch of 128 random images (the
    time does not depend on the pixels); each variant starts from the same fresh model. Writes a JSON list."""
    import torch

    from fedclust.contract import DataInfo
    from fedclust.losses.simsiam import model_contrastive_loss, simsiam_loss
    from fedclust.methods import CCFC
    from fedclust.seeding import generator

    dev = torch.device(opts.device)
    x = torch.rand(128, 1, 28, 28, generator=generator(SEED, "step-images")).to(dev)
    results = []
    for variant in opts.variants:
        kind, precision = variant.split(":")
        result = {"variant": variant}
        results.append(result)
        if dev.type != "cuda" and kind != "eager":
            result["error"] = "skipped: needs CUDA"
            continue
        torch.manual_seed(SEED)
        start = time.perf_counter()
        method = CCFC(latent_dim=256, lam=0.001, sync_init=False)  # configs/ccfc_fmnist.yaml's settings
        method.build(DataInfo(num_classes=10, in_channels=1, input_size=28, num_features=784, is_image=True))
        method.to(dev).train()
        method.on_round_start(None)  # the frozen global model, as each round starts
        method._augment_gen, method._pseudo = generator(SEED, "augment", device=dev), None
        frozen, lam = method._frozen["net"], method.hparams.lam
        # a CUDA graph replays the casts it captured: autocast's cache of cast weights must stay off there
        cast = (torch.autocast(dev.type, dtype=torch.bfloat16, cache_enabled=kind != "cudagraph")
                if precision == "bf16" else contextlib.nullcontext())
        if dev.type == "cuda":
            torch.cuda.reset_peak_memory_stats(dev)
        try:
            if kind in ("compile", "reduce-overhead"):
                compile_mode = "reduce-overhead" if kind == "reduce-overhead" else None
                method.encoder = torch.compile(method.encoder, mode=compile_mode)
                method.predictor = torch.compile(method.predictor, mode=compile_mode)
                method._frozen["net"] = torch.compile(frozen, mode=compile_mode)
            optimizer = torch.optim.Adam(method.parameters(), lr=1e-3, capturable=kind == "cudagraph",
                                         foreach=True)
            step = (_graphed_step(method, optimizer, frozen, lam, cast, x, simsiam_loss, model_contrastive_loss)
                    if kind == "cudagraph" else _eager_step(method, optimizer, cast, x, kind == "reduce-overhead"))
            for _ in range(opts.warmup):
                step()
            if dev.type == "cuda":
                torch.cuda.synchronize(dev)
            timed = time.perf_counter()
            for _ in range(opts.steps):
                loss = step()
            result["loss"] = float(loss)  # also waits for the device
            result["seconds_per_step"] = (time.perf_counter() - timed) / opts.steps
            result["seconds_total"] = time.perf_counter() - start
            result["peak_mb"] = torch.cuda.max_memory_allocated(dev) / 2**20 if dev.type == "cuda" else None
            print(f"{variant}: {result['seconds_per_step'] * 1e3:.2f} ms a step, loss {result['loss']:.4f}, "
                  f"{result['seconds_total']:.0f} s with warm-up", flush=True)
        except Exception as error:  # a variant that does not work here is reported, the others still run
            result["error"] = f"{type(error).__name__}: {str(error)[:300]}"
            print(f"{variant}: {result['error']}", flush=True)
        Path(opts.out).write_text(json.dumps(results))  # what finished survives a cut-off
    Path(opts.out).write_text(json.dumps(results))


def _eager_step(method, optimizer, cast, x, new_graph_step: bool):
    """The step as the engine runs it: the method's training_step, backward, Adam."""
    import torch

    def step() -> torch.Tensor:
        if new_graph_step:  # torch.compile's CUDA graphs (mode reduce-overhead): a new training step begins
            torch.compiler.cudagraph_mark_step_begin()
        with cast:
            loss = method.training_step({"x": x}, 0)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        return loss.detach()

    return step


def _graphed_step(method, optimizer, frozen, lam, cast, x, simsiam_loss, model_contrastive_loss):
    """The step with its network part (both encoders, predictors, the frozen model, loss, backward, Adam) captured
    once as a CUDA graph and replayed; the views are drawn outside it, as the step draws them, and copied into the
    graph's input buffers (their draws come from a generator of their own, which a capture does not advance)."""
    import torch

    x1, x2 = method.views(x, method._augment_gen), method.views(x, method._augment_gen)

    def network() -> torch.Tensor:
        with cast:
            z1, z2 = method.encoder(x1), method.encoder(x2)
            p1, p2 = method.predictor(z1), method.predictor(z2)
            loss = simsiam_loss(p1, p2, z1, z2)
            with torch.no_grad():
                g1, g2 = frozen(x1), frozen(x2)
            return loss + lam * 0.5 * (model_contrastive_loss(p1, g1) + model_contrastive_loss(p2, g2))

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up outside the graph (cuDNN picks its kernels, Adam makes its state)
        for _ in range(3):
            optimizer.zero_grad(set_to_none=True)
            network().backward()
            optimizer.step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    optimizer.zero_grad(set_to_none=True)
    with torch.cuda.graph(graph):
        static_loss = network()
        static_loss.backward()
        optimizer.step()

    def step() -> torch.Tensor:
        x1.copy_(method.views(x, method._augment_gen))
        x2.copy_(method.views(x, method._augment_gen))
        graph.replay()
        return static_loss.detach()

    return step


def main() -> None:
    args = argparse.ArgumentParser()
    sub = args.add_subparsers(dest="command")
    fl = sub.add_parser("flower", help="(internal) one Flower simulation")
    fl.add_argument("--clients", type=int, required=True)
    fl.add_argument("--rounds", type=int, required=True)
    fl.add_argument("--cpus-per-client", type=float, default=1)
    fl.add_argument("--data", required=True)
    fl.add_argument("--out", required=True)
    fl.add_argument("--device", default="cpu")
    fl.add_argument("--gpus-per-client", type=float, default=0.0)
    gpu = sub.add_parser("gpu", help="the GPU speed legs (benchmarks/gpu_protocol.sh speed)")
    gpu.add_argument("--legs", nargs="+", default=["short", "step", "full"], choices=["short", "step", "full", "peer"])
    gpu.add_argument("--budget", type=float, default=540, help="seconds for all legs; what is left goes on next call")
    gpu.add_argument("--csv", default=str(RESULTS / "gpu_speed.csv"))
    gpu.add_argument("--out", default=os.environ.get("OUT"), help="a folder that gets a copy of the CSV after each row")
    gpu.add_argument("--runs", default=str(RUNS / "gpu_speed"), help="the legs' run folders")
    gpu.add_argument("--accelerator", default="cuda", help="cuda; cpu for a dry run")
    gpu.add_argument("--clients", type=int, nargs="+", default=[10, 100])
    gpu.add_argument("--images", type=int, default=70_000, help="images the fit arguments give (for the CSV)")
    gpu.add_argument("--fit-args", type=shlex.split, default=[],
                     help="more `fedclust fit` options as one string, e.g. --fit-args='--data.subsample 600'")
    gpu.add_argument("--modes", nargs="+", default=list(SPEED_MODES), choices=list(SPEED_MODES))
    gpu.add_argument("--full-modes", nargs="+", default=["auto", "fp32"], choices=list(SPEED_MODES))
    gpu.add_argument("--short-rounds", type=int, nargs=2, default=[3, 1], metavar=("PRETRAIN", "CLUSTER"))
    gpu.add_argument("--full-rounds", type=int, nargs=2, default=[100, 30], metavar=("PRETRAIN", "CLUSTER"))
    gpu.add_argument("--variants", nargs="+", default=STEP_VARIANTS)
    gpu.add_argument("--step-count", type=int, default=200, help="timed steps per variant")
    gpu.add_argument("--peer-rounds", type=int, default=3, help="rounds per peer run (the first is the warm-up)")
    gpu.add_argument("--peer-mode", default="auto", choices=list(SPEED_MODES))
    gpu.add_argument("--flower-python", default=sys.executable)
    gpu.add_argument("--flower-site", default=None, help="a folder to put before PYTHONPATH for Flower's run")
    gpu.add_argument("--flower-cpus", type=float, default=2, help="CPUs per Flower client (Ray actor)")
    gpu.add_argument("--flower-gpus", type=float, default=0.125, help="GPU share per Flower client (Ray actor)")
    gpu.add_argument("--threads", type=int, default=max(1, (os.cpu_count() or 2) // 2),
                     help="fedclust's torch threads in the peer leg")
    step = sub.add_parser("gpu-step", help="(internal) the local step's variants, timed")
    step.add_argument("--device", default="cuda")
    step.add_argument("--variants", nargs="+", default=STEP_VARIANTS)
    step.add_argument("--steps", type=int, default=200)
    step.add_argument("--warmup", type=int, default=10)
    step.add_argument("--out", required=True)
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
    {"flower": flower_main, "gpu": gpu_main, "gpu-step": step_main}.get(opts.command, driver)(opts)


if __name__ == "__main__":
    main()

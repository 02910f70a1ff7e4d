"""The project's Flower peer (issue 13; issue 46 item 4 on a GPU), `python -m benchmarks peer`: CCFC's stage-1
workload on Flower's simulation against `fedclust fit`, A B, rounds timed by each run's clock, memory polled.

Flower is the optional `bench` extra (best in a venv made with --system-site-packages, so its pins never touch
fedclust's); its side runs in that interpreter as `python -m benchmarks.flower_peer SPEC.json`. Both sides: the
Fashion-MNIST test split, IID over N clients (fedclust's partitioner, seed 66), CCFC's ConvNet28 + heads (latent 64,
lambda 1), batch 128, one epoch of SimSiam + the model-contrastive term, Adam reset each round, FedAvg, k-means
(k = 10) on each client and over the centroids on the server. The Flower side is written as Flower's examples write
it (NumPyClient, PIL images under torchvision transforms, scikit-learn KMeans, Ray); networks and losses are
fedclust's, so only the framework differs. The tuned A B A B of 2026-11-24 is results/flower_peer.md.
"""

from __future__ import annotations

import copy
import csv
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from fedclust.errors import ConfigError

from .common import ROOT, RUNS, append_row, git_commit, machine, now

WORK = RUNS / "flower_peer"
SEED, K, BATCH, LR, LAM, LATENT = 66, 10, 128, 1e-3, 1.0, 64
COLUMNS = ["framework", "clients", "rounds", "accelerator", "setting", "warmup_seconds", "seconds_per_round",
           "peak_rss_mb", "peak_pss_mb", "peak_gpu_mb", "nmi", "commit", "machine", "started"]


# --- Flower side (runs inside the flwr environment) -----------------------------------------------------
def flower_main(opts: dict) -> None:
    """One Flower simulation; writes per-round seconds and the final NMI to opts["out"]."""
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

    from fedclust.data.config import DataConfig, build_federated_data
    from fedclust.losses.simsiam import model_contrastive_loss, simsiam_loss
    from fedclust.nn.backbones import build_backbone
    from fedclust.nn.heads import predictor, projector

    data = build_federated_data(DataConfig(name="fmnist", split="test", num_clients=opts["clients"], partition="iid"),
                                torch.device("cpu"), SEED)  # fedclust's partition: both sides hold the same samples
    x = data.x.squeeze(1)
    images = ((x * 255).round() if x.is_floating_point() else x).to(torch.uint8).numpy()
    labels, parts = data.labels.numpy(), [p.numpy() for p in data.parts]
    device = torch.device(opts["device"])  # as Flower's examples: the client's network and batches on the GPU if any

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
        return CCFCClient(images[parts[pid]]).to_client()

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
        if server_round != opts["rounds"]:
            return None
        net = Net().to(device)
        set_weights(net, parameters)
        c = strategy.centroids / np.linalg.norm(strategy.centroids, axis=1, keepdims=True)
        result["nmi"] = float(normalized_mutual_info_score(labels, (embed(net, images) @ c.T).argmax(1)))
        return 0.0, {"nmi": result["nmi"]}

    torch.manual_seed(SEED)
    strategy = CCFCFedAvg(fraction_fit=1.0, fraction_evaluate=0.0, min_fit_clients=opts["clients"],
                          min_available_clients=opts["clients"], evaluate_fn=evaluate_fn,
                          initial_parameters=ndarrays_to_parameters(get_weights(Net())))

    def server_fn(context: Context):
        return ServerAppComponents(strategy=strategy, config=ServerConfig(num_rounds=opts["rounds"]))

    run_simulation(server_app=ServerApp(server_fn=server_fn), client_app=ClientApp(client_fn=client_fn),
                   num_supernodes=opts["clients"],
                   backend_config={"client_resources": {"num_cpus": opts["cpus_per_client"],
                                                        "num_gpus": opts["gpus_per_client"]}})
    Path(opts["out"]).write_text(json.dumps(result))


# --- the peer: both sides, A B ------------------------------------------------------------------------
def gpu_memory_mb() -> float | None:
    """Memory in use on GPU 0 by every process (nvidia-smi), or None without one."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits", "-i", "0"],
                             capture_output=True, text=True, timeout=10).stdout
        return float(out.split()[0])
    except (OSError, ValueError, IndexError, subprocess.TimeoutExpired):
        return None


def watch(cmd: list[str], env: dict[str, str], gpu: bool = False) -> tuple[float, float, float | None]:
    """Run cmd; the peak RSS and PSS (MB) summed over its whole process tree, and with gpu=True the peak GPU memory
    it added (nvidia-smi's memory in use, less what was in use before it started; None without)."""
    try:
        import psutil
    except ImportError:  # the `bench` extra: Flower and psutil
        raise ConfigError("peer", sys.executable, 'an interpreter with the `bench` extra (pip install '
                          '"fedclust[bench]"; Flower best in a venv made with --system-site-packages)') from None
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
    return peak_rss, peak_pss, peak_gpu if gpu else None


def run_flower(n: int, rounds: int, cpus: float, python: str, device: str = "cpu", gpus: float = 0.0,
               pythonpath: str | None = None) -> dict:
    out = WORK / f"flower_{n}.json"
    # Ray starts its workers at nice 15 (its worker_niceness default): on a shared machine they would lose the
    # CPU to everyone else's work while fedclust runs at nice 0. Same priority for both: RAY_worker_niceness=0.
    env = {**os.environ, "OMP_WAIT_POLICY": "PASSIVE", "FLWR_TELEMETRY_ENABLED": "0", "RAY_DEDUP_LOGS": "0",
           "RAY_worker_niceness": "0"}
    if pythonpath:  # Flower's stack unpacked for this run alone (the GPU machine's, benchmarks/gpu_wheels.sh)
        env["PYTHONPATH"] = pythonpath + os.pathsep + env.get("PYTHONPATH", "")
    start = time.perf_counter()
    spec = WORK / f"flower_{n}.spec.json"
    spec.write_text(json.dumps({"clients": n, "rounds": rounds, "cpus_per_client": cpus, "gpus_per_client": gpus,
                                "device": device, "out": str(out)}))
    rss, pss, gpu_mb = watch([python, "-m", "benchmarks.flower_peer", str(spec)], env, gpu=device != "cpu")
    res = json.loads(out.read_text())
    return {**res, "rss": rss, "pss": pss, "gpu_mb": gpu_mb, "wall": time.perf_counter() - start}


def run_fedclust(n: int, rounds: int, threads: int, precision: str = "auto",
                 accelerator: str = "auto") -> dict:
    from fedclust.resume import started_arithmetic

    folder = WORK / f"fedclust_{n}"
    env = {**os.environ, "OMP_WAIT_POLICY": "PASSIVE", "OMP_NUM_THREADS": str(threads)}  # both sides: PASSIVE
    cmd = [sys.executable, "-m", "fedclust", "fit", "--config",
           str(ROOT / "configs/ccfc_fmnist.yaml"), "--run_dir", str(folder), "--progress", "false",
           "--data.split", "test", "--data.num_clients", str(n), "--data.partition", "iid",
           "--method.init_args.pretrain_rounds", str(rounds), "--method.init_args.cluster_rounds", "0",
           # the Flower side's settings (the paper's for Fashion-MNIST), whatever the packaged config ships
           "--method.init_args.latent_dim", str(LATENT), "--method.init_args.lam", str(LAM),
           "--method.init_args.sync_init", "true",
           "--federation.optimizer_state", "reset", "--federation.eval_every", "1000",
           "--federation.checkpoint_every", "1000", "--fabric.precision", precision,
           "--fabric.accelerator", accelerator]
    if folder.exists():
        shutil.rmtree(folder)
    start = time.perf_counter()
    rss, pss, gpu_mb = watch(cmd, env, gpu=accelerator == "cuda")
    with open(folder / "metrics.csv", newline="") as f:
        secs = [float(r["seconds"]) for r in csv.DictReader(f)]
    nmi = json.loads((folder / "final.json").read_text())["metrics"]["nmi"]
    # what `precision: auto` resolved to on this machine, as the run recorded it
    used = (started_arithmetic(folder) or (precision,))[0]
    return {"rounds": secs, "nmi": nmi, "rss": rss, "pss": pss, "precision": used, "gpu_mb": gpu_mb,
            "wall": time.perf_counter() - start}


def peer(clients: list[int], rounds: int, pairs: int, accelerator: str, flower_python: str, flower_site: str | None,
         flower_cpus: float, flower_gpus: float, threads: int, precision: str, out: Path) -> Path:
    """A B pairs (Flower, then fedclust) at each client count; a row per run appended to `out` as it ends."""
    WORK.mkdir(parents=True, exist_ok=True)
    record = {"commit": git_commit(), "machine": machine(date=False)}
    for n in clients:
        for _ in range(pairs):
            for framework in ("Flower", "fedclust"):
                started = now()
                if framework == "Flower":
                    r = run_flower(n, rounds, flower_cpus, flower_python, accelerator, flower_gpus, flower_site)
                    setting = f"{flower_cpus:g} CPU, {flower_gpus:g} GPU per Ray actor"
                else:
                    r = run_fedclust(n, rounds, threads, precision, accelerator)
                    setting = f"{threads} threads, {r['precision']}"
                timed = r["rounds"][1:] or r["rounds"]
                append_row(out, COLUMNS, {
                    "framework": framework, "clients": n, "rounds": rounds, "accelerator": accelerator,
                    "setting": setting, "warmup_seconds": f"{r['rounds'][0]:.2f}", "nmi": f"{r['nmi']:.4f}",
                    "seconds_per_round": f"{statistics.median(timed):.3f}", "peak_rss_mb": f"{r['rss']:.0f}",
                    "peak_pss_mb": f"{r['pss']:.0f}", **record, "started": started,
                    "peak_gpu_mb": "" if r["gpu_mb"] is None else f"{r['gpu_mb']:.0f}"})
    return out


if __name__ == "__main__":  # Flower's side, in Flower's interpreter: one simulation, its settings in a JSON file
    flower_main(json.loads(Path(sys.argv[1]).read_text()))

"""Why centralized k-means and k-FED took longer in fedclust than in their reference code (issue 14), measured.

    python benchmarks/classic_speed.py [--reps 3]        # ~20 minutes on 2 shared CPU cores

Four programs, each a fresh process timed from start to exit, run interleaved (A, B, C, D, A, B, ...) because
the machine is shared: the minimum over the repetitions is the least disturbed figure.
- `ref-kmeans`: scikit-learn KMeans(10, n_init=10, max_iter=300) on the 70,000 Fashion-MNIST images in [0, 1],
  L2-normalised (REFERENCE.md's KM reading), data read with numpy;
- `fedclust fit --config configs/kmeans_fmnist.yaml` (FAISS, niter 300, nredo 10, the same geometry);
- `ref-kfed`: k-FED as the official code runs it (numpy + scikit-learn: randomized SVD, D^2 seeding in the
  projection, the 3x rule, KMeans(init=...) locally; first client's centres + farthest points, KMeans(init=...)
  centrally), 10 clients of 7,000 shuffled images (p = 0), written here from the official steps for timing;
- `fedclust fit --config configs/kfed_fmnist.yaml` (p = 0).
Then, in this process, where the time goes: start-up (imports), FAISS's Lloyd iterations against
scikit-learn's, and k-FED's local step pieces. Writes benchmarks/results/classic_speed_fmnist.md.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

T0 = time.perf_counter()
# Every process here, references included, waits passively in OpenMP as fedclust does (fedclust/__init__.py): on
# a shared machine spinning threads of one runtime starve the others. Set before numpy, torch or FAISS load.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
FMNIST = "/usr/share/datasets/fashion-mnist"
COMMAND = "python benchmarks/classic_speed.py"
BEFORE = "68c6e57^"  # the commit before k-FED's Gram-matrix SVD and empty-cluster re-seeding


def load_fmnist():
    """The 70,000 images as float32 rows in [0, 1], L2-normalised, and their labels, read with numpy alone (as a
    reference script would: fedclust's reader imports torch)."""
    import gzip

    import numpy as np

    def idx(name: str, offset: int) -> np.ndarray:
        with gzip.open(f"{FMNIST}/{name}.gz") as f:
            return np.frombuffer(f.read(), np.uint8, offset=offset)

    x = np.concatenate([idx(f"{p}-images-idx3-ubyte", 16) for p in ("train", "t10k")]).reshape(-1, 784)
    y = np.concatenate([idx(f"{p}-labels-idx1-ubyte", 8) for p in ("train", "t10k")])
    x = x.astype(np.float32) / 255.0
    return x / np.linalg.norm(x, axis=1, keepdims=True), y.astype(np.int64)


def ref_kmeans() -> dict:
    from sklearn.cluster import KMeans
    from sklearn.metrics import normalized_mutual_info_score

    imported = time.perf_counter()
    x, y = load_fmnist()
    loaded = time.perf_counter()
    log = io.StringIO()
    with contextlib.redirect_stdout(log):  # verbose=1 prints one "Converged at iteration N" per init
        km = KMeans(10, n_init=10, max_iter=300, random_state=66, verbose=1).fit(x)
    fitted = time.perf_counter()
    iterations = [int(m) + 1 for m in re.findall(r"Converged at iteration (\d+)", log.getvalue())]
    return {"import_s": imported - T0, "load_s": loaded - imported, "fit_s": fitted - loaded,
            "iterations": iterations, "nmi": normalized_mutual_info_score(y, km.labels_)}


def ref_kfed() -> dict:
    import numpy as np
    from scipy.spatial.distance import cdist
    from sklearn.cluster import KMeans, kmeans_plusplus
    from sklearn.metrics import normalized_mutual_info_score
    from sklearn.utils.extmath import randomized_svd

    imported = time.perf_counter()
    x, y = load_fmnist()
    loaded = time.perf_counter()
    rng = np.random.default_rng(66)
    parts = np.array_split(rng.permutation(len(x)), 10)
    centres, local_labels = [], []
    for part in parts:
        a = x[part]
        v = randomized_svd(a, n_components=10, random_state=int(rng.integers(2**31)))[2].T
        ah = a @ v
        seeds, _ = kmeans_plusplus(ah, 10, n_local_trials=1, random_state=int(rng.integers(2**31)))  # D^2 draws
        d = cdist(seeds, ah)
        start = []
        for r in range(10):
            others = np.delete(d, r, axis=0)
            kept = (others >= 3 * d[r]).all(0)
            kept = kept if kept.any() else d.argmin(0) == r  # an empty kept set is NaN in the official code
            start.append(ah[kept].mean(0) @ v.T)
        km = KMeans(10, init=np.array(start), n_init=1).fit(a)
        centres.append(km.cluster_centers_)
        local_labels.append(km.labels_)
    pts = np.concatenate(centres)
    init, rest = list(pts[:10]), pts[10:]
    while len(init) < 10:  # k = k': the first client's centres are all the seeds already
        i = cdist(rest, np.array(init)).min(1).argmax()
        init.append(rest[i])
        rest = np.delete(rest, i, 0)
    central = KMeans(10, init=np.array(init), n_init=1).fit(pts).labels_.reshape(10, 10)
    pred = np.empty(len(x), dtype=np.int64)
    for c, part in enumerate(parts):
        pred[part] = central[c][local_labels[c]]
    done = time.perf_counter()
    return {"import_s": imported - T0, "load_s": loaded - imported, "fit_s": done - loaded,
            "nmi": normalized_mutual_info_score(y, pred)}


def timed(cmd: list[str], env: dict[str, str] | None = None, cwd: Path | None = None) -> tuple[float, float, str]:
    """Wall and CPU (user + system, children) seconds of one process, and its stdout."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env={**os.environ, **(env or {})},
                         cwd=cwd or Path(__file__).resolve().parents[1]).stdout
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), out


def before_tree(rev: str) -> Path:
    """fedclust as it was at `rev` (git archive into benchmarks/runs), run with PYTHONPATH pointing at it."""
    from common import ROOT, RUNS

    tree = RUNS / "classic_speed" / f"tree_{rev.replace('^', '_')}"
    if not tree.exists():
        tree.mkdir(parents=True)
        archive = subprocess.run(["git", "archive", rev, "fedclust", "callbacks"], cwd=ROOT, check=True,
                                 capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
        if not (tree / "fedclust" / "callbacks").exists():  # a symlink in git at some revisions
            shutil.copytree(tree / "callbacks", tree / "fedclust" / "callbacks")  # the wheel's package-dir mapping
    return tree


def main() -> None:
    from common import RESULTS, ROOT, RUNS, machine

    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--before", default=BEFORE, help="git revision of fedclust 'before' (k-FED's old code)")
    args = parser.parse_args()
    me, fit = [sys.executable, __file__], [sys.executable, "-m", "fedclust", "fit", "--progress", "false"]
    tree = before_tree(args.before)
    km, kf = [str(ROOT / "configs" / f"{name}_fmnist.yaml") for name in ("kmeans", "kfed")]
    programs = {  # name: (command, extra environment, working folder: `python -m` imports from there first)
        "scikit-learn KMeans": (me + ["ref-kmeans"], {}, ROOT),
        "fedclust KMeans": (fit + ["--config", km], {}, ROOT),
        "official-style k-FED": (me + ["ref-kfed"], {}, ROOT),
        "fedclust k-FED": (fit + ["--config", kf], {}, ROOT),
        f"fedclust k-FED before ({args.before})": (fit + ["--config", kf], {"PYTHONPATH": str(tree)}, tree),
    }
    times: dict[str, list] = {name: [] for name in programs}
    for rep in range(args.reps):
        for i, (name, (cmd, env, cwd)) in enumerate(programs.items()):
            run = RUNS / "classic_speed" / f"program{i}_{rep}"
            extra = ["--run_dir", str(run)] if "fit" in cmd else []
            shutil.rmtree(run, ignore_errors=True)
            wall, cpu, out = timed(cmd + extra, env, cwd)
            phases = json.loads(out.strip().splitlines()[-1]) if not extra else round_phases(run)
            if extra:  # start-up (imports, Fabric), data loading and writing the run folder
                phases["outside_round_s"] = wall - sum(phases.values())
                phases["nmi"] = run_nmi(run)  # also tells which code ran (k-FED's start changed the result)
            times[name].append((wall, cpu, phases))
            print(rep, name, f"{wall:.1f} s wall, {cpu:.1f} s CPU", phases, flush=True)
    startup = {name: timed([sys.executable, "-c", f"import {mod}"])[0] for name, mod in
               [("import fedclust.fit (torch, Lightning, torchmetrics, torchvision)", "fedclust.fit"),
                ("import sklearn.cluster", "sklearn.cluster")]}
    lines = ["# Speed of the classic baselines against their reference code (Fashion-MNIST, 70,000 images)", "",
             f"Machine: {machine()}", "", f"Command: `{COMMAND} --reps {args.reps}`. Each program is a fresh process "
             "timed from start to exit; the programs ran interleaved, repetition after repetition, on a machine shared "
             "with other jobs, so the minimum over repetitions is the figure to compare (CPU seconds are less "
             "disturbed by other jobs than wall seconds).", "",
             "| program | wall s (min) | wall s (all) | CPU s (min) | phases of the fastest repetition |",
             "|---|---|---|---|---|"]
    for name, runs in times.items():
        best = min(runs, key=lambda r: r[0])
        lines.append(f"| {name} | {best[0]:.1f} | {', '.join(f'{r[0]:.1f}' for r in runs)} | "
                     f"{min(r[1] for r in runs):.1f} | {fmt(best[2])} |")
    lines += ["", "Start-up alone (one process each, wall s): " + "; ".join(
        f"{k}: {v:.1f}" for k, v in startup.items()), ""]
    lines += why_kmeans() + why_kfed()
    (RESULTS / "classic_speed_fmnist.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def round_phases(run) -> dict:
    import csv

    with (run / "metrics.csv").open() as f:
        row = list(csv.DictReader(f))[-1]
    return {k: float(row[k]) for k in ("train_seconds", "server_seconds", "eval_seconds") if k in row}


def run_nmi(run) -> float:
    return json.loads((run / "final.json").read_text())["metrics"]["nmi"]


def fmt(phases: dict) -> str:
    return ", ".join(f"{k} {v:.4f}" if k == "nmi" else f"{k} {v:.1f}" if isinstance(v, float) else f"{k} {v}"
                     for k, v in phases.items())


def why_kmeans() -> list[str]:
    """FAISS's Lloyd iterations (by default they stop only when the objective stops changing; its
    early_stop_threshold stops at a relative change, like scikit-learn's tol) against scikit-learn's (stop once
    the centres move less than tol = 1e-4 x the mean feature variance), on the same data, here."""
    import faiss
    from sklearn.metrics import normalized_mutual_info_score

    x, y = load_fmnist()
    n, d = x.shape
    rows = []
    for label, threshold in [("FAISS as fedclust calls it (niter 300, nredo 10, k-means++)", 0.0),
                             ("FAISS, same + early_stop_threshold 1e-4", 1e-4)]:
        start = time.perf_counter()
        km = faiss.Kmeans(d, 10, niter=300, nredo=10, seed=66, max_points_per_centroid=-(-n // 10),
                          min_points_per_centroid=1, verbose=False, early_stop_threshold=threshold,
                          init_method=faiss.ClusteringInitMethod_KMEANS_PLUS_PLUS)
        km.train(x)
        seconds, iterations = time.perf_counter() - start, len(km.iteration_stats)
        nmi = normalized_mutual_info_score(y, km.index.search(x, 1)[1][:, 0])
        rows.append(f"| {label} | {iterations} | {seconds:.1f} | {seconds / iterations:.3f} | {nmi:.4f} |")
    import torch

    from fedclust.clustering import kmeans as fk

    xt = torch.from_numpy(x)
    start = time.perf_counter()
    result = fk.kmeans(xt, 10, niter=300, nredo=10, seed=66)
    whole = time.perf_counter() - start
    start = time.perf_counter()
    fk._inertia(xt, result.centroids, result.labels)
    inertia = time.perf_counter() - start
    rows.append(f"| fedclust `kmeans()` (FAISS as above + final assignment + float64 inertia) | | {whole:.1f} | | |")
    rows.append(f"| of which the float64 inertia (`_inertia`) | | {inertia:.1f} | | |")
    ref = ref_kmeans()
    its = ref["iterations"]
    rows.append(f"| scikit-learn KMeans (max_iter 300, n_init 10, tol 1e-4) | {sum(its)} ({', '.join(map(str, its))}) "
                f"| {ref['fit_s']:.1f} | {ref['fit_s'] / sum(its):.3f} | {ref['nmi']:.4f} |")
    return ["## k-means: where the time goes", "",
            "| k-means of the 70,000 x 784 rows, 10 starts | Lloyd iterations (all starts) | seconds | s / iteration "
            "| NMI |", "|---|---|---|---|---|", *rows, ""]


def why_kfed() -> list[str]:
    """k-FED's local step on client 0 of the p = 0 run: SVD (full vs Gram) and the Lloyd iterations (ours, which
    stop when the assignment is stable, vs scikit-learn's from the same start)."""
    from unittest import mock

    import torch
    from sklearn.cluster import KMeans

    from fedclust.clustering import kfed
    from fedclust.data.config import DataConfig, build_federated_data
    from fedclust.seeding import generator

    data = build_federated_data(DataConfig(name="fmnist", num_clients=10, partition="pshift", p=0.0,
                                           normalize="l2"), torch.device("cpu"), 66)
    x = data.client(0, 128).all_x().flatten(1).contiguous()
    rows = []
    for label, fn in [("full SVD (torch.linalg.svd, before)", lambda: torch.linalg.svd(x, full_matrices=False)),
                      ("top-10 from the Gram matrix (now)", lambda: kfed.top_right_singular_vectors(x, 10))]:
        best = min(_seconds(fn) for _ in range(3))
        rows.append(f"| {label} | {best:.3f} |")
    start = _local_start(x, generator(66, 0, 0, 0, "local-kfed", device="cpu"))
    loop, now, iters = [], [], 0
    for _ in range(3):  # interleaved, best of 3
        with mock.patch.object(kfed, "assign_nearest", wraps=kfed.assign_nearest) as counted:  # once per iteration
            loop.append(_seconds(lambda: kfed.lloyd_torch(x, start)))
            iters = counted.call_count - 1
        now.append(_seconds(lambda: kfed.lloyd(x, start)))
    sk = KMeans(10, init=start.numpy(), n_init=1, tol=0.0).fit(x.numpy())
    return ["## k-FED: the local step of one client (7,000 x 784), here", "",
            "| top-k' right singular vectors | seconds (min of 3) |", "|---|---|", *rows, "",
            "| Lloyd from the same start, until the assignment is stable | iterations | seconds (min of 3) |",
            "|---|---|---|",
            f"| torch loop (before; now the CUDA path `lloyd_torch`) | {iters} | {min(loop):.2f} |",
            f"| scikit-learn KMeans(init=..., tol=0) (now, CPU) | {sk.n_iter_} | {min(now):.2f} |", ""]


def _local_start(x, g):
    """The start Lloyd gets in local_kfed (seeds, 3x rule, means), by running local_kfed with niter 0."""
    from fedclust.clustering import kfed

    centres, _ = kfed.local_kfed(x, 10, g, niter=0)
    return centres


def _seconds(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


if __name__ == "__main__":
    if sys.argv[1:2] == ["ref-kmeans"]:
        print(json.dumps(ref_kmeans()))
    elif sys.argv[1:2] == ["ref-kfed"]:
        print(json.dumps(ref_kfed()))
    else:
        main()

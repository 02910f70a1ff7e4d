"""The classic baselines against their reference code, timed (issue 14): is fedclust as fast as the programs the
papers' numbers come from?

    python benchmarks/classic_speed.py [--reps 3]        # ~20 minutes on 2 shared CPU cores

Four programs, each a fresh process timed from start to exit, run interleaved (A, B, C, D, A, B, ...) because
a machine is often shared: the minimum over the repetitions is the least disturbed figure.
- `ref-kmeans`: scikit-learn KMeans(10, n_init=10, max_iter=300) on the 70,000 Fashion-MNIST images in [0, 1],
  L2-normalised (REFERENCE.md's KM reading), data read with numpy;
- `fedclust fit --config kmeans_fmnist` (FAISS, niter 300, nredo 10, the same geometry);
- `ref-kfed`: k-FED as the official code runs it (numpy + scikit-learn: randomized SVD, D^2 seeding in the
  projection, the 3x rule, KMeans(init=...) locally; first client's centres + farthest points, KMeans(init=...)
  centrally), 10 clients of 7,000 shuffled images (p = 0), written here from the official steps;
- `fedclust fit --config kfed_fmnist` (p = 0).
Writes benchmarks/results/classic_speed_fmnist.md. Kept as a script, not an experiment: two of its programs are
not fedclust runs. (Where the time went when fedclust was slower, FAISS's iterations and k-FED's SVD, was a
one-time probe of this script's earlier version: see git history.)
"""

from __future__ import annotations

import csv
import json
import os
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
FMNIST = os.environ.get("FEDCLUST_DATA_ROOT", "/usr/share/datasets/fashion-mnist")


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
    km = KMeans(10, n_init=10, max_iter=300, random_state=66).fit(x)
    return {"import_s": imported - T0, "load_s": loaded - imported, "fit_s": time.perf_counter() - loaded,
            "nmi": normalized_mutual_info_score(y, km.labels_)}


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
            kept = (np.delete(d, r, axis=0) >= 3 * d[r]).all(0)
            kept = kept if kept.any() else d.argmin(0) == r  # an empty kept set is NaN in the official code
            start.append(ah[kept].mean(0) @ v.T)
        km = KMeans(10, init=np.array(start), n_init=1).fit(a)
        centres.append(km.cluster_centers_)
        local_labels.append(km.labels_)
    pts = np.concatenate(centres)
    init, rest = list(pts[:10]), pts[10:]  # k = k': the first client's centres are all the seeds already
    while len(init) < 10:
        i = cdist(rest, np.array(init)).min(1).argmax()
        init.append(rest[i])
        rest = np.delete(rest, i, 0)
    central = KMeans(10, init=np.array(init), n_init=1).fit(pts).labels_.reshape(10, 10)
    pred = np.empty(len(x), dtype=np.int64)
    for c, part in enumerate(parts):
        pred[part] = central[c][local_labels[c]]
    return {"import_s": imported - T0, "load_s": loaded - imported, "fit_s": time.perf_counter() - loaded,
            "nmi": normalized_mutual_info_score(y, pred)}


def timed(cmd: list[str], cwd: Path) -> tuple[float, float, str]:
    """Wall and CPU (user + system, children) seconds of one process, and its stdout."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=cwd).stdout
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), out


def fit_phases(run: Path, wall: float) -> dict:
    """The last round's own clock (metrics.csv), the rest of the wall time (start-up, data, writing), NMI."""
    with (run / "metrics.csv").open() as f:
        row = list(csv.DictReader(f))[-1]
    phases = {k: float(row[k]) for k in ("train_seconds", "server_seconds", "eval_seconds") if k in row}
    phases["outside_round_s"] = wall - sum(phases.values())
    phases["nmi"] = json.loads((run / "final.json").read_text())["metrics"]["nmi"]
    return phases


def main() -> None:
    import argparse

    from common import RESULTS, ROOT, RUNS, git_commit, machine

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    me, fit = [sys.executable, __file__], [sys.executable, "-m", "fedclust", "fit", "--progress", "false"]
    programs = {"scikit-learn KMeans": me + ["ref-kmeans"], "fedclust KMeans": fit + ["--config", "kmeans_fmnist"],
                "official-style k-FED": me + ["ref-kfed"], "fedclust k-FED": fit + ["--config", "kfed_fmnist"]}
    times: dict[str, list] = {name: [] for name in programs}
    for rep in range(args.reps):
        for i, (name, cmd) in enumerate(programs.items()):
            run = RUNS / "classic_speed" / f"program{i}_{rep}"
            shutil.rmtree(run, ignore_errors=True)
            extra = ["--run_dir", str(run)] if "fit" in cmd else []
            wall, cpu, out = timed(cmd + extra, ROOT)
            phases = fit_phases(run, wall) if extra else json.loads(out.strip().splitlines()[-1])
            times[name].append((wall, cpu, phases))
            print(rep, name, f"{wall:.1f} s wall, {cpu:.1f} s CPU", phases, flush=True)
    lines = ["# Speed of the classic baselines against their reference code (Fashion-MNIST, 70,000 images)", "",
             f"Machine: {machine()}; fedclust at commit {git_commit()}", "",
             f"Command: `python benchmarks/classic_speed.py --reps {args.reps}`. Each program is a fresh process timed "
             "from start to exit; the programs ran interleaved, repetition after repetition, so the minimum over "
             "repetitions is the figure to compare (CPU seconds are less disturbed by other jobs than wall seconds).",
             "", "| program | wall s (min) | wall s (all) | CPU s (min) | phases of the fastest repetition |",
             "|---|---|---|---|---|"]
    for name, runs in times.items():
        best = min(runs, key=lambda r: r[0])
        phases = ", ".join(f"{k} {v:.4f}" if k == "nmi" else f"{k} {v:.1f}" for k, v in best[2].items())
        lines.append(f"| {name} | {best[0]:.1f} | {', '.join(f'{r[0]:.1f}' for r in runs)} | "
                     f"{min(r[1] for r in runs):.1f} | {phases} |")
    (RESULTS / "classic_speed_fmnist.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    if sys.argv[1:2] == ["ref-kmeans"]:
        print(json.dumps(ref_kmeans()))
    elif sys.argv[1:2] == ["ref-kfed"]:
        print(json.dumps(ref_kfed()))
    else:
        main()

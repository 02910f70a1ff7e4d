"""The papers' whole schedules on the Fashion-MNIST test split (10,000 real images), on this CPU.

    python benchmarks/whole_schedule.py list                        # the runs and their state
    nice -n 19 python benchmarks/whole_schedule.py run ccfc_p0 ccfc_p1 --threads 1   # start or resume
    python benchmarks/whole_schedule.py report                      # results file + compare page
    python benchmarks/whole_schedule.py snapshot fedmcc_iid --at 100  # keep the model of round 100 aside
    python benchmarks/whole_schedule.py probe fedmcc_iid_round100 fedcc_iid_fedmcc_split  # k-means on each z
    python benchmarks/whole_schedule.py run fedmcc_iid_stage2_e5    # a branch: on from a snapshot, one setting changed

Every run is an ordinary `fedclust fit` in benchmarks/runs/whole/NAME that checkpoints every 5 rounds;
`run` resumes a run folder that holds a checkpoint and no final.json, so a run cut off by the end of a
session goes on in the next one from its last checkpoint. Settings are each config's (the papers') with
the data set switched to the Fashion-MNIST test split, as named per run below; `report` writes
benchmarks/results/whole_schedule_fmnist_test.md (final metrics, the papers' cells, NMI per round) and
benchmarks/results/whole_schedule_fmnist_test.html (`fedclust compare` over every started run).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from common import RESULTS, ROOT, RUNS, csv_rows, machine

WHOLE = RUNS / "whole"
TEST_SPLIT = ["--data.split", "test"]
FP32 = ["--fabric.precision", "32-true"]  # (memory_format auto is then contiguous)
# this checkout's package, run from ROOT: a run that spans sessions keeps working when the editable install
# is re-pointed elsewhere (a CI run from a clean clone does that)
FEDCLUST = [sys.executable, "-m", "fedclust"]


@dataclass(frozen=True)
class Run:
    config: str
    overrides: list[str] = field(default_factory=list)
    paper: str = ""  # the paper's cell it sits next to (data scale stated there)
    note: str = ""


def _ccfc(p: float, paper: str) -> Run:
    return Run("configs/ccfc_fmnist.yaml", [*TEST_SPLIT, "--data.p", str(p)], paper,
               "100 + 30 rounds, 10 clients, lambda 1, latent 64, batch 128, Adam 1e-3, 1 local epoch")


def _contrastive(config: str, setting: str) -> Run:
    partition = (["--data.partition", "dirichlet", "--data.alpha", "0.1"] if setting == "dir01"
                 else ["--data.partition", "iid"])
    return Run(config, [*TEST_SPLIT, *partition, "--method.init_args.rounds", "100"], "",
               "100 rounds, 5 clients, 1 local epoch (paper: 5), batch 128, Adam 3e-4")


def _two_stage(config: str, setting: str, rounds: list[str], schedule: str) -> Run:
    partition = (["--data.partition", "pathological", "--data.num_classes_per_partition", "2",
                  "--data.class_assignment_mode", "disjoint"] if setting == "noniid" else ["--data.partition", "iid"])
    return Run(config, [*TEST_SPLIT, *partition, *rounds, "--federation.eval_every", "5"], "",
               f"{schedule}, 5 clients, 1 local epoch (paper: 5), batch 128")


RUNS_BY_NAME: dict[str, Run] = {
    "ccfc_p0": _ccfc(0.0, "CCFC Table 1, Fashion-MNIST p = 0 (70,000 images): NMI 0.6237"),
    "ccfc_p0.5": _ccfc(0.5, "CCFC Table 1, Fashion-MNIST p = 0.5 (70,000 images): NMI 0.6023"),
    "ccfc_p1": _ccfc(1.0, "CCFC Table 1, Fashion-MNIST p = 1 (70,000 images): NMI 0.1211"),
    # the official views plus brightness/contrast jitter (benchmarks/results/ccfc_stage1_fmnist_test.md)
    "ccfc_p0_jitter": Run("configs/ccfc_fmnist_jitter.yaml", [*TEST_SPLIT, "--data.p", "0.0"],
                          "CCFC Table 1, Fashion-MNIST p = 0 (70,000 images): NMI 0.6237",
                          "as ccfc_p0 with jitter 0.4 on the stage-1 views (a deviation from the official code)"),
    **{f"kfed_p{p}": Run("configs/kfed_fmnist.yaml", [*TEST_SPLIT, "--data.p", str(p)],
                         "CCFC Table 1 k-FED, Fashion-MNIST (70,000 images)") for p in ("0", "0.5", "1")},
    "kmeans": Run("configs/kmeans_fmnist.yaml", TEST_SPLIT, "CCFC Table 1 KM, Fashion-MNIST (70,000 images): 0.6070"),
    **{f"{m}_{s}": _contrastive(f"configs/{m}_fmnist.yaml", s) for m in ("fedcc", "fedpnp") for s in ("iid", "dir01")},
    **{f"fedmcc_{s}": _two_stage("configs/fedmcc_fmnist.yaml", s, ["--method.init_args.representation_rounds", "100",
                                                                   "--method.init_args.cluster_rounds", "10"],
                                    "100 representation + 10 cluster rounds")
       for s in ("iid", "noniid")},
    **{f"fedu_kmeans_{s}": _two_stage("configs/fedu_kmeans_fmnist.yaml", s, ["--method.init_args.rounds", "100"],
                                           "100 FedU rounds, then k-means on the global encoder")
       for s in ("iid", "noniid")},
}
# Fed+CC is FedMCC's baseline: FedCC for 100 rounds under FedMCC's splits and FedMCC's protocol, which creates
# every client's optimizer anew each round (EasyFL; configs/fedmcc_fmnist.yaml), as benchmarks/fedmcc_fmnist.py
# does. Without the reset the IID run would be fedcc_iid again (same partition and seed, deterministic).
RUNS_BY_NAME.update({f"fedcc_{s}_fedmcc_split": _two_stage("configs/fedcc_fmnist.yaml", s,
                                                             ["--method.init_args.rounds", "100",
                                                              "--federation.optimizer_state", "reset"],
                                                             "100 rounds, optimizer reset every round (as FedMCC)")
                     for s in ("iid", "noniid")})


@dataclass(frozen=True)
class Branch:
    """A run that goes on from another's kept model (a `snapshot`) with some settings changed: the question "what
    if only the later stage differed". The source folder is copied (its checkpoint hard-linked), the changes are
    written into the copy's config.yaml (dotted keys), and the copy is resumed."""
    source: str
    changes: dict[str, object]
    note: str


BRANCHES: dict[str, Branch] = {
    # FedMCC's stage 2 with the paper's E = 5 local epochs (Section IV-A) on the same stage-1 model
    "fedmcc_iid_stage2_e5": Branch("fedmcc_iid_round100", {"method.init_args.cluster_local_epochs": 5,
                                                           "federation.eval_every": 1},
                                   "fedmcc_iid's model of round 100, then 10 cluster rounds x 5 local epochs "
                                   "(the paper's E) instead of 1"),
    # stage 2's target path through the global f* instead of the client's own f_k^T (eq. 7's reading)
    "fedmcc_iid_stage2_global_target": Branch("fedmcc_iid_round100",
                                              {"method.init_args.cluster_target_encoder": "global",
                                               "federation.eval_every": 1},
                                              "fedmcc_iid's model of round 100, then its 10 cluster rounds with "
                                              "the target path encoding through the global f* (ablation)"),
    # the cluster head's target follows its online twin at once (m = 0 in stage 2 only: stage 1 is done): does the
    # slow EMA target, which starts as a random head, hold the head back?
    "fedmcc_iid_stage2_m0": Branch("fedmcc_iid_round100", {"method.init_args.ema_decay": 0.0,
                                                           "federation.eval_every": 1},
                                   "fedmcc_iid's model of round 100, then its 10 cluster rounds with the cluster "
                                   "head's EMA decay 0 (target = online after every step) instead of 0.99"),
    # five times the cluster rounds: is the head of eq. (9) merely under-trained after 10 rounds?
    "fedmcc_iid_stage2_r50": Branch("fedmcc_iid_round100", {"method.init_args.cluster_rounds": 50},
                                    "fedmcc_iid's model of round 100, then 50 cluster rounds instead of 10"),
    # both: m = 0 was still climbing after 10 rounds
    "fedmcc_iid_stage2_m0_r50": Branch("fedmcc_iid_round100", {"method.init_args.ema_decay": 0.0,
                                                               "method.init_args.cluster_rounds": 50},
                                       "fedmcc_iid's model of round 100, then 50 cluster rounds with the cluster "
                                       "head's EMA decay 0"),
    "fedmcc_noniid_stage2_m0": Branch("fedmcc_noniid_round100", {"method.init_args.ema_decay": 0.0,
                                                                 "federation.eval_every": 1},
                                      "fedmcc_noniid's model of round 100, then its 10 cluster rounds with the "
                                      "cluster head's EMA decay 0"),
}


def start_branch(name: str) -> Path:
    import yaml

    spec, folder = BRANCHES[name], WHOLE / name
    if folder.exists():
        return folder
    source = WHOLE / spec.source
    if not (source / "checkpoints" / "last.ckpt").exists():
        sys.exit(f"{name}: its source {source} holds no checkpoint (run `snapshot` first)")
    tmp = folder.with_name(name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    (tmp / "checkpoints").mkdir(parents=True)
    os.link(source / "checkpoints" / "last.ckpt", tmp / "checkpoints" / "last.ckpt")
    for extra in ("partition.csv", "partition.txt", "metrics.csv"):
        shutil.copy2(source / extra, tmp / extra)
    config = yaml.safe_load((source / "config.yaml").read_text())
    for key, value in spec.changes.items():
        *path, leaf = key.split(".")
        node = config
        for part in path:
            node = node[part]
        node[leaf] = value  # a setting newer than the source run is added (fit checks its name and value)
    (tmp / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    tmp.rename(folder)
    return folder


def state(name: str) -> str:
    folder = WHOLE / name
    if (folder / "final.json").exists():
        return "done"
    if (folder / "checkpoints" / "last.ckpt").exists():
        rows = _metrics(folder)
        return f"checkpointed ({rows[-1]['round'] if rows else '?'} rounds logged)"
    return "not started"


def _metrics(folder: Path) -> list[dict[str, str]]:
    return csv_rows(folder / "metrics.csv")


def median_round_seconds(name: str) -> float | None:
    """Median wall seconds of the rounds this run trained itself (a branch's copied rounds of its source are left
    out), from metrics.csv; pauses of the machine are in it, the median keeps them from dominating."""
    after = int(BRANCHES[name].source.rpartition("_round")[2]) if name in BRANCHES else 0
    seconds = [float(r["seconds"]) for r in _metrics(WHOLE / name) if int(r["round"]) > after and r.get("seconds")]
    return statistics.median(seconds) if seconds else None


def nmi_by_round(folder: Path) -> dict[int, float]:
    """NMI of every scored round of a run folder (rounds without a score are left out)."""
    return {int(r["round"]): float(r["nmi"]) for r in _metrics(folder) if r.get("nmi")}


@dataclass(frozen=True)
class Claim:
    """A paper's claim as two runs: `claimant` should end above `baseline`. `clusters_from` is the first round
    at which the claimant's clustering means anything (FedMCC's cluster head is untrained in its representation
    stage, so its rounds 1-100 score a random head); rounds before it are left out of the round-by-round
    columns, and the finals are compared whatever their round."""
    baseline: str
    claimant: str
    text: str
    clusters_from: int = 1


CLAIMS = [Claim("fedcc_iid", "fedpnp_iid", "FedPNP > FedCC, IID"),
          Claim("fedcc_dir01", "fedpnp_dir01", "FedPNP > FedCC, Dirichlet 0.1"),
          Claim("fedcc_iid_fedmcc_split", "fedmcc_iid", "FedMCC > Fed+CC, IID", clusters_from=101),
          Claim("fedcc_noniid_fedmcc_split", "fedmcc_noniid", "FedMCC > Fed+CC, non-IID", clusters_from=101),
          # FedMCC Section IV "consistently outperforms FedU + K-means" (Tables I-II)
          Claim("fedu_kmeans_iid", "fedmcc_iid", "FedMCC > FedU+K-means, IID", clusters_from=101),
          Claim("fedu_kmeans_noniid", "fedmcc_noniid", "FedMCC > FedU+K-means, non-IID", clusters_from=101)]


def _final_nmi(name: str) -> float | None:
    final = WHOLE / name / "final.json"
    return float(json.loads(final.read_text())["metrics"]["nmi"]) if final.exists() else None


def claim_rows() -> list[str]:
    """One table row per claim with something to compare: the finals (once both runs are done), then how often
    and by how much the claim holds round by round over the rounds both runs score meaningfully."""
    rows = []
    for claim in CLAIMS:
        a, b = nmi_by_round(WHOLE / claim.baseline), nmi_by_round(WHOLE / claim.claimant)
        shared = sorted(t for t in set(a) & set(b) if t >= claim.clusters_from)
        finals = (_final_nmi(claim.claimant), _final_nmi(claim.baseline))
        if not shared and None in finals:
            continue
        final = "not both done yet" if None in finals else f"{finals[0]:.4f} vs {finals[1]:.4f}"
        meaningful = {t: v for t, v in b.items() if t >= claim.clusters_from}
        best = ""
        if meaningful and a:
            best_a, best_b = max(a, key=a.get), max(meaningful, key=meaningful.get)
            best = f"{b[best_b]:.3f} ({best_b}) vs {a[best_a]:.3f} ({best_a})"
        if shared:
            tail = shared[-20:]
            by_round = (f"{len(shared)} (to round {shared[-1]}) | {sum(b[t] > a[t] for t in shared)} | "
                        f"{sum(b[t] for t in tail) / len(tail):.3f} vs {sum(a[t] for t in tail) / len(tail):.3f}")
        else:
            by_round = f"none (the claimant clusters from round {claim.clusters_from}) | | "
        rows.append(f"| {claim.text} | {claim.claimant} vs {claim.baseline} | {final} | {best} | {by_round} |")
    return rows


def run(name: str, threads: int) -> None:
    folder = WHOLE / name
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    if (folder / "final.json").exists():
        print(f"{name}: done")
        return
    if name in BRANCHES:
        start_branch(name)
    spec = RUNS_BY_NAME.get(name)
    if (folder / "checkpoints" / "last.ckpt").exists():
        command = [*FEDCLUST, "fit", "--resume", str(folder), "--progress", "false"]
    else:
        if folder.exists():  # died before its first checkpoint: keep it aside, start again
            n = 1
            while folder.with_name(f"{name}.incomplete-{n}").exists():
                n += 1
            folder.rename(folder.with_name(f"{name}.incomplete-{n}"))
        # fp32, as the papers trained and as the first runs here did (precision: auto would put CCFC's
        # ConvNet28 in bf16 on this CPU, and the curves must compare)
        command = [*FEDCLUST, "fit", "--config", str(ROOT / spec.config), *spec.overrides, *FP32,
                   "--federation.checkpoint_every", "5", "--run_dir", str(folder), "--progress", "false"]
    print(f"{name}: {' '.join(command)}", flush=True)
    subprocess.run(command, check=True, cwd=ROOT, env=env)


def snapshot(name: str, at: int, poll_seconds: float = 10.0) -> Path:
    """Keep a running run's model of round `at` (a stage boundary: FedMCC's representation after its 100 rounds)
    as a run folder of its own, NAME_roundAT, which `fedclust evaluate` and the `representations` data set read.
    Waits for the checkpoint of that round (`at` must be a checkpoint round: a multiple of 5); the checkpoint is
    hard-linked (the run replaces it atomically, so the link keeps the round's file)."""
    from fedclust.callbacks.checkpoint import load_checkpoint

    folder, kept = WHOLE / name, WHOLE / f"{name}_round{at}"
    source = folder / "checkpoints" / "last.ckpt"
    target = kept / "checkpoints" / "last.ckpt"
    if target.exists():
        return kept
    kept.mkdir(exist_ok=True)
    target.parent.mkdir(exist_ok=True)
    while True:
        rows = _metrics(folder)
        if rows and int(rows[-1]["round"]) >= at and source.exists():
            probe = target.with_suffix(".tmp")
            probe.unlink(missing_ok=True)
            os.link(source, probe)
            done = load_checkpoint(probe)["done"]
            if done == at:
                probe.rename(target)
                break
            probe.unlink()
            if done > at:
                shutil.rmtree(kept)  # nothing kept: leave no folder that looks like a snapshot
                sys.exit(f"{name}: its checkpoint is already at round {done}, past {at}")
        time.sleep(poll_seconds)
    for extra in ("config.yaml", "partition.csv", "partition.txt"):
        shutil.copy2(folder / extra, kept / extra)
    header, *lines = (folder / "metrics.csv").read_text().splitlines()
    (kept / "metrics.csv").write_text("\n".join([header, *(r for r in lines if int(r.split(",")[0]) <= at)]) + "\n")
    print(kept)
    return kept


PROBES = WHOLE / "probe_kmeans"


def probe(name: str, threads: int) -> None:
    """NAME: a folder of benchmarks/runs/whole, or one under benchmarks/runs (fedpnp_ablation/alpha_only).
    Centralized k-means (configs/kmeans_fmnist.yaml: 10 restarts, L2-normalised) on the representations
    (`method.embed`) that a run folder's saved model gives the same 10,000 test images: how well each run's
    representation clusters, whatever its own cluster head does. It is how FedU + K-means clusters, so
    FedMCC's representation after stage 1 and Fed+CC's can be put beside it."""
    folder = WHOLE / name if (WHOLE / name).is_dir() else RUNS / name  # e.g. fedpnp_ablation/alpha_only
    out = PROBES / name.replace("/", "-")
    if (out / "final.json").exists():
        print(f"probe {name}: done")
        return
    shutil.rmtree(out, ignore_errors=True)  # no checkpoint worth resuming: one k-means
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    command = [*FEDCLUST, "fit", "--config", str(ROOT / "configs/kmeans_fmnist.yaml"), "--data.name",
               "representations", "--data.split", "test", "--data.options", json.dumps({"run": str(folder)}),
               "--run_dir", str(out), "--progress", "false"]
    print(f"probe {name}: {' '.join(command)}", flush=True)
    subprocess.run(command, check=True, cwd=ROOT, env=env)


def probe_rows() -> list[str]:
    rows = []
    for out in sorted(PROBES.glob("*/final.json")):
        m = json.loads(out.read_text())["metrics"]
        rows.append(f"| {out.parent.name} | " + " | ".join(f"{float(m[k]):.4f}" for k in ("nmi", "acc", "ari", "kappa"))
                    + " |")
    return rows


def _section(title: str, intro: str, header: list[str], rows: list[str]) -> list[str]:
    """A markdown section of the results file: title, one paragraph, a table; nothing when it has no rows."""
    if not rows:
        return []
    return ["", f"## {title}", "", intro, "", "| " + " | ".join(header) + " |", "|---" * len(header) + "|", *rows]


def report() -> None:
    lines = ["# Whole schedules on the Fashion-MNIST test split (10,000 images)", "",
             f"Machine: {machine()}", "",
             "Command: `python benchmarks/whole_schedule.py run NAME ...` then `python benchmarks/whole_schedule.py "
             "report`. Data: the 10,000-image test split of Fashion-MNIST; the papers' cells are on 70,000 "
             "images (CCFC) or on other data sets (FedPNP: CIFAR; FedMCC: MNIST, CIFAR, STL-10, ImageNet-10), "
             "so they are context, not targets.", "",
             "| run | state | rounds | NMI | ACC | ARI | Kappa | median s/round | settings | paper |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    curves = []
    settings = {name: f"{spec.note}; overrides `{' '.join(spec.overrides)}` | {spec.paper}"
                for name, spec in RUNS_BY_NAME.items()}
    settings.update({name: f"{b.note}; from `{b.source}`, changed `{b.changes}` | "
                     for name, b in BRANCHES.items()})
    for name, setting in settings.items():
        folder = WHOLE / name
        rows = [r for r in _metrics(folder) if r.get("nmi") not in ("", None)]
        done = (folder / "final.json").exists()
        final = json.loads((folder / "final.json").read_text())["metrics"] if done else {}
        last = final or (rows[-1] if rows else {})
        cells = [f"{float(last[m]):.4f}" if last.get(m) not in (None, "") else ""
                 for m in ("nmi", "acc", "ari", "kappa")]
        seconds = median_round_seconds(name)
        cells.append(f"{seconds:.1f}" if seconds is not None else "")
        lines.append(f"| {name} | {state(name)} | {rows[-1]['round'] if rows else 0} | {' | '.join(cells)} | "
                     f"{setting} |")
        if rows:
            curves.append(f"- {name}: " + ", ".join(f"{r['round']}: {float(r['nmi']):.3f}" for r in rows))
    lines += _section("The papers' claims (NMI; claimant first)",
                      "Round by round only over rounds where both runs' clusterings mean something: FedMCC's "
                      "cluster head is trained only in its cluster stage (rounds 101-110), so against Fed+CC and "
                      "FedU+K-means the finals and bests carry the claim.",
                      ["claim", "runs", "final", "best (round)", "shared scored rounds",
                       "rounds the claimant is higher", "mean of the last 20 shared"], claim_rows())
    lines += _section("k-means on each run's representation (`probe`)",
                      "Centralized k-means (configs/kmeans_fmnist.yaml: 10 restarts, L2-normalised) on `method.embed` "
                      "of the same 10,000 images, from the saved model of the folder named (NAME_roundR: the model "
                      "of round R, kept by `snapshot`).", ["run folder", "NMI", "ACC", "ARI", "Kappa"], probe_rows())
    lines += ["", "## NMI per scored round", "", *curves, ""]
    out = RESULTS / "whole_schedule_fmnist_test.md"
    out.write_text("\n".join(lines))
    print(out)
    started = [str(WHOLE / n) for n in settings if _metrics(WHOLE / n)]  # unfinished runs show their curve so far
    if started:
        subprocess.run([*FEDCLUST, "compare", *started, "--output",
                        str(RESULTS / "whole_schedule_fmnist_test.html")], check=True, cwd=ROOT)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("command", choices=["list", "run", "report", "snapshot", "probe"])
    parser.add_argument("names", nargs="*", help="runs to start or resume (run)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per run")
    parser.add_argument("--at", type=int, default=100, help="the round to keep (snapshot)")
    opts = parser.parse_args()
    known = RUNS_BY_NAME if opts.command != "probe" else [
        *(p.parent.parent.name for p in WHOLE.glob("*/checkpoints/last.ckpt")),
        *(str(p.parent.parent.relative_to(RUNS)) for p in RUNS.glob("*/*/checkpoints/last.ckpt"))]
    if opts.command in ("run", "list"):
        known = {**RUNS_BY_NAME, **BRANCHES}
    unknown = [n for n in opts.names if n not in known]
    if unknown:
        sys.exit(f"unknown run(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    if opts.command == "list":
        for name in [*RUNS_BY_NAME, *BRANCHES]:
            print(f"{name:28s} {state(name)}")
    elif opts.command == "run":
        for name in opts.names:
            run(name, opts.threads)
    elif opts.command == "probe":
        for name in opts.names:
            probe(name, opts.threads)
    elif opts.command == "snapshot":
        for name in opts.names:
            snapshot(name, opts.at)
    else:
        report()


if __name__ == "__main__":
    main()

"""`fedclust evaluate`: re-score a saved run, or assign clusters to another split with the saved model; optionally
score each client's own samples (CCFC Table 4), probe its representations (kNN accuracy, CCFC Table 3; linear
evaluation, FedMCC Tables III-IV) and diagnose them (spectrum, brightness, cluster sizes: docs/diagnostics.md)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Literal

import torch
from jsonargparse import ArgumentParser
from rich.console import Console
from rich.table import Table

from fedclust.callbacks.diagnostics import diagnose_model, has_embedding
from fedclust.clustering.metrics import LABEL_METRICS, cluster_metrics, grouped_cluster_metrics, label_free_metrics
from fedclust.contract import FederatedMethod
from fedclust.data.checks import check_data_name
from fedclust.data.client_data import FederatedData
from fedclust.data.datasets import DATASETS, load_dataset
from fedclust.errors import ConfigError
from fedclust.parsers import command_parser
from fedclust.probes import ProbeData, knn_accuracy, linear_probe, probe_data
from fedclust.probes.diagnose import DIAGNOSTIC_KEYS
from fedclust.run import load_run
from fedclust.run_checks import check_diagnose, check_evaluate_settings, check_ks
from fedclust.run_folder import check_writable, write_assignments, write_json


def evaluate(run: str, split: Literal["same", "all", "train", "test"] = "same", data_name: str | None = None,
             data_root: str | None = None, output: str | None = None, knn: list[int] | None = None,
             linear: bool = False, per_client: bool = False, diagnose: bool = False) -> dict[str, float]:
    """Score the saved global model of a run folder.

    Args:
        run: The run folder (holds config.yaml and checkpoints/last.ckpt).
        split: "same" re-scores the run's own data with its own client partition (so methods that label
            through a client, like k-FED, are scored as in the run); "all", "train" or "test" assigns every
            sample of that split with the saved global model.
        data_name: Assign another data set of the same shape (default: the run's).
        data_root: Folder of that data set.
        output: CSV of assignments to write (default RUN/assignments_<split>.csv).
        knn: Also report the test accuracy of a majority-vote kNN classifier fitted on the train split's
            representations, for each k given (CCFC Table 3 uses 3 5 7 9 100 1000 7000); saved with the
            linear probe in RUN/evaluate_probes.json. Probes use the run's own data set (not data_name), its
            train part to fit and its test part to score; sets without a test part are split 80/20 (seeded).
        linear: Also report linear evaluation: a linear classifier trained on the frozen train
            representations (FedU/FedEMA's protocol, which FedMCC reports: Adam 3e-3, 200 epochs), test accuracy.
        per_client: Also score each client's own samples separately (CCFC Table 4's per-client Kappa, with each
            client's imbalance ratio: its largest class over its smallest present one) and the mean over
            clients; written to RUN/evaluate_per_client.json. Needs split "same" (the run's own clients).
        diagnose: Also diagnose the final model's representation of the evaluated samples, as `fedclust fit
            --diagnose true` does at every evaluated round: effective rank, top-1/top-3 variance share,
            directions holding 90 %, |r| of its first direction with brightness, cluster sizes and the NMI of
            k-means on it (docs/diagnostics.md); written to RUN/diagnostics_<split>.json. Needs a method that
            learns a representation (its own `embed`).
    """
    check_evaluate_settings(split, data_name, per_client, knn)  # before loading anything (also in fedclust.precheck)
    if data_name is not None:
        check_data_name(data_name, DATASETS)  # before the run is loaded (also in fedclust.precheck)
    folder = Path(run)
    if output:
        check_writable(Path(output), "output")  # before any work
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    method, data_cfg, seed, state, base = load_run(folder, device)
    if diagnose:
        check_diagnose(type(method).__name__, has_embedding(type(method)))  # before anything is computed or written
    if not base.dataset.has_labels:  # the probes and the per-client table score against labels
        for option, asked in (("knn", knn), ("linear", linear), ("per_client", per_client)):
            if asked:
                raise ConfigError(option, asked, f"unset: the run's {data_cfg.name} data have no labels to "
                                  "score against")
    probes = None
    if knn or linear:  # representations first, so that a k beyond the train split fails before anything is written
        probes = probe_data(method, data_cfg, seed, device, base.dataset)
        if knn:
            check_ks(knn, len(probes.train_y))
    if split == "same" and data_name is None:
        data, clusters = base, method.predict(base, state["clients"]).cpu()
    else:
        dataset = load_dataset(data_name or data_cfg.name, root=data_root or data_cfg.root,
                               split="all" if split == "same" else split, **data_cfg.options)
        if dataset.x[0].shape != base.x[0].shape:
            raise ConfigError("data_name", data_name, f"a data set of samples shaped {tuple(base.x[0].shape)}")
        dataset.x = dataset.x.to(device)
        data = FederatedData(dataset, [torch.arange(len(dataset.y))], device, normalize=data_cfg.normalize,
                             eval_batch_size=data_cfg.eval_batch_size)
        method.eval()
        with torch.no_grad():
            clusters = torch.cat([method.assign(x).cpu() for x in data.iter_all()])
    groups = method.metric_groups(data) if data is base else None  # scored as in the run
    if data.dataset.has_labels:
        metrics = grouped_cluster_metrics(clusters, data.labels.cpu(), groups)
    else:  # as the run scored it: in the representation space, no labels (fedclust/clustering/metrics.py)
        method.eval()
        with torch.no_grad():
            z = torch.cat([method.embed(x).float().cpu() for x in data.iter_all()])
        metrics = grouped_cluster_metrics(clusters, z, groups, score=label_free_metrics)
    write_assignments(Path(output) if output else folder / f"assignments_{split}.csv", clusters, data,
                      "output" if output else "run")
    write_json(folder / f"evaluate_{split}.json", metrics, "run")
    table = Table(title=f"{folder.name}: {split} ({len(clusters)} samples)")
    for key in metrics:
        table.add_column("Kappa" if key == "kappa" else key.upper() if key in LABEL_METRICS else key.replace("_", " "),
                         justify="right")
    table.add_row(*(f"{v:.4f}" for v in metrics.values()))
    Console().print(table)
    if diagnose:
        diagnose_run(folder, method, data, clusters, split, data_name or data_cfg.name, seed, state["done"])
    if per_client:
        score_clients(folder, clusters, data)
    if probes is not None:
        probe_run(folder, probes, data_cfg.name, seed, knn or [], linear, rounds=state["done"])
    return metrics


def evaluate_parser() -> ArgumentParser:
    """`fedclust evaluate`'s parser: evaluate's typed arguments, --knn as a list of k values."""
    parser = command_parser(evaluate)
    parser.add_function_arguments(evaluate, fail_untyped=True, skip={"knn"})
    # added by hand so that k values are listed the argparse way (--knn 3 5 7), not as a JSON list
    parser.add_argument("--knn", type=int, nargs="+", default=None, metavar="K",
                        help="Also report majority-vote kNN test accuracy on the representations for each k "
                             "(CCFC Table 3: 3 5 7 9 100 1000 7000); saved in RUN/evaluate_probes.json.")
    return parser


COUNTS = ("directions_90", "cluster_min", "cluster_max", "empty_clusters")  # printed as whole numbers


def diagnose_run(folder: Path, method: FederatedMethod, data: FederatedData, clusters: torch.Tensor, split: str,
                 data_name: str, seed: int, rounds: int) -> dict:
    """The diagnostics of the final model on the evaluated samples, as one record (every key present, a value
    that cannot be computed, such as the k-means NMI without labels, is null); written to
    RUN/diagnostics_<split>.json and printed."""
    found = diagnose_model(method, data, clusters, seed)
    record = {"split": split, "data": data_name, "samples": len(clusters), "round": rounds,
              **{key: found.get(key, math.nan) for key in DIAGNOSTIC_KEYS}}
    write_json(folder / f"diagnostics_{split}.json", record, "run")
    table = Table(title=f"{folder.name}: diagnostics, {split}")
    table.add_column("diagnostic")
    table.add_column("value", justify="right")
    for key in DIAGNOSTIC_KEYS:
        value = record[key]
        table.add_row(key, "n/a" if not math.isfinite(value) else f"{value:.0f}" if key in COUNTS else f"{value:.4f}")
    Console().print(table)
    return record


def score_clients(folder: Path, clusters: torch.Tensor, data: FederatedData) -> dict:
    """Each client's metrics on its own samples (the run's labelling), their mean over clients, and each client's
    imbalance ratio (CCFC Table 4); written to RUN/evaluate_per_client.json and printed."""
    labels = data.labels.cpu()
    rows = []
    for cid, part in enumerate(data.parts):
        idx = part.cpu()
        counts = torch.bincount(labels[idx])
        present = counts[counts > 0]
        rows.append({"client": cid, "samples": len(idx), "imbalance_ratio": float(present.max() / present.min()),
                     **cluster_metrics(clusters[idx], labels[idx])})
    keys = [k for k in rows[0] if k not in ("client", "samples", "imbalance_ratio")]
    result = {"clients": rows, "mean": {k: sum(r[k] for r in rows) / len(rows) for k in keys}}
    write_json(folder / "evaluate_per_client.json", result, "run")
    table = Table(title=f"{folder.name}: each client's own samples")
    for name in ("client", "samples", "IR", "NMI", "ACC", "ARI", "Kappa"):
        table.add_column(name, justify="right")
    for r in rows:
        table.add_row(str(r["client"]), str(r["samples"]), f"{r['imbalance_ratio']:.2f}",
                      *(f"{r[k]:.4f}" for k in ("nmi", "acc", "ari", "kappa")))
    table.add_row("mean", "", "", *(f"{result['mean'][k]:.4f}" for k in ("nmi", "acc", "ari", "kappa")))
    Console().print(table)
    return result


def probe_run(folder: Path, data: ProbeData, data_name: str, seed: int, knn: list[int], linear: bool,
              rounds: int | None = None) -> dict:
    """kNN and/or linear-probe test accuracy of a run's representations; merged into RUN/evaluate_probes.json, so an
    earlier probe's result stays (its kNN k values too) unless this call measures it again. Results of another
    model (the run went on for more rounds: `rounds`) or other probe data are replaced, not merged."""
    result: dict = {"data": data_name, "split": data.split, "train_samples": len(data.train_y),
                    "test_samples": len(data.test_y), "feature_dim": data.train_x.shape[1], "seed": seed,
                    "rounds": rounds}
    path = folder / "evaluate_probes.json"
    earlier = _earlier_probes(path)
    if all(earlier.get(k) == v for k, v in result.items()):  # the same probe data: keep what it measured
        result = {**earlier, **result, "knn": dict(earlier.get("knn", {}))}
        if not result["knn"]:
            del result["knn"]
    if knn:
        accuracy = knn_accuracy(data.train_x, data.train_y, data.test_x, data.test_y, knn)
        merged = {**result.get("knn", {}), **{str(k): accuracy[k] for k in knn}}
        result["knn"] = dict(sorted(merged.items(), key=lambda item: int(item[0])))
        result["knn_rule"] = "majority vote, Euclidean distance on method.embed, ties to the smallest label"
    if linear:
        result["linear"] = linear_probe(data.train_x, data.train_y, data.test_x, data.test_y, data.num_classes,
                                        seed=seed).as_dict()
    write_json(path, result, "run")
    table = Table(title=f"{folder.name}: probes, fit on train, scored on test", caption=data.split)
    table.add_column("probe")
    table.add_column("test accuracy", justify="right")
    for k, acc in result.get("knn", {}).items():
        table.add_row(f"kNN k = {k}", f"{acc:.4f}")
    if "linear" in result:
        table.add_row("linear", f"{result['linear']['test_accuracy']:.4f}")
    Console().print(table)
    return result


def _earlier_probes(path: Path) -> dict:
    """The probe results an earlier evaluate saved, to merge with; a file that is not such a result (damaged, or
    not written by fedclust) has nothing to merge and is replaced."""
    try:
        earlier = json.loads(path.read_text())
    except (OSError, ValueError):  # missing, unreadable, not JSON
        return {}
    if not (isinstance(earlier, dict) and all(isinstance(earlier.get(k, {}), dict) for k in ("knn", "linear"))):
        return {}
    for key in ("knn", "linear"):  # a score saved as null (strict JSON has no NaN) is nan again
        if key in earlier:
            earlier[key] = {k: math.nan if v is None else v for k, v in earlier[key].items()}
    return earlier

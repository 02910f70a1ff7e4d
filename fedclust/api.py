"""The Python API (docs/python_api.md): `fedclust.fit` from a config or from objects, returning a FitResult.

    fedclust.fit("quickstart", {"federation.rounds": 3, "seed": 1})          # a packaged config, or a YAML path
    fedclust.fit(method=KFED(k_local=5), data=DataConfig(name="digits"))      # objects, as fit's arguments

Both go the command line's way: the config, the objects and the dotted overrides become the arguments of
`fedclust fit` (in that order, the later winning), read by the same parser and checked by the same checks, so a
bad name or value is the same one-sentence FedclustError, raised (never printed, never sys.exit); the run folder
gets the same resolved config.yaml, which `fedclust evaluate --run` and `fedclust fit --resume` read. An object
passed in is the one that trains (`FitResult.model` is it).

The run folder is claimed here rather than inside fedclust.run.fit, so that its path is known before the run
(fedclust/estimator.py's config names the place of its arrays in it) and after it (fit returns only the metrics).
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import json
import os
import shutil
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from jsonargparse import ArgumentError

from fedclust import run_folder
from fedclust.callbacks.csv_metrics import read_metrics
from fedclust.cli_errors import one_sentence
from fedclust.config_files import nearest, resolve_config
from fedclust.contract import FederatedMethod
from fedclust.errors import ConfigError, FedclustError
from fedclust.federation.distributed import rank_zero_before_launch
from fedclust.parsers import describe, parse, resolved_config
from fedclust.run import fit as run_fit
from fedclust.run import fit_parser
from fedclust.run_folder import LOCK, RUN_DIR_ENV

ASSIGNMENT_COLUMNS = ("index", "client", "label", "cluster")
# the command line's fit() arguments a caller may pass as keywords (config_text is the command line's own)
FIT_KEYS = tuple(name for name in inspect.signature(run_fit).parameters if name != "config_text")


@dataclass(repr=False)
class FitResult:
    """What a run leaves, in memory: its final metrics, the run folder, and the objects the files hold.

    Attributes:
        metrics: The final scores (nmi, acc, ari, kappa, purity; the label-free scores for data without labels).
        assignments: One NumPy int64 array per column of assignments.csv, one row per sample: index (the
            sample's row in the data), client (-1: none), label (-1: no labels), cluster. A plain dict, so that
            pandas stays optional: `pandas.DataFrame(result.assignments)` makes it a table.
        centroids: The global cluster centres (NumPy, one row per cluster, in the space of `model.embed`: the
            input itself for k-FED, k-means, FCM) when the method has them, else None
            (FederatedMethod.global_centroids).
        model: The trained FederatedMethod with its global state.
        run_dir: The run folder (config.yaml, metrics.csv, checkpoints/last.ckpt, assignments.csv, ...).
        history: One dict per round, the rows of metrics.csv (round, loss, the scores of evaluated rounds, ...).
    """

    metrics: dict[str, float]
    assignments: dict[str, np.ndarray]
    centroids: np.ndarray | None
    model: FederatedMethod
    run_dir: Path
    history: list[dict[str, float]] = field(default_factory=list)

    def __repr__(self) -> str:
        scores = ", ".join(f"{k}={v:.4f}" for k, v in self.metrics.items())
        centres = "None" if self.centroids is None else f"array{self.centroids.shape}"
        return (f"FitResult({type(self.model).__name__}, {len(self.assignments.get('index', ()))} samples, "
                f"{len(self.history)} rounds, {scores}, centroids={centres}, run_dir={str(self.run_dir)!r})")


@dataclass
class Call:
    """fedclust.run.fit's arguments as objects, and the resolved config the run folder keeps."""

    init: dict[str, Any]
    text: str


def fit(config: str | os.PathLike | None = None, overrides: Mapping[str, Any] | None = None,
        **objects: Any) -> FitResult:
    """Run one federated clustering experiment from Python and return what it left (a FitResult).

    Args:
        config: A packaged config's name (`fedclust configs` lists them) or a YAML file's path; None: the
            objects alone (then `method` is required). With only `resume=RUN_DIR`, that run's own config.yaml.
        overrides: Dotted keys and values applied last, as on the command line: {"federation.rounds": 3,
            "data.p": 0.5, "method.init_args.lam": 0.01, "seed": 1}. A key inside a section given as an object
            is refused (set it on the object).
        **objects: Any argument of `fedclust fit` (fedclust/run.py): method (a FederatedMethod), data
            (DataConfig), federation (FederationConfig), fabric (FabricConfig), seed, runs_dir, run_dir,
            resume, progress, logger, name, ...

    Raises:
        FedclustError (ConfigError for a field): one sentence naming the field, the value and what is valid.
    """
    return run(resolve(config, overrides, objects))


def resolve(config: str | os.PathLike | None, overrides: Mapping[str, Any] | None, objects: dict[str, Any]) -> Call:
    """The arguments fit would get from `fedclust fit --config CONFIG --KEY VALUE ...`, and its resolved config."""
    overrides = _check_overrides(overrides, objects)
    for key, value in objects.items():
        if key not in FIT_KEYS:
            raise ConfigError(key, _short(value), f"an argument of fedclust.fit (closest: {nearest(key, FIT_KEYS)})")
    if config is None and objects.get("resume") is not None:  # as `fedclust fit --resume DIR` does
        config = Path(objects["resume"]) / "config.yaml"
        if not config.is_file():
            raise ConfigError("resume", str(objects["resume"]), "a run folder written by fedclust fit (it holds "
                              "config.yaml)")
    argv = [] if config is None else ["--config", str(resolve_config(os.fspath(config)))]
    argv += [f"--{key}={_as_arg(value)}" for key, value in [*objects.items(), *overrides.items()]]
    parser = fit_parser()  # the precheck, the command line's torch-free first pass, is no use once torch is loaded
    try:
        cfg = parse(parser, argv)
    except ArgumentError as error:
        raise FedclustError(one_sentence(str(error), parser)) from None
    init, text = resolved_config(parser, cfg)
    for key, value in objects.items():  # the caller's own objects train (equal to what the config now says)
        if isinstance(value, FederatedMethod) or dataclasses.is_dataclass(value):
            init[key] = value
    return Call(init, text)


def run(call: Call, folder: Path | None = None) -> FitResult:
    """Run a resolved call in `folder` (claimed here when None and the call names no run_dir or resume)."""
    init = dict(call.init)
    leader = rank_zero_before_launch()  # a process Lightning launches for DDP claims nothing
    with contextlib.ExitStack() as stack:
        if folder is None and leader and init["resume"] is None and init["run_dir"] is None:
            folder = stack.enter_context(new_run_folder(init["runs_dir"], run_prefix(init)))
        if folder is not None and init["resume"] is None:
            init["run_dir"] = str(folder)  # config.yaml keeps run_dir as the call gave it (unset: null)
        metrics = run_fit(**init, config_text=call.text)
    where = Path(init["resume"] or init["run_dir"] or os.environ.get(RUN_DIR_ENV, ""))
    return result_of(where, init["method"], metrics, leader)


def run_prefix(init: dict) -> str:
    """The run folder's name before its time stamp, as fedclust.run.fit names it."""
    return init["name"] or f"{type(init['method']).__name__.lower()}_{init['data'].name}"


@contextlib.contextmanager
def new_run_folder(runs_dir: str, prefix: str) -> Iterator[Path]:
    """A new, empty run folder for fit's `run_dir` (fit locks it again); removed again if the run fails before
    writing its config.yaml, as fit removes a folder of its own then."""
    claimed = run_folder.claim(runs_dir, prefix, None)
    claimed.release()
    try:
        yield claimed.path
    except BaseException:
        if not (claimed.path / "config.yaml").exists() and all(p.name == LOCK for p in claimed.path.iterdir()):
            shutil.rmtree(claimed.path, ignore_errors=True)
        raise


def result_of(folder: Path, method: FederatedMethod, metrics: dict[str, float], leader: bool = True) -> FitResult:
    """The FitResult of a finished run: its metrics and model in memory, the rest read from its folder (only
    rank 0 writes it: another process of a DDP run gets empty assignments and history)."""
    centroids = method.global_centroids()
    centroids = None if centroids is None else centroids.detach().float().cpu().numpy()
    assignments: dict[str, np.ndarray] = {c: np.zeros(0, dtype=np.int64) for c in ASSIGNMENT_COLUMNS}
    history: list[dict[str, float]] = []
    if leader:
        table = np.loadtxt(folder / "assignments.csv", delimiter=",", skiprows=1, dtype=np.int64, ndmin=2)
        assignments = {c: np.ascontiguousarray(table[:, i]) for i, c in enumerate(ASSIGNMENT_COLUMNS)}
        history = read_metrics(folder / "metrics.csv")
    return FitResult(dict(metrics), assignments, centroids, method, folder, history)


def _check_overrides(overrides: Mapping[str, Any] | None, objects: dict[str, Any]) -> dict[str, Any]:
    if overrides is None:
        return {}
    if not isinstance(overrides, Mapping):
        raise ConfigError("overrides", _short(overrides), "a mapping of dotted keys to values, such as "
                          '{"federation.rounds": 3, "seed": 1}')
    for key in overrides:
        if not isinstance(key, str) or not key or key.startswith("-"):
            raise ConfigError("overrides", key, 'a dotted key as the command line names it, such as "data.p"')
        section = key.split(".", 1)[0]
        if "." in key and not isinstance(objects.get(section, {}), Mapping):
            raise ConfigError("overrides", key, f"a key outside {section}, which is given as an object: set the "
                              "value on that object")
    return dict(overrides)


def _as_arg(value: Any) -> str:
    """A value as a command-line token: text as it is (as typed after --key=), anything else as JSON (YAML)."""
    value = describe(value)
    return value if isinstance(value, str) else json.dumps(value)


def _short(value: Any) -> Any:
    """A value as an error message shows it: itself when it is a short number or text, else its repr, cut."""
    if isinstance(value, bool | int | float | str | None) and len(repr(value)) <= 60:
        return value
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."

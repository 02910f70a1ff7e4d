"""`fedclust.FederatedClustering`: a scikit-learn-style entry for a notebook's own NumPy arrays.

    X, y = sklearn.datasets.load_digits(return_X_y=True)
    model = fedclust.FederatedClustering("kfed", n_clusters=10)
    labels = model.fit_predict(X, clients=np.arange(len(X)) % 10)      # 10 clients, each holding every 10th row

It runs `fedclust fit` on the `features` data source (fedclust/data/features.py) with `partition: natural`: the
arrays are saved as data.npz inside the run folder and its config.yaml points there, so the folder is
re-loadable like any other (`fedclust evaluate --run DIR`, `fedclust fit --resume DIR`) and the arrays never
enter the config. Without `clients`, the rows are spread over `n_clients` simulated IID clients.

It is a scikit-learn estimator without deriving from its BaseEstimator (which forbids the `**method_args` that
pass a method's own init arguments): its names (fit, fit_predict, predict, labels_, cluster_centers_,
n_features_in_), get_params / set_params (a method's own arguments among them), so `sklearn.base.clone`, grid
searches and pipelines take it; scikit-learn itself stays optional.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import shutil
import tempfile
from pathlib import Path
from typing import Any, Literal

import numpy as np

from fedclust.errors import ConfigError, FedclustError, NotFittedError
from fedclust.registry import METHODS

DATA_FILE = "data.npz"  # the arrays, inside the run folder


class FederatedClustering:
    """Cluster an (n_samples, n_features) array with a federated method, each client holding its own rows.

    Args:
        method: A method's registry name, any case (fedclust/registry.py): on feature vectors kfed, ffcm, uifca, or
            the centralized kmeans and fcm with n_clients=1 (the deep methods need images).
        n_clusters: Number of clusters (the method's num_clusters); None: the number of classes of `y`.
        n_clients: Simulated IID clients when `fit` is given no `clients`.
        normalize: "none", or "l2" to scale every row to unit norm (the cosine geometry of the classic baselines).
        federation: FederationConfig fields, e.g. {"rounds": 3, "fraction": 0.5}.
        fabric: FabricConfig fields, e.g. {"accelerator": "cpu"}.
        random_state: The run's seed (every random draw is seeded by it).
        runs_dir: Where the run folder is created (its path is `result_.run_dir`).
        verbose: Print the per-round lines, the progress bar and the final metrics table (False: print nothing).
        **method_args: The method's own init arguments (e.g. k_local=5 for kfed).

    Attributes (after fit):
        labels_: Each row's cluster (int64), the run's own labelling (k-FED labels a row through its client).
        cluster_centers_: The global centres, one row per cluster, in the space the method clusters in (the
            rows themselves, after `normalize`, for kfed, kmeans, fcm, ffcm); None for a method without centres.
        n_features_in_: The number of columns of X.
        result_: The run's FitResult (metrics, assignments, model, run_dir, history).
    """

    def __init__(self, method: str = "kfed", n_clusters: int | None = None, *, n_clients: int = 10,
                 normalize: Literal["none", "l2"] = "none", federation: dict | None = None,
                 fabric: dict | None = None, random_state: int = 0, runs_dir: str = "runs", verbose: bool = False,
                 **method_args: Any):
        self.method, self.n_clusters, self.n_clients, self.normalize = method, n_clusters, n_clients, normalize
        self.federation, self.fabric, self.random_state = federation, fabric, random_state
        self.runs_dir, self.verbose, self.method_args = runs_dir, verbose, method_args

    # scikit-learn's estimator protocol: the constructor's arguments, a method's own ones included
    _OWN = ("method", "n_clusters", "n_clients", "normalize", "federation", "fabric", "random_state", "runs_dir",
            "verbose")

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        """The constructor's arguments by name (the method's own ones too), as scikit-learn's clone reads them."""
        return {**{name: getattr(self, name) for name in self._OWN}, **self.method_args}

    def set_params(self, **params: Any) -> FederatedClustering:
        """Set constructor arguments by name (a method's own init arguments too); an unknown name is one sentence."""
        known = _method_args(self.method) if "method" not in params else _method_args(params["method"])
        for name in params:
            if name not in self._OWN and known is not None and name not in known:
                from fedclust.config_files import nearest

                raise ConfigError(name, params[name], "an argument of FederatedClustering or of the method "
                                  f"(closest: {nearest(name, [*self._OWN, *known])})")
        for name, value in params.items():
            if name in self._OWN:
                setattr(self, name, value)
            else:
                self.method_args = {**self.method_args, name: value}
        return self

    _estimator_type = "clusterer"  # scikit-learn before 1.6 reads this; later ones __sklearn_tags__

    def __sklearn_tags__(self):
        """What scikit-learn (1.6+) asks of an estimator: a clusterer of 2-d numbers, y optional, no NaN."""
        from sklearn.utils import InputTags, Tags, TargetTags

        return Tags(estimator_type="clusterer", target_tags=TargetTags(required=False),
                    input_tags=InputTags(allow_nan=False), non_deterministic=False)

    def __repr__(self) -> str:
        import inspect

        defaults = {name: p.default for name, p in inspect.signature(type(self)).parameters.items()}
        given = {name: value for name, value in self.get_params().items()
                 if name not in self._OWN or value != defaults[name]}
        return f"FederatedClustering({', '.join(f'{k}={v!r}' for k, v in given.items())})"

    def fit(self, X, y=None, clients=None) -> FederatedClustering:
        """Run the federated method on the rows of X.

        Args:
            X: (n_samples, n_features) numbers.
            y: Optional true labels, one per row, used only to score the run (NMI, ACC, ...), never to cluster.
            clients: Optional client id per row (numbers or names); None: `n_clients` simulated IID clients.
        """
        from fedclust import api
        from fedclust.data.config import DataConfig

        x = _features(X)
        ids = {name: _ids(values, name, len(x)) for name, values in (("client", clients), ("label", y))
               if values is not None}
        name = _method_name(self.method)
        if "num_clusters" in self.method_args:
            raise ConfigError("num_clusters", self.method_args["num_clusters"], "unset: pass n_clusters")
        method = {"class_path": name, "init_args": {"num_clusters": self.n_clusters, **self.method_args}}
        with api.new_run_folder(self.runs_dir, f"{name.lower()}_features") as folder, \
                tempfile.TemporaryDirectory() as staging:
            data = DataConfig(name="features", root=str((folder / DATA_FILE).absolute()), normalize=self.normalize,
                              partition="natural" if "client" in ids else "iid",
                              num_clients=None if "client" in ids else self.n_clients,
                              options={"feature_columns": ["x"],
                                       **{f"{column}_column": column for column in ids}})
            objects = {"method": method, "data": data, "seed": self.random_state, "progress": self.verbose,
                       "federation": self.federation or {}, "fabric": self.fabric or {}}
            call = api.resolve(None, None, objects)
            # fit takes a run folder only while it is empty, so the arrays wait in a temporary folder and move in
            # once the run has written its config.yaml (which names their place in the run folder)
            staged = Path(staging) / DATA_FILE
            np.savez(staged, x=x, **ids)
            call.init["data"] = dataclasses.replace(data, root=str(staged))
            try:
                with contextlib.nullcontext() if self.verbose else contextlib.redirect_stdout(io.StringIO()):
                    self.result_ = api.run(call, folder)
            finally:
                if (folder / "config.yaml").exists():
                    shutil.move(staged, folder / DATA_FILE)
        self._data = data
        self.n_features_in_ = x.shape[1]
        order = np.argsort(self.result_.assignments["index"], kind="stable")
        self.labels_ = self.result_.assignments["cluster"][order]
        self.cluster_centers_ = self.result_.centroids
        return self

    def fit_predict(self, X, y=None, clients=None) -> np.ndarray:
        """`fit`, then each row's cluster (labels_)."""
        return self.fit(X, y, clients).labels_

    def predict(self, X) -> np.ndarray:
        """The cluster of each row of X under the trained global model (as `fedclust evaluate --split` assigns
        new samples: with the global model alone, not through a client)."""
        import torch

        from fedclust.data.client_data import FederatedData
        from fedclust.data.own_data import own_dataset

        if not hasattr(self, "result_"):
            raise NotFittedError("this FederatedClustering is not fitted yet: call fit(X, clients=...) first.")
        x = _features(X)
        if x.shape[1] != self.n_features_in_:
            raise ConfigError("X", x.shape, f"an array of {self.n_features_in_} columns, as the one fit was given")
        method = self.result_.model
        device = next(method.parameters(), torch.empty(0)).device
        data = FederatedData(own_dataset("features", x), [torch.arange(len(x))], device,
                             normalize=self._data.normalize, eval_batch_size=self._data.eval_batch_size)
        method.eval()
        with torch.no_grad():
            return torch.cat([method.assign(batch).cpu() for batch in data.iter_all()]).numpy()


def _method_name(name: str) -> str:
    """A registry name, any case: kfed -> KFED."""
    by_lower = {key.lower(): key for key in METHODS}
    if not isinstance(name, str) or name.lower() not in by_lower:
        from fedclust.config_files import nearest

        raise ConfigError("method", name, f"a fedclust method (closest: {nearest(str(name).lower(), by_lower)}; "
                          f"all: {', '.join(k.lower() for k in METHODS)})")
    return by_lower[name.lower()]


def _method_args(method) -> list[str] | None:
    """The init arguments of a method by its registry name, as cli_schema.json lists them (torch-free); None when
    that cannot be told (the run then judges them)."""
    from fedclust import cli_schema

    try:
        name = _method_name(method)
    except ConfigError:
        return None
    entry = ((cli_schema.load() or {}).get("method", {}).get("classes", {})).get(name) or {}
    params = entry.get("params")
    return None if params is None else [p for p in params if p not in ("num_clusters",)]


def _features(X) -> np.ndarray:
    """X as a float32 (n_samples, n_features) array, or one sentence saying what is wrong with it."""
    try:
        x = np.asarray(X)
    except ValueError:  # numpy's words for rows of different lengths ("inhomogeneous shape")
        lengths = sorted({len(row) for row in X if hasattr(row, "__len__")})
        shown = ", ".join(map(str, lengths[:5])) + (", ..." if len(lengths) > 5 else "")
        raise ConfigError("X", f"rows of {len(lengths)} different lengths ({shown})", "an (n_samples, n_features) "
                          "array, every row as long as the first: pad or drop the short rows") from None
    if x.dtype == object and x.ndim == 1 and len(x) and all(hasattr(row, "__len__") for row in x):
        lengths = sorted({len(row) for row in x})
        raise ConfigError("X", f"rows of {len(lengths)} different lengths", "an (n_samples, n_features) array, "
                          "every row as long as the first: pad or drop the short rows")
    if x.ndim != 2 or x.shape[0] == 0 or x.shape[1] == 0:
        hint = " (X.reshape(-1, 1) for a single feature)" if x.ndim == 1 else ""
        raise ConfigError("X", x.shape, f"an (n_samples, n_features) array with at least one row and column{hint}")
    if x.dtype.kind not in "biuf":
        raise ConfigError("X", str(x.dtype), "an array of numbers")
    with np.errstate(over="ignore"):
        x = x.astype(np.float32)
    bad = np.flatnonzero(~np.isfinite(x).all(axis=1))
    if len(bad):
        raise FedclustError(f"X holds NaN, infinite or too large values in {len(bad)} rows (the first is row "
                            f"{int(bad[0])}); features must be finite numbers: drop or fill those rows.")
    return x


def _ids(values, name: str, n: int) -> np.ndarray:
    """Client ids or labels, one per row of X (numbers or names: fedclust/data/own_data.py encodes them)."""
    ids = np.asarray(values)
    if ids.ndim != 1 or len(ids) != n:
        option = "clients" if name == "client" else "y"
        raise ConfigError(option, ids.shape, f"one {'client id' if name == 'client' else 'label'} per row of X, "
                          f"shaped ({n},)")
    return ids.astype(str) if ids.dtype.kind == "O" else ids  # an .npz holds no Python objects (allow_pickle=False)

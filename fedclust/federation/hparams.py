"""What no method can work with, whatever its maths, judged on its init arguments (name -> value): non-finite
numbers, negative counts, sizes below 1, learning rates at or below 0, negative weights, tolerances and noise,
temperatures at or below 0, fuzzifiers at or below 1, mini-batches of one sample (BatchNorm cannot train on
them); and more clusters than the data (or a client, for methods that cluster locally) has samples.

Torch-free, so fedclust.precheck applies the same rules to the init arguments a command line gives before
torch is imported (the cluster counts on a known data set's sizes, fedclust/data/catalog.py);
fedclust.federation.setup applies them to a built method's hparams and to the loaded data.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping

from fedclust.errors import MethodArgError

# By name, whichever method has the argument: (name pattern, whether a value is valid, what is valid). A number is
# judged by every rule whose pattern its name matches. Counts may be 0, a valid "none" there (FedMCC's
# representation_rounds: 0, FFCM's cycle_window: 0); sizes may not.
RULES = [
    (re.compile(r"(_dim|hidden|channels|^num_clusters|couplings|k_local|iter|iterations|redo|^n_init|batch_size"
                r"|^rounds|^restarts|resize|dilation|per_client|per_epoch|n_critic|chunk|hog_cell|walk_links)$"),
     lambda v: v >= 1, "a positive integer"),
    (re.compile(r"(rounds|epochs|steps|window|after|neighbors|positives|vote|blocks|seed)$"),
     lambda v: v >= 0, "an integer >= 0"),
    (re.compile(r"(^lr|^lr_(?!decay$)\w+|_lr)$"), lambda v: v > 0, "a positive learning rate"),
    (re.compile(r"^lr_decay$"), lambda v: v > 0, "a positive factor"),
    (re.compile(r"temperature$"), lambda v: v > 0, "a positive number"),
    (re.compile(r"_m$"), lambda v: v > 1, "a fuzzifier greater than 1"),  # SDA-FC's fcm_m (FCM's m: its own)
    (re.compile(r"ema_decay$"), lambda v: 0 <= v <= 1, "a number in [0, 1]"),
    (re.compile(r"(weight|weight_decay|^lam|jitter|^beta_\w+|noise_std|init_noise|momentum|tol|color_strength)$"),
     lambda v: v >= 0, "a number >= 0"),
]


def check_init_args(args: Mapping[str, object]) -> None:
    """Raise MethodArgError (a ConfigError) on the first init argument no method can work with."""
    for key, value in args.items():
        values = value if isinstance(value, list | tuple) else [value]
        if any(isinstance(v, float) and not math.isfinite(v) for v in values):
            raise MethodArgError(key, value, "a finite number")
        if isinstance(value, bool) or not isinstance(value, int | float):
            continue
        for pattern, valid, what in RULES:
            if pattern.search(key) and not valid(value):
                raise MethodArgError(key, value, what)
    check_batch_size(args.get("batch_size"))


def check_batch_size(batch_size) -> None:
    """A training batch of one sample: None (no training) and non-numbers are not judged here."""
    if isinstance(batch_size, int | float) and not isinstance(batch_size, bool) and batch_size < 2:
        raise MethodArgError("batch_size", batch_size, "at least 2 (BatchNorm cannot train on "
                          "one sample)")


def check_cluster_counts(num_clusters: int | None, local_clusters: int | None, num_classes: int, num_samples: int,
                         min_client_size: int) -> None:
    """k-means cannot find more clusters than it has points: `local_clusters` (the clusters each client
    computes from its own samples, `method.local_clusters()`) against the smallest client, then the number of
    clusters (None: the number of classes) against all samples. min_client_size 0: not known, not judged."""
    if local_clusters is not None and min_client_size and local_clusters > min_client_size:
        raise MethodArgError("num_clusters", local_clusters,
                          f"at most the {min_client_size} samples of the "
                          "smallest client (each client clusters its own data)")
    if (num_clusters or num_classes) > num_samples:
        raise MethodArgError("num_clusters", num_clusters, f"at most the {num_samples} samples")

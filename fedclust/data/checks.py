"""The `data:` settings that can be judged before any data is loaded: one rule per setting, each the only copy.

Torch-free (numpy only inside `check_alpha`), so fedclust.precheck calls `check_data_settings` on the command
line's values before torch is imported; build_federated_data calls it before loading anything, and each
partitioner's constructor calls the rules of its own settings. What needs the data (the number of classes
or samples: pshift's num_clients, pathological's classes per client, dirichlet's minimum size) stays in
fedclust/data/partition.py.
"""

from __future__ import annotations

import numbers

from fedclust.errors import ConfigError

PATHOLOGICAL_MODES = ("first-deterministic", "deterministic", "random", "disjoint")


def check_num_clients(num_clients) -> None:
    integral = isinstance(num_clients, numbers.Integral) and not isinstance(num_clients, bool)
    if not integral or num_clients < 1:
        raise ConfigError("data.num_clients", num_clients, "a positive integer")


def check_p(p) -> float:
    """pshift's share of each client's own class."""
    if isinstance(p, bool) or not isinstance(p, numbers.Real) or not 0 <= p <= 1:
        raise ConfigError("data.p", p, "a number in [0, 1]")
    return float(p)


def check_alpha(alpha):
    """dirichlet's concentration, one number or one per client, as a 1-d float array."""
    import numpy as np

    values = np.atleast_1d(np.asarray(alpha, dtype=float))
    if values.ndim != 1 or not np.all(values > 0):  # also rejects NaN
        raise ConfigError("data.alpha", alpha, "a positive number, or a list of them (one per client)")
    return values


def check_min_partition_size(min_partition_size) -> None:
    if min_partition_size < 0:
        raise ConfigError("data.min_partition_size", min_partition_size, "a non-negative integer")


def check_classes_per_partition(num_classes_per_partition, class_assignment_mode) -> None:
    if num_classes_per_partition < 1:
        raise ConfigError("data.num_classes_per_partition", num_classes_per_partition, "a positive integer")
    if class_assignment_mode not in PATHOLOGICAL_MODES:
        valid = "one of " + ", ".join(PATHOLOGICAL_MODES)
        raise ConfigError("data.class_assignment_mode", class_assignment_mode, valid)


def check_data_settings(partition: str, num_clients, p, alpha, min_partition_size, num_classes_per_partition,
                        class_assignment_mode) -> None:
    """Every data setting the chosen partition uses (as DataConfig.partitioner reads them); settings of
    another partition are not judged, since the run never reads them. num_clients None: from the data (natural)
    or the default of 10 (fedclust/data/config.py)."""
    if num_clients is not None:
        check_num_clients(num_clients)
    if partition == "pshift":
        check_p(p)
    elif partition == "dirichlet":
        check_alpha(alpha)
        check_min_partition_size(min_partition_size)
    elif partition == "pathological":
        check_classes_per_partition(num_classes_per_partition, class_assignment_mode)

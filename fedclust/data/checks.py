"""The `data:` rules, each the only copy: the settings that can be judged before any data is loaded, and the
partition rules that need only the number of classes and samples.

Torch-free (numpy only inside `check_alpha`), so fedclust.precheck calls them before torch is imported:
`check_data_settings` on the command line's values, `check_data_name` / `check_data_options` against the
data sets cli_schema.json lists, and the partition rules on a known data set's counts
(fedclust/data/catalog.py). build_federated_data and load_dataset call the same functions before loading
anything, and the partitioners call the rules of their own settings (fedclust/data/partition.py), so a
refusal reads the same both ways. What needs the samples themselves stays in partition.py.
"""

from __future__ import annotations

import difflib
import inspect
import numbers
from collections.abc import Callable, Iterable, Mapping

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


def check_subsample(size, available: int | None = None) -> None:
    """data.subsample: a positive number of samples, at most the split's (when known)."""
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ConfigError("data.subsample", size, "a positive number of samples, or null for all of them")
    if available is not None and size > available:
        raise ConfigError("data.subsample", size, f"at most the {available} samples of the split")


DEFAULT_NUM_CLIENTS = 10  # data.num_clients left unset, for the simulated partitions


def simulated_num_clients(num_clients: int | None) -> int:
    """The client count of a simulated partition: data.num_clients, or 10 when it is left unset (None; the
    natural partition takes it from the data instead)."""
    return DEFAULT_NUM_CLIENTS if num_clients is None else num_clients


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


# ---------------------------------------------------------------- the data set and its options


def check_data_name(name, known: Iterable[str]) -> None:
    """A registered data set (load_dataset's registry, or the list cli_schema.json keeps of it)."""
    known = list(known)
    if name in known:
        return
    close = difflib.get_close_matches(str(name), known, n=1, cutoff=0.6)
    hint = f" (closest: {close[0]})" if close else ""
    raise ConfigError("data.name", name, "one of " + ", ".join(known) + hint)


def loader_options(loader: Callable) -> list[str]:
    """The data.options a data set's loader takes: its keyword arguments after (root, split)."""
    return list(inspect.signature(loader).parameters)[2:]


def check_data_options(name: str, options: Mapping, accepted: list[str]) -> None:
    for key in options:
        if key not in accepted:
            valid = "its options are " + ", ".join(accepted) if accepted else "it takes none"
            raise ConfigError(f"data.options.{key}", options[key], f"not an option of {name} ({valid})")


# ---------------------------------------------------------------- a partition against the data's classes and size


def check_pshift_clients(num_clients: int, num_classes: int) -> None:
    """pshift gives client l "its" class l: one client per class."""
    if num_clients != num_classes:
        valid = f"equal to the number of classes ({num_classes}) for the pshift partition"
        raise ConfigError("data.num_clients", num_clients, valid)


def check_pathological_classes(num_classes_per_partition: int, class_assignment_mode: str, num_clients: int,
                               num_classes: int) -> None:
    if num_classes_per_partition > num_classes:
        valid = f"at most the number of classes ({num_classes})"
        raise ConfigError("data.num_classes_per_partition", num_classes_per_partition, valid)
    if class_assignment_mode == "disjoint" and num_clients * num_classes_per_partition != num_classes:
        valid = f"num_clients ({num_clients}) x num_classes_per_partition = the number of classes " \
                f"({num_classes}) for the disjoint mode"
        raise ConfigError("data.num_classes_per_partition", num_classes_per_partition, valid)


def check_clients_fit_samples(num_clients: int, num_samples: int) -> None:
    if num_clients > num_samples:
        raise ConfigError("data.num_clients", num_clients, f"at most the number of samples ({num_samples})")


def check_min_partition_size_fits(min_partition_size: int, num_samples: int, num_clients: int) -> None:
    """dirichlet redraws until every client has min_partition_size samples: N / num_clients must allow it."""
    if min_partition_size * num_clients > num_samples:
        valid = f"at most N / num_clients = {num_samples // num_clients} ({num_samples} samples, {num_clients} clients)"
        raise ConfigError("data.min_partition_size", min_partition_size, valid)


def check_partition_fits(partition: str, num_clients: int, min_partition_size: int,
                         num_classes_per_partition: int, class_assignment_mode: str, num_classes: int,
                         class_counts: tuple[int, ...]) -> None:
    """Every rule of the chosen partition that the data's classes and counts decide, in the order
    build_federated_data meets them: the partitioner's validate on the data set's classes, then its call on
    the labels (whose classes are the labels present: max label + 1)."""
    for classes in (num_classes, len(class_counts)):
        if partition == "pshift":
            check_pshift_clients(num_clients, classes)
        elif partition == "pathological":
            check_pathological_classes(num_classes_per_partition, class_assignment_mode, num_clients, classes)
    check_clients_fit_samples(num_clients, sum(class_counts))
    if partition == "dirichlet":
        check_min_partition_size_fits(min_partition_size, sum(class_counts), num_clients)


def pshift_shares(num_samples: int, num_clients: int, p: float) -> tuple[int, int]:
    """CCFC's p scheme with s = N / m: each client first takes round(s * p) samples of its own class, then a
    chunk of round(s * (1 - p)) from the shuffled pool (Python's round: ties to even)."""
    s = num_samples / num_clients
    return round(s * p), round(s * (1 - p))


def client_sizes(partition: str, class_counts: tuple[int, ...], num_clients: int, p) -> list[int] | None:
    """Each client's number of samples where the partition fixes it without drawing (pshift, iid,
    iid_balanced); None where it depends on the draw (dirichlet, pathological)."""
    n, m = sum(class_counts), num_clients
    if partition in ("iid", "iid_balanced"):  # near-equal cuts, or a round-robin deal: N // m or one more
        return [n // m + (1 if i < n % m else 0) for i in range(m)]
    if partition != "pshift" or len(class_counts) != m:
        return None
    if p == 1:
        return list(class_counts)
    take, chunk = pshift_shares(n, m, p)
    own = [min(take, c) for c in class_counts]
    pool = n - sum(own)
    rest = max(0, pool - m * chunk)
    return [own[i] + max(0, min(chunk, pool - i * chunk)) + len(range(i, rest, m)) for i in range(m)]

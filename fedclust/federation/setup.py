"""Preparing a method for a data set before any round: the checks no method can do without, its own
`validate`, then `build` on the data's device. Used by fit and by whatever loads a saved run."""

from __future__ import annotations

import torch

from fedclust.contract import FederatedMethod
from fedclust.errors import ConfigError, MethodArgError
from fedclust.federation.hparams import check_batch_size, check_cluster_counts, check_init_args


def setup_method(method: FederatedMethod, data, seed: int) -> None:
    """Check the method against the data, then build its networks on the data's device (fit and evaluate)."""
    info = data.info
    check_hparams(method)
    if method.num_clusters is None and not info.has_labels:  # nothing to take the number of classes from
        raise MethodArgError("num_clusters", None,
                          "a positive integer: the data have no labels to take the "
                          "number of clusters from")
    method.validate(info, data.num_clients)
    # also in fedclust.precheck, on a known data set's sizes
    check_cluster_counts(method.num_clusters, method.local_clusters(), info.num_classes, len(data),
                         info.min_client_size)
    torch.manual_seed(seed)  # network initialisation: the one draw made before any client exists
    method.build(info)
    method.to(data.device)


def check_hparams(method: FederatedMethod) -> None:
    """The rules of fedclust/federation/hparams.py on the method's saved init arguments and its batch size."""
    check_init_args(dict(getattr(method, "hparams", {})))
    check_batch_size(method.batch_size)


def check_summary_floor(method: FederatedMethod, client_sizes: list[int], floor: int) -> None:
    """A floor no client's summaries could meet is an impossible request, refused before any round: no client holds
    ``floor`` samples, or the clients' local clusters of at least ``floor`` samples cannot reach the k clusters a
    method with local clustering needs (k-FED's k' * clients >= k under the floor)."""
    if not method.summary_keys or not client_sizes:
        return
    largest = max(client_sizes)
    if largest < floor:
        raise ConfigError("federation.min_summary_size", floor,
                          f"at most {largest}, the largest client's samples (no client could send a summary)")
    k_local, k = method.local_clusters(), method.num_clusters
    if k_local and k:
        possible = sum(min(k_local, n // floor) for n in client_sizes)
        if possible < k:
            raise ConfigError("federation.min_summary_size", floor,
                              f"a floor at which the clients' local clusters can reach k = {k} (at {floor} samples "
                              f"each they hold at most {possible} among them)")

"""The run level's own checks on `fit` and `evaluate` arguments that need no data, model or device.

Torch-free, so fedclust.precheck calls them on the command line's values before torch is imported; fit(),
evaluate() and the kNN probe call the same functions. What needs the loaded run or data (k at most the
train samples, GPUs present) is judged where that is known.
"""

from __future__ import annotations

from collections.abc import Sequence

from fedclust.errors import ConfigError


def check_embedding_points(embedding_points: int) -> None:
    if embedding_points < 10:
        raise ConfigError("embedding_points", embedding_points, "at least 10 samples for the t-SNE picture")


def check_device_count(devices: int | str) -> None:
    """fabric.devices as a number (a string such as "auto" is Lightning's to judge)."""
    if isinstance(devices, int) and devices < 1:
        raise ConfigError("fabric.devices", devices, "a positive number of devices (or auto)")


def check_evaluate_settings(split: str, data_name: str | None, per_client: bool, knn: Sequence[int] | None) -> None:
    """evaluate's arguments, before loading anything."""
    if per_client and (split != "same" or data_name is not None):
        raise ConfigError("per_client", True, 'split "same" without data_name (the clients are the run\'s own)')
    if knn is not None:
        check_ks(knn)  # k larger than the train split is checked once it is known


def check_ks(ks: Sequence[int], num_train: int | None = None) -> list[int]:
    """The kNN probe's k values, validated: each a positive integer, at most the number of train samples."""
    if not ks:
        raise ConfigError("knn", list(ks), "at least one k, e.g. --knn 3 5 7 9 100 1000 7000")
    for k in ks:
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ConfigError("knn", k, "a positive integer number of neighbours")
        if num_train is not None and k > num_train:
            raise ConfigError("knn", k, f"at most the number of train samples ({num_train})")
    return list(ks)

"""What no method can work with, whatever its maths, judged on its init arguments (name -> value): non-finite
numbers, sizes below 1, learning rates at or below 0, mini-batches of one sample (BatchNorm cannot train on
them).

Torch-free, so fedclust.precheck applies the same rules to the init arguments a command line gives before
torch is imported; fedclust.federation.setup.check_hparams applies them to a built method's hparams.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping

from fedclust.errors import ConfigError

SIZE_KEYS = re.compile(r"(_dim|hidden|^num_clusters|^k_local|niter|redo|^n_init|^batch_size)$")


def check_init_args(args: Mapping[str, object]) -> None:
    """Raise ConfigError on the first init argument no method can work with."""
    for key, value in args.items():
        name = f"method.init_args.{key}"
        values = value if isinstance(value, list | tuple) else [value]
        if any(isinstance(v, float) and not math.isfinite(v) for v in values):
            raise ConfigError(name, value, "a finite number")
        if isinstance(value, bool) or not isinstance(value, int | float):
            continue
        if SIZE_KEYS.search(key) and value < 1:
            raise ConfigError(name, value, "a positive integer")
        if (key == "lr" or key.startswith("lr_") or key.endswith("_lr")) and value <= 0:
            raise ConfigError(name, value, "a positive learning rate")
    check_batch_size(args.get("batch_size"))


def check_batch_size(batch_size) -> None:
    """A training batch of one sample: None (no training) and non-numbers are not judged here."""
    if isinstance(batch_size, int | float) and not isinstance(batch_size, bool) and batch_size < 2:
        raise ConfigError("method.init_args.batch_size", batch_size, "at least 2 (BatchNorm cannot train on "
                          "one sample)")

"""fedclust/federation/hparams.py: the init arguments no method can work with are refused, for every method."""

import inspect

import pytest

from fedclust.data.info import DataInfo
from fedclust.errors import ConfigError
from fedclust.federation.hparams import check_init_args
from fedclust.federation.setup import check_hparams
from fedclust.registry import METHODS

IMAGES, VECTORS = DataInfo(10, 1, 28, 784, True, 500), DataInfo(10, 0, 0, 32, False, 500)


def _integer_arguments():
    for name, entry in METHODS.items():
        for param in list(inspect.signature(entry.load().__init__).parameters.values())[1:]:
            kind = str(param.annotation)
            if "int" in kind and "bool" not in kind and "Literal" not in kind:
                yield pytest.param(entry.load(), param.name, id=f"{name}.{param.name}")


def _refused(cls, key: str, value: int) -> bool:
    """Whether a method built with key = value is refused where fit() judges it: its constructor, the rules
    of hparams.py, or its own validate() on whichever kind of data it accepts."""
    try:
        method = cls(**{key: value})
        check_hparams(method)
    except ConfigError:
        return True
    for info in (IMAGES, VECTORS):
        try:
            method.validate(info, 4)
            return False
        except ConfigError as error:
            if not error.field.startswith("data"):
                return True  # refused for this value, not for the kind of data
    return True


@pytest.mark.parametrize(("cls", "key"), list(_integer_arguments()))
def test_no_method_takes_a_negative_count(cls, key):
    assert _refused(cls, key, -1)


@pytest.mark.parametrize("key", ["resize", "dilation", "hidden_channels", "num_couplings", "kfed_k_local", "rounds",
                                 "restarts", "synthetic_per_client", "max_steps_per_epoch", "fcm_max_iter"])
def test_sizes_below_one_are_refused(key):
    with pytest.raises(ConfigError, match=f"method.init_args.{key} = 0 is not valid: a positive integer"):
        check_init_args({key: 0})


@pytest.mark.parametrize("key", ["representation_rounds", "cycle_window", "local_epochs", "smooth_steps", "seed"])
def test_zero_stays_a_valid_none_where_it_means_one(key):
    check_init_args({key: 0})

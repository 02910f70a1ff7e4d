"""fedclust/federation/hparams.py: the init arguments no method can work with are refused, for every method."""

import inspect
import re

import pytest

from fedclust.data.info import DataInfo
from fedclust.errors import ConfigError
from fedclust.federation.hparams import check_init_args
from fedclust.federation.setup import check_hparams
from fedclust.registry import METHODS

IMAGES, VECTORS = DataInfo(10, 1, 28, 784, True, 500), DataInfo(10, 0, 0, 32, False, 500)


def _arguments(kind_word: str):
    """(method class, init argument) for every method's arguments annotated with kind_word (no bool, Literal or
    tuple)."""
    for name, entry in METHODS.items():
        for param in list(inspect.signature(entry.load().__init__).parameters.values())[1:]:
            kind = str(param.annotation)
            if kind_word in kind and not any(other in kind for other in ("bool", "Literal", "tuple")):
                yield pytest.param(entry.load(), param.name, id=f"{name}.{param.name}")


def _refused(cls, key: str, value: float) -> bool:
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


@pytest.mark.parametrize(("cls", "key"), list(_arguments("int")))
def test_no_method_takes_a_negative_count(cls, key):
    assert _refused(cls, key, -1)


@pytest.mark.parametrize(("cls", "key"), list(_arguments("float")))
def test_no_method_takes_a_negative_rate_weight_or_temperature(cls, key):
    assert _refused(cls, key, -1.0)


@pytest.mark.parametrize(("key", "value", "valid"), [
    ("lam", -0.5, "a number >= 0"), ("gp_weight", -1.0, "a number >= 0"), ("tol", -1e-4, "a number >= 0"),
    ("instance_temperature", 0.0, "a positive number"), ("fcm_m", 1.0, "a fuzzifier greater than 1"),
    ("ema_decay", 1.5, "a number in [0, 1]"), ("lr_decay", 0.0, "a positive factor"),
])
def test_real_valued_arguments_are_judged_by_their_kind(key, value, valid):
    with pytest.raises(ConfigError, match=f"method.init_args.{key} = {value} is not valid: {re.escape(valid)}"):
        check_init_args({key: value})


@pytest.mark.parametrize("key", ["resize", "dilation", "hidden_channels", "num_couplings", "kfed_k_local", "rounds",
                                 "restarts", "synthetic_per_client", "max_steps_per_epoch", "fcm_max_iter"])
def test_sizes_below_one_are_refused(key):
    with pytest.raises(ConfigError, match=f"method.init_args.{key} = 0 is not valid: a positive integer"):
        check_init_args({key: 0})


@pytest.mark.parametrize("key", ["representation_rounds", "cycle_window", "local_epochs", "smooth_steps", "seed"])
def test_zero_stays_a_valid_none_where_it_means_one(key):
    check_init_args({key: 0})

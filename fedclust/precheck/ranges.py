"""The checks a command line can be judged by before torch is imported, run on the values the command line
gives (or the defaults it leaves), in the order fit() and evaluate() run them: the values that need no data,
then those that need the machine, the file system or a known data set's size (facts.py). Each rule lives
once, torch-free, where the run calls it too: FederationConfig.validate, fedclust/run_checks.py,
fedclust/federation/hparams.py, fedclust/data/checks.py, fedclust/data/catalog.py.

A value the precheck could not judge (UNKNOWN), or a default the schema does not hold, leaves the checks that
need it to the run. Checks that need the loaded data of a data set the catalogue does not know stay in the
run (the docstrings of fedclust/data/checks.py and fedclust/data/catalog.py say which).
"""

from __future__ import annotations

import dataclasses
import inspect

from fedclust.data.checks import check_data_settings
from fedclust.federation.config import FederationConfig
from fedclust.federation.hparams import check_init_args
from fedclust.precheck import facts
from fedclust.precheck.values import UNKNOWN
from fedclust.run_checks import check_device_count, check_embedding_points, check_evaluate_settings


def _resolver(options: dict, values: dict):
    """name -> the value given last, else the option's default in the schema, else UNKNOWN."""
    def get(name: str):
        if name in values:
            return values[name]
        return options.get("--" + name, {}).get("default", UNKNOWN)
    return get


def _call(check, get, prefix: str = "") -> None:
    """check(**its arguments read as options `prefix + name`), unless one of them is unknown."""
    kwargs = {name: get(prefix + name) for name in inspect.signature(check).parameters}
    if UNKNOWN not in kwargs.values():
        check(**kwargs)


def fit(options: dict, values: dict, init_args: dict, method: dict, data_sets: dict | None = None) -> None:
    """`fit`'s checks in fit()'s order: its own (federation, devices, the method's init args, the logger, the
    t-SNE sample, --diagnose for the method), the run folder, then build_federated_data's and setup_method's."""
    get = _resolver(options, values)
    fields = {f.name for f in dataclasses.fields(FederationConfig)}
    given = {k.split(".", 1)[1]: v for k, v in values.items() if k.startswith("federation.")}
    if set(given) <= fields and UNKNOWN not in given.values():
        FederationConfig(**given).validate()
    if UNKNOWN not in (get("fabric.accelerator"), get("fabric.devices")):
        facts.cuda(get("fabric.accelerator"), get("fabric.devices"))
    if get("fabric.devices") is not UNKNOWN:
        check_device_count(get("fabric.devices"))
    checked = set(method.get("checked") or ())  # the init args check_hparams sees on the built method
    check_init_args({k: v for k, v in init_args.items() if k in checked and v is not UNKNOWN})
    facts.logger(get("logger"))
    _call(check_embedding_points, get)
    facts.diagnose(get("diagnose"), method.get("path"))
    facts.resume(get, options, method, init_args)
    facts.run_location(get("runs_dir"), get("run_dir"), get("resume"))
    facts.start_folder(get("init_from"), get("resume"))
    _call(check_data_settings, get, "data.")
    facts.data(get, data_sets, method, init_args)


def evaluate(options: dict, values: dict) -> None:
    _call(check_evaluate_settings, _resolver(options, values))

"""Experiments for the runner's tests: tiny ones on the embedded 8x8 digits, written into tmp_path."""

from pathlib import Path

import pytest
import yaml

DIGITS = {"data.name": "digits", "data.num_clients": 2, "data.partition": "iid"}


def _tiny_spec(**changes) -> dict:
    """An experiment on the embedded 8x8 digits: k-FED (no training, seconds a run) over two seeds."""
    spec = {"title": "tiny", "data": "8x8 digits (1,797 images), 2 clients", "overrides": dict(DIGITS),
            "grid": {"seed": [1, 2]}, "configs": [{"label": "k-FED", "config": "kfed_fmnist"}],
            "metrics": ["nmi", "rounds", "seconds_per_round", "commit"],
            "paper": [{"metric": "nmi", "source": "a made-up table", "cells": {"k-FED": 0.5}}],
            "table": {"columns": ["method", "seed", "nmi", "rounds", "seconds_per_round", "commit"]},
            "plot": {"x": "seed", "y": "nmi"}}
    spec.update(changes)
    return spec


@pytest.fixture
def write_experiment(tmp_path):
    """Write an experiment YAML into tmp_path/experiments and return its path."""

    def write(spec: dict, name: str = "tiny") -> Path:
        path = tmp_path / "experiments" / f"{name}.yaml"
        path.parent.mkdir(exist_ok=True)
        path.write_text(yaml.safe_dump(spec, sort_keys=False))
        return path

    return write


@pytest.fixture
def tiny_spec():
    return _tiny_spec

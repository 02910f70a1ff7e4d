"""The packaged CIFAR-10 and STL-10 configs of issue 22's methods (CCFC++ and FedSpectral) run as shipped, every
setting but the schedule's and the federation's size (and so its privacy floor) kept, on tiny copies of the data
sets the tests write."""

import json

import pytest
import torchvision
import yaml

from fedclust.__main__ import main
from fedclust.config_files import resolve_config
from tests.helpers.tiny_images import write_tiny_cifar10, write_tiny_stl10

SHORT = {
    "ccfcpp": ["--method.init_args.pretrain_rounds", "1", "--method.init_args.cluster_rounds", "1",
               "--method.init_args.batch_size", "16", "--federation.min_summary_size", "3"],
    "fedspectral": ["--method.init_args.rounds", "2", "--method.init_args.batch_size", "16",
                    "--federation.min_summary_size", "3",
                    "--method.init_args.round_vote", "2"],
}


@pytest.fixture
def colour_root(tmp_path, monkeypatch):
    """CIFAR-10 and STL-10 under one data root; torchvision's md5 checks cannot pass on files written here."""
    monkeypatch.setattr(torchvision.datasets.cifar, "check_integrity", lambda *a, **k: True)
    monkeypatch.setattr(torchvision.datasets.STL10, "_check_integrity", lambda self: True)
    return write_tiny_stl10(write_tiny_cifar10(tmp_path / "data"))


CONFIGS = ["ccfcpp_cifar10", "ccfcpp_stl10", "fedspectral_cifar10", "fedspectral_stl10"]


@pytest.mark.slow  # 10-35 s each on a 2-core CPU (ResNet-18 trunks on the CPU)
@pytest.mark.parametrize("config", CONFIGS)
def test_a_colour_config_runs_as_shipped_on_tiny_files(config, colour_root, tmp_path):
    run = tmp_path / "run"
    argv = ["fit", "--config", config, "--data.root", str(colour_root), "--data.num_clients", "2",
            "--data.partition", "iid", "--progress", "false", "--run_dir", str(run), *SHORT[config.split("_")[0]]]
    assert main(argv) == 0
    final = json.loads((run / "final.json").read_text())
    assert 0 <= final["metrics"]["nmi"] <= 1
    images = 72 if "cifar" in config else 60  # every image of both splits (data.split all) has its cluster
    assert (run / "assignments.csv").read_text().count("\n") == 1 + images


@pytest.mark.parametrize("config", ["fedspectral_cifar10", "fedspectral_stl10"])
def test_fedspectral_colour_configs_carry_fashion_mnist_settings(config):
    """Their headers promise Fashion-MNIST's settings (chosen on its training split) on a colour trunk: every method
    setting but the trunk's, the views' and the HOG cell's equals fedspectral_fmnist's, the rounds and floor included
    (projector_rank is the convnet's: it factors its flat 2,304 features; a ResNet's pooled 512 need none)."""
    colour, fmnist = (yaml.safe_load(resolve_config(name).read_text()) for name in (config, "fedspectral_fmnist"))
    own = {"backbone", "projector_rank", "augment", "crop_scale", "hog_cell"}
    shared = {k: v for k, v in colour["method"]["init_args"].items() if k not in own}
    assert shared == {k: v for k, v in fmnist["method"]["init_args"].items() if k not in own}
    assert colour["federation"] == fmnist["federation"]

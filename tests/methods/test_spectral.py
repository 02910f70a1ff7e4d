"""The central spectral baseline: a sample keeps its spectral cluster; on HOG vectors it is FedSpectral's descriptor."""

import torch

from fedclust.clustering.metrics import nmi
from fedclust.data.config import DataConfig
from fedclust.errors import ConfigError
from fedclust.methods import Spectral


def test_it_clusters_every_sample_of_its_one_client_and_sends_cluster_means_with_sizes(run_fit, server_inputs):
    metrics = run_fit(Spectral(), data=DataConfig(name="digits", num_clients=1, partition="iid"))
    assert metrics["nmi"] > 0.75  # 8x8 digits: spectral clustering of the pixels' kNN graph
    (_, _, (update,)), = server_inputs
    assert len(update.payload["centroids"]) == len(update.payload["counts"]) == 10
    assert int(update.payload["counts"].sum()) == update.num_samples


def test_on_hog_vectors_it_is_the_descriptor_alone(run_fit, tmp_path):
    data = DataConfig(name="hog", options={"source": "digits", "cell": 2}, num_clients=1, partition="iid")
    metrics = run_fit(Spectral(neighbors=10), data=data)
    assert 0.5 < metrics["nmi"] <= 1
    labels = torch.tensor([int(r.split(",")[3]) for r in (tmp_path / "run" / "assignments.csv").read_text()
                           .splitlines()[1:]])
    truth = torch.tensor([int(r.split(",")[2]) for r in (tmp_path / "run" / "assignments.csv").read_text()
                          .splitlines()[1:]])
    assert abs(float(nmi(labels, truth)) - metrics["nmi"]) < 1e-6  # what predict gave is what was scored


def test_bad_neighbors_is_one_sentence():
    import pytest

    with pytest.raises(ConfigError, match="method.init_args.neighbors"):
        Spectral(neighbors=0)

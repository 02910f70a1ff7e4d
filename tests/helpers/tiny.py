"""Small settings of every method and the shared test scaffolding (tests import shared pieces from here or
tests/conftest.py only). TINY_METHODS gives each registered method a setting that runs one round on two
tiny clients in about a second; tests/test_registry.py keeps it in step with fedclust/registry.py."""

import contextlib
import dataclasses
import gzip
from pathlib import Path

import numpy as np
import pytest
import torch
from lightning.fabric import Fabric

from fedclust.contract import DataInfo
from fedclust.data.config import DataConfig, build_federated_data
from fedclust.federation.config import FederationConfig
from fedclust.federation.orchestrator import Orchestrator
from fedclust.methods import (
    CC,
    DCN,
    FCM,
    FFCM,
    KFED,
    MCC,
    PPFCGAN,
    SDAFC,
    UIFCA,
    CCFCPlusPlus,
    ClusterGANFedAvg,
    FedBYOLCC,
    FedCC,
    FedMCC,
    FedPNP,
    FedSpectral,
    FedUKMeans,
    FedUMCC,
    KMeans,
    SingleSimCLR,
    Spectral,
)
from tests.conftest import tiny_ccfc, tiny_data


def build(method, data_cfg=None, federation=None, seed=3):
    fabric = Fabric(accelerator="cpu", devices=1)
    data = build_federated_data(data_cfg or tiny_data(num_clients=3), fabric.device, seed)
    torch.manual_seed(seed)
    method.build(data.info)
    return Orchestrator(fabric, method, data, federation or FederationConfig(), seed)

def write_idx(path: Path, array: np.ndarray, gz: bool) -> None:
    header = bytes([0, 0, 0x08, array.ndim]) + np.asarray(array.shape, dtype=">i4").tobytes()
    data = header + array.astype(np.uint8).tobytes()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(data) if gz else data)

INFO = DataInfo(num_classes=10, in_channels=1, input_size=8, num_features=64, is_image=True)

def tiny_cc_family(cls=FedCC, **kw):
    args = dict(backbone="mlp", rounds=1, local_epochs=1, batch_size=64)
    args.update(kw)
    return cls(**args)

def tiny_cc(**kw) -> CC:
    args = dict(backbone="mlp", epochs=1, batch_size=64)
    args.update(kw)
    return CC(**args)

def tiny_clustergan(**kw) -> ClusterGANFedAvg:
    """ClusterGAN with 4/8-channel convs and a 16-wide FC layer: a round takes well under a second on CPU."""
    args = dict(noise_dim=4, channels=4, hidden=16, rounds=1, batch_size=8, n_critic=2, kmeans_redo=1)
    args.update(kw)
    return ClusterGANFedAvg(**args)

def tiny_mnist28(root, n_train: int = 40, n_test: int = 10) -> DataConfig:
    """A 28x28 IDX set written under `root`: class c is a bright 8x8 square at its own place plus noise."""
    rng = np.random.default_rng(0)
    for stem, n in (("train", n_train), ("t10k", n_test)):
        labels = np.arange(n) % 10
        images = rng.integers(0, 40, size=(n, 28, 28))
        for i, c in enumerate(labels):
            r, s = 2 + 8 * (c // 3), 2 + 8 * (c % 3)
            images[i, r:r + 8, s:s + 8] = 255
        write_idx(root / f"{stem}-images-idx3-ubyte", images, gz=False)
        write_idx(root / f"{stem}-labels-idx1-ubyte", labels, gz=False)
    return DataConfig(name="mnist", root=str(root), num_clients=2, partition="iid")

def tiny_fedbyolcc(**kw) -> FedBYOLCC:
    args = dict(backbone="mlp", resize=None, projector_hidden=32, projection_dim=16, predictor_hidden=32,
                head_hidden=32, rounds=1, local_epochs=1, batch_size=64, crop_scale=(0.5, 1.0))
    args.update(kw)
    return FedBYOLCC(**args)

def tiny_fedmcc(**kw) -> FedMCC:
    """FedMCC small enough for CPU tests: MLP backbone on 8x8 digits, one round and one epoch per stage."""
    args = dict(backbone="mlp", head_hidden=32, instance_dim=16, representation_rounds=1, cluster_rounds=1,
                local_epochs=1, cluster_local_epochs=1, batch_size=64, crop_scale=(0.5, 1.0))
    args.update(kw)
    return FedMCC(**args)

def tiny_mcc(**kw) -> MCC:
    args = dict(backbone="mlp", head_hidden=32, instance_dim=16, epochs=1, batch_size=64, crop_scale=(0.5, 1.0))
    args.update(kw)
    return MCC(**args)

PPFC_TINY = dict(gan_rounds=1, g_hidden=16, d_hidden=16, max_steps_per_epoch=4, ae_hidden=(32,), latent_dim=4,
            pretrain_epochs=1, cluster_epochs=1, kmeans_redo=1)

def tiny_ppfc(**kw) -> PPFCGAN:
    """PPFC-GAN with 16-wide GAN layers, one GAN round of at most 4 steps and a 64-32-4 autoencoder trained
    1 + 1 epochs."""
    return PPFCGAN(**{**PPFC_TINY, **kw})

SDAFC_TINY = dict(epochs=1, g_hidden=16, d_hidden=16, max_steps_per_epoch=4, kmeans_niter=20, kmeans_redo=1,
            fcm_max_iter=100)

def tiny_sdafc(**kw) -> SDAFC:
    """SDA-FC with 16-wide hidden layers and one local epoch of at most 4 steps: a 2-client run on 8x8 digits
    takes ~2 s on CPU."""
    return SDAFC(**{**SDAFC_TINY, **kw})

def tiny_single(**kw) -> SingleSimCLR:
    args = dict(backbone="mlp", rounds=1, local_epochs=1, batch_size=64, kmeans_niter=10, kmeans_redo=1)
    args.update(kw)
    return SingleSimCLR(**args)

def tiny_uifca(**kw) -> UIFCA:
    args = dict(cluster_rounds=1, communication_rounds=1, local_steps=2, batch_size=32, optimizer="adam", lr=0.01)
    args.update(kw)
    return UIFCA(**args)

FEDU_TINY = dict(backbone="mlp", projector_hidden=32, projection_dim=16, predictor_hidden=32, rounds=1, local_epochs=1,
            batch_size=64, crop_scale=(0.5, 1.0))

def tiny_run_config(method, data) -> str:
    """The config.yaml text `fedclust fit` would save for this method and data (run_fit alone saves none, and
    `evaluate` rebuilds the run from it)."""

    from fedclust.run import fit_parser

    parser = fit_parser()
    cfg = parser.parse_object({"method": {"class_path": f"{type(method).__module__}.{type(method).__name__}",
                                          "init_args": dict(method.hparams)},
                               "data": dataclasses.asdict(data), "fabric": {"accelerator": "cpu"}, "progress": False})
    cfg.pop("config", None)
    return parser.dump(cfg, skip_unset=False)

CLI_TINY = ["--method.init_args.backbone", "mlp", "--method.init_args.latent_dim", "16",
        "--method.init_args.kmeans_redo", "1", "--data.num_clients", "2", "--data.partition", "iid",
        "--federation.rounds", "2", "--progress", "false"]


def _one_client() -> DataConfig:
    # 600 of the 1,797 digits: the central baselines grow faster than n (Spectral's dense eigh below 2,000 points)
    return DataConfig(name="digits", num_clients=1, partition="iid", subsample=600)


def _gaussian() -> DataConfig:
    return DataConfig(name="gaussian", num_clients=2, partition="iid",
                      options={"num_clusters": 2, "points_per_cluster": 100})


# name -> (a tiny method, its data: None = tiny_data(), a DataConfig factory, or a factory of a folder to write in)
TINY_METHODS = {
    "CCFC": (tiny_ccfc, None),
    "CCFCPlusPlus": (lambda: tiny_ccfc(cls=CCFCPlusPlus, decorrelation_weight=1.0), None),
    "KFED": (lambda: KFED(k_local=10), None),
    "KMeans": (KMeans, _one_client),
    "DCN": (lambda: DCN(latent_dim=4, ae_hidden=(16,), pretrain_epochs=1, cluster_epochs=1), _one_client),
    "Spectral": (Spectral, _one_client),
    "FCM": (lambda: FCM(max_iter=20), _one_client),
    "FFCM": (lambda: FFCM(max_rounds=2), None),
    "SDAFC": (tiny_sdafc, None),
    "PPFCGAN": (tiny_ppfc, None),
    "ClusterGANFedAvg": (tiny_clustergan, tiny_mnist28),
    "UIFCA": (lambda: tiny_uifca(flow="affine"), _gaussian),
    "FedCC": (tiny_cc_family, None),
    "FedPNP": (lambda: tiny_cc_family(FedPNP), None),
    "FedSpectral": (lambda: FedSpectral(backbone="mlp", projector_hidden=32, latent_dim=16, rounds=2, batch_size=64,
                                        neighbors=5), None),
    "SingleSimCLR": (tiny_single, None),
    "FedBYOLCC": (tiny_fedbyolcc, None),
    "CC": (tiny_cc, _one_client),
    "FedMCC": (tiny_fedmcc, None),
    "MCC": (tiny_mcc, _one_client),
    "FedUKMeans": (lambda: FedUKMeans(**FEDU_TINY, kmeans_niter=10, kmeans_redo=1), None),
    "FedUMCC": (lambda: FedUMCC(**FEDU_TINY, cluster_rounds=1, cluster_local_epochs=1, head_hidden=32), None),
}


def tiny_method_and_data(name: str, folder: Path):
    """A fresh tiny method of `name` and the DataConfig it runs on (data files, if any, written in `folder`)."""
    make, data = TINY_METHODS[name]
    if data is None:
        return make(), tiny_data()
    return make(), data(folder) if data is tiny_mnist28 else data()


@contextlib.contextmanager
def interrupted_after_round(done: int):
    """Runs inside the block stop with KeyboardInterrupt (as Ctrl-C would) once `done` rounds are complete."""
    real_round = Orchestrator.run_round

    def stop(self, ctx):
        if self.progress.done == done:
            raise KeyboardInterrupt
        return real_round(self, ctx)

    Orchestrator.run_round = stop
    try:
        with pytest.raises(KeyboardInterrupt):
            yield
    finally:
        Orchestrator.run_round = real_round


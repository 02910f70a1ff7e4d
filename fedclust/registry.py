"""The one list of methods: name -> where its class lives and which paper it implements.

Plain data, no torch: the command line lists the methods and suggests the nearest name without importing
any of them, and its first pass refuses `--diagnose true` for a method without an embedding; `load()`
imports a method's class when it is needed. Everything else that names the methods derives from this table or
is tested against it (tests/test_registry.py): the package's exports (fedclust/methods/__init__.py), the
method tables of README.md and docs/methods.md, `fedclust --help`, the import-linter contracts in
pyproject.toml, the tiny settings the conformance and privacy-boundary tests run. The packaged configs of a
method are the ones whose `method.class_path` names it (`configs_of`).

Adding a method (a file, a config, a line here, its test): docs/adding_a_method.md.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class MethodEntry:
    name: str  # the class name; configs say `method: {class_path: NAME}`
    module: str  # file in fedclust/methods/
    paper: str
    # whether the class learns a representation of its own (overrides the contract's `embed`, which returns the
    # flattened input): recorded here so the torch-free first pass can refuse `--diagnose true` without importing
    # the class (tests/test_registry.py checks each against its class)
    embeds: bool = True

    @property
    def class_path(self) -> str:
        return f"fedclust.methods.{self.module}.{self.name}"

    def load(self) -> type:
        return getattr(importlib.import_module(f"fedclust.methods.{self.module}"), self.name)


METHODS: dict[str, MethodEntry] = {e.name: e for e in (
    MethodEntry("CCFC", "ccfc", "CCFC (Yan et al.): cluster-contrastive federated clustering"),
    MethodEntry("CCFCPlusPlus", "ccfcpp", "CCFC++ (Yan et al.): CCFC + feature decorrelation"),
    MethodEntry("FedSpectral", "fedspectral", "fedclust's own: decorrelated contrastive training, summaries of "
                "fixed groups under the privacy floor, spectral clustering of the summaries"),
    MethodEntry("KFED", "kfed", "k-FED (Dennis, Li & Smith, ICML 2021)", embeds=False),
    MethodEntry("KMeans", "kmeans", "centralized k-means baseline", embeds=False),
    MethodEntry("DCN", "dcn", "centralized DCN (Yang et al. 2017), PPFC-GAN's server clusterer on real data"),
    MethodEntry("Spectral", "spectral", "centralized spectral clustering (Ng, Jordan & Weiss 2002), FedSpectral's "
                "no-training, no-federation reference", embeds=False),
    MethodEntry("FCM", "fcm", "fuzzy c-means (Bezdek 1981), centralized", embeds=False),
    MethodEntry("FFCM", "ffcm", "FFCM (Stallmann & Wilbik 2022)", embeds=False),
    MethodEntry("SDAFC", "sdafc", "SDA-FC (Yan et al.): synthetic-data-aided federated clustering", embeds=False),
    MethodEntry("PPFCGAN", "ppfc_gan", "PPFC-GAN (Yan et al.)"),
    MethodEntry("ClusterGANFedAvg", "clustergan_fedavg", "ClusterGAN + FedAvg (UIFCA's baseline)"),
    MethodEntry("UIFCA", "uifca", "UIFCA (Chung et al.)", embeds=False),
    MethodEntry("FedCC", "fedcc", "Contrastive Clustering + FedAvg (Fed+CC)"),
    MethodEntry("FedPNP", "fedpnp", "FedPNP (Miao & Koyuncu)"),
    MethodEntry("SingleSimCLR", "single_simclr", "FedPNP's Single-Training"),
    MethodEntry("FedBYOLCC", "fedbyolcc", "FedPNP's BYOL + CC baseline"),
    MethodEntry("CC", "cc", "Contrastive Clustering, centralized"),
    MethodEntry("FedMCC", "fedmcc", "FedMCC (Miao & Koyuncu)"),
    MethodEntry("MCC", "mcc", "MCC, centralized (FedMCC paper)"),
    MethodEntry("FedUKMeans", "fedu_kmeans", "FedU (Zhuang et al.) + K-means, FedMCC's baseline"),
    MethodEntry("FedUMCC", "fedu_mcc", "FedU (Zhuang et al.) + MCC's cluster stage, FedMCC's baseline"),
)}


def configs_of(name: str, folder: Path | None = None) -> list[str]:
    """Names of the configs (in `folder`, default the packaged ones) whose method is `name`."""
    import yaml

    from fedclust.config_files import packaged_configs

    paths = sorted(folder.glob("*.yaml")) if folder else packaged_configs().values()
    out = []
    for path in paths:
        method = (yaml.safe_load(path.read_text()) or {}).get("method") or {}
        if str(method.get("class_path", "")).rsplit(".", 1)[-1] == name:
            out.append(path.stem)
    return out

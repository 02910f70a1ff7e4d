import os

import pytest

import fedclust  # noqa: F401  (sets OMP_WAIT_POLICY before torch and FAISS load)
from fedclust.data.config import DataConfig
from fedclust.federation.config import FederationConfig
from fedclust.methods import CCFC
from fedclust.run import FabricConfig


def pytest_xdist_auto_num_workers(config):
    """`-n auto` (pyproject's addopts): a worker per core, at most 4. Each worker imports torch (~0.5 GB), and most
    tests are single-threaded Python, so two workers halve the default run on a 2-core CI machine."""
    return max(1, min(os.cpu_count() or 1, 4))


def tiny_ccfc(cls=CCFC, **kw) -> CCFC:
    """A CCFC (or a method of its family, ``cls``) small enough for CPU tests: MLP backbone on 8x8 digits, one
    round per stage."""
    args = dict(backbone="mlp", latent_dim=16, projector_hidden=32, pretrain_rounds=1, cluster_rounds=1,
                batch_size=64, kmeans_niter=10, kmeans_redo=1)
    args.update(kw)
    return cls(**args)


def tiny_data(**kw) -> DataConfig:
    args = dict(name="digits", num_clients=2, partition="iid")
    args.update(kw)
    return DataConfig(**args)


@pytest.fixture
def run_fit(tmp_path):
    """fit() on CPU without progress output, in a fresh run folder under tmp_path."""
    from fedclust.run import fit

    def _run(method, data=None, federation=None, folder="run", **kw):
        fabric = kw.pop("fabric", None) or FabricConfig(accelerator="cpu")
        return fit(method, data or tiny_data(), federation or FederationConfig(), fabric,
                   run_dir=str(tmp_path / folder), progress=False, **kw)

    return _run


@pytest.fixture
def server_inputs(monkeypatch):
    """Every aggregate call of the runs in a test, as (stage name, averaged weights, client updates): what
    crossed from the clients to the server."""
    from fedclust.federation.orchestrator import Orchestrator

    seen = []
    real = Orchestrator.run_round

    def spy(self, ctx):
        original = self.method.aggregate

        def capture(averaged, updates, rctx):
            seen.append((rctx.stage.name, averaged, updates))
            return original(averaged, updates, rctx)

        self.method.aggregate = capture
        try:
            return real(self, ctx)
        finally:
            del self.method.aggregate

    monkeypatch.setattr(Orchestrator, "run_round", spy)
    return seen

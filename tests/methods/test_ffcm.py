import json

import pytest
import torch

from fedclust.data.config import DataConfig
from fedclust.errors import ConfigError
from fedclust.federation.config import FederationConfig
from fedclust.federation.orchestrator import Orchestrator
from fedclust.methods import FFCM


def spy_updates(monkeypatch) -> list:
    """Record every ClientUpdate the server receives."""
    seen = []
    real = FFCM.aggregate

    def capture(self, averaged, updates, ctx):
        seen.append(list(updates))
        return real(self, averaged, updates, ctx)

    monkeypatch.setattr(FFCM, "aggregate", capture)
    return seen


@pytest.mark.parametrize("server", ["avg", "kmeans"])
def test_two_clients_one_round_smoke(run_fit, monkeypatch, server):
    seen = spy_updates(monkeypatch)
    method = FFCM(server=server, max_rounds=1, m=1.1)
    metrics = run_fit(method)
    assert metrics["nmi"] > 0.6  # digits; measured 0.70 (avg) and 0.74 (kmeans)
    (updates,) = seen
    assert [u.client_id for u in updates] == [0, 1]
    for u in updates:  # c centres and c supports: summaries, nothing shaped like the samples
        assert set(u.payload) == {"centres", "supports"}
        assert u.payload["centres"].shape == (10, 64) and u.payload["supports"].shape == (10,)
        assert u.payload["supports"].sum().item() == pytest.approx(u.num_samples, rel=1e-4)
    assert method.centroids.shape == (10, 64) and not method.converged


@pytest.mark.parametrize("server,p", [("avg", 0.0), ("kmeans", 0.0), ("kmeans", 1.0)])
def test_recovers_separated_gaussians_and_stops(run_fit, server, p):
    data = DataConfig(name="gaussian", num_clients=4, partition="pshift", p=p)
    method = FFCM(server=server, max_rounds=15)
    metrics = run_fit(method, data=data, folder=f"{server}{p}")
    assert metrics["nmi"] == pytest.approx(1.0)
    assert method.converged and method.converged_round < 15 and method.shift < method.tol


def test_avg_server_cannot_untangle_one_class_per_client(run_fit):
    # p = 1: each client splits its single cluster into c pieces, and averaging centre j over clients
    # mixes pieces of different clusters -- the weakness of index matching (measured NMI 0.52).
    data = DataConfig(name="gaussian", num_clients=4, partition="pshift", p=1.0)
    assert run_fit(FFCM(server="avg", max_rounds=15), data=data)["nmi"] < 0.8


def test_rounds_after_convergence_are_no_ops(run_fit, monkeypatch, tmp_path):
    seen = spy_updates(monkeypatch)
    method = FFCM(max_rounds=12)
    run_fit(method, data=DataConfig(name="gaussian", num_clients=4, partition="pshift", p=0.0))
    done = method.converged_round
    assert done is not None and done < 12
    assert all(u.payload for u in seen[done - 1]) and not any(u.payload for r in seen[done:] for u in r)
    rows = (tmp_path / "run" / "metrics.csv").read_text().splitlines()[1:]
    assert len({row.split(",")[4] for row in rows[done - 1:]}) == 1  # nmi frozen after convergence


def test_stopped_and_resumed_run_ends_like_the_uninterrupted_run(run_fit, monkeypatch, tmp_path):
    kw = dict(federation=FederationConfig(checkpoint_every=1), seed=3)
    make = lambda: FFCM(server="kmeans", max_rounds=4, m=1.5, tol=0.0)  # tol 0: all four rounds work
    full = run_fit(make(), folder="full", **kw)
    real = Orchestrator.run_round

    def crash_at_round_3(self, ctx):
        if self.progress.done == 2:
            raise KeyboardInterrupt
        return real(self, ctx)

    monkeypatch.setattr(Orchestrator, "run_round", crash_at_round_3)
    with pytest.raises(KeyboardInterrupt):
        run_fit(make(), folder="cut", **kw)
    monkeypatch.setattr(Orchestrator, "run_round", real)
    resumed = run_fit(make(), folder="unused", resume=str(tmp_path / "cut"), **kw)
    assert resumed == pytest.approx(full, abs=1e-6)
    assert json.loads((tmp_path / "cut" / "final.json").read_text())["metrics"] == pytest.approx(full, abs=1e-6)


def test_server_state_round_trip():
    a = FFCM(num_clusters=3)
    a.centroids, a.converged, a.converged_round, a.shift = torch.randn(3, 5), True, 7, 1e-5
    b = FFCM(num_clusters=3)
    b.load_server_state(a.server_state())
    x = torch.randn(50, 5)
    assert torch.equal(a.assign(x), b.assign(x)) and (b.converged, b.converged_round) == (True, 7)


@pytest.mark.parametrize("kw,field", [({"m": 1.0}, "method.m"), ({"server": "median"}, "method.server"),
                                      ({"max_rounds": 0}, "method.max_rounds")])
def test_bad_settings_are_config_errors(run_fit, kw, field):
    with pytest.raises(ConfigError, match=field):
        run_fit(FFCM(**kw))

import json

import pytest
import torch

from fedclust.contract import ClientUpdate, RoundContext, Stage
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
    for u in updates:  # c centres, c supports and their effective counts: summaries, nothing shaped like the samples
        assert set(u.payload) == {"centres", "supports", "counts"}
        assert u.payload["centres"].shape == (10, 64) and u.payload["supports"].shape == (10,)
        assert bool((u.payload["counts"] >= 20).all())  # the default floor, met by every centre here
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


@pytest.mark.parametrize("kw,field", [({"m": 1.0}, "method.init_args.m"),
                                      ({"server": "median"}, "method.init_args.server"),
                                      ({"max_rounds": 0}, "method.init_args.max_rounds")])
def test_bad_settings_are_config_errors(run_fit, kw, field):
    with pytest.raises(ConfigError, match=field):
        run_fit(FFCM(**kw))


def test_server_kmeans_seeds_ten_times_then_warm_starts(monkeypatch):
    """Pins the official server k-means (scikit-learn's KMeans, n_init 10 in the seeded first round, then started
    from the previous global centres): the first round ran one seeding before."""
    from fedclust.methods import ffcm

    calls = []
    real = ffcm.kmeans

    def spy(x, k, **kw):
        calls.append((kw["nredo"], kw["init_centroids"] is not None))
        return real(x, k, **kw)

    monkeypatch.setattr(ffcm, "kmeans", spy)
    method = _direct(server="kmeans")
    g = torch.Generator().manual_seed(0)
    for rnd in range(3):
        method.aggregate(None, [ClientUpdate(c, 5, {"centres": torch.rand(3, 2, generator=g),
                                                          "counts": torch.full((3,), 50.0)}) for c in range(2)],
                         RoundContext(Stage("ffcm", 5), 0, rnd, 0))
    assert calls == [(10, False), (1, True), (1, True)]


def _direct(**kw) -> FFCM:
    method = FFCM(num_clusters=3, tol=1e-6, **kw)
    method.centroids = torch.zeros(3, 2)
    return method


def _server_round(method: FFCM, rnd: int, centres: torch.Tensor, clients=(0,)) -> None:
    """One server step whose clients all send `centres` with equal supports (the avg server returns them)."""
    method.on_round_start(RoundContext(Stage("ffcm", 9), 0, rnd, 0))
    payload = {"centres": centres, "supports": torch.ones(3), "counts": torch.full((3,), 50.0)}
    updates = [ClientUpdate(c, 5, payload) for c in clients]
    method.aggregate(None, updates, RoundContext(Stage("ffcm", 9), 0, rnd, 0))


def test_a_repeating_state_is_a_cycle_and_later_rounds_replay_it():
    """Pins the stop on a cycle: states A, B, A (same clients) close a cycle of 2 at round 3; round 4 then holds B
    and round 5 A without any client step, as the loop itself would."""
    a, b = torch.rand(3, 2), torch.rand(3, 2) + 1
    method = _direct()
    for rnd, state in enumerate([a, b, a]):
        _server_round(method, rnd, state)
    assert (method.cycle_round, method.period, method.converged, method.stopped) == (3, 2, False, True)
    method.on_round_start(RoundContext(Stage("ffcm", 9), 0, 3, 0))
    assert torch.equal(method.centroids, b)
    method.on_round_start(RoundContext(Stage("ffcm", 9), 0, 4, 0))
    assert torch.equal(method.centroids, a)
    state = method.server_state()
    resumed = FFCM(num_clusters=3)
    resumed.load_server_state(state)
    resumed.on_round_start(RoundContext(Stage("ffcm", 9), 0, 5, 0))
    assert resumed.stopped and resumed.period == 2 and torch.equal(resumed.centroids, b)


def test_no_cycle_is_claimed_when_the_clients_changed():
    """A state that returns after a round with other clients is not the same map repeating."""
    a, b = torch.rand(3, 2), torch.rand(3, 2) + 1
    method = _direct()
    for rnd, (state, clients) in enumerate([(a, (0, 1)), (b, (0, 1)), (a, (0,))]):
        _server_round(method, rnd, state, clients)
    assert not method.stopped
    off = _direct(cycle_window=0)
    for rnd, state in enumerate([a, b, a, b]):
        _server_round(off, rnd, state)
    assert not off.stopped and off.past == []


class Reflect:
    """A stand-in local step with a 2-cycle: each client returns the global centres mirrored through 0.5."""

    calls = 0

    def __call__(self, x, c, m, max_iter, tol, init_centres):
        from fedclust.clustering.fcm import FCMResult

        Reflect.calls += 1
        centres = 1.0 - init_centres
        uniform = torch.full((len(x), c), 1.0 / c)  # every sample weighs every centre alike: counts of n
        return FCMResult(centres, uniform, torch.zeros(0), torch.full((c,), len(x) / c), 1, 0.0)


def test_a_run_that_cycles_stops_warns_once_and_ends_like_the_full_loop(run_fit, monkeypatch, caplog, tmp_path):
    """Pins the whole stop: the full loop (cycle_window 0) and the stopping run give the same metrics every round
    and the same final centres; the stopping run calls the local step only until the cycle closes (round 2),
    logs one warning, and a run cut after that and resumed ends the same without more client work."""
    from fedclust.methods import ffcm

    monkeypatch.setattr(ffcm, "fcm", Reflect())
    kw = dict(federation=FederationConfig(checkpoint_every=1))
    full = run_fit(FFCM(max_rounds=6, cycle_window=0), folder="full", **kw)
    assert Reflect.calls == 12
    Reflect.calls = 0
    with caplog.at_level("WARNING", logger="fedclust"):
        stopped_method = FFCM(max_rounds=6)
        stopped = run_fit(stopped_method, folder="stop", **kw)
    assert Reflect.calls == 4 and stopped == pytest.approx(full)
    assert (stopped_method.cycle_round, stopped_method.period) == (2, 2)
    assert sum("FFCM stopped at round 2" in r.getMessage() for r in caplog.records) == 1
    rows = lambda name: [line.split(",")[4] for line in (tmp_path / name / "metrics.csv").read_text().splitlines()[1:]]
    assert rows("full") == rows("stop")
    full_ckpt = torch.load(tmp_path / "full" / "checkpoints" / "last.ckpt", weights_only=False)
    assert torch.allclose(full_ckpt["server"]["centroids"], stopped_method.centroids)

    real = Orchestrator.run_round

    def crash_at_round_4(self, ctx):
        if self.progress.done == 3:
            raise KeyboardInterrupt
        return real(self, ctx)

    monkeypatch.setattr(Orchestrator, "run_round", crash_at_round_4)
    with pytest.raises(KeyboardInterrupt):
        run_fit(FFCM(max_rounds=6), folder="cut", **kw)
    monkeypatch.setattr(Orchestrator, "run_round", real)
    Reflect.calls = 0
    resumed = run_fit(FFCM(max_rounds=6), folder="unused", resume=str(tmp_path / "cut"), **kw)
    assert Reflect.calls == 0 and resumed == pytest.approx(full)

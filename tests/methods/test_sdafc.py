import json

import pytest
import torch

from fedclust.contract import LOCAL_WEIGHTS, ClientContext, ClientSession, ClientUpdate, DataInfo, RoundContext, Stage
from fedclust.data.config import build_federated_data
from fedclust.errors import ConfigError
from fedclust.federation.config import FederationConfig
from fedclust.methods import SDAFC
from fedclust.methods.sdafc import recluster
from tests.conftest import tiny_data
from tests.helpers.tiny import SDAFC_TINY as TINY
from tests.helpers.tiny import build, tiny_sdafc


@pytest.mark.parametrize("clusterer,steps", [("kmeans", None), ("fcm", 4)])  # None: a full local epoch
def test_two_clients_one_round_smoke(run_fit, tmp_path, clusterer, steps):
    metrics = run_fit(tiny_sdafc(clusterer=clusterer, max_steps_per_epoch=steps))
    assert set(metrics) >= {"nmi", "acc", "ari", "kappa"} and 0 <= metrics["nmi"] <= 1
    for name in ("metrics.csv", "checkpoints/last.ckpt", "assignments.csv"):
        assert (tmp_path / "run" / name).exists(), name
    ckpt = torch.load(tmp_path / "run" / "checkpoints" / "last.ckpt", weights_only=False)
    assert set(ckpt["server"]) == {"centres"} and ckpt["server"]["centres"].shape == (10, 64)  # no synthetic set


def test_paper_shape_28x28(run_fit, tmp_path):
    from tests.helpers.tiny import tiny_mnist28

    assert 0 <= run_fit(tiny_sdafc(), data=tiny_mnist28(tmp_path / "mnist28"))["nmi"] <= 1


def test_client_gans_are_not_averaged_and_the_global_model_never_moves():
    orch = build(tiny_sdafc(), data_cfg=tiny_data(num_clients=2), federation=FederationConfig(optimizer_state="reset"))
    assert orch.method.communicated() == []
    before = {k: v.clone() for k, v in orch.method.state_dict().items()}
    orch.run()
    assert all(torch.equal(before[k], v) for k, v in orch.method.state_dict().items())
    local = [orch.client_states[c][LOCAL_WEIGHTS] for c in (0, 1)]
    key = "gan.generator.fc.0.weight"
    assert set(local[0]) == set(before) and not torch.equal(local[0][key], local[1][key])


STAGE = Stage("local-gan", 1, 3)


def client_ctx(data, cid, rnd=0, state=None):
    return ClientContext(cid, STAGE, 0, rnd, data.client(cid, 64), {} if state is None else state, 0)


def test_each_client_starts_from_its_own_draw_unless_asked_not_to():
    data = build_federated_data(tiny_data(num_clients=2), torch.device("cpu"), 0)
    for independent in (True, False):
        method = tiny_sdafc(independent_init=independent)
        torch.manual_seed(0)
        method.build(data.info)
        weights = []
        for cid in (0, 1):
            method.on_client_start(client_ctx(data, cid))
            weights.append(method.gan.generator.fc[0].weight.clone())
        assert torch.equal(weights[0], weights[1]) != independent
    # a client that already trained keeps its weights (no re-init in a later round)
    method = tiny_sdafc()
    method.build(data.info)
    kept = method.gan.generator.fc[0].weight.clone()
    method.on_client_start(client_ctx(data, 0, state={LOCAL_WEIGHTS: {}}))
    assert torch.equal(method.gan.generator.fc[0].weight, kept)


def test_learning_rates_decay_by_099_per_epoch_and_adam_is_rebuilt():
    data = build_federated_data(tiny_data(num_clients=2), torch.device("cpu"), 0)
    method = tiny_sdafc()
    method.build(data.info)
    opt_d, opt_g = method.configure_optimizers()
    method.session = ClientSession(ctx=None, optimizers=[opt_d, opt_g])  # the engine's optimizers
    opt_d.state[next(iter(opt_d.param_groups[0]["params"]))] = {"step": torch.tensor(5.0)}
    for rnd, epoch, exponent in ((0, 0, 0), (0, 2, 2), (1, 1, 4)):  # 3 local epochs per round
        batches = method.client_batches(client_ctx(data, 0, rnd=rnd), epoch)
        assert opt_d.param_groups[0]["lr"] == pytest.approx(2e-4 * 0.99**exponent)
        assert opt_g.param_groups[0]["lr"] == pytest.approx(1.8e-3 * 0.99**exponent)
        assert len(opt_d.state) == 0
        assert next(iter(batches))["x"].shape[1:] == (1, 8, 8)


def test_decay_is_applied_during_a_run(run_fit, monkeypatch):
    seen = []
    real = SDAFC.training_step

    def spy(self, batch, batch_idx):
        seen.append(tuple(opt.param_groups[0]["lr"] for opt in self.optimizers()))
        return real(self, batch, batch_idx)

    monkeypatch.setattr(SDAFC, "training_step", spy)
    run_fit(tiny_sdafc(epochs=2))
    # flat lists: pytest >= 9.2's approx refuses nested structures
    got = [lr for pair in sorted(set(seen), reverse=True) for lr in pair]
    assert got == pytest.approx([2e-4, 1.8e-3, 2e-4 * 0.99, 1.8e-3 * 0.99])


def test_payload_is_as_many_synthetic_images_as_the_client_holds():
    data = build_federated_data(tiny_data(num_clients=2), torch.device("cpu"), 0)
    method = tiny_sdafc()
    method.build(data.info)
    ctx = client_ctx(data, 1)
    payload = method.on_client_end(ctx)
    assert set(payload) == {"synthetic"}
    x = payload["synthetic"]
    assert x.shape == (len(ctx.data), 1, 8, 8) and 0 <= x.min() and x.max() <= 1
    method.hparams.synthetic_per_client = 7
    assert method.on_client_end(ctx)["synthetic"].shape == (7, 1, 8, 8)


@pytest.mark.parametrize("clusterer", ["kmeans", "fcm"])
def test_server_clusters_the_normalised_synthetic_images_and_assigns_by_cosine(clusterer):
    # two directions in pixel space; the scale of an image must not matter (cosine geometry)
    g = torch.Generator().manual_seed(0)
    a, b = torch.zeros(64), torch.zeros(64)
    a[:32], b[32:] = 1.0, 1.0
    scale = torch.rand(40, 1, generator=g) * 5 + 0.1
    noisy = lambda base: (base + 0.05 * torch.rand(40, 64, generator=g)) * scale
    updates = [ClientUpdate(0, 40, {"synthetic": noisy(a).view(40, 1, 8, 8)}),
               ClientUpdate(1, 40, {"synthetic": noisy(b).view(40, 1, 8, 8)})]
    method = tiny_sdafc(clusterer=clusterer, num_clusters=2)
    method.build(DataInfo(2, 1, 8, 64, True))
    method.aggregate(None, updates, RoundContext(Stage("local-gan", 1), 0, 0, 0))
    assert torch.allclose(method.centres.norm(dim=1), torch.ones(2))
    labels = method.assign(torch.stack([a * 0.01, b * 100.0, a * 3]).view(3, 1, 8, 8))
    assert labels[0] == labels[2] != labels[1]
    fresh = tiny_sdafc(num_clusters=2)
    fresh.load_server_state(method.server_state())
    assert torch.equal(fresh.centres, method.centres)


def test_vector_data_is_refused_before_any_work():
    with pytest.raises(ConfigError, match="data.name"):
        tiny_sdafc().validate(DataInfo(4, 0, 0, 32, False), 2)


def test_recluster_equals_a_fresh_run_with_the_other_clusterer(tmp_path):
    from fedclust.__main__ import main

    common = ["--data.name", "digits", "--data.num_clients", "2", "--data.partition", "iid", "--progress", "false",
              *[a for k, v in TINY.items() for a in (f"--method.init_args.{k}", str(v))]]
    assert main(["fit", "--config", "configs/sdafc_km_fmnist.yaml", *common, "--run_dir", str(tmp_path / "km")]) == 0
    assert main(["fit", "--config", "configs/sdafc_fcm_fmnist.yaml", *common, "--run_dir", str(tmp_path / "fcm")]) == 0
    fresh = json.loads((tmp_path / "fcm" / "final.json").read_text())["metrics"]
    from fedclust.run import load_run

    def saved():
        return load_run(tmp_path / "km", torch.device("cpu"))

    again = recluster(saved(), "fcm")
    assert {k: again[k] for k in ("nmi", "acc", "ari", "kappa")} == pytest.approx(
        {k: fresh[k] for k in ("nmi", "acc", "ari", "kappa")}, abs=1e-6)
    km = json.loads((tmp_path / "km" / "final.json").read_text())["metrics"]
    assert recluster(saved(), "kmeans")["nmi"] == pytest.approx(km["nmi"], abs=1e-6)



def test_server_fcm_runs_the_official_packages_iterations_and_tolerance(monkeypatch):
    """Pins the official SDA-FC server FCM settings (the fuzzy-c-means package's defaults: at most 150 iterations,
    stop below a membership change of 1e-5); the class used to run 1,000 iterations at 1e-4."""
    from fedclust.methods import sdafc

    seen = {}
    real = sdafc.fcm

    def spy(*args, **kwargs):
        seen.update(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(sdafc, "fcm", spy)
    method = SDAFC(clusterer="fcm", num_clusters=2, g_hidden=16, d_hidden=16)
    method.build(DataInfo(2, 1, 8, 64, True))
    x = torch.rand(2, 30, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    method.aggregate(None, [ClientUpdate(c, 30, {"synthetic": x[c]}) for c in range(2)],
                     RoundContext(Stage("local-gan", 1), 0, 0, 0))
    assert (seen["max_iter"], seen["tol"], seen["m"]) == (150, 1e-5, 1.1)

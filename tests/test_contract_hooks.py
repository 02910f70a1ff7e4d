"""The method contract, hook by hook, on a toy method (issue 12): what every method must implement, and each
optional hook of fedclust/contract/hooks.py doing what its docstring promises when a method overrides it."""

import pytest
import torch
from torch import nn

from fedclust.contract import FederatedMethod, Stage
from fedclust.data.config import build_federated_data
from fedclust.errors import ConfigError, FedclustError
from fedclust.federation.config import FederationConfig
from fedclust.federation.setup import setup_method
from fedclust.probes.features import probe_data
from tests.conftest import tiny_data
from tests.helpers.tiny import build, interrupted_after_round

TWO_ROUNDS = FederationConfig(rounds=2, checkpoint_every=1)


class HookedToy(FederatedMethod):
    """Two linear maps on the flattened input, one SGD step per batch, clusters = argmax of `shared`."""

    def __init__(self, num_clusters: int | None = 2, batch_size: int = 64, rounds: int = 2):
        super().__init__(num_clusters, batch_size)
        self.rounds = rounds
        self.calls: list[tuple] = []

    def build(self, info):
        super().build(info)
        self.calls.append(("build", info.num_features))
        self.shared = nn.Linear(info.num_features, self.num_clusters)
        self.own = nn.Linear(info.num_features, 1)

    def stages(self):
        return [Stage("train", self.rounds, 1)]

    def training_step(self, batch, batch_idx):
        x = batch["x"].flatten(1)
        return (self.shared(x) - 1).pow(2).mean() + (self.own(x) - 1).pow(2).mean()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)

    def assign(self, x):
        return self.shared(x.flatten(1)).argmax(1)


def weights(module: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


# --- what every method implements -------------------------------------------------------------------
def test_a_method_without_assign_fails_at_start_in_one_sentence():
    class NoAssign(HookedToy):
        assign = FederatedMethod.assign

    with pytest.raises(FedclustError, match=r"NoAssign does not implement assign: every method") as error:
        build(NoAssign())
    assert "\n" not in str(error.value)


def test_a_training_method_without_training_step_fails_at_start():
    class NoStep(HookedToy):
        training_step = FederatedMethod.training_step

    with pytest.raises(FedclustError, match="does not implement training_step"):
        build(NoStep())


def test_the_engine_lends_the_client_and_its_optimizer_only_while_the_client_is_visited():
    class Watch(HookedToy):
        def training_step(self, batch, batch_idx):
            self.calls.append(("step", self.ctx.client_id, self.optimizers() is self.session.optimizers[0]))
            return super().training_step(batch, batch_idx)

    orch = build(Watch(rounds=1), tiny_data(num_clients=2))
    orch.run()
    steps = [c for c in orch.method.calls if c[0] == "step"]
    assert {c[1] for c in steps} == {0, 1} and all(c[2] for c in steps)
    assert orch.method.session is None and orch.method.ctx is None


# --- optional hooks ---------------------------------------------------------------------------------
def test_build_is_called_once_with_the_data_before_any_round():
    orch = build(HookedToy(), tiny_data(num_clients=2))
    orch.run()
    assert [c for c in orch.method.calls if c[0] == "build"] == [("build", 64)]


def test_validate_refuses_before_any_network_is_built():
    class Picky(HookedToy):
        def validate(self, info, num_clients):
            if num_clients > 1:
                raise ConfigError("data.num_clients", num_clients, "1 for this toy")

    method = Picky()
    data = build_federated_data(tiny_data(num_clients=2), torch.device("cpu"), 0)
    with pytest.raises(ConfigError, match="data.num_clients"):
        setup_method(method, data, 0)
    assert method.calls == []


def test_local_clusters_above_the_smallest_client_are_refused():
    class LocalKMeans(HookedToy):
        def local_clusters(self):
            return 10_000

    data = build_federated_data(tiny_data(num_clients=2), torch.device("cpu"), 0)
    with pytest.raises(ConfigError, match="method.init_args.num_clusters"):
        setup_method(LocalKMeans(), data, 0)


def test_communicated_keys_are_averaged_and_the_others_stay_on_each_client():
    class SharedOnly(HookedToy):
        def communicated(self):
            return [k for k in self.state_dict() if k.startswith("shared.")]

    orch = build(SharedOnly(), tiny_data(num_clients=2))
    start = weights(orch.method)
    orch.run()
    end = weights(orch.method)
    assert not torch.equal(start["shared.weight"], end["shared.weight"])
    assert torch.equal(start["own.weight"], end["own.weight"])  # the server never sees `own`
    kept = [orch.client_states[c]["_local_weights"] for c in (0, 1)]
    assert set(kept[0]) == {"own.weight", "own.bias"}
    assert not torch.equal(kept[0]["own.weight"], kept[1]["own.weight"])  # each client its own


def test_on_round_start_runs_once_per_round_before_its_clients_which_start_from_the_global_weights():
    class Order(HookedToy):
        def on_round_start(self, ctx):
            self.calls.append(("round", ctx.round, self.shared.weight.detach().clone()))

        def on_client_start(self, ctx):
            self.calls.append(("client", ctx.round, self.shared.weight.detach().clone()))

    orch = build(Order(), tiny_data(num_clients=2))
    orch.run()
    calls = [c for c in orch.method.calls if c[0] != "build"]
    assert [(c[0], c[1]) for c in calls] == [("round", 0), ("client", 0), ("client", 0),
                                             ("round", 1), ("client", 1), ("client", 1)]
    for round_start, *clients in (calls[0:3], calls[3:6]):
        assert all(torch.equal(round_start[2], c[2]) for c in clients)
    assert not torch.equal(calls[0][2], calls[3][2])  # the global model moved between the rounds


def test_client_batches_decide_what_local_training_sees():
    class ThreeSamples(HookedToy):
        def client_batches(self, ctx, epoch):
            x = next(iter(ctx.data.iter_all()))[:3]
            return [{"x": x}, {"x": x}]

        def training_step(self, batch, batch_idx):
            self.calls.append(("batch", len(batch["x"])))
            return super().training_step(batch, batch_idx)

    orch = build(ThreeSamples(rounds=1), tiny_data(num_clients=2))
    orch.run()
    assert [c for c in orch.method.calls if c[0] == "batch"] == [("batch", 3)] * 4  # 2 batches x 2 clients


def test_on_client_end_payloads_reach_aggregate_by_client_with_their_sizes():
    class Means(HookedToy):
        summary_keys = {"mean": "count"}

        def on_client_end(self, ctx):
            x = ctx.data.all_x().flatten(1)
            return {"mean": x.mean(0, keepdim=True), "count": torch.tensor([float(len(x))])}

        def aggregate(self, averaged, updates, ctx):
            self.calls.append(("aggregate", [(u.client_id, u.num_samples, u.payload["mean"].shape) for u in updates]))
            super().aggregate(averaged, updates, ctx)

    orch = build(Means(rounds=1), tiny_data(num_clients=2))
    orch.run()
    (_, seen), = [c for c in orch.method.calls if c[0] == "aggregate"]
    sizes = [len(orch.data.client(c, 64)) for c in (0, 1)]
    assert seen == [(0, sizes[0], (1, 64)), (1, sizes[1], (1, 64))]


def test_a_payload_key_the_method_does_not_declare_never_reaches_the_server():
    class Leaky(HookedToy):
        summary_keys = {"mean": "count"}

        def on_client_end(self, ctx):
            return {"mean": torch.zeros(1, 2), "count": torch.tensor([50.0]), "samples": ctx.data.all_x()}

    orch = build(Leaky(rounds=1), tiny_data(num_clients=2))
    with pytest.raises(FedclustError, match=r"sent \['samples'\] but declares summary_keys = \{'mean': 'count'\}"):
        orch.run()


class Groups(HookedToy):
    """Sends the means of groups of ``size`` samples (the last group takes the rest), with their counts."""

    summary_keys = {"means": "counts"}
    size, counts_sent = 25, None

    def on_client_end(self, ctx):
        x = ctx.data.all_x().flatten(1)
        groups = list(x.split(self.size))
        counts = self.counts_sent if self.counts_sent is not None else torch.tensor([float(len(g)) for g in groups])
        return {"means": torch.stack([g.mean(0) for g in groups]), "counts": counts}


def test_a_summary_below_the_runs_floor_is_refused_where_payloads_are_collected():
    small = Groups(rounds=1)
    small.size = 5
    with pytest.raises(FedclustError, match=r"Groups.on_client_end sent a row of 'means' that aggregates \d+ samples, "
                                            r"below the run's floor federation.min_summary_size = 20"):
        build(small, tiny_data(num_clients=2)).run()
    # the same groups pass under a floor they meet (the last group holds the remainder)
    build(small, tiny_data(num_clients=2), FederationConfig(min_summary_size=1)).run()
    big = Groups(rounds=1)
    big.size = 299  # digits' clients hold ~898 samples: groups of 299, 299, 299 and the rest (~1) -> refused
    with pytest.raises(FedclustError, match="below the run's floor"):
        build(big, tiny_data(num_clients=2)).run()


def test_a_summary_must_declare_one_count_per_row():
    wrong = Groups(rounds=1)
    wrong.counts_sent = torch.tensor([100.0])  # one count for many rows
    with pytest.raises(FedclustError, match="sent 'means' without one count per row under 'counts'"):
        build(wrong, tiny_data(num_clients=2)).run()


def test_a_row_counted_zero_must_carry_nothing():
    class Echo(HookedToy):
        summary_keys = {"means": "counts"}

        def on_client_end(self, ctx):
            return {"means": torch.ones(2, 64), "counts": torch.tensor([0.0, 500.0])}

    with pytest.raises(FedclustError, match="aggregates 0 samples"):
        build(Echo(rounds=1), tiny_data(num_clients=2)).run()


def test_default_aggregate_is_fedavg_weighted_by_sample_counts_and_a_zero_weight_leaves_a_client_out():
    class Record(HookedToy):
        zero_for_client_1 = False

        def on_client_end(self, ctx):
            self.calls.append(("trained", ctx.client_id, len(ctx.data), weights(self.shared)))
            return {}

        def aggregation_weights(self, ctx):
            return {"shared.": 0.0} if self.zero_for_client_1 and ctx.client_id == 1 else None

    for zero in (False, True):
        method = Record(rounds=1)
        method.zero_for_client_1 = zero
        orch = build(method, tiny_data(num_clients=2, partition="dirichlet", alpha=0.5))
        orch.run()
        trained = [c for c in method.calls if c[0] == "trained"]
        n = torch.tensor([float(c[2]) for c in trained])
        assert n[0] != n[1]  # unequal clients: a plain mean would differ
        if zero:
            expected = trained[0][3]["weight"]
        else:
            expected = sum(w * c[3]["weight"].double() for w, c in zip(n / n.sum(), trained))
        assert torch.allclose(method.shared.weight.double(), expected.double(), atol=1e-6)


def test_server_state_survives_a_stop_and_resume(run_fit, tmp_path):
    class Counting(HookedToy):
        def __init__(self, **kw):
            super().__init__(**kw)
            self.aggregations = 0

        def aggregate(self, averaged, updates, ctx):
            super().aggregate(averaged, updates, ctx)
            self.aggregations += 1

        def server_state(self):
            return {"aggregations": self.aggregations}

        def load_server_state(self, state):
            self.aggregations = state["aggregations"]

    with interrupted_after_round(1):
        run_fit(Counting(), federation=TWO_ROUNDS, folder="cut")
    resumed = Counting()
    run_fit(resumed, federation=TWO_ROUNDS, folder="resumed", resume=str(tmp_path / "cut"))
    assert resumed.aggregations == 2  # one before the stop, restored, and one after


def test_metric_groups_score_each_group_on_its_own_and_average():
    class PerClientLabels(HookedToy):
        """Labels each client's samples with the true class shifted by the client id: a perfect clustering
        within each client, an imperfect one over all samples."""

        grouped = False

        def predict(self, data, client_states):
            labels = data.labels.clone()
            for c in range(data.num_clients):
                idx = data.client(c, 64).indices.cpu()
                labels[idx] = (labels[idx] + c) % 10
            return labels

        def metric_groups(self, data):
            if not self.grouped:
                return None
            groups = torch.full((len(data),), -1)
            for c in range(data.num_clients):
                groups[data.client(c, 64).indices.cpu()] = c
            return groups

    results = {}
    for grouped in (False, True):
        method = PerClientLabels(rounds=1)
        method.grouped = grouped
        orch = build(method, tiny_data(num_clients=2))
        results[grouped] = orch.evaluate()["nmi"]
    assert results[True] == pytest.approx(1.0) and results[False] < 0.9


def test_embed_is_the_representation_the_probes_read():
    class Doubling(HookedToy):
        def embed(self, x):
            return 2 * x.flatten(1)

    method = Doubling()
    data_cfg = tiny_data(num_clients=1)
    method.build(build_federated_data(data_cfg, torch.device("cpu"), 0).info)
    probed = probe_data(method, data_cfg, 0, torch.device("cpu"))
    raw = probe_data(HookedToy(), data_cfg, 0, torch.device("cpu"))  # the default embed: the flattened input
    assert torch.allclose(probed.train_x, 2 * raw.train_x)

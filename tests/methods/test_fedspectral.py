"""FedSpectral: what crosses the boundary (fixed groups at the floor), where summaries come from, how samples get
their clusters, and its settings."""

import pytest
import torch

from fedclust.clustering.kmeans import assign_nearest
from fedclust.clustering.knn_vote import nearest_neighbors
from fedclust.clustering.label_history import vote_over_labellings
from fedclust.clustering.label_spreading import label_spreading
from fedclust.contract import ClientContext, ClientSession, ClientUpdate, RoundContext, Stage
from fedclust.data.config import build_federated_data
from fedclust.data.hog import hog
from fedclust.errors import ConfigError
from fedclust.federation.config import FederationConfig
from fedclust.losses.contrastive import nt_xent, supervised_nt_xent
from fedclust.losses.decorrelation import decorrelation_loss
from fedclust.methods import FedSpectral
from tests.conftest import tiny_data

FLOOR = 20


def tiny(**kw) -> FedSpectral:
    args = dict(backbone="mlp", projector_hidden=32, latent_dim=16, rounds=2, batch_size=64, neighbors=5,
                spread_neighbors=4, spread_alpha=0.9, round_vote=1)
    return FedSpectral(**{**args, **kw})


def _data():
    return build_federated_data(tiny_data(num_clients=3), torch.device("cpu"), 0)


def _client(method, data, cid=0, rnd=0, state=None):
    ctx = ClientContext(cid, Stage("train", 4), 0, rnd, data.client(cid, 64), {} if state is None else state, 0,
                        FLOOR)
    method.session = ClientSession(ctx)
    method.on_client_start(ctx)
    return ctx


def _round(method, data, states, rnd=0):
    method.on_round_start(RoundContext(Stage("train", 4), 0, rnd, 0))
    updates = []
    for cid in range(data.num_clients):
        ctx = _client(method, data, cid, rnd, states.setdefault(cid, {}))
        updates.append(ClientUpdate(cid, len(data.parts[cid]), method.on_client_end(ctx)))
    method.session = None
    method.aggregate(None, updates, RoundContext(Stage("train", 4), 0, rnd, 0))
    return updates


def test_a_client_sends_the_means_of_fixed_equal_groups_of_at_least_the_floor():
    data = _data()
    method = tiny()
    method.build(data.info)
    ctx = _client(method, data)
    sent = method.on_client_end(ctx)
    n = len(data.parts[0])
    groups = ctx.state["groups"]
    assert set(sent) == {"summaries", "summary_sizes"} and len(sent["summaries"]) == n // FLOOR
    assert sent["summary_sizes"].min() >= FLOOR and int(sent["summary_sizes"].sum()) == n
    assert torch.equal(torch.bincount(groups).float(), sent["summary_sizes"])
    # each summary is the plain mean of its group's unit embeddings (norm <= 1: what the DP noise assumes)
    method.eval()
    with torch.no_grad():
        h = method.embed(data.gather(data.parts[0]))
    torch.testing.assert_close(sent["summaries"][3], h[groups == 3].mean(0))
    assert float(sent["summaries"].norm(dim=1).max()) <= 1 + 1e-6
    # the groups are drawn once: the next round keeps them even though the model moved
    with torch.no_grad():
        for p in method.parameters():
            p.add_(0.5)
    again = _client(method, data, rnd=1, state=ctx.state)
    assert torch.equal(again.state["groups"], groups)
    assert not torch.allclose(method.on_client_end(again)["summaries"], sent["summaries"])


def test_summaries_are_made_by_the_global_model_before_local_training():
    data = _data()
    method = tiny()
    method.build(data.info)
    ctx = _client(method, data)
    before = method._summaries.clone()
    with torch.no_grad():  # local training moves the weights; the summaries sent stay the round start's
        for p in method.parameters():
            p.add_(1.0)
    assert torch.equal(method.on_client_end(ctx)["summaries"], before)


def test_the_loss_is_nt_xent_plus_the_weighted_decorrelation_of_both_views(monkeypatch):
    data = _data()
    seen = []
    method = tiny(decorrelation_weight=3.0)
    method.build(data.info)
    _client(method, data)
    real_proj = method.projector.forward

    def spy(h):
        z = real_proj(h)
        seen.append(z.detach())
        return z

    monkeypatch.setattr(method.projector, "forward", spy)
    batch = next(data.client(0, 64).batches(torch.Generator().manual_seed(0)))
    loss = float(method.training_step(batch, 0))
    z1, z2 = seen
    expected = float(nt_xent(z1, z2, 0.5)) + 3.0 * 0.5 * (float(decorrelation_loss(z1)) + float(decorrelation_loss(z2)))
    assert loss == pytest.approx(expected, rel=1e-5)


@pytest.mark.parametrize("neighbors", [0, 2])  # the labels' rows are found the same way beside neighbour positives
def test_cluster_weight_adds_a_supervised_contrast_over_the_labels_of_the_last_clustering(monkeypatch, neighbors):
    data = _data()
    method = tiny(cluster_weight=2.0, decorrelation_weight=0.0, neighbor_positives=neighbors)
    method.build(data.info)
    ctx = _client(method, data)
    batch = next(data.client(0, 64).batches(torch.Generator().manual_seed(0)))
    assert "y" not in method.batched_inputs(batch)  # round 1: no clustering yet, the plain loss
    _round(method, data, {})
    ctx = _client(method, data, rnd=1)
    method.eval()
    with torch.no_grad():  # the client's own labelling of its samples: nearest summary, spread over its graph
        h = method.embed(data.gather(ctx.data.indices))
        nearest = method.summary_labels[assign_nearest(h, method.summaries, cosine=True)]
        expected = label_spreading(nearest_neighbors(h, 4), nearest, method.num_clusters, 0.9)
    method.train()
    inputs = method.batched_inputs(batch)
    position = {int(i): k for k, i in enumerate(ctx.data.indices)}
    assert torch.equal(inputs["y"], expected[[position[int(i)] for i in batch["index"]]])
    seen = []
    real_proj = method.projector.forward
    monkeypatch.setattr(method.projector, "forward", lambda h: seen.append(real_proj(h)) or seen[-1])
    loss = float(method.loss_from_inputs(inputs))
    z1, z2 = (z.detach() for z in seen)
    supervised = float(supervised_nt_xent(z1, z2, inputs["y"], 0.5))
    assert loss == pytest.approx(float(nt_xent(z1, z2, 0.5)) + 2.0 * supervised, rel=1e-5)


def test_neighbor_positives_draw_the_second_view_from_the_sample_or_its_nearest_in_the_rounds_space(monkeypatch):
    data = _data()
    method = tiny(neighbor_positives=3)
    method.build(data.info)
    monkeypatch.setattr(method, "_view", lambda x: x)  # the views' inputs themselves
    ctx = _client(method, data)
    method.eval()
    with torch.no_grad():  # the client's own samples, in the clustering space of the round's global model
        h = method.embed(data.gather(ctx.data.indices))
    method.train()
    candidates = ctx.data.indices[nearest_neighbors(h, 3)]  # each sample and its 3 nearest, the client's own
    batch = next(data.client(0, 64).batches(torch.Generator().manual_seed(0)))
    inputs = method.batched_inputs(batch)
    assert torch.equal(inputs["x1"], batch["x"])
    position = {int(i): k for k, i in enumerate(ctx.data.indices)}
    partners = []
    for row, index in zip(inputs["x2"], batch["index"]):
        chosen = [int(c) for c in candidates[position[int(index)]] if torch.equal(data.gather(c[None])[0], row)]
        assert chosen, "a second view from a sample that is neither the sample nor one of its nearest"
        partners.append(chosen[0] != int(index))
    assert 0 < sum(partners) < len(partners)  # both itself and its neighbours are drawn (1 in 4 is itself)


def test_samples_take_their_nearest_summarys_cluster_spread_over_their_clients_own_graph():
    data = _data()
    method = tiny()
    method.build(data.info)
    states = {}
    updates = _round(method, data, states)
    assert len(method.summary_labels) == sum(len(u.payload["summaries"]) for u in updates)
    with torch.no_grad():  # a later model is loaded now; labelling uses the round's space, as its summaries did
        for p in method.parameters():
            p.add_(0.3)
    after = {k: v.clone() for k, v in method.state_dict().items()}
    labels = method.predict(data, states)
    assert all(torch.equal(v, method.state_dict()[k]) for k, v in after.items())  # and puts the model back
    method.load_state_dict(method.space)
    method.eval()
    with torch.no_grad():
        for part in data.parts:  # each client: nearest summary, spread over its own graph only
            h = method.embed(data.gather(part))
            nearest = method.summary_labels[assign_nearest(h, method.summaries, cosine=True)]
            expected = label_spreading(nearest_neighbors(h, 4), nearest, method.num_clusters, 0.9)
            assert torch.equal(labels[part], expected)
    assert labels.min() >= 0 and labels.max() < method.num_clusters
    assert method.assign(data.gather(torch.arange(5))).shape == (5,)  # a sample no client holds: nearest summary
    assert method.global_centroids().shape == (method.num_clusters, method.summaries.shape[1])


def test_smoothing_runs_over_each_clients_own_graph_fixed_with_its_groups():
    data = _data()
    method = tiny(smooth_steps=3, smooth_alpha=0.8)
    method.build(data.info)
    states = {}
    updates = _round(method, data, states)
    method.eval()
    with torch.no_grad():
        h = method.embed(data.gather(data.parts[0]))
    graph = states[0]["graph"]
    assert torch.equal(graph, nearest_neighbors(h, 4))  # the sample and its spread_neighbors nearest, its own only
    g = h
    for _ in range(3):
        g = 0.2 * h + 0.8 * g[graph].mean(1)
    smoothed = torch.nn.functional.normalize(g, dim=1)
    groups = states[0]["groups"]
    torch.testing.assert_close(updates[0].payload["summaries"][1], smoothed[groups == 1].mean(0))
    # labelling: nearest summary of the smoothed rows, spread over the smoothed rows' graph
    labels = method.predict(data, states)
    nearest = method.summary_labels[assign_nearest(smoothed, method.summaries, cosine=True)]
    expected = label_spreading(nearest_neighbors(smoothed, 4), nearest, method.num_clusters, 0.9)
    assert torch.equal(labels[data.parts[0]], expected)
    # the graph is kept with the groups when the model moves (a summary stays one combination of the same samples)
    with torch.no_grad():
        for p in method.parameters():
            p.add_(0.5)
    _round(method, data, states, rnd=1)
    assert torch.equal(states[0]["graph"], graph) and torch.equal(states[0]["groups"], groups)
    states[1]["graph"] = torch.full((len(data.parts[1]), 5), 10**6)  # untrusted checkpoint: rebuilt, not indexed
    states[2]["groups"] = torch.full((len(data.parts[2]),), 10**6)  # nor are groups out of range counted
    _round(method, data, states, rnd=2)
    assert int(states[1]["graph"].max()) < len(data.parts[1])
    assert int(states[2]["groups"].max()) < len(data.parts[2]) // FLOOR


def test_round_vote_keeps_each_clients_last_labels_and_votes_over_them():
    data = _data()
    method = tiny(round_vote=3)
    method.build(data.info)
    states, each_round = {}, {cid: [] for cid in range(data.num_clients)}
    for rnd in range(4):
        _round(method, data, states, rnd)
        one = tiny(round_vote=1)  # the same round labelled alone
        one.build(data.info)
        one.load_state_dict(method.state_dict())
        one.load_server_state(method.server_state())
        alone = one.predict(data, {cid: {} for cid in states})
        for cid, part in enumerate(data.parts):
            each_round[cid].append(alone[part])
        labels = method.predict(data, states)
        labels_again = method.predict(data, states)  # the same round scored twice counts once
        assert torch.equal(labels, labels_again)
    for cid, part in enumerate(data.parts):
        assert sorted(states[cid]["labels_by_round"]) == [1, 2, 3]
        assert torch.equal(labels[part], vote_over_labellings(each_round[cid][-3:], method.num_clusters))
    states[0]["labels_by_round"] = {0: "not labels", 1: torch.full((len(data.parts[0]),), 99)}  # untrusted: ignored
    assert torch.equal(method.predict(data, states)[data.parts[0]], each_round[0][-1])


@pytest.mark.parametrize("bad", [dict(summary_size=0), dict(neighbors=0), dict(decorrelation_weight=-1.0),
                                 dict(spread_neighbors=-1), dict(spread_alpha=1.0), dict(round_vote=0),
                                 dict(projector_rank=0), dict(hog_cell=0), dict(cluster_space="input+backbone"),
                                 dict(cluster_weight=-0.5), dict(smooth_steps=-1), dict(smooth_alpha=1.5),
                                 dict(smooth_steps=2, spread_neighbors=0), dict(neighbor_positives=-1),
                                 dict(neighbor_positives=1.5), dict(labelling="vote"), dict(walk_restart=0.0),
                                 dict(walk_server=1.0), dict(walk_links=0), dict(walk_iterations=0),
                                 dict(labelling="walk", spread_neighbors=0), dict(walk_spread_alpha=1.0)])
def test_bad_settings_are_one_sentence(bad):
    with pytest.raises(ConfigError, match="method."):
        tiny(**bad)


def test_a_low_rank_projector_sees_every_flat_feature_below_ccfcs_size():
    """projector_rank: the flat input's first layer factored through ``rank`` numbers: the projector still sees all
    2,304 flat features (a change at any one position moves z) and the model is below the packaged CCFC's."""
    from fedclust.api import resolve
    from fedclust.data.info import DataInfo

    info = DataInfo(num_classes=10, in_channels=1, input_size=28, num_features=784, is_image=True,
                    min_client_size=100)
    ccfc = resolve("ccfc_fmnist", {}, {}).init["method"]
    low = FedSpectral(projector_rank=128)
    for method in (low, ccfc):
        method.build(info)
    factor, first = low.projector[0], low.projector[1]
    assert (factor.in_features, factor.out_features, factor.bias) == (2304, 128, None)
    assert (first.in_features, first.out_features) == (128, 512)
    assert sum(p.numel() for p in low.parameters()) < sum(p.numel() for p in ccfc.parameters())
    h = torch.zeros(1, 2304)
    moved = h.clone()
    moved[0, 2303] = 1.0  # the last channel's last position alone
    with torch.no_grad():
        assert not torch.allclose(low.projector(h), low.projector(moved))


def test_the_hog_space_joins_two_unit_blocks_and_is_refused_where_it_cannot_exist():
    from fedclust.data.config import DataConfig

    data = _data()  # 8 x 8 digits
    x = next(iter(data.iter_all()))
    method = tiny(cluster_space="hog+backbone", hog_cell=2)
    method.build(data.info)
    method.eval()
    with torch.no_grad():
        unit = torch.nn.functional.normalize
        expected = unit(torch.cat([hog(x, 2), unit(method.trunk(x), dim=1)], 1), dim=1)
        torch.testing.assert_close(method.embed(x), expected)
    assert method.embed(x).shape[1] == 9 * 4 * 4 + method.trunk.out_dim
    with pytest.raises(ConfigError, match="method.init_args.hog_cell"):
        tiny(cluster_space="hog+backbone", hog_cell=9).build(data.info)
    vectors = build_federated_data(DataConfig(name="gaussian", num_clients=2, partition="iid",
                                              options={"num_clusters": 3, "points_per_cluster": 20, "dim": 8}),
                                   torch.device("cpu"), 0)
    with pytest.raises(ConfigError, match="method.init_args.cluster_space.*vectors"):
        tiny(cluster_space="hog+backbone").build(vectors.info)


def test_a_run_on_images_clusters_under_the_default_floor(run_fit, server_inputs):
    metrics = run_fit(tiny(cluster_space="hog+backbone", hog_cell=2))
    assert 0.5 < metrics["nmi"] <= 1  # digits
    for _, _, updates in server_inputs:
        for update in updates:
            assert update.payload["summary_sizes"].min() >= FederationConfig().min_summary_size


def test_vector_data_cluster_in_the_trunks_space(run_fit):
    """Beyond images (issue 43 item 7): feature vectors train with noise views and cluster in the trunk's space."""
    from fedclust.data.config import DataConfig

    data = DataConfig(name="gaussian", num_clients=3, partition="iid",
                      options={"num_clusters": 4, "points_per_cluster": 150, "dim": 16})
    metrics = run_fit(tiny(num_clusters=4, cluster_space="backbone"), data)
    assert metrics["nmi"] > 0.8  # four Gaussian clusters, apart


def test_summaries_can_carry_differential_privacy_noise_and_the_run_says_what_it_spends(run_fit, tmp_path,
                                                                                         server_inputs):
    import json

    run_fit(tiny(cluster_space="hog+backbone", hog_cell=2, rounds=2),
            federation=FederationConfig(dp_epsilon=4.0, dp_delta=1e-5))
    spent = json.loads((tmp_path / "run" / "privacy.json").read_text())
    assert spent["releases"] == 2 and spent["epsilon"] == pytest.approx(4.0, rel=0.01)
    assert spent["noise_multiplier"] > 1 and spent["clip"] == 1.0
    sizes = torch.cat([u.payload["summary_sizes"] for _, _, ups in server_inputs for u in ups])
    assert not torch.equal(sizes, sizes.round())  # counts went out noised


def test_a_client_below_the_floor_sends_no_summary_and_still_labels_its_samples():
    data = build_federated_data(tiny_data(num_clients=40, partition="dirichlet", alpha=0.3, min_partition_size=2),
                                torch.device("cpu"), 0)
    small = min(range(data.num_clients), key=lambda c: len(data.parts[c]))
    assert len(data.parts[small]) < FLOOR  # the partition gives a client below the floor
    method = tiny()
    method.build(data.info)
    states = {}
    updates = _round(method, data, states)
    assert len(updates[small].payload["summaries"]) == 0 and len(updates[small].payload["summary_sizes"]) == 0
    labels = method.predict(data, states)
    assert (labels[data.parts[small]] >= 0).all()


def test_the_walk_labels_every_client_from_its_own_groups_and_all_summaries(monkeypatch):
    """labelling: walk: the server knows which client sent each summary; each client walks on its own graph, sends
    one mean per own group (its fixed groups, in the server's rows it owns), and its samples take the walk's labels
    (voted as before); a client below the floor walks without groups of its own."""
    import fedclust.methods.families.summary_spectral as family

    data = build_federated_data(tiny_data(num_clients=40, partition="dirichlet", alpha=0.3, min_partition_size=2),
                                torch.device("cpu"), 0)
    method = tiny(labelling="walk", walk_iterations=50)
    method.build(data.info)
    states = {}
    updates = _round(method, data, states)
    owners = torch.cat([torch.full((len(u.payload["summaries"]),), u.client_id) for u in updates])
    assert torch.equal(method.summary_owners, owners)
    seen = {}
    real_walk = family.client_walk

    def client_walk(h, neighbors_of, summaries, scales, groups, own, links, search=None):
        walk = real_walk(h, neighbors_of, summaries, scales, groups, own, links, search)
        seen[len(seen)] = (len(h), groups.clone(), own.clone(), walk)
        return walk

    monkeypatch.setattr(family, "client_walk", client_walk)
    labels = method.predict(data, states)
    assert ((labels >= 0) & (labels < method.num_clusters)).all()
    held = [cid for cid in range(data.num_clients) if len(data.parts[cid])]
    assert len(seen) == len(held)
    for (n, groups, own, walk), cid in zip(seen.values(), held):
        assert n == len(data.parts[cid])
        assert torch.equal(own, (owners == cid).nonzero().squeeze(1))
        if len(own):  # the client's own fixed groups, each at least the floor
            assert torch.equal(groups, states[cid]["groups"])
            assert torch.bincount(groups).min() >= FLOOR
        assert walk.members.shape == (len(own), n)
    assert any(len(own) == 0 for _, _, own, _ in seen.values())  # the clients below the floor


def test_the_walk_refuses_differential_privacy_it_would_not_cover(run_fit):
    with pytest.raises(ConfigError, match="federation.dp_epsilon.*summary_norm_bound"):
        run_fit(tiny(labelling="walk"), federation=FederationConfig(dp_epsilon=4.0))


def test_a_run_with_the_walk_clusters_images(run_fit):
    metrics = run_fit(tiny(cluster_space="hog+backbone", hog_cell=2, labelling="walk", walk_iterations=100))
    assert 0.5 < metrics["nmi"] <= 1  # digits


@pytest.mark.parametrize("owners", [torch.zeros(3), torch.zeros(1, dtype=torch.long), "clients", None])
def test_a_checkpoints_summary_owners_are_untrusted(owners):
    """Owners read back from a checkpoint that are not one integer per summary are dropped: the walk then runs
    with no client claiming a summary (every client still walks to them), rather than trusting them."""
    data = _data()
    method = tiny(labelling="walk", walk_iterations=20)
    method.build(data.info)
    states = {}
    _round(method, data, states)
    state = method.server_state()
    method.load_server_state({**state, "summary_owners": owners})
    assert method.summary_owners is None
    method.load_server_state(state)
    assert torch.equal(method.summary_owners, state["summary_owners"])
    method.load_server_state({**state, "summary_owners": owners})
    labels = method.predict(data, states)
    assert ((labels >= 0) & (labels < method.num_clusters)).all()


def test_the_walks_labels_can_spread_over_each_clients_own_graph(monkeypatch):
    """walk_spread_alpha: the walk's labels, spread over the client's own graph (the one the walk steps on) with
    that alpha; 0 keeps them."""
    import fedclust.methods.families.summary_spectral as family

    data = _data()
    found = {}
    real = family.walk_labels
    monkeypatch.setattr(family, "walk_labels", lambda *a: found.setdefault("labels", real(*a)))
    outcomes = []
    for alpha in (0.0, 0.9):
        found.clear()
        method = tiny(labelling="walk", walk_iterations=30, walk_spread_alpha=alpha)
        method.build(data.info)
        states = {}
        _round(method, data, states)
        labels = method.predict(data, states)
        outcomes.append((labels, found["labels"], method, states))
    (plain, walked, _, _), (spread, walked_too, method, states) = outcomes
    for cid, part in enumerate(data.parts):
        assert torch.equal(plain[part], walked[cid])
        method.load_state_dict(method.space)
        h = method._smoothed(method._embed_all(data.client(cid, 64)), states[cid])
        expected = label_spreading(nearest_neighbors(h, 4), walked_too[cid], method.num_clusters, 0.9)
        assert torch.equal(spread[part], expected)


def test_a_shorter_run_is_the_first_rounds_of_a_longer_one(tmp_path):
    """Nothing FedSpectral does reads the number of rounds (constant learning rate, a vote over the last rounds seen),
    so a run of R rounds is the first R rounds of a longer run, bit for bit: what lets fedspectral_rounds_train choose
    the packaged config's rounds from one longer run's per-round rows (docs/findings/fedspectral.md)."""
    import fedclust

    quick = {"method.init_args.latent_dim": 16, "method.init_args.projector_hidden": 32,
             "method.init_args.batch_size": 64, "method.init_args.labelling": "walk", "method.init_args.round_vote": 2,
             "federation.eval_every": 1, "federation.min_summary_size": 5, "fabric.accelerator": "cpu",
             "progress": False, "seed": 1}
    short, longer = (fedclust.fit("quickstart", {**quick, "method.init_args.rounds": rounds},
                                  runs_dir=str(tmp_path / str(rounds))) for rounds in (2, 3))
    def scores(history):
        return [[row[k] for k in ("loss", "nmi", "acc", "ari")] for row in history]

    assert scores(short.history) == scores(longer.history[:2])
    assert len(longer.history) == 3

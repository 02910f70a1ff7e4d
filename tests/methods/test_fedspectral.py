"""FedSpectral: what crosses the boundary, where summaries come from, and how samples get their clusters."""

import pytest
import torch

from fedclust.clustering.knn_vote import knn_vote, vote
from fedclust.clustering.label_history import vote_over_labellings
from fedclust.clustering.label_spreading import label_spreading
from fedclust.contract import ClientContext, ClientSession, ClientUpdate, RoundContext, Stage
from fedclust.data.config import build_federated_data
from fedclust.errors import ConfigError
from fedclust.losses.contrastive import nt_xent
from fedclust.losses.decorrelation import decorrelation_loss
from fedclust.methods import FedSpectral
from tests.conftest import tiny_data


def tiny(**kw) -> FedSpectral:
    args = dict(backbone="mlp", projector_hidden=32, latent_dim=16, rounds=2, batch_size=64, summary_size=10,
                min_summary_size=3, neighbors=5)
    return FedSpectral(**{**args, **kw})


def _client(method, data, cid=0, rnd=0):
    ctx = ClientContext(cid, Stage("train", 2), 0, rnd, data.client(cid, 64), {}, 0)
    method.session = ClientSession(ctx)
    method.on_client_start(ctx)
    return ctx


def test_summaries_are_made_by_the_global_model_before_local_training():
    data = build_federated_data(tiny_data(), torch.device("cpu"), 0)
    method = tiny()
    method.build(data.info)
    ctx = _client(method, data)
    before = method._summaries.clone()
    with torch.no_grad():  # local training moves the weights; the summaries sent stay the round start's
        for p in method.parameters():
            p.add_(1.0)
    sent = method.on_client_end(ctx)
    assert set(sent) == {"summaries", "summary_sizes"}
    assert torch.equal(sent["summaries"], before)
    assert int(sent["summary_sizes"].sum()) == len(data.parts[0]) and sent["summary_sizes"].min() >= 3
    assert len(ctx.state["summary_of"]) == len(data.parts[0])


def test_the_loss_is_nt_xent_plus_the_weighted_decorrelation_of_both_views(monkeypatch):
    data = build_federated_data(tiny_data(), torch.device("cpu"), 0)
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


def _one_round(method, data):
    states, updates = {}, []
    for cid in range(data.num_clients):
        ctx = _client(method, data, cid)
        updates.append(ClientUpdate(cid, len(data.parts[cid]), method.on_client_end(ctx)))
        states[cid] = ctx.state
    method.session = None
    method.aggregate(None, updates, RoundContext(Stage("train", 2), 0, 0, 0))
    return states, updates


def test_server_clusters_the_summaries_and_samples_take_their_summarys_cluster():
    data = build_federated_data(tiny_data(), torch.device("cpu"), 0)
    method = tiny()
    method.build(data.info)
    states, updates = _one_round(method, data)
    assert len(method.summary_labels) == sum(len(u.payload["summaries"]) for u in updates)
    labels = method.predict(data, states)
    for cid, part in enumerate(data.parts):  # through the client: its summary's cluster
        assert torch.equal(labels[part], method.client_labels[cid][states[cid]["summary_of"]])
    assert labels.min() >= 0 and labels.max() < method.num_clusters
    # a sample no client holds takes its nearest summary's cluster
    assert method.assign(data.gather(torch.arange(5))).shape == (5,)
    assert method.global_centroids().shape == (method.num_clusters, method.summaries.shape[1])


def test_the_clients_vote_relabels_each_sample_by_its_own_nearest_samples():
    data = build_federated_data(tiny_data(), torch.device("cpu"), 0)
    method = tiny(vote_neighbors=4)
    method.build(data.info)
    states, _ = _one_round(method, data)
    labels = method.predict(data, states)
    with torch.no_grad():
        for cid, part in enumerate(data.parts):  # each client votes among its own samples only
            own = method.client_labels[cid][states[cid]["summary_of"]]
            h = method.embed(data.gather(part))
            assert torch.equal(labels[part], knn_vote(h, own, 4, method.num_clusters))
    # a damaged saved state (indices out of range) leaves the summaries' labels as they are
    for damaged in (torch.full_like(states[0]["voters_of"], 10**6), "not a tensor", states[0]["voters_of"].float()):
        states[0]["voters_of"] = damaged
        assert torch.equal(method.predict(data, states)[data.parts[0]],
                           method.client_labels[0][states[0]["summary_of"]])


def test_spreading_smooths_the_servers_labels_over_the_votes_own_graph():
    data = build_federated_data(tiny_data(), torch.device("cpu"), 0)
    method = tiny(vote_neighbors=4, spread_alpha=0.9)
    method.build(data.info)
    states, _ = _one_round(method, data)
    labels = method.predict(data, states)
    for cid, part in enumerate(data.parts):  # each client spreads over its own samples' graph only
        own, graph = method.client_labels[cid][states[cid]["summary_of"]], states[cid]["voters_of"]
        assert torch.equal(labels[part], label_spreading(graph, own, method.num_clusters, 0.9))
        assert not torch.equal(labels[part], vote(own, graph, method.num_clusters))  # spread, not voted


def test_round_vote_keeps_each_clients_last_labels_and_votes_over_them():
    data = build_federated_data(tiny_data(), torch.device("cpu"), 0)
    method = tiny(vote_neighbors=4, round_vote=3)
    method.build(data.info)
    states = {cid: {} for cid in range(data.num_clients)}
    each_round = {cid: [] for cid in range(data.num_clients)}
    for rnd in range(4):
        updates = []
        for cid in range(data.num_clients):
            ctx = ClientContext(cid, Stage("train", 4), 0, rnd, data.client(cid, 64), states[cid], 0)
            method.session = ClientSession(ctx)
            method.on_client_start(ctx)
            updates.append(ClientUpdate(cid, len(data.parts[cid]), method.on_client_end(ctx)))
        method.session = None
        method.aggregate(None, updates, RoundContext(Stage("train", 4), 0, rnd, 0))
        for cid in range(data.num_clients):  # the round's own labels: the server's, voted over the client's graph
            own = method.client_labels[cid][states[cid]["summary_of"]]
            each_round[cid].append(vote(own, states[cid]["voters_of"], method.num_clusters))
    labels = method.predict(data, states)
    for cid, part in enumerate(data.parts):
        assert [len(h) for h in states[cid]["labels_before"]] == [len(part)] * 2  # round_vote - 1 kept
        assert torch.equal(labels[part], vote_over_labellings(each_round[cid][-3:], method.num_clusters))
    assert any(not torch.equal(r[0], r[-1]) for r in each_round.values())  # the rounds did differ
    states[0]["labels_before"] = ["not labels", torch.full((len(data.parts[0]),), 99)]  # untrusted: ignored
    assert torch.equal(method.predict(data, states)[data.parts[0]], each_round[0][-1])


@pytest.mark.parametrize("bad", [dict(summary_size=0), dict(min_summary_size=0), dict(neighbors=0),
                                 dict(temperature=0.0), dict(decorrelation_weight=-1.0),
                                 dict(vote_neighbors=-1), dict(backbone_weight=0.0), dict(flip=1.5),
                                 dict(rotation=-5.0), dict(vote_neighbors=5, spread_alpha=1.0),
                                 dict(spread_alpha=0.5), dict(neighbor_positives=0.5),
                                 dict(vote_neighbors=5, neighbor_positives=1.5), dict(round_vote=0),
                                 dict(projector_input="mean")])
def test_bad_settings_are_one_sentence(bad):
    with pytest.raises(ConfigError, match="method."):
        tiny(**bad)


@pytest.mark.parametrize("share", [0.0, 0.5, 1.0])
def test_neighbour_positives_replace_that_share_of_a_batch_by_one_of_each_samples_own_neighbours(share):
    data = build_federated_data(tiny_data(), torch.device("cpu"), 0)
    method = tiny(vote_neighbors=3, neighbor_positives=share)
    method.build(data.info)
    ctx = _client(method, data, cid=1)
    batch = next(data.client(1, 64).batches(torch.Generator().manual_seed(0)))
    if not share:  # off: no neighbour table is kept for training, and the positives are the samples' own views
        assert not hasattr(method, "_neighbours")
        return
    mixed = method._with_neighbours(batch["x"], batch["index"])
    part, graph = data.parts[1], ctx.state["voters_of"]
    replaced = 0
    for row, (x, index) in enumerate(zip(mixed, batch["index"])):
        at = int((part == index).nonzero())
        own_neighbours = part[graph[at, 1:]]  # the client's own samples, found at the round's start
        if torch.equal(x, batch["x"][row]):
            continue
        replaced += 1
        assert any(torch.equal(x, data.gather(j.view(1))[0]) for j in own_neighbours)
    assert replaced == len(mixed) if share == 1.0 else 0 < replaced < len(mixed)
    method.training_step(batch, 0).backward()  # and it trains


def test_a_pooled_projector_input_sees_each_channels_mean_and_shrinks_the_model():
    """projector_input "pooled": the projector's first layer takes the trunk's 256 channel means instead of its
    2,304 flat features (convnet28 on 28 x 28), and the clustering space (embed) does not change."""
    from fedclust.data.info import DataInfo

    info = DataInfo(num_classes=10, in_channels=1, input_size=28, num_features=784, is_image=True,
                    min_client_size=100)
    flat, pooled = (FedSpectral(projector_input=kind, latent_dim=16) for kind in ("flat", "pooled"))
    for method in (flat, pooled):
        method.build(info)
    first = [m for m in pooled.projector if isinstance(m, torch.nn.Linear)][0]
    assert first.in_features == 256 and flat.projector[0].in_features == 2304
    assert sum(p.numel() for p in pooled.parameters()) < sum(p.numel() for p in flat.parameters()) - 1_000_000
    pooled.trunk.load_state_dict(flat.trunk.state_dict())
    x = torch.rand(4, 1, 28, 28)
    with torch.no_grad():
        assert torch.equal(pooled.embed(x), flat.embed(x))
        assert torch.allclose(pooled.projector(pooled.trunk(x)), pooled.projector[1:](
            pooled.trunk.net[:-1](x).mean((2, 3))), atol=1e-6)


def test_a_pooled2x2_projector_input_keeps_where_a_pattern_is_below_ccfcs_size():
    """projector_input "pooled2x2": the projector sees each channel's means over a 2 x 2 grid of its 3 x 3 map (1,024
    numbers on convnet28), so the model stays below the packaged Fashion-MNIST CCFC's while the projector still knows
    the pattern's place; the clustering space does not change."""
    from fedclust.api import resolve
    from fedclust.data.info import DataInfo

    info = DataInfo(num_classes=10, in_channels=1, input_size=28, num_features=784, is_image=True,
                    min_client_size=100)
    ccfc = resolve("ccfc_fmnist", {}, {}).init["method"]
    flat, grid = (FedSpectral(projector_input=kind) for kind in ("flat", "pooled2x2"))
    for method in (flat, grid, ccfc):
        method.build(info)
    first = [m for m in grid.projector if isinstance(m, torch.nn.Linear)][0]
    assert first.in_features == 1024
    size = {name: sum(p.numel() for p in m.parameters()) for name, m in (("grid", grid), ("ccfc", ccfc))}
    assert size["grid"] < size["ccfc"]
    grid.trunk.load_state_dict(flat.trunk.state_dict())
    x = torch.rand(4, 1, 28, 28)
    with torch.no_grad():
        assert torch.equal(grid.embed(x), flat.embed(x))
        maps = grid.trunk.net[:-1](x)
        cells = torch.nn.functional.avg_pool2d(maps, 2, stride=1).flatten(1)
        assert torch.allclose(grid.projector(grid.trunk(x)), grid.projector[1:](cells), atol=1e-5)
    with pytest.raises(ConfigError, match="flat, pooled or pooled2x2"):
        FedSpectral(projector_input="pooled3x3")


def test_a_low_rank_projector_sees_every_flat_feature_below_ccfcs_size():
    """projector_rank: the flat input's first layer factored through ``rank`` numbers: the projector still sees all
    2,304 flat features (a change at any one position moves z), the model is below the packaged CCFC's, and the
    clustering space does not change."""
    from fedclust.api import resolve
    from fedclust.data.info import DataInfo

    info = DataInfo(num_classes=10, in_channels=1, input_size=28, num_features=784, is_image=True,
                    min_client_size=100)
    ccfc = resolve("ccfc_fmnist", {}, {}).init["method"]
    flat, low = FedSpectral(), FedSpectral(projector_rank=128)
    for method in (flat, low, ccfc):
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
        low.trunk.load_state_dict(flat.trunk.state_dict())
        x = torch.rand(4, 1, 28, 28)
        assert torch.equal(low.embed(x), flat.embed(x))
    with pytest.raises(ConfigError, match="projector_rank"):
        FedSpectral(projector_rank=0)


def test_vector_data_train_without_image_views(run_fit):
    from fedclust.data.config import DataConfig

    data = DataConfig(name="gaussian", num_clients=2, partition="iid",
                      options={"num_clusters": 3, "points_per_cluster": 60, "dim": 8})
    metrics = run_fit(tiny(num_clusters=3), data)
    assert 0 <= metrics["nmi"] <= 1


def test_the_mid_level_space_joins_three_unit_blocks():
    """input+mid+backbone: the unit input, the trunk's unit mid-level features and its unit output (scaled by
    backbone_weight), joined and normalised again; training does not see the space."""
    from fedclust.nn.backbones import with_mid_features

    data = build_federated_data(tiny_data(), torch.device("cpu"), 0)
    x = next(iter(data.iter_all()))
    method = tiny(cluster_space="input+mid+backbone", backbone_weight=2.0)
    method.build(data.info)
    method.eval()
    with torch.no_grad():
        h, mid = with_mid_features(method.trunk, x)
        unit = torch.nn.functional.normalize
        expected = unit(torch.cat([unit(x.flatten(1), dim=1), unit(mid, dim=1), 2.0 * unit(h, dim=1)], 1), dim=1)
        torch.testing.assert_close(method.embed(x), expected)
    with pytest.raises(ConfigError, match="method.cluster_space"):
        tiny(cluster_space="input+pixels")


def test_backbone_weight_leans_the_clustering_space_on_the_trunk():
    """input+backbone joins the unit input and the unit trunk features scaled by backbone_weight: the trunk's share
    of the squared norm is w^2 / (1 + w^2), and the joined vector is unit."""
    data = build_federated_data(tiny_data(), torch.device("cpu"), 0)
    x = next(iter(data.iter_all()))
    for w in (1.0, 2.0):
        method = tiny(cluster_space="input+backbone", backbone_weight=w)
        method.build(data.info)
        with torch.no_grad():
            e = method.embed(x)
        d_in = x.flatten(1).shape[1]
        torch.testing.assert_close(e.norm(dim=1), torch.ones(len(x)))
        torch.testing.assert_close(e[:, d_in:].pow(2).sum(1), torch.full((len(x),), w * w / (1 + w * w)))


def test_the_hog_space_joins_the_inputs_hog_beside_the_trunk():
    """hog+backbone: the input's unit HOG block (fedclust/nn/hog.py) beside the trunk's unit features scaled by
    backbone_weight, joined and normalised again; refused on vectors and for cells larger than the images."""
    from fedclust.data.config import DataConfig
    from fedclust.nn.hog import hog

    data = build_federated_data(tiny_data(), torch.device("cpu"), 0)  # 8 x 8 digits
    x = next(iter(data.iter_all()))
    method = tiny(cluster_space="hog+backbone", backbone_weight=2.0, hog_cell=2, hog_bins=6)
    method.build(data.info)
    method.eval()
    with torch.no_grad():
        unit = torch.nn.functional.normalize
        expected = unit(torch.cat([hog(x, 2, 6), 2.0 * unit(method.trunk(x), dim=1)], 1), dim=1)
        torch.testing.assert_close(method.embed(x), expected)
    assert method.embed(x).shape[1] == 6 * 4 * 4 + method.trunk.out_dim
    with pytest.raises(ConfigError, match="method.hog_cell"):
        tiny(cluster_space="hog+backbone", hog_cell=9).build(data.info)
    vectors = build_federated_data(DataConfig(name="gaussian", num_clients=2, partition="iid",
                                              options={"num_clusters": 3, "points_per_cluster": 20, "dim": 8}),
                                   torch.device("cpu"), 0)
    with pytest.raises(ConfigError, match="method.cluster_space.*vectors"):
        tiny(cluster_space="hog+backbone").build(vectors.info)
    for bad in (dict(hog_cell=0), dict(hog_bins=1)):
        with pytest.raises(ConfigError, match="method.hog_"):
            tiny(**bad)


def test_a_run_clusters_in_the_hog_space(run_fit):
    metrics = run_fit(tiny(cluster_space="hog+backbone", hog_cell=2, vote_neighbors=3, spread_alpha=0.9))
    assert 0.3 < metrics["nmi"] <= 1  # digits: HOG alone already groups them well above chance

"""The small probe scripts whose figures the results notes quote: round_spread, the recluster script's purity and
ceiling, the space-ceiling script's blocks, the manifold-ceiling script's missing UMAP and the cluster holdings
of a run."""

import sys
from types import SimpleNamespace

import pytest
import torch

from benchmarks.cluster_holdings import main as cluster_holdings
from benchmarks.fedspectral_manifold_ceiling import manifold_nmi
from benchmarks.fedspectral_recluster import central_spectral_nmi, summary_purity
from benchmarks.fedspectral_space_ceiling import joined, pixel_block, score_hog
from benchmarks.round_spread import main as round_spread


def _metrics(folder, nmi_by_round):
    folder.mkdir()
    rows = [f"{r},{'' if v is None else v}" for r, v in nmi_by_round.items()]
    (folder / "metrics.csv").write_text("round,nmi\n" + "\n".join(rows) + "\n")
    return folder


def test_round_spread_gives_the_mean_over_a_range_one_round_and_a_curve_skipping_unevaluated_rounds(tmp_path, capsys):
    run = _metrics(tmp_path / "run", {1: 0.1, 2: None, 3: 0.3, 4: 0.5, 5: 0.7})
    round_spread([str(run), "--rounds", "3", "5"])
    assert "mean 0.5000, std 0.2000" in capsys.readouterr().out
    round_spread([str(run), "--rounds", "4", "4"])
    assert capsys.readouterr().out.strip() == "run: NMI at round 4 0.5000"
    round_spread([str(run), "--rounds", "1", "5", "--each", "2"])  # rounds 1, 3, 5 (round 2 has no NMI anyway)
    assert capsys.readouterr().out.strip() == "run: NMI at round 1 0.1000, 3 0.3000, 5 0.7000"
    with pytest.raises(SystemExit, match="no evaluated round"):
        round_spread([str(run), "--rounds", "2", "2"])


def test_round_spread_reads_another_metrics_column(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.csv").write_text("round,loss,nmi\n1,9.5,\n2,7.25,0.4\n")
    round_spread([str(run), "--metric", "loss", "--rounds", "1", "2", "--each", "1"])
    assert capsys.readouterr().out.strip() == "run: loss at round 1 9.5000, 2 7.2500"


def test_summary_purity_counts_each_summarys_majority_class_weighted_by_client():
    labels = torch.tensor([0, 0, 1, 1, 1, 2, 2, 2])
    data = SimpleNamespace(labels=labels, parts=[torch.tensor([0, 1, 2, 3]), torch.tensor([4, 5, 6, 7])])
    made = [(None, torch.tensor([0, 0, 1, 1]), None),  # two pure summaries: 4 of 4
            (None, torch.tensor([0, 0, 0, 0]), None)]  # one summary of classes 1, 2, 2, 2: 3 of 4
    assert summary_purity(data, made) == pytest.approx(7 / 8)


def test_space_ceiling_pixel_blocks_remove_brightness_when_centred_and_join_as_equal_unit_halves():
    images = torch.rand(3, 1, 4, 4, generator=torch.Generator().manual_seed(0))
    brighter = images + 0.5  # the same images, every pixel 0.5 brighter
    assert torch.allclose(pixel_block(images, "centred"), pixel_block(brighter, "centred"), atol=1e-6)
    assert not torch.allclose(pixel_block(images, "raw"), pixel_block(brighter, "raw"), atol=1e-3)
    both = joined(pixel_block(images, "raw"), 5 * torch.ones(3, 2))  # the second block is rescaled to unit norm too
    assert torch.allclose(both.norm(dim=1), torch.ones(3))
    assert torch.allclose(both[:, :16].norm(dim=1), both[:, 16:].norm(dim=1))


def test_space_ceiling_hog_scores_shape_apart_from_brightness(capsys):
    # 20 images of vertical stripes and 20 of horizontal ones, each at a random brightness: the HOG block (blind to
    # brightness) parts the two shapes for spectral clustering alone and beside a trunk of noise, and for k-means
    g = torch.Generator().manual_seed(0)
    stripes = (torch.arange(8) % 2).float().expand(8, 8)
    images = torch.cat([stripes.expand(20, 1, 8, 8), stripes.T.expand(20, 1, 8, 8)])
    images = images * torch.rand(40, 1, 1, 1, generator=g).add(0.5)
    score_hog(images, torch.randn(40, 4, generator=g), [0] * 20 + [1] * 20, 2, neighbors=5, cell=4, bins=9)
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0].startswith("HOG, cells of 4 pixels, 9 bins: 36 numbers an image")
    assert lines[2].startswith("HOG alone 1.0000  beside the trunk 1.0000")
    assert lines[3] == "k-means(2) on the HOG, seeds 0-2: 1.000 / 1.000 / 1.000"
    assert lines[4].startswith("k-means(2) on the unit pixels, seeds 0-2: ")


def test_central_spectral_ceiling_finds_two_separated_groups():
    g = torch.Generator().manual_seed(0)
    z = torch.cat([torch.randn(30, 3, generator=g), torch.randn(30, 3, generator=g) + 20])
    labels = [0] * 30 + [1] * 30
    assert central_spectral_nmi(z, labels, 2, neighbors=5) == pytest.approx(1.0)


def test_cluster_holdings_names_the_true_clusters_each_model_holds_and_the_empty_ones(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    found_label = [(0, 0)] * 5 + [(0, 1)] * 5 + [(1, 2)] * 4 + [(1, 1)] + [(2, 3)] * 5  # model 3 holds nothing
    rows = [f"{i},0,{label},{found}" for i, (found, label) in enumerate(found_label)]
    (run / "assignments.csv").write_text("index,client,label,cluster\n" + "\n".join(rows) + "\n")
    cluster_holdings([str(run)])
    assert capsys.readouterr().out.strip() == ("run: purity 0.7000; model 0: 10 = 0 (5) + 1 (5); model 1: 5 = 2 (4); "
                                               "model 2: 5 = 3 (5); model 3: empty")


def test_round_vote_probe_keeps_every_scorings_labels_and_votes_over_the_last_rounds(tmp_path, capsys):
    from benchmarks.fedspectral_round_vote import main as round_vote

    run = tmp_path / "run"
    assert round_vote(["record", str(run), "--", "--config", "quickstart", "--data.split", "train",
                       "--federation.rounds", "3", "--federation.eval_every", "1", "--fabric.accelerator", "cpu"]) == 0
    kept = torch.load(run / "round_labels.pt", weights_only=True)
    assert len(kept["labels"]) >= 3 and sum(len(p) for p in kept["parts"]) == len(kept["labels"][-1])
    capsys.readouterr()
    round_vote(["score", str(run), "--last", "1", "3"])
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0].startswith(f"{run}: 3 rounds") and "vote over the last  3 rounds: NMI 0." in lines[-1]


def test_manifold_ceiling_says_how_to_install_umap_when_it_is_missing(monkeypatch):
    monkeypatch.setitem(sys.modules, "umap", None)  # import umap raises ImportError
    with pytest.raises(SystemExit, match="pip install umap-learn"):
        manifold_nmi(torch.rand(20, 3).numpy(), torch.zeros(20).numpy(), 2, 5, 2)

"""The small probe scripts whose figures the results notes quote: round_spread, the recluster script's purity and
ceiling, the space-ceiling script's blocks, the manifold-ceiling script's missing UMAP and the cluster holdings
of a run."""


import pytest

from benchmarks.cluster_holdings import main as cluster_holdings
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


def test_cluster_holdings_names_the_true_clusters_each_model_holds_and_the_empty_ones(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    found_label = [(0, 0)] * 5 + [(0, 1)] * 5 + [(1, 2)] * 4 + [(1, 1)] + [(2, 3)] * 5  # model 3 holds nothing
    rows = [f"{i},0,{label},{found}" for i, (found, label) in enumerate(found_label)]
    (run / "assignments.csv").write_text("index,client,label,cluster\n" + "\n".join(rows) + "\n")
    cluster_holdings([str(run)])
    assert capsys.readouterr().out.strip() == ("run: purity 0.7000; model 0: 10 = 0 (5) + 1 (5); model 1: 5 = 2 (4); "
                                               "model 2: 5 = 3 (5); model 3: empty")

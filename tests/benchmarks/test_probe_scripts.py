"""The runner's commands besides its experiments: `python -m benchmarks holdings` (UIFCA's account of a run below
100 % purity, which the UIFCA findings quote), and the rule that keeps probes out of benchmarks/ (issue 45)."""

from benchmarks.__main__ import main


def test_cluster_holdings_names_the_true_clusters_each_model_holds_and_the_empty_ones(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    found_label = [(0, 0)] * 5 + [(0, 1)] * 5 + [(1, 2)] * 4 + [(1, 1)] + [(2, 3)] * 5  # model 3 holds nothing
    rows = [f"{i},0,{label},{found}" for i, (found, label) in enumerate(found_label)]
    (run / "assignments.csv").write_text("index,client,label,cluster\n" + "\n".join(rows) + "\n")
    assert main(["holdings", str(run)]) == 0
    assert capsys.readouterr().out.strip() == ("run: purity 0.7000; model 0: 10 = 0 (5) + 1 (5); model 1: 5 = 2 (4); "
                                               "model 2: 5 = 3 (5); model 3: empty")


def test_the_runner_is_the_one_parser_and_benchmarks_stays_small():
    """Issue 45: probes live as the runner's commands or experiments, not as scripts with parsers of their own."""
    from pathlib import Path

    folder = Path(__file__).resolve().parents[2] / "benchmarks"
    sources = {path.name: path.read_text() for path in folder.glob("*.py")}
    assert [name for name, text in sources.items() if "ArgumentParser(" in text] == ["__main__.py"]
    assert sum(text.count("\n") for text in sources.values()) < 1500

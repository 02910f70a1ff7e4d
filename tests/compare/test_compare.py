import json
import re
import shutil
import subprocess

import pytest
import yaml

from fedclust.__main__ import main
from fedclust.compare.runs import load_runs


def fake_run(root, name, method="KFED", p=0.0, seed=1, rate=0.0, nmi=0.5, rounds=3, alpha=None):
    """A run folder as `fedclust fit` writes it, without running anything."""
    folder = root / name
    folder.mkdir(parents=True)
    config = {"method": {"class_path": method, "init_args": {}}, "seed": seed,
              "data": {"name": "fmnist", "partition": "pshift" if alpha is None else "dirichlet", "p": p,
                       "alpha": alpha, "num_clients": 3},
              "federation": {"disconnect_rate": rate}}
    (folder / "config.yaml").write_text(yaml.safe_dump(config))
    rows = ["round,stage,stage_round,loss,nmi,acc,ari,kappa,purity,clients,failed,rejected,seconds,peak_memory_mb"]
    for r in range(1, rounds + 1):
        score = nmi * r / rounds
        rows.append(f"{r},0,{r - 1},{1 / r},{score},{score},{score},{score},{score},3,0,0,2.0,100")
    (folder / "metrics.csv").write_text("\n".join(rows) + "\n")
    final = {k: nmi for k in ("nmi", "acc", "ari", "kappa", "purity")}
    (folder / "final.json").write_text(json.dumps({"metrics": final, "rounds": rounds}))
    (folder / "partition.csv").write_text("client,class_0,class_1\n0,5,1\n1,0,7\n2,3,3\n")
    return folder


@pytest.fixture
def runs(tmp_path):
    root = tmp_path / "runs"
    folders = [fake_run(root, f"kfed_p{p}_s{s}", p=p, seed=s, nmi=0.5 + p / 10 + s / 100)
               for p in (0.0, 0.5, 1.0) for s in (1, 2)]
    folders += [fake_run(root, f"ccfc_rate{r}", method="CCFC", rate=r, nmi=0.6 - r) for r in (0.0, 0.2, 0.4)]
    return folders


def test_runs_are_read_from_their_folders(runs):
    records = load_runs([str(f) for f in runs])
    kfed = [r for r in records if r.method == "k-FED"]
    assert len(kfed) == 6 and {r.heterogeneity for r in kfed} == {("p", 0.0), ("p", 0.5), ("p", 1.0)}
    assert kfed[0].seconds_per_round == 2.0 and kfed[0].counts[1] == [0, 7]
    # a folder of runs (a sweep) stands for the runs in it
    assert len(load_runs([str(runs[0].parent)])) == 9


def test_page_is_self_contained_with_every_section(runs, tmp_path):
    out = tmp_path / "page.html"
    assert main(["compare", *map(str, runs), "--output", str(out)]) == 0
    page = out.read_text()
    assert not re.search(r"<script[^>]+src=", page)  # plotly.js inline: opens offline
    assert "k-FED on fmnist, paper (CCFC Table 1)" in page  # reference line from the published table
    assert "Final NMI vs device-failure rate" in page and "samples per client and class" in page
    assert page.count("<tr>") == 1 + 9


def test_not_a_run_folder_is_one_sentence(tmp_path, capsys):
    assert main(["compare", str(tmp_path / "missing")]) == 2
    assert "config.yaml" in capsys.readouterr().err


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium package (.ci/run installs it)")
def test_plots_render_in_headless_chromium(runs, tmp_path):
    out = tmp_path / "page.html"
    main(["compare", *map(str, runs), "--output", str(out)])
    dom = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                          "--virtual-time-budget=15000", "--dump-dom", out.as_uri()],
                         capture_output=True, text=True, timeout=120).stdout
    divs = dom.count('class="plotly-graph-div')
    rendered = len(re.findall(r'class="plotly-graph-div[^"]*js-plotly-plot', dom))
    # 2 summary plots + 4 curves + 9 partition heatmaps, each drawn by plotly.js into its SVG layers
    assert divs == 15 and rendered == 15
    assert dom.count('class="main-svg"') >= 15
    assert dom.count('class="trace scatter') >= 6 + 4  # the summary lines and the curves drew their traces
    assert dom.count('class="hm"') == 9  # every partition heatmap drew its image


def test_p_and_alpha_get_one_figure_each(tmp_path):
    from fedclust.compare.figures import heterogeneity

    root = tmp_path / "runs"
    folders = [fake_run(root, f"p{p}", p=p) for p in (0.0, 1.0)]
    folders += [fake_run(root, f"a{a}", method="FedCC", alpha=a) for a in (0.1, 0.5)]
    figs = heterogeneity(load_runs([str(f) for f in folders]))
    assert [f.layout.xaxis.title.text for f in figs] == ["alpha", "p"]
    assert [t.name for t in figs[0].data] == ["FedCC on fmnist"]  # no published line for Dirichlet settings
    assert "k-FED on fmnist, paper (CCFC Table 1)" in [t.name for t in figs[1].data]

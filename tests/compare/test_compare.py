import html
import json
import re
import shutil
import subprocess

import pytest
import yaml

from fedclust.__main__ import main
from fedclust.compare.diagnostics import LABELS
from fedclust.compare.runs import load_runs
from fedclust.probes.diagnose import DIAGNOSTIC_KEYS


def fake_run(root, name, method="KFED", p=0.0, seed=1, rate=0.0, nmi=0.5, rounds=3, alpha=None, diagnose=False,
             init_args=None, privacy=None):
    """A run folder as `fedclust fit` writes it (with diagnostics.csv: `--diagnose true`; privacy.json: with
    federation.dp_epsilon), without running anything."""
    folder = root / name
    folder.mkdir(parents=True)
    config = {"method": {"class_path": method, "init_args": init_args or {}}, "seed": seed,
              "data": {"name": "fmnist", "partition": "pshift" if alpha is None else "dirichlet", "p": p,
                       "alpha": alpha, "num_clients": 3},
              "federation": {"disconnect_rate": rate, "dp_epsilon": None if privacy is None else privacy["epsilon"]},
              "run_dir": str(folder), "name": name, "progress": True}
    if privacy is not None:
        (folder / "privacy.json").write_text(json.dumps(privacy))
    (folder / "config.yaml").write_text(yaml.safe_dump(config))
    rows = ["round,stage,stage_round,loss,nmi,acc,ari,kappa,purity,clients,failed,rejected,seconds,peak_memory_mb"]
    for r in range(1, rounds + 1):
        score = nmi * r / rounds
        rows.append(f"{r},0,{r - 1},{1 / r},{score},{score},{score},{score},{score},3,0,0,2.0,100")
    (folder / "metrics.csv").write_text("\n".join(rows) + "\n")
    final = {k: nmi for k in ("nmi", "acc", "ari", "kappa", "purity")}
    (folder / "final.json").write_text(json.dumps({"metrics": final, "rounds": rounds}))
    (folder / "partition.csv").write_text("client,class_0,class_1\n0,5,1\n1,0,7\n2,3,3\n")
    if diagnose:  # a representation collapsing onto brightness, as CCFC's did on Fashion-MNIST
        rows = [",".join(["round", *DIAGNOSTIC_KEYS])]
        for r in range(1, rounds + 1):
            rows.append(f"{r},{20 / r},0.5,{0.6 + 0.1 * r},{12 - r},{0.3 * r},40,900,0.9,0,0.4")
        (folder / "diagnostics.csv").write_text("\n".join(rows) + "\n")
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


def _table(page: str) -> list[list[str]]:
    """The final-metrics table's rows (header first) as cell texts."""
    table = page.split("<h2>Final metrics</h2>", 1)[1].split("</table>", 1)[0]
    return [[html.unescape(re.sub("<[^>]+>", "", cell)) for cell in re.findall(r"<t[hd][^>]*>.*?</t[hd]>", row)]
            for row in re.findall(r"<tr>(.*?)</tr>", table)]


def test_the_table_shows_the_settings_that_differ_one_column_each(tmp_path):
    """Five runs that differ only in a summary size (and their folders, names, progress) are told apart by one
    column; a setting only one method takes is compared among the runs that take it."""
    root = tmp_path / "runs"
    folders = [fake_run(root, f"spectral_{size}", method="FedSpectral",
                        init_args={"summary_size": size, "neighbors": 5, "crop_scale": [0.8, 1.0]})
               for size in (5, 10, 20, 40, 80)]
    folders.append(fake_run(root, "kfed", init_args={"k_local": 4}))
    out = tmp_path / "page.html"
    assert main(["compare", *map(str, folders), "--output", str(out)]) == 0
    rows = _table(out.read_text())
    header = rows[0]
    assert header[header.index("seed") + 1:header.index("rounds")] == ["method.summary_size"]
    column = header.index("method.summary_size")
    assert {row[0]: row[column] for row in rows[1:]} == {"kfed": "", **{f"spectral_{s}": str(s)
                                                                         for s in (5, 10, 20, 40, 80)}}
    assert "epsilon" not in header  # no run noised its summaries


def test_the_table_shows_a_runs_privacy_budget(tmp_path):
    root = tmp_path / "runs"
    budget = {"epsilon": 2.5, "delta": 1e-5, "noise_multiplier": 1.7, "releases": 20, "clip": 1.0,
              "accountant": "dp_accounting RDP (Gaussian mechanism, self-composed)"}
    folders = [fake_run(root, "noised", privacy=budget), fake_run(root, "plain")]
    out = tmp_path / "page.html"
    assert main(["compare", *map(str, folders), "--output", str(out)]) == 0
    rows = _table(out.read_text())
    header = rows[0]
    assert "epsilon" in header and "federation.dp_epsilon" not in header  # the budget, not the setting twice
    assert {row[0]: row[header.index("epsilon")] for row in rows[1:]} == {"noised": "2.5", "plain": ""}
    assert load_runs([str(folders[0])])[0].privacy["delta"] == 1e-5


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


def test_the_page_names_every_diagnostic():
    assert list(LABELS) == list(DIAGNOSTIC_KEYS)


def test_diagnosed_runs_get_curves_and_a_table_others_nothing(tmp_path):
    root = tmp_path / "runs"
    plain = fake_run(root, "plain")
    out = tmp_path / "plain.html"
    assert main(["compare", str(plain), "--output", str(out)]) == 0
    page = out.read_text()
    assert "<h2>Diagnostics</h2>" not in page and "Effective rank of z" not in page
    assert "first direction with brightness" not in page and page.count('class="plotly-graph-div') == 4 + 1

    diagnosed = fake_run(root, "diagnosed", method="CCFC", diagnose=True)
    (diagnosed / "diagnostics_test.json").write_text(json.dumps(
        {"split": "test", "data": "fmnist", "samples": 10, "round": 3,
         **{key: 0.5 for key in DIAGNOSTIC_KEYS}, "embed_kmeans_nmi": None}))
    assert main(["compare", str(plain), str(diagnosed), "--output", str(out)]) == 0
    page = out.read_text()
    for title in ("Effective rank of z per round", "Top-3 variance share of z per round",
                  "|r| of z's first direction with brightness per round"):
        assert page.count(title) == 1
    section = page[page.index("<h2>Diagnostics</h2>"):page.index("<h2>Curves</h2>")]
    rows = re.findall(r"<tr>(.*?)</tr>", section)
    cells = [re.findall(r"<td[^>]*>(.*?)</td>", row) for row in rows[1:]]
    # one row per source: the run's last diagnosed round, and the evaluated test split; the plain run has none
    assert [c[:3] for c in cells] == [["diagnosed", "CCFC", "fit, round 3"],
                                      ["diagnosed", "CCFC", "evaluate test, round 3"]]
    assert cells[0][3:6] == ["6.6667", "0.5000", "0.9000"] and cells[1][-1] == ""  # null: not computed
    assert 'class="note"' not in section


@pytest.mark.parametrize("name,content,needle", [
    ("diagnostics.csv", "round,effective_rank\n1,2.0\n2,abc\n3,,\n", "2 of 3 rows are not rows of numbers"),
    ("diagnostics.csv", "just,some,words\nx,y,z\n", "not a diagnostics table"),
    ("diagnostics.csv", b"\xff\xfe\x00binary", "cannot be read"),
    ("diagnostics_same.json", "{not json", "not a diagnostics record"),
    ("diagnostics_same.json", '{"effective_rank": "high"}', "not a diagnostics record"),
    ("diagnostics_same.json", "[1, 2]", "not a diagnostics record"),
])
def test_a_damaged_diagnostics_file_is_one_line_on_the_page(tmp_path, capsys, name, content, needle):
    run = fake_run(tmp_path / "runs", "damaged", method="CCFC")
    path = run / name
    path.write_bytes(content) if isinstance(content, bytes) else path.write_text(content)
    out = tmp_path / "page.html"

    assert main(["compare", str(run), "--output", str(out)]) == 0

    page = out.read_text()
    notes = re.findall(r'<p class="note">(.*?)</p>', page)
    assert len(notes) == 1 and notes[0].startswith(f"damaged: {name}") and needle in notes[0]
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0]
    readable = name == "diagnostics.csv" and "rows" in needle  # its one good row is still drawn
    assert ("Effective rank of z per round" in page) == readable


@pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium package (.ci/run installs it)")
def test_diagnostic_curves_render_in_headless_chromium(tmp_path):
    run = fake_run(tmp_path / "runs", "diagnosed", method="CCFC", diagnose=True)
    out = tmp_path / "page.html"
    main(["compare", str(run), "--output", str(out)])
    dom = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                          "--virtual-time-budget=15000", "--dump-dom", out.as_uri()],
                         capture_output=True, text=True, timeout=120).stdout
    # 4 metric curves + 3 diagnostic curves + 1 partition heatmap, each drawn by plotly.js
    assert len(re.findall(r'class="plotly-graph-div[^"]*js-plotly-plot', dom)) == 8
    assert "Effective rank of z per round" in dom and dom.count('class="trace scatter') >= 7


BINARY = b"\xff\xfe\x00\x81binary"


@pytest.mark.parametrize("name,content,needle", [
    ("metrics.csv", "round,loss,nmi\n1,0.5,0.1\n2,abc,0.2\n3,0.3,0.3\n", "1 of 3 rows are not rows of numbers"),
    ("metrics.csv", "stage,loss,nmi\n0,0.5,0.1\n", "is not a metrics table (it needs a round column"),
    ("metrics.csv", BINARY, "cannot be read"),
    ("metrics.csv", "", "is not a metrics table"),
    ("final.json", "{not json", "is not a run's final scores"),
    ("final.json", '{"metrics": {"nmi": "high"}}', "is not a run's final scores ('high' is not a number)"),
    ("final.json", "[1, 2]", "is not a run's final scores"),
    ("final.json", BINARY, "cannot be read"),
    ("config.yaml", "method: {class_path: [unclosed\n", "is not a run's config"),
    ("config.yaml", "seed: abc\n", "is not a run's config (seed 'abc' is not a whole number)"),
    ("config.yaml", "data: 5\n", "is not a run's config (data 5 is not a mapping)"),
    ("config.yaml", "- a list\n", "is not a run's config (it is not a mapping of settings)"),
    ("config.yaml", "", "is not a run's config"),
    ("config.yaml", BINARY, "cannot be read"),
    ("partition.csv", "client,class_0,class_1\n0,5,x\n", "is not a table of samples per client and class"),
    ("partition.csv", "client,class_0,class_1\n0,5\n", "a row of 2 cells under a header of 3"),
    ("partition.csv", "", "is not a table of samples per client and class"),
    ("partition.csv", BINARY, "cannot be read"),
])
def test_a_damaged_run_file_is_one_line_on_the_page_and_the_rest_is_shown(tmp_path, capsys, name, content, needle):
    good = fake_run(tmp_path / "runs", "good", nmi=0.7)
    run = fake_run(tmp_path / "runs", "damaged", method="CCFC", nmi=0.6)
    path = run / name
    path.write_bytes(content) if isinstance(content, bytes) else path.write_text(content)
    out = tmp_path / "page.html"

    assert main(["compare", str(good), str(run), "--output", str(out)]) == 0

    page = out.read_text()
    notes = re.findall(r'<p class="note">(.*?)</p>', page)
    assert len(notes) == 1 and notes[0].startswith(f"damaged: {name}") and html.escape(needle) in notes[0], notes
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"fedclust: note: {html.unescape(notes[0])}"]
    rows = {cells[0]: cells for cells in (re.findall(r"<td[^>]*>(.*?)</td>", row)
                                          for row in re.findall(r"<tr>(.*?)</tr>", page)) if cells}
    assert set(rows) == {"good", "damaged"} and rows["good"][:2] == ["good", "k-FED"]
    assert rows["good"][8] == "0.7000" and rows["good"][7] == "3"  # the good run whole: its NMI, its rounds
    damaged = rows["damaged"]
    assert damaged[1] == ("?" if name == "config.yaml" else "CCFC")
    if name == "final.json":  # the last scored round stands in, as for a run still going
        assert damaged[8] == "0.6000"
    if name == "metrics.csv":
        assert damaged[7] == ("2" if "rows" in needle else "0") and damaged[8] == "0.6000"  # final.json still read
    assert "good: samples per client and class" in page  # the heatmaps' titles
    assert ("damaged: samples per client and class" in page) == (name != "partition.csv")


def test_a_run_folder_with_nothing_readable_is_listed_as_skipped(tmp_path, capsys):
    root = tmp_path / "sweep"
    fake_run(root, "good")
    broken = fake_run(root, "broken")
    (broken / "config.yaml").write_bytes(BINARY)
    (broken / "metrics.csv").write_text("")
    (broken / "final.json").write_text("{")
    (broken / "partition.csv").unlink()
    out = tmp_path / "page.html"

    assert main(["compare", str(root), "--output", str(out)]) == 0  # the sweep folder: both its runs

    page = out.read_text()
    assert "1 runs, 1 skipped" in page and page.count("<tr>") == 1 + 1
    notes = re.findall(r'<p class="note">(.*?)</p>', page)
    assert len(notes) == 1 and notes[0].startswith("broken: skipped, nothing in it could be read: config.yaml "
                                                   "cannot be read (")
    assert "metrics.csv is not a metrics table" in notes[0] and "final.json is not a run&#x27;s final" in notes[0]
    captured = capsys.readouterr()
    assert captured.err.strip().splitlines() == [f"fedclust: note: {html.unescape(notes[0])}"]
    assert "(1 runs, 1 skipped)" in captured.out

    before = out.read_bytes()  # nothing readable at all: refused in one sentence, the last page kept
    assert main(["compare", str(broken), "--output", str(out)]) != 0
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "every one was skipped (broken: skipped" in err
    assert "Traceback" not in err and out.read_bytes() == before


def test_a_folder_that_cannot_be_listed_is_one_sentence(tmp_path, monkeypatch, capsys):
    from pathlib import Path

    from fedclust import precheck

    locked = tmp_path / "locked"
    locked.mkdir()
    real = Path.iterdir

    def iterdir(self):
        if self == locked:
            raise PermissionError(13, "Permission denied", str(self))
        return real(self)

    monkeypatch.setattr(Path, "iterdir", iterdir)
    for first_pass in (True, False):  # refused by the first pass, and by compare itself
        if not first_pass:
            monkeypatch.setattr(precheck, "check", lambda command, args: None)
        assert main(["compare", str(locked), "--output", str(tmp_path / "page.html")]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("fedclust: error: runs = ") and "config.yaml" in err[0]


def test_an_unfinished_run_is_marked_and_kept_out_of_the_plots_against_p(tmp_path, capsys):
    """A run still going (no final.json) shows its last scored round, marked, and does not pull the final NMI
    against p down to a round-1 score."""
    from fedclust.compare import figures

    root = tmp_path / "sweep"
    for seed in (1, 2):
        fake_run(root, f"done_p0_s{seed}", p=0.0, seed=seed, nmi=0.6)
        fake_run(root, f"done_p1_s{seed}", p=1.0, seed=seed, nmi=0.8)
    going = fake_run(root, "going_p1", p=1.0, seed=3, nmi=0.1)
    (going / "final.json").unlink()
    out = tmp_path / "page.html"

    assert main(["compare", str(root), "--output", str(out)]) == 0

    page = out.read_text()
    assert "5 runs, 1 unfinished" in page and "left out of the plots against heterogeneity" in page
    rows = {cells[0]: cells for cells in (re.findall(r"<td[^>]*>(.*?)</td>", row)
                                          for row in re.findall(r"<tr>(.*?)</tr>", page)) if cells}
    assert rows["going_p1"][7] == "3, unfinished" and rows["going_p1"][8] == "0.1000"  # its last scored round
    assert rows["done_p1_s1"][7] == "3"
    (against_p,) = figures.heterogeneity(load_runs([str(root)]))
    (mine,) = [t for t in against_p.data if "paper" not in t.name]
    assert list(mine.y) == [0.6, 0.8]  # p = 1 is the two finished seeds' mean, not pulled to 0.5 by the 0.1
    assert "(5 runs, 1 unfinished)" in capsys.readouterr().out


def test_a_method_run_at_two_schedules_is_two_lines_against_p(tmp_path):
    """CCFC at 30 and at 130 rounds are two results, not two seeds of one: each is its own line, named by its
    rounds, and the paper's line is drawn once."""
    from fedclust.compare import figures

    root = tmp_path / "sweep"
    for p in (0.0, 1.0):
        fake_run(root, f"short_p{p}", method="CCFC", p=p, nmi=0.3, rounds=3)
        fake_run(root, f"whole_p{p}", method="CCFC", p=p, nmi=0.5, rounds=5)
    (against_p,) = figures.heterogeneity(load_runs([str(root)]))
    names = [t.name for t in against_p.data]
    assert sorted(names) == ["CCFC on fmnist, 3 rounds", "CCFC on fmnist, 5 rounds",
                             "CCFC on fmnist, paper (CCFC Table 1)"]  # a list: a second paper line would show
    lines = {t.name: list(t.y) for t in against_p.data}
    assert lines["CCFC on fmnist, 3 rounds"] == [0.3, 0.3] and lines["CCFC on fmnist, 5 rounds"] == [0.5, 0.5]

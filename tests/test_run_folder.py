"""One run, one folder (issue 11): atomic claims, a live run's lock, nothing left by a rejected config, and
--resume refusing changes to what the run computes."""

import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from fedclust import run_folder
from fedclust.__main__ import main
from fedclust.errors import ConfigError


@pytest.fixture(scope="module")
def two_round_run(tmp_path_factory):
    """One finished 2-round quick start for the module (a fit is ~10 s here): tests take copies of it."""
    run = tmp_path_factory.mktemp("finished") / "run"
    assert main(["fit", "--config", "quickstart", "--federation.rounds", "2", "--progress", "false",
                 "--run_dir", str(run)]) == 0
    return run


@pytest.fixture
def finished_run(two_round_run, tmp_path):
    """This test's own copy of the finished run, free to resume, break or compare."""
    return Path(shutil.copytree(two_round_run, tmp_path / "run"))


def test_two_runs_in_the_same_second_get_two_folders(tmp_path, monkeypatch):
    monkeypatch.setattr(time, "strftime", lambda fmt: "20260101-000000")
    a = run_folder.claim(str(tmp_path), "ccfc_digits", None)
    b = run_folder.claim(str(tmp_path), "ccfc_digits", None)
    assert a.path != b.path and b.path.name == "ccfc_digits_20260101-000000-2"
    a.release()
    b.release()


@pytest.mark.slow  # several processes, each importing torch: 35-100 s here; CI runs -m slow
def test_a_folder_held_by_a_live_run_is_refused_and_freed_when_it_ends(tmp_path):
    held = run_folder.claim(str(tmp_path), "x", str(tmp_path / "run"))
    code = ("import sys; from fedclust import run_folder; from fedclust.errors import ConfigError\n"
            "try:\n    run_folder.RunFolder(__import__('pathlib').Path(sys.argv[1]), False).lock()\n"
            "except ConfigError as e:\n    print(e); sys.exit(3)")
    other = subprocess.run([sys.executable, "-c", code, str(tmp_path / "run")], capture_output=True, text=True)
    assert other.returncode == 3 and "no live run holds" in other.stdout
    held.release()
    assert subprocess.run([sys.executable, "-c", code, str(tmp_path / "run")]).returncode == 0


@pytest.mark.slow  # several processes, each importing torch: 35-100 s here; CI runs -m slow
def test_two_processes_started_on_one_name_never_share_a_folder(tmp_path):
    """Both start at once with the same --run_dir: one runs, the other is refused with one sentence."""
    argv = [sys.executable, "-m", "fedclust", "fit", "--config", "quickstart", "--federation.rounds", "2",
            "--progress", "false", "--run_dir", str(tmp_path / "same")]
    procs = [subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    results = [(p.wait(timeout=600), p.stderr.read()) for p in procs]
    codes = sorted(code for code, _ in results)
    assert codes == [0, 2], results
    err = next(e for code, e in results if code == 2).strip()
    assert len(err.splitlines()) == 1 and "run_dir" in err
    rows = (tmp_path / "same" / "metrics.csv").read_text().splitlines()
    assert len(rows) == 3  # a header and two rounds: nothing written twice


def test_a_rejected_config_leaves_no_folder_behind(tmp_path, capsys):
    assert main(["fit", "--config", "quickstart", "--data.num_clients", "3", "--runs_dir", str(tmp_path / "runs")]) == 2
    assert "data.num_clients" in capsys.readouterr().err
    assert not any((tmp_path / "runs").glob("*/*")) and not list((tmp_path / "runs").glob("*"))


@pytest.mark.parametrize(("override", "key"), [
    (["--data.partition", "dirichlet"], "data.partition"),
    (["--federation.rounds", "3"], "federation.rounds"),
    (["--seed", "1"], "seed"),
    (["--method", "KFED"], "method.class_path"),
    (["--method.init_args.latent_dim", "32"], "method.init_args"),
])
def test_resume_refuses_a_change_of_what_the_run_computes(finished_run, capsys, override, key):
    run = finished_run
    before = {p.name: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    capsys.readouterr()
    assert main(["fit", "--resume", str(run), *override]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and key in err and "resumed run" in err
    assert {p.name: p.read_bytes() for p in run.rglob("*") if p.is_file()} == before


def test_resume_may_change_what_is_observed(finished_run):
    run = finished_run
    assert main(["fit", "--resume", str(run), "--federation.eval_every", "1", "--progress", "false"]) == 0


def test_resume_accepts_a_setting_newer_than_the_run_at_its_default(finished_run, capsys):
    """A run saved before a method setting existed computed with that setting's default: it resumes; asking for
    another value is still a change."""
    run = finished_run
    config = run / "config.yaml"
    saved = yaml.safe_load(config.read_text())
    del saved["method"]["init_args"]["blur_sigma"]
    config.write_text(yaml.safe_dump(saved, sort_keys=False))
    capsys.readouterr()
    other = ["--method.init_args.blur_sigma", "[0.1, 0.6]"]
    assert main(["fit", "--resume", str(run), *other, "--progress", "false"]) == 2
    assert "method.init_args.blur_sigma" in capsys.readouterr().err
    assert main(["fit", "--resume", str(run), "--federation.rounds", "2", "--progress", "false"]) == 0


def test_an_unwritable_runs_dir_is_one_sentence(tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(ConfigError, match="run_dir"):
        run_folder.claim(str(tmp_path), "x", str(tmp_path / "file"))


def test_an_unwritable_output_is_one_sentence_and_leaves_no_partial_file(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigError, match="output"):
        run_folder.write_output(tmp_path / "file" / "page.html", "<html>", "output")
    run_folder.write_output(tmp_path / "out" / "page.html", "<html>", "output")
    assert (tmp_path / "out" / "page.html").read_text() == "<html>"
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["page.html"]


def test_compare_to_an_unwritable_output_exits_2_in_one_line(finished_run, tmp_path, capsys):
    run = finished_run
    (tmp_path / "file").write_text("x")
    capsys.readouterr()
    assert main(["compare", str(run), "--output", str(tmp_path / "file" / "page.html")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "output" in err


def test_evaluate_to_an_unwritable_output_exits_2_in_one_line_before_any_work(finished_run, tmp_path, capsys):
    run = finished_run
    before = {p.name: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    (tmp_path / "file").write_text("x")
    capsys.readouterr()
    assert main(["evaluate", "--run", str(run), "--output", str(tmp_path / "file" / "a.csv")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "output" in err
    assert {p.name: p.read_bytes() for p in run.rglob("*") if p.is_file()} == before


def test_a_metric_by_round_reads_both_tables_and_skips_what_is_not_a_score(tmp_path):
    from fedclust.run_folder import metric_by_round, rounds_level

    (tmp_path / "metrics.csv").write_text("round,nmi,loss\n1,0.5,1.0\n2,,0.9\n3,0.7,0.8\nx,0.9,1\n4,nan,1\n")
    (tmp_path / "diagnostics.csv").write_text("round,embed_kmeans_nmi\n1,0.41\n3,0.43\n")
    assert metric_by_round(tmp_path, "nmi") == {1: 0.5, 3: 0.7}  # unscored, unnumbered and nan rounds left out
    assert metric_by_round(tmp_path, "embed_kmeans_nmi") == {1: 0.41, 3: 0.43}
    assert metric_by_round(tmp_path / "missing", "nmi") == {}
    assert rounds_level({1: 0.5, 2: 0.7, 3: 0.6}, 1, 3) == pytest.approx((0.6, 0.1))
    assert rounds_level({1: 0.5, 3: 0.6}, 1, 3) is None  # round 2 missing: no level yet

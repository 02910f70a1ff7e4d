"""`python -m benchmarks run / report / list` (benchmarks/runner.py, report.py): runs go through the sweep's
queue (done points skipped, the commit kept when a point starts), and the report reads whatever the run
folders hold: done, running, checkpointed, pending and stale points alike."""

import csv
import json
import shutil
import subprocess

import pytest

from benchmarks.__main__ import main
from benchmarks.archive import archived
from benchmarks.common import git_commit
from benchmarks.experiment import load
from benchmarks.report import MARK, measure, report
from benchmarks.runner import run, select, state
from fedclust.sweep import fingerprint
from fedclust.sweep import points as sweep_points


def _fake_run(root, run, final=True, commit="abc123def456", record_fingerprint=None):
    """A run folder as `fedclust fit` leaves it (final.json once done, else a checkpoint) and the runner's
    record of its start."""
    folder = root / run.point.name
    (folder / "checkpoints").mkdir(parents=True)
    (folder / "checkpoints" / "last.ckpt").write_bytes(b"weights")
    (folder / "metrics.csv").write_text("round,nmi,seconds\n1,0.25,2.0\n2,0.5,4.0\n3,,9.0\n")
    if final:
        (folder / "final.json").write_text(json.dumps({"metrics": {"nmi": 0.75}, "rounds": 3}))
    (root / ".points").mkdir(exist_ok=True)
    record = {"fingerprint": record_fingerprint or fingerprint(run.point), "commit": commit,
              "command": "python -m benchmarks run tiny", "machine": "box | 2 cores", "started": "2026-11-25 10:00"}
    (root / ".points" / f"{run.point.name}.json").write_text(json.dumps(record))


@pytest.fixture
def tiny(write_experiment, tiny_spec, tmp_path):
    path = write_experiment(tiny_spec(grid={"seed": [1, 2, 3, 4]}, notes="Each run  as packaged.\nThe history.",
                                      metrics=["nmi", "rounds", "seconds_per_round", "seconds", "commit"]))
    return load(str(path), path.parent), tmp_path / "runs" / "tiny", tmp_path / "results"


def test_report_shows_partial_results_with_their_state_and_commit(tiny):
    exp, root, results = tiny
    done, checkpointed, pending, stale = exp.runs
    _fake_run(root, done)
    _fake_run(root, checkpointed, final=False)
    _fake_run(root, stale, record_fingerprint="made with other settings")
    assert [state(root, r) for r in exp.runs] == ["done", "checkpointed", "pending", "stale"]

    written = report(exp, root, results, "python -m benchmarks report tiny")

    assert [p.name for p in written] == ["tiny.csv", "tiny.md", "tiny.png"]
    rows = list(csv.DictReader((results / "tiny.csv").open()))
    assert [r["state"] for r in rows] == ["done", "checkpointed", "pending", "stale"]
    assert rows[0]["commit"] == "abc123def456" and rows[0]["nmi"] == "0.75" and rows[0]["paper_nmi"] == "0.5"
    assert rows[0]["rounds"] == "3" and float(rows[0]["seconds_per_round"]) == 4.0  # median of metrics.csv seconds
    assert float(rows[0]["seconds"]) == 15.0  # and their sum, the run's training time, where declared
    # the issues' columns: method, data (its name, from the overrides or the config file), the grid by short names
    assert list(rows[0])[:4] == ["method", "data", "seed", "state"]
    assert rows[0]["method"] == "k-FED" and rows[0]["data"] == "digits" and rows[0]["seed"] == "1"
    assert rows[1]["nmi"] == "0.5" and rows[1]["commit"] == "abc123def456"  # its last scored round so far
    assert rows[2]["nmi"] == rows[3]["nmi"] == rows[3]["commit"] == ""  # a stale folder is not this point's run
    text = (results / "tiny.md").read_text()
    assert text.startswith(MARK) and "`python -m benchmarks run tiny`" in text and "box | 2 cores" in text
    assert "| method | state | seed | nmi | paper nmi | rounds | seconds_per_round | commit |" in text
    assert "| k-FED | done | 1 | 0.7500 | 0.5000 | 3 | 4.0 | abc123def456 |" in text
    assert "| k-FED | pending | 3 |" in text and "1 of 4 runs done" in text
    assert "\n\nEach run as packaged.\n\nThe history.\n\n" in text  # the notes' paragraphs, each on its own


def test_a_pending_point_whose_stopped_folder_was_removed_shows_no_commit(tiny):
    exp, root, results = tiny
    stopped = exp.runs[0]
    _fake_run(root, stopped, final=False)
    shutil.rmtree(root / stopped.point.name)  # stopped as it started, its folder removed: its start record stays
    assert state(root, stopped) == "pending"
    report(exp, root, results, "python -m benchmarks report tiny")
    row = next(csv.DictReader((results / "tiny.csv").open()))
    assert row["state"] == "pending" and row["commit"] == row["nmi"] == ""


def test_a_damaged_start_record_makes_the_folder_stale_not_a_crash(tiny):
    exp, root, _ = tiny
    _fake_run(root, exp.runs[0])
    (root / ".points" / f"{exp.runs[0].point.name}.json").write_bytes(b"\x00{not json")
    assert state(root, exp.runs[0]) == "stale"


@pytest.mark.parametrize("damaged, nmi", [('{"metrics": [1, 2]}', 0.5), ("not json", 0.5),
                                          ('{"metrics": {"nmi": "high"}}', None)])
def test_a_damaged_final_json_is_read_without_a_crash(tmp_path, damaged, nmi):
    (tmp_path / "metrics.csv").write_text("round,nmi,seconds\n1,0.25,2.0\n2,0.5,4.0\n")
    (tmp_path / "final.json").write_text(damaged)
    found = measure(tmp_path)  # the last scored round instead, or no value for a cell that is not a number
    assert found["nmi"] == nmi and found["rounds"] == 2 and found["seconds_per_round"] == 3.0


def test_report_keeps_a_results_file_a_former_script_wrote(tiny):
    exp, root, results = tiny
    results.mkdir()
    (results / "tiny.md").write_text("# measured by hand\n")
    with pytest.raises(Exception, match="former script"):
        report(exp, root, results, "report")
    assert (results / "tiny.md").read_text() == "# measured by hand\n"
    report(exp, root, results, "report", replace=True)
    assert (results / "tiny.md").read_text().startswith(MARK)


def test_run_skips_done_points_and_records_the_commit_of_the_others(tiny, monkeypatch):
    exp, root, _ = tiny
    _fake_run(root, exp.runs[0])
    started = {}

    def fake_run_point(root_, point, env, group, console, record=None):
        started[point.name] = record
        point.status = "done"

    monkeypatch.setattr(sweep_points, "run_point", fake_run_point)
    runs = run(exp, root, "python -m benchmarks run tiny --only k-FED", slots=2, only=["k-FED"], nice=0)
    assert [r["status"] for r in runs] == ["done"] * 4
    assert sorted(started) == [r.point.name for r in exp.runs[1:]]  # the done point is not run again
    record = started[exp.runs[1].point.name]()  # made as the point starts
    assert record["commit"] == git_commit() and record["command"].endswith("--only k-FED")


def test_each_point_records_the_commit_and_time_it_starts_at(tiny, monkeypatch):
    """A queue that outlives a commit: the point started after it records the new commit, not the queue's first."""
    exp, root, _ = tiny
    commits = iter(["aaaaaaaaaaaa", "bbbbbbbbbbbb", "cccccccccccc", "dddddddddddd"])
    monkeypatch.setattr("benchmarks.runner.git_commit", lambda: next(commits))
    monkeypatch.setattr(sweep_points, "_run_fit", lambda cmd, env, out: 0)  # the fit itself: not run here
    run(exp, root, "python -m benchmarks run tiny", slots=1, nice=0)
    recorded = [sweep_points.start_record(root, r.point)["commit"] for r in exp.runs]
    assert recorded == ["aaaaaaaaaaaa", "bbbbbbbbbbbb", "cccccccccccc", "dddddddddddd"]


def test_list_and_an_unknown_label(tiny, capsys):
    exp, root, _ = tiny
    _fake_run(root, exp.runs[0])
    assert main(["--runs", str(root.parent), "list", str(exp.path)]) == 0
    assert f"{exp.runs[0].point.name}" in capsys.readouterr().out
    with pytest.raises(Exception, match="--only"):
        run(exp, root, "run", only=["KM"], nice=0)


@pytest.mark.slow  # three `fedclust fit` processes, each importing torch: ~60 s here; CI runs -m slow
def test_run_then_report_end_to_end_and_resume(write_experiment, tiny_spec, tmp_path):
    path = write_experiment(tiny_spec())  # k-FED on the digits, seeds 1 and 2
    exp, root, results = load(str(path), path.parent), tmp_path / "runs" / "tiny", tmp_path / "results"
    args = ["--runs", str(root.parent), "--results", str(results)]
    two = ["--only", "k-FED", "--nice", "0", "--slots", "2"]
    assert main([*args, "run", str(path), *two]) == 0
    assert main([*args, "report", str(path)]) == 0
    rows = list(csv.DictReader((results / "tiny.csv").open()))
    assert [r["state"] for r in rows] == ["done", "done"] and all(0 < float(r["nmi"]) <= 1 for r in rows)
    assert {r["commit"] for r in rows} == {git_commit()}
    assert (results / "tiny.png").stat().st_size > 0 and "| k-FED | 1 |" in (results / "tiny.md").read_text()

    first = root / exp.runs[0].point.name
    (first / "final.json").unlink()  # cut off after its last checkpoint: the same command resumes it
    mtime = (root / exp.runs[1].point.name / "final.json").stat().st_mtime
    assert main([*args, "run", str(path), *two]) == 0
    assert (first / "final.json").exists() and not first.with_name(first.name + ".incomplete-1").exists()
    assert (root / exp.runs[1].point.name / "final.json").stat().st_mtime == mtime  # done: not run again


def _rewrite_csv(path, change):
    rows = list(csv.DictReader(path.open()))
    for row in rows:
        change(row)
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def test_a_fresh_checkout_keeps_the_committed_rows_of_runs_whose_folders_are_gone(tiny, monkeypatch):
    exp, root, results = tiny
    _fake_run(root, exp.runs[0])
    _fake_run(root, exp.runs[1])
    report(exp, root, results, "report")
    first = list(csv.DictReader((results / "tiny.csv").open()))
    assert first[0]["fingerprint"] == fingerprint(exp.runs[0].point) and first[2]["fingerprint"] == ""
    shutil.rmtree(root)  # a new clone: the run folders were git-ignored, the results CSV was committed

    kept = archived(exp, results)
    assert sorted(kept) == [r.point.name for r in exp.runs[:2]]
    assert [state(root, r, kept) for r in exp.runs] == ["archived", "archived", "pending", "pending"]
    report(exp, root, results, "report")
    again = list(csv.DictReader((results / "tiny.csv").open()))
    assert again[:2] == first[:2]  # the same numbers and record, still done
    text = (results / "tiny.md").read_text()
    assert "| k-FED | done | 1 | 0.7500 |" in text and "2 of 4 runs done; 2 of them read back" in text

    started = []
    monkeypatch.setattr(sweep_points, "run_point", lambda root_, point, *a, **k: started.append(point.name))
    run(exp, root, "run", nice=0, kept=kept)
    assert started == [r.point.name for r in exp.runs[2:]]  # archived runs are not run again


def test_a_committed_row_made_with_other_settings_is_not_kept(tiny):
    exp, root, results = tiny
    _fake_run(root, exp.runs[0])
    report(exp, root, results, "report")
    shutil.rmtree(root)
    _rewrite_csv(results / "tiny.csv", lambda row: row.update(fingerprint="another config"))
    assert archived(exp, results) == {}
    (results / "tiny.csv").write_bytes(b"\xff\x00 not a csv")  # a damaged file is no archive, not a crash
    assert archived(exp, results) == {}


def test_a_row_written_before_fingerprints_is_checked_against_its_commits_config(tiny):
    exp, root, results = tiny
    _fake_run(root, exp.runs[0])
    _fake_run(root, exp.runs[1])
    report(exp, root, results, "report")
    shutil.rmtree(root)
    head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    commits = iter([head, "0000000000000000000000000000000000000000"])  # the second: a commit git does not know
    _rewrite_csv(results / "tiny.csv", lambda row: row.update(fingerprint="", commit=next(commits, "")))
    assert sorted(archived(exp, results)) == [exp.runs[0].point.name]


def test_where_runs_only_the_points_whose_grid_values_match(tiny, monkeypatch):
    exp, root, _ = tiny  # seeds 1-4
    assert [r.values["seed"] for r in select(exp, None, ["seed=2,4"])] == [2, 4]
    assert [r.values["seed"] for r in select(exp, None, ["seed=3.0"])] == [3]  # numbers compare as numbers
    started = []
    monkeypatch.setattr(sweep_points, "run_point", lambda root_, point, *a, **k: started.append(point.name))
    run(exp, root, "run", nice=0, where=["seed=1"])
    assert started == [exp.runs[0].point.name]
    for bad in ("colour=red", "seed", "seed="):
        with pytest.raises(Exception, match="--where"):
            select(exp, None, [bad])

"""`fedclust sweep --executor slurm | submitit-local | submitit-debug` (issue 46 item 6): the grid as one submitit job
array whose jobs make the same run folders as the local queue, skip what is done and resume what is checkpointed;
on Slurm, a point whose job is still queued or running is not submitted twice.

No Slurm cluster here: the Slurm test puts stand-ins for srun, sbatch and sacct on PATH (sbatch keeps the script it is
given), so what is checked is the job array fedclust asks submitit for, as sbatch would receive it."""

import json
import os
import stat

import pytest

from fedclust.__main__ import main
from fedclust.sweep import sweep

submitit = pytest.importorskip("submitit")

KFED = "configs/kfed_fmnist.yaml"
GRID = ["data.name=digits", "data.num_clients=2", "data.partition=iid", "seed=1,2"]


def _fake_fit(root, point, slot_env, group, console, record=None):
    """run_point without the fit: its start record, the folder a finished point leaves (final.json) and the
    ledger fields."""
    from fedclust.sweep import fingerprint

    (root / ".points").mkdir(parents=True, exist_ok=True)
    (root / ".points" / f"{point.name}.json").write_text(json.dumps({"fingerprint": fingerprint(point)}))
    folder = root / point.name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "final.json").write_text(json.dumps({"metrics": {"nmi": 0.5}, "rounds": 1}))
    point.status, point.metrics, point.seconds, point.log = "done", {"nmi": 0.5}, 0.1, "fake"


def test_debug_executor_runs_every_point_in_its_folder_and_skips_done_ones(tmp_path, monkeypatch):
    import fedclust.sweep.points as sweep_module

    calls = []
    monkeypatch.setattr(sweep_module, "run_point", lambda *a, **k: (calls.append(a[1].name), _fake_fit(*a, **k)))
    root = tmp_path / "sweep"
    runs = sweep(KFED, GRID, str(root), executor="submitit-debug")
    assert [(r["name"], r["status"]) for r in runs] == [("seed=1", "done"), ("seed=2", "done")]
    assert sorted(calls) == ["seed=1", "seed=2"]
    assert {r["name"] for r in json.loads((root / "sweep.json").read_text())} == {"seed=1", "seed=2"}
    assert set(json.loads((root / ".submitit" / "jobs.json").read_text())) == {"seed=1", "seed=2"}
    again = sweep(KFED, GRID, str(root), executor="submitit-debug")
    assert [r["status"] for r in again] == ["done", "done"] and len(calls) == 2  # nothing submitted again


def _stand_ins(bin_dir, sacct_lines):
    """srun, sbatch (keeps each script, answers job 4242, then 4243, ...) and sacct (answers sacct_lines)."""
    bin_dir.mkdir()
    scripts = {
        "srun": "#!/bin/sh\nexit 0\n",
        "sbatch": ('#!/bin/sh\nd=$(dirname "$0")\nn=$(ls "$d"/submitted-*.sh 2>/dev/null | wc -l)\n'
                   'cp "$1" "$d/submitted-$n.sh"\necho "Submitted batch job $((4242 + n))"\n'),
        "sacct": "#!/bin/sh\nprintf 'JobID|State|NodeList\\n" + "".join(f"{line}\\n" for line in sacct_lines)
                 + "'\n",
    }
    for name, text in scripts.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod((bin_dir / name).stat().st_mode | stat.S_IEXEC)


def test_slurm_job_array_asks_what_the_settings_say_and_resubmits_only_points_not_coming(tmp_path, monkeypatch):
    from submitit.slurm.slurm import SlurmJob

    bin_dir = tmp_path / "bin"
    _stand_ins(bin_dir, ["4242_0|RUNNING|node1", "4242_1|TIMEOUT|node2"])
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    SlurmJob.watcher.clear()
    root = tmp_path / "sweep"
    settings = {"slurm_partition": "gpu", "slurm_time": 90, "slurm_gpus": 1, "slurm_cpus": 6, "slurm_mem_gb": 32,
                "slurm_array_parallelism": 1, "slurm_account": "lab", "slurm_setup": ["module load cuda"],
                "slurm_wait": False}
    runs = sweep(KFED, GRID, str(root), executor="slurm", **settings)
    assert [r["status"] for r in runs] == ["submitted", "submitted"]
    script = (bin_dir / "submitted-0.sh").read_text()
    for line in ("#SBATCH --partition=gpu", "#SBATCH --time=90", "#SBATCH --gpus-per-node=1",
                 "#SBATCH --cpus-per-task=6", "#SBATCH --mem=32GB", "#SBATCH --array=0-1%1",
                 "#SBATCH --account=lab", "#SBATCH --nodes=1", "#SBATCH --ntasks-per-node=1", "module load cuda"):
        assert line in script, line
    assert json.loads((root / ".submitit" / "jobs.json").read_text()) == {"seed=1": "4242_0", "seed=2": "4242_1"}

    # seed=1's job still runs; seed=2's was cut off by its time limit: only seed=2 goes again
    SlurmJob.watcher.clear()
    listed = sweep(KFED, GRID, str(root), executor="slurm", dry_run=True, **settings)
    assert [r["status"] for r in listed] == ["submitted", "pending"]
    again = sweep(KFED, GRID, str(root), executor="slurm", **settings)
    assert [r["status"] for r in again] == ["submitted", "submitted"]
    second = (bin_dir / "submitted-1.sh").read_text()
    assert "#SBATCH --partition=gpu" in second and "--array" not in second  # one point: submitit sends one job
    assert json.loads((root / ".submitit" / "jobs.json").read_text()) == {"seed=1": "4242_0", "seed=2": "4243"}


def test_cli_takes_the_executor_and_slurm_settings(tmp_path, monkeypatch, capsys):
    """The command line (and its torch-free precheck) knows --executor and --slurm_*."""
    import fedclust.sweep.points as sweep_module

    monkeypatch.setattr(sweep_module, "run_point", _fake_fit)
    root = tmp_path / "sweep"
    assert main(["sweep", "--config", KFED, *[a for g in GRID for a in ("--grid", g)], "--sweep_dir", str(root),
                 "--executor", "submitit-debug", "--slurm_time", "30", "--slurm_gpus", "0",
                 "--slurm_setup", '["module load cuda"]']) == 0
    assert (root / "seed=2" / "final.json").exists()
    assert main(["sweep", "--config", KFED, "--grid", "seed=1", "--sweep_dir", str(root),
                 "--executor", "kubernetes"]) == 2
    err = capsys.readouterr().err
    assert "executor" in err and "slurm" in err and "Traceback" not in err


@pytest.mark.slow  # two `fedclust fit` processes started by submitit's local executor: 1-3 minutes here
def test_local_executor_makes_the_run_folders_and_resumes(tmp_path):
    root = tmp_path / "sweep"
    settings = {"slurm_gpus": 0, "slurm_cpus": 1, "slurm_time": 20}
    runs = sweep(KFED, GRID, str(root), executor="submitit-local", **settings)
    assert [r["status"] for r in runs] == ["done", "done"], runs
    nmi = {r["name"]: r["metrics"]["nmi"] for r in runs}
    for name in ("seed=1", "seed=2"):
        folder = root / name
        assert (folder / "config.yaml").exists() and (folder / "metrics.csv").exists()
        assert json.loads((folder / "final.json").read_text())["metrics"]["nmi"] == pytest.approx(nmi[name])
    assert (root / "logs" / "seed=1.log").exists()
    # cut off after its checkpoint: the next call resumes seed=1 in place and leaves seed=2 alone
    (root / "seed=1" / "final.json").unlink()
    again = sweep(KFED, GRID, str(root), executor="submitit-local", **settings)
    assert [r["status"] for r in again] == ["done", "done"]
    assert not (root / "seed=1.incomplete-1").exists()
    assert {r["name"]: r["metrics"]["nmi"] for r in again} == pytest.approx(nmi)

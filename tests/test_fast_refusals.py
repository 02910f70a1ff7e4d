"""Issue 25, point 4: a bad input that needs only the config, the file system, a file's header or a known data
set's size is refused before torch and Lightning are imported, in well under the 3 s this test allows
(about 0.5 s on an idle 2-core machine; the real run used to take 5-20 s to say the same), with the very
sentence the run prints, and nothing left behind.

CASES is the one table: each case is timed as the user meets it (`python -m fedclust ...` in a subprocess,
from an empty folder), and run through the real parser and fit() / evaluate() with the first pass switched off,
which must print the same sentence and leave the folder empty too.
"""

from __future__ import annotations

import gzip
import io
import os
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest
import yaml

from fedclust.config_files import packaged_configs
from fedclust.run_checks import no_cuda_for_certain
from tests.helpers.cli import fill
from tests.helpers.known_data import write_checkpoint_stub

LIMIT_S = 3.0
QUICK = ["fit", "--config", "ccfc_digits"]

DIAGNOSE_KFED = ("diagnose = True is not valid: diagnostics need a method that learns an embedding, and KFED clusters "
                 "the input itself (the methods with one: CCFC, ")
# (id, argv, a piece of the one-line message); {d} is the prepared folder of the `files` fixture
CASES = [
    ("pshift_clients", [*QUICK, "--data.num_clients", "5"],
     "data.num_clients = 5 is not valid: equal to the number of classes (10) for the pshift partition."),
    ("classes_per_client", [*QUICK, "--data.partition", "pathological", "--data.num_classes_per_partition", "11"],
     "data.num_classes_per_partition = 11 is not valid: at most the number of classes (10)."),
    ("disjoint", [*QUICK, "--data.partition", "pathological", "--data.class_assignment_mode", "disjoint",
                  "--data.num_classes_per_partition", "3"], "num_clients (10) x num_classes_per_partition"),
    ("clients_above_samples", [*QUICK, "--data.partition", "iid", "--data.num_clients", "2000"],
     "data.num_clients = 2000 is not valid: at most the number of samples (1797)."),
    ("dirichlet_min_size", [*QUICK, "--data.partition", "dirichlet", "--data.min_partition_size", "500"],
     "data.min_partition_size = 500 is not valid: at most N / num_clients = 179"),
    ("k_above_smallest_client", [*QUICK, "--method.num_clusters", "200"],
     "method.init_args.num_clusters = 200 is not valid: at most the 177 samples of the smallest client"),
    ("k_local_above_smallest_client", ["fit", "--config", "kfed_fmnist", "--data.root", "{d}/small_fmnist",
                                       "--method.k_local", "40"], "at most the 35 samples of the smallest client"),
    ("k_above_samples", [*QUICK, "--method", "KMeans", "--method.num_clusters", "2000", "--data.partition", "iid",
                         "--data.num_clients", "1"],
     "method.init_args.num_clusters = 2000 is not valid: at most the 1797"),
    ("unknown_data_set", [*QUICK, "--data.name", "mnistt"], "data.name = 'mnistt' is not valid: one of digits"),
    ("unknown_data_option", [*QUICK, "--data.options", "{size: 3}"],
     "data.options.size = 3 is not valid: not an option of digits (it takes none)."),
    ("missing_root", ["fit", "--config", "ccfc_mnist", "--data.root", "{d}/nowhere"], "MNIST not found in {d}/nowhere"),
    ("missing_files", ["fit", "--config", "ccfc_mnist", "--data.root", "{d}/empty"], "MNIST not found in {d}/empty"),
    ("missing_cifar", ["fit", "--config", "ccfc_cifar10", "--data.root", "{d}/nowhere"],
     "CIFAR-10 not found (or corrupted) in {d}/nowhere/cifar-10-batches-py"),
    ("truncated_idx", ["fit", "--config", "ccfc_fmnist", "--data.root", "{d}/truncated"],
     "train-images-idx3-ubyte holds 168 bytes where its IDX header (20, 4, 4) needs 336"),
    ("truncated_gzip", ["fit", "--config", "ccfc_fmnist", "--data.root", "{d}/truncated_gz"],
     "train-images-idx3-ubyte.gz is a damaged gzip file"),
    ("runs_dir_under_a_file", [*QUICK, "--runs_dir", "{d}/a_file/runs"],
     "runs_dir = '{d}/a_file/runs' is not valid: a folder that can be created ({d}/a_file is a file)."),
    ("run_dir_taken", [*QUICK, "--run_dir", "{d}/taken"], "run_dir = '{d}/taken' is not valid: an empty or new"),
    ("gpu_on_a_cpu_machine", [*QUICK, "--fabric.accelerator", "cuda"],
     "fabric.accelerator = 'cuda' is not valid: cpu or auto: this machine has no CUDA GPU."),
    ("resume_without_checkpoint", [*QUICK, "--resume", "{d}/empty"],
     "resume = '{d}/empty' is not valid: a run folder holding checkpoints/last.ckpt."),
    ("resume_truncated_checkpoint", ["fit", "--resume", "{d}/truncated_run"],
     "a complete checkpoint written by fedclust; this file is truncated or damaged"),
    ("evaluate_truncated_checkpoint", ["evaluate", "--run", "{d}/truncated_run"],
     "checkpoint = '{d}/truncated_run/checkpoints/last.ckpt' is not valid: a complete checkpoint"),
    ("evaluate_unknown_data_name", ["evaluate", "--run", "{d}/mnist_run", "--data_name", "mnistt"],
     "data.name = 'mnistt' is not valid: one of digits, mnist"),
    ("evaluate_missing_data", ["evaluate", "--run", "{d}/mnist_run"], "MNIST not found in {d}/nowhere"),
    ("diagnose_without_embedding", [*QUICK, "--method", "KFED", "--diagnose", "true"], DIAGNOSE_KFED),
    ("evaluate_diagnose_without_embedding", ["evaluate", "--run", "{d}/kfed_run", "--diagnose", "true"],
     DIAGNOSE_KFED),
]
IDS = [case[0] for case in CASES]


def _write_idx(path: Path, array: np.ndarray) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(bytes([0, 0, 0x08, array.ndim]) + np.asarray(array.shape, ">i4").tobytes()
                     + array.astype(np.uint8).tobytes())


def _idx_set(folder: Path, train_per_class: int, test_per_class: int) -> None:
    for stem, per_class in (("train", train_per_class), ("t10k", test_per_class)):
        labels = np.repeat(np.arange(10), per_class)
        _write_idx(folder / f"{stem}-images-idx3-ubyte", np.zeros((len(labels), 4, 4)))
        _write_idx(folder / f"{stem}-labels-idx1-ubyte", labels)


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("fast_refusals")
    _idx_set(d / "small_fmnist", 30, 5)  # 350 samples: 35 per pshift client
    _idx_set(d / "truncated", 2, 1)
    images = d / "truncated" / "train-images-idx3-ubyte"
    (d / "truncated_gz").mkdir()
    for file in (d / "truncated").iterdir():
        packed = gzip.compress(file.read_bytes())
        (d / "truncated_gz" / f"{file.name}.gz").write_bytes(packed[:len(packed) // 2] if file == images else packed)
    images.write_bytes(images.read_bytes()[:168])  # half of its 20 images
    (d / "empty").mkdir()
    (d / "a_file").write_text("not a folder")
    (d / "taken").mkdir()
    (d / "taken" / "metrics.csv").write_text("an earlier run's")
    run = d / "truncated_run"
    (run / "config.yaml").parent.mkdir()
    (run / "config.yaml").write_text(_resolved("ccfc_digits"))
    checkpoint = run / "checkpoints" / "last.ckpt"
    write_checkpoint_stub(checkpoint)
    checkpoint.write_bytes(checkpoint.read_bytes()[:-30])  # cut short: no central directory
    run = d / "mnist_run"  # a saved run whose data is gone
    (run / "checkpoints").mkdir(parents=True)
    (run / "config.yaml").write_text(_resolved("ccfc_mnist", "--data.root", str(d / "nowhere")))
    import torch

    torch.save({"model": {}, "server": {}, "clients": {}, "done": 1}, run / "checkpoints" / "last.ckpt")
    _kfed_run(d / "kfed_run")  # a whole saved run of a method without an embedding
    return d


def _kfed_run(folder: Path) -> None:
    from fedclust.methods import KFED
    from fedclust.run import FabricConfig, fit
    from tests.conftest import tiny_data
    from tests.helpers.tiny import tiny_run_config

    method, data = KFED(k_local=10), tiny_data(num_clients=3)
    fit(method, data, fabric=FabricConfig(accelerator="cpu"), run_dir=str(folder), progress=False,
        config_text=tiny_run_config(method, data))


def _resolved(config: str, *overrides: str) -> str:
    """A packaged config as fit() saves it in a run folder (what --resume and evaluate read back)."""
    from fedclust.parsers import parse
    from fedclust.run import fit_parser

    parser = fit_parser()
    args = ["--config", str(packaged_configs()[config]), *overrides]
    return parser.dump(parse(parser, args), skip_unset=False)


def _skip_where_not_judged(case_id: str) -> None:
    if case_id == "gpu_on_a_cpu_machine" and not no_cuda_for_certain():
        pytest.skip("this machine may have a GPU: the first pass leaves the question to torch")


@pytest.mark.parametrize(("case_id", "argv", "needle"), CASES, ids=IDS)
def test_refused_within_the_limit_without_torch(files, tmp_path, case_id, argv, needle):
    _skip_where_not_judged(case_id)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[1]),
                                                         os.environ.get("PYTHONPATH", "")])}
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "fedclust", *fill(argv, files)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120, env=env)
    seconds = time.perf_counter() - start
    lines = [line for line in proc.stderr.splitlines() if not line.startswith("import time:")]
    imported = {line.split("|")[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")}
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr[-2000:]
    assert lines[0].startswith("fedclust: error: ") and fill([needle], files)[0] in lines[0], lines[0]
    assert not {"torch", "lightning"} & imported, f"{case_id} imported torch or Lightning before refusing"
    assert list(tmp_path.iterdir()) == [], "a refused run left files behind"
    assert seconds < LIMIT_S, f"{case_id} took {seconds:.2f} s to refuse (limit {LIMIT_S} s)"


@pytest.fixture
def without_first_pass(monkeypatch, tmp_path):
    """`fedclust` as it is without fedclust/precheck/: the real parser, then fit() / evaluate()."""
    from fedclust import precheck

    monkeypatch.setattr(precheck, "check", lambda command, args: None)
    monkeypatch.chdir(tmp_path)


@pytest.mark.parametrize(("case_id", "argv", "needle"), CASES, ids=IDS)
def test_the_run_says_the_same_and_leaves_nothing(files, without_first_pass, tmp_path, capsys, case_id, argv,
                                                  needle):
    from fedclust import precheck
    from fedclust.__main__ import _resume_argv, main
    from fedclust.config_files import expand_config_args
    from fedclust.errors import FedclustError

    _skip_where_not_judged(case_id)
    argv = fill(argv, files)
    assert main(argv) == 2
    said = capsys.readouterr().err.strip().splitlines()
    assert said and fill([needle], files)[0] in said[-1], said
    with pytest.raises(FedclustError) as first_pass:
        precheck.judge(argv[0], expand_config_args(_resume_argv(argv))[1:])
    assert said[-1] == f"fedclust: error: {first_pass.value}"  # one rule, one sentence
    assert list(tmp_path.iterdir()) == [], "a refused run left files behind"


def test_a_late_refusal_removes_the_runs_folder_it_made(run_fit, tmp_path, monkeypatch):
    """A refusal the first pass cannot make (a data set it does not know) still leaves no empty runs/ behind."""
    from fedclust.errors import ConfigError
    from fedclust.run import fit
    from tests.conftest import tiny_ccfc, tiny_data

    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match="data.options.num_clusters"):
        fit(tiny_ccfc(), tiny_data(name="gaussian", options={"num_clusters": 0}), progress=False,
            runs_dir="runs/nested")
    assert list(tmp_path.iterdir()) == []


def test_an_unsafe_checkpoint_is_refused_before_any_data_or_model(files, tmp_path, monkeypatch, capsys):
    """A checkpoint's content needs torch to judge, but it is judged as soon as it is read: fit --resume and
    evaluate refuse a crafted one before loading data or building the model."""
    import argparse

    import torch

    from fedclust import run as fit_module
    from fedclust import saved_run
    from fedclust.__main__ import main

    run = tmp_path / "crafted"
    (run / "checkpoints").mkdir(parents=True)
    (run / "config.yaml").write_text(_resolved("ccfc_digits"))
    torch.save({"model": argparse.Namespace(), "server": {}, "clients": {}, "done": 1},
               run / "checkpoints" / "last.ckpt")

    def no_data(*args, **kwargs):
        raise AssertionError("data loaded before the checkpoint was judged")

    monkeypatch.setattr(fit_module, "build_federated_data", no_data)  # fit() builds there
    monkeypatch.setattr(saved_run, "build_federated_data", no_data)  # and load_run (evaluate) there
    for argv in (["fit", "--resume", str(run)], ["evaluate", "--run", str(run)]):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert err.endswith("this file asks to load argparse.Namespace and is refused."), err


def test_the_known_sizes_are_the_data_sets_own():
    """digits' table against scikit-learn; Fashion-MNIST's counts (read from its label files) against the
    loaded labels where the Debian package is installed."""
    import torch

    from fedclust.data import catalog
    from fedclust.data.datasets import DEBIAN_FASHION_MNIST, load_dataset

    for split in ("all", "train", "test"):
        labels = load_dataset("digits", split=split).y
        facts = catalog.dataset_facts("digits", None, split)
        assert facts.class_counts == tuple(torch.bincount(labels).tolist()) and facts.num_classes == 10
    if DEBIAN_FASHION_MNIST.is_dir():
        facts = catalog.dataset_facts("fmnist", None, "all")
        assert facts.class_counts == tuple(torch.bincount(load_dataset("fmnist").y).tolist())
    assert catalog.dataset_facts("gaussian", None, "all") is None  # not known: the run judges it


def test_the_files_looked_for_are_torchvisions():
    """The files the first pass requires are those torchvision's constructors check (every part's, whatever
    the split), so a data set it calls missing is one torchvision refuses too."""
    from torchvision.datasets import CIFAR10, CIFAR100, STL10

    from fedclust.data import catalog

    for name, cls in (("cifar10", CIFAR10), ("cifar100", CIFAR100), ("cifar100_20", CIFAR100), ("stl10", STL10)):
        entry = catalog.TORCHVISION_SETS[name]
        meta = [cls.meta["filename"]] if hasattr(cls, "meta") else []
        assert entry.folder == cls.base_folder and entry.cls == cls.__name__
        assert set(entry.files) == {f for f, _ in cls.train_list + cls.test_list} | set(meta)


@pytest.mark.parametrize("partition", ["pshift", "iid", "iid_balanced"])
def test_client_sizes_known_without_data_are_the_partitioners(partition):
    import torch

    from fedclust.data.checks import client_sizes
    from fedclust.data.config import DataConfig

    rng = np.random.default_rng(0)
    for trial in range(40):
        m = int(rng.integers(2, 12))
        counts = tuple(int(c) for c in rng.integers(1, 60, size=m))
        p = float(rng.choice([0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 1.0, rng.random()]))
        labels = torch.from_numpy(np.repeat(np.arange(m), counts))
        parts = DataConfig(partition=partition, p=p).partitioner()(labels, m, seed=trial)
        assert client_sizes(partition, counts, m, p) == [len(part) for part in parts], (counts, p)


@pytest.mark.parametrize("gz", [False, True])
def test_an_idx_files_header_tells_what_reading_it_would(tmp_path, gz):
    """idx_file_layout (header and size only) gives the shape read_idx gives, and refuses what read_idx
    refuses with read_idx's sentence."""
    from fedclust.data.idx import idx_file_layout, read_idx
    from fedclust.errors import DataFileError

    raw = bytes([0, 0, 0x08, 3]) + np.asarray((6, 4, 5), ">i4").tobytes() + bytes(range(120))
    damaged = {"whole": raw, "truncated": raw[:-7], "padded": raw + b"\0", "header": b"\1\2" + raw[2:]}
    for how, data in damaged.items():
        path = tmp_path / f"{how}.idx"
        path.write_bytes(gzip.compress(data) if gz else data)
        if how == "whole":
            assert idx_file_layout(path) == read_idx(path).shape == (6, 4, 5)
            continue
        with pytest.raises(DataFileError) as read:
            read_idx(path)
        with pytest.raises(DataFileError) as judged:
            idx_file_layout(path)
        assert str(judged.value) == str(read.value)


def test_a_gpu_is_refused_only_where_there_is_certainly_none(monkeypatch):
    from fedclust import run_checks

    monkeypatch.setattr(run_checks.sys, "platform", "linux")
    monkeypatch.setattr(run_checks.shutil, "which", lambda name: None)
    monkeypatch.setattr(run_checks.Path, "exists", lambda self: False)
    monkeypatch.setattr(run_checks.Path, "glob", lambda self, pattern: iter(()))
    assert run_checks.no_cuda_for_certain()
    for trace in ("/proc/driver/nvidia", "/dev/kfd", "/dev/dxg"):
        monkeypatch.setattr(run_checks.Path, "exists", lambda self, trace=trace: str(self) == trace)
        assert not run_checks.no_cuda_for_certain(), trace
    monkeypatch.setattr(run_checks.Path, "exists", lambda self: False)
    monkeypatch.setattr(run_checks.shutil, "which", lambda name: "/usr/bin/nvidia-smi")
    assert not run_checks.no_cuda_for_certain()
    monkeypatch.setattr(run_checks.shutil, "which", lambda name: None)
    monkeypatch.setattr(run_checks.sys, "platform", "darwin")
    assert not run_checks.no_cuda_for_certain()


def test_a_folder_this_user_cannot_write_in_is_named_by_its_field(tmp_path, monkeypatch):
    from fedclust import run_checks
    from fedclust.errors import ConfigError

    monkeypatch.setattr(run_checks.os, "access", lambda path, mode: False)  # root may write anywhere: pretend
    with pytest.raises(ConfigError, match=r"^runs_dir = .* a folder this user can write in \("):
        run_checks.check_run_location(str(tmp_path / "runs"), None, None)
    with pytest.raises(ConfigError, match=r"^run_dir = .* a folder this user can write in"):
        run_checks.check_run_location("runs", str(tmp_path), None)


def test_the_schema_knows_which_init_arguments_give_the_local_clusters():
    from fedclust import cli_schema

    classes = cli_schema.load()["method"]["classes"]
    assert classes["KFED"]["local_clusters"] == ["k_local", "num_clusters"]  # k_local or num_clusters
    assert classes["CCFC"]["local_clusters"] == ["num_clusters"]
    assert classes["KMeans"]["local_clusters"] == []  # no local clustering
    assert classes["KMeans"]["num_clusters"] == ["num_clusters"]
    assert classes["KFED"]["defaults"]["k_local"] is None


def test_a_checkpoint_that_is_a_whole_archive_passes(tmp_path):
    from fedclust.run_checks import check_checkpoint_file

    path = tmp_path / "last.ckpt"
    write_checkpoint_stub(path)
    check_checkpoint_file(path)
    with zipfile.ZipFile(io.BytesIO(path.read_bytes())) as archive:
        assert archive.namelist() == ["last/data.pkl"]


def test_compare_usage_names_the_subcommand_and_sweep_folders():
    from fedclust.compare import compare_parser

    usage = compare_parser().format_usage()
    assert usage.startswith("usage: fedclust compare ") and "SWEEP_DIR" in usage


def test_a_config_files_unknown_key_is_judged_against_the_schema(tmp_path, monkeypatch, capsys):
    """A fit config's top-level keys are judged by the first pass against cli_schema.json (fit()'s arguments as
    its parser has them: no hand-kept list to forget a new one in); where that pass steps aside (a stale
    schema), the real parser's refusal is one sentence too."""
    from fedclust import precheck
    from fedclust.__main__ import main

    path = tmp_path / "typo.yaml"
    path.write_text(yaml.safe_dump({"method": "CCFC", "datta": {"p": 1}}))
    assert main(["fit", "--config", str(path)]) == 2
    assert "typo.yaml: datta = {'p': 1} is not valid: a fit setting (closest: data)." in capsys.readouterr().err
    monkeypatch.setattr(precheck, "check", lambda command, args: None)
    assert main(["fit", "--config", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == ("fedclust: error: datta.p is not a setting (closest: data.p, data, data.split; --help lists them "
                   "all).")

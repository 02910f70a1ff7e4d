"""The run level's own checks on `fit` and `evaluate` arguments that need no data, model or torch: values,
the machine (a GPU asked for where there is none, an optional logger not installed), the run folders and a
checkpoint's archive.

Torch-free, so fedclust.precheck calls them on the command line's values before torch is imported; fit(),
evaluate(), run_folder.py, the checkpoint loader and the kNN probe call the same functions, so a refusal
reads the same both ways. What needs the loaded run or data (k at most the train samples) is judged where
that is known.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
import zipfile
from collections.abc import Sequence
from pathlib import Path

from fedclust.errors import ConfigError
from fedclust.registry import METHODS

CHECKPOINT = Path("checkpoints/last.ckpt")  # a run folder's resumable checkpoint
LOCK = ".lock"  # a run folder's lock file (fedclust/run_folder.py), the one file a new run folder may hold


def check_embedding_points(embedding_points: int) -> None:
    if embedding_points < 10:
        raise ConfigError("embedding_points", embedding_points, "at least 10 samples for the t-SNE picture")


def check_device_count(devices: int | str) -> None:
    """fabric.devices as a number (a string such as "auto" is Lightning's to judge)."""
    if isinstance(devices, int) and devices < 1:
        raise ConfigError("fabric.devices", devices, "a positive number of devices (or auto)")


def check_cuda_request(accelerator: str, devices: int | str, cuda_devices: int) -> None:
    """Asking for GPUs on a machine without them (or more than it has) is one sentence, not Lightning's
    traceback. fit() passes torch.cuda.device_count(); the precheck passes 0 where no_cuda_for_certain()."""
    if accelerator not in ("cuda", "gpu"):
        return
    if cuda_devices == 0:
        raise ConfigError("fabric.accelerator", accelerator, "cpu or auto: this machine has no CUDA GPU")
    if isinstance(devices, int) and devices > cuda_devices:
        raise ConfigError("fabric.devices", devices, f"at most the {cuda_devices} GPUs here")


def no_cuda_for_certain() -> bool:
    """Whether this machine certainly has no GPU torch could use, known without importing torch: a Linux
    machine with no NVIDIA driver (/proc/driver/nvidia, /dev/nvidia*, nvidia-smi), no ROCm device
    (/dev/kfd: ROCm builds of torch answer to "cuda") and no WSL GPU (/dev/dxg). Anything else (another
    system, any trace of a driver) is "not certain": torch decides in the run."""
    if not sys.platform.startswith("linux"):
        return False
    traces = [Path("/proc/driver/nvidia"), Path("/dev/kfd"), Path("/dev/dxg"), *Path("/dev").glob("nvidia*")]
    return not any(p.exists() for p in traces) and shutil.which("nvidia-smi") is None


def require_logger(kind: str) -> None:
    """One sentence if the optional package behind `kind` is not installed."""
    module = {"wandb": "wandb", "tensorboard": "tensorboard"}.get(kind)
    if module and importlib.util.find_spec(module) is None:
        raise ConfigError("logger", kind, f"csv, or install the optional extra first: pip install 'fedclust[{kind}]'")


def launcher() -> str:
    """Who started this process, read from the environment the way Lightning picks its cluster environment
    (lightning.fabric.connector._choose_and_init_cluster_environment, in that order): "torchrun" (it sets
    TORCHELASTIC_RUN_ID), "slurm" (srun sets SLURM_NTASKS; Lightning ignores Slurm in a job named bash or
    interactive: its ``_is_srun_used``, rewritten because ``SLURMEnvironment.detect()`` also warns), or
    "lightning" (Fabric's own launcher, or nodes started by hand with NODE_RANK). LSF and MPI are not
    covered: there every process would take itself for rank 0."""
    if "TORCHELASTIC_RUN_ID" in os.environ:  # torch.distributed.is_torchelastic_launched(), without torch
        return "torchrun"
    if "SLURM_NTASKS" in os.environ and os.environ.get("SLURM_JOB_NAME") not in ("bash", "interactive"):
        return "slurm"
    return "lightning"


def rank_zero_before_launch() -> bool:
    """Whether this process will be global rank 0, known before Fabric exists (rank 0 alone claims the run
    folder and builds the loggers, which Fabric's constructor takes): RANK under torchrun, SLURM_PROCID
    under Slurm, else LOCAL_RANK and NODE_RANK (or GROUP_RANK) as Lightning's own launcher numbers them."""
    env, which = os.environ, launcher()
    if which == "torchrun":
        return env.get("RANK", "0") == "0"
    if which == "slurm":
        return env.get("SLURM_PROCID", "0") == "0"
    return env.get("LOCAL_RANK", "0") == "0" and env.get("NODE_RANK", env.get("GROUP_RANK", "0")) == "0"


# ---------------------------------------------------------------- run folders and checkpoints


def check_run_location(runs_dir: str, run_dir: str | None, resume: str | None) -> None:
    """Where fit() will write, judged before it claims anything: --resume a folder holding a checkpoint;
    --run_dir a new or empty folder that can be created; else a --runs_dir new run folders can be made in."""
    if resume is not None:
        check_resume_folder(resume)
    elif run_dir is not None:
        check_new_run_dir(Path(run_dir))
        check_can_create(Path(run_dir), "run_dir")
    else:
        check_can_create(Path(runs_dir), "runs_dir")


def check_saved_run(run: str | Path) -> None:
    """A run folder evaluate (or a representations data set) can read back."""
    if not (Path(run) / CHECKPOINT).exists() or not (Path(run) / "config.yaml").is_file():
        raise ConfigError("run", str(run), f"a run folder holding config.yaml and {CHECKPOINT}")


def check_resume_folder(resume: str) -> None:
    if not (Path(resume) / CHECKPOINT).exists():
        raise ConfigError("resume", resume, f"a run folder holding {CHECKPOINT}")


def check_new_run_dir(folder: Path) -> None:
    """An explicit run folder must be new or empty: an earlier run's files are never overwritten."""
    if folder.exists() and not folder.is_dir():
        raise ConfigError("run_dir", str(folder), "a folder path (a file has that name)")
    if folder.exists() and any(p.name != LOCK for p in folder.iterdir()):
        raise ConfigError("run_dir", str(folder), "an empty or new folder (pass --resume to continue that run)")


def check_can_create(folder: Path, field: str) -> None:
    """`folder` exists as a folder, or can be created: its nearest existing ancestor is a folder this user
    can write in (os.access: the kernel's own answer, read-only file systems included)."""
    folder = folder.expanduser().absolute()
    try:
        existing = next(p for p in (folder, *folder.parents) if p.exists())
    except OSError:  # an ancestor this user cannot even look into: mkdir will say what it says
        return
    if not existing.is_dir():
        raise ConfigError(field, str(folder), f"a folder that can be created ({existing} is a file)")
    if existing != folder and not os.access(existing, os.W_OK | os.X_OK):
        raise ConfigError(field, str(folder), f"a folder this user can write in ({existing} is not writable)")
    if existing == folder and not os.access(folder, os.W_OK | os.X_OK):
        raise ConfigError(field, str(folder), "a folder this user can write in")


def check_checkpoint_file(path: Path) -> None:
    """A checkpoint is read with torch.load (callbacks/checkpoint.py), which writes one zip archive;
    a file that is not a complete one (cut short by a full disk or an interrupted copy) is refused here,
    torch-free, before any work."""
    path = Path(path)
    try:
        with zipfile.ZipFile(path) as archive:
            complete = any(name.endswith("/data.pkl") or name == "data.pkl" for name in archive.namelist())
    except (zipfile.BadZipFile, OSError, ValueError):
        complete = False
    if not complete:
        raise ConfigError("checkpoint", str(path), "a complete checkpoint written by fedclust; this file is "
                          "truncated or damaged (not a whole zip archive); resume from an intact copy or start "
                          "a new run")


def check_diagnose(method: str, embeds: bool) -> None:
    """`--diagnose true` (fit and evaluate): diagnostics describe a learned representation, so a method that keeps
    the contract's `embed` (the input itself, flattened) is refused in one sentence naming the methods that learn
    one. `embeds`: the class's own answer in a run (fedclust.callbacks.diagnostics.has_embedding), the registry's
    record of it in the torch-free first pass (fedclust.precheck.facts)."""
    if embeds:
        return
    having = ", ".join(name for name, entry in METHODS.items() if entry.embeds)
    raise ConfigError("diagnose", True, f"diagnostics need a method that learns an embedding, and {method} clusters "
                      f"the input itself (the methods with one: {having})")


def check_evaluate_settings(split: str, data_name: str | None, per_client: bool, knn: Sequence[int] | None) -> None:
    """evaluate's arguments, before loading anything."""
    if per_client and (split != "same" or data_name is not None):
        raise ConfigError("per_client", True, 'split "same" without data_name (the clients are the run\'s own)')
    if knn is not None:
        check_ks(knn)  # k larger than the train split is checked once it is known


def check_ks(ks: Sequence[int], num_train: int | None = None) -> list[int]:
    """The kNN probe's k values, validated: each a positive integer, at most the number of train samples."""
    if not ks:
        raise ConfigError("knn", list(ks), "at least one k, e.g. --knn 3 5 7 9 100 1000 7000")
    for k in ks:
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ConfigError("knn", k, "a positive integer number of neighbours")
        if num_train is not None and k > num_train:
            raise ConfigError("knn", k, f"at most the number of train samples ({num_train})")
    return list(ks)

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
import io
import os
import pickletools
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


def check_start_folder(init_from: str) -> None:
    """A run that starts from another's model (fedclust/branch.py) needs a finished one: final.json says it ended
    (a running run's checkpoint still moves)."""
    missing = [str(name) for name in ("config.yaml", CHECKPOINT, "final.json")
               if not (Path(init_from) / name).is_file()]
    if missing:
        raise ConfigError("init_from", init_from, f"a finished run folder (it lacks {', '.join(missing)}; a run still "
                          "going or stopped early has no final.json)")
    check_checkpoint_file(Path(init_from) / CHECKPOINT)


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
    """A checkpoint is read with torch.load (callbacks/checkpoint.py) and is untrusted, so it is judged before,
    torch-free: a file that is not a whole checkpoint torch writes (a zip archive, or the old-style pickle torch
    wrote before 1.6), cut short by a full disk or an interrupted copy, is refused; so is one that asks to load
    code, where torch's safe loader (weights_only) certainly would refuse it, with the sentence the loader's
    refusal gets (the loader still judges every file this lets through)."""
    path = Path(path)
    try:
        pickled = _zip_pickle(path) if zipfile.is_zipfile(path) else _old_style_pickle(path)
    except (zipfile.BadZipFile, OSError, ValueError, EOFError):
        pickled = None
    if pickled is None:
        raise ConfigError("checkpoint", str(path), "a complete checkpoint written by fedclust; this file is "
                          "truncated or damaged (neither a whole zip archive nor an intact old-style torch pickle); "
                          "resume from an intact copy or start a new run")
    code = code_asked_for(pickled)
    if code is not None:
        raise code_refusal(path, code)


def code_refusal(path: Path, what: str) -> ConfigError:
    """The refusal of a checkpoint that asks to load `what` (a class or function), from here or from torch's loader."""
    return ConfigError("checkpoint", str(path), "a checkpoint holding only tensors, numbers, strings and containers; "
                      f"this file asks to load {what} and is refused")


def _zip_pickle(path: Path) -> bytes | None:
    """The object pickle of a checkpoint in torch's zip layout (ARCHIVE/data.pkl), None when there is none."""
    with zipfile.ZipFile(path) as archive:
        name = next((n for n in archive.namelist() if n.endswith("/data.pkl") or n == "data.pkl"), None)
        return None if name is None else archive.read(name)


_OLD_STYLE_MAGIC = 0x1950A86A20F9469CFC6C  # torch.serialization.MAGIC_NUMBER, the first pickle of an old-style file


def _old_style_pickle(path: Path) -> bytes | None:
    """The object pickle of an old-style checkpoint (before torch 1.6: the magic number, the protocol version and
    the system info pickled one after the other, then the object, then the storages' keys and bytes); None for a
    file that is not one or is cut short before its storages. Read op by op, never unpickled."""
    with path.open("rb") as file:
        spans = []
        for _ in range(5):
            start = file.tell()
            ops = _whole_pickle(file)
            if ops is None:
                return None
            if not spans and [(op, arg) for op, arg in ops if op != "PROTO"] != [("LONG1", _OLD_STYLE_MAGIC),
                                                                                  ("STOP", None)]:
                return None  # not torch's magic number: not an old-style checkpoint
            spans.append((start, file.tell()))
        start, end = spans[3]
        file.seek(start)
        return file.read(end - start)


def _whole_pickle(file) -> list[tuple[str, object]] | None:
    """The (opcode, argument) pairs of the pickle at the file's position, read up to its STOP; None when the
    bytes there are not a whole pickle."""
    ops = []
    try:
        for opcode, arg, _ in pickletools.genops(file):
            ops.append((opcode.name, arg))
            if opcode.name == "STOP":
                return ops
            if len(ops) == 1 and opcode.name != "PROTO":
                return None  # torch's pickles all open with their protocol
    except (ValueError, EOFError):  # pickletools' words for bytes that are not (or no longer) a pickle
        return None
    return None


# the opcodes torch's safe loader reads (torch/_weights_only_unpickler.py); another stops it, with its own words
_SAFE_LOADER_OPCODES = {
    "GLOBAL", "NEWOBJ", "REDUCE", "BUILD", "APPEND", "APPENDS", "SETITEM", "SETITEMS", "MARK", "TUPLE", "TUPLE1",
    "TUPLE2", "TUPLE3", "NONE", "NEWFALSE", "NEWTRUE", "EMPTY_TUPLE", "EMPTY_LIST", "EMPTY_DICT", "EMPTY_SET",
    "BININT", "BININT1", "BININT2", "BINFLOAT", "BINUNICODE", "SHORT_BINSTRING", "BINPERSID", "BINGET",
    "LONG_BINGET", "BINPUT", "LONG_BINPUT", "LONG1", "PROTO", "STOP"}
# what it loads outside torch's own names (its _get_allowed_globals)
_SAFE_OUTSIDE_TORCH = {"collections.OrderedDict", "collections.Counter", "_codecs.encode", "builtins.bytearray",
                       "builtins.set", "builtins.complex"}
_PYTHON2_MODULES = {"__builtin__", "copy_reg", "exceptions", "UserDict", "UserList", "cPickle"}  # renamed by torch


def code_asked_for(pickled: bytes) -> str | None:
    """The first class or function this pickle asks to import that torch's safe loader certainly refuses
    (anything outside torch's own names and the few containers it allows), or None: none, or the loader stops
    earlier for another reason, which it then says itself."""
    try:
        for opcode, arg, _ in pickletools.genops(io.BytesIO(pickled)):
            if opcode.name not in _SAFE_LOADER_OPCODES:
                return None
            if opcode.name != "GLOBAL":
                continue
            module, _, name = str(arg).partition(" ")
            if module in _PYTHON2_MODULES:
                return None
            full = f"{module}.{name}"
            if not (full in _SAFE_OUTSIDE_TORCH or module == "torch" or module.startswith("torch.")):
                return full
    except (ValueError, EOFError):
        return None
    return None


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

"""`fedclust fit`: build Fabric, data, method and federation from typed arguments, run, write the run folder;
its parser (typed from fit's signature), and `load_run`: a run folder brought back (fedclust/saved_run.py) with
that parser.

fit reads as its five steps, one function (or context) each: 1. checks (`check_request`, then the resumed run's
checkpoint, `read_resumed_checkpoint`), 2. the folder (`run_folder.claimed`), 3. build (`build_run` -> `Run`),
4. the rounds (`start_run`, `run_rounds`), 5. what the run leaves (`write_results`). The run writes nothing before
step 4 (a W&B or TensorBoard logger, built in step 3, makes its own files): a refusal in steps 1-3 leaves a new folder
removed and a resumed one byte for byte as it was.

Run folder: config.yaml (resolved), partition.txt / partition.csv (per-client class counts; without labels
partition.txt holds each client's size and there is no partition.csv), metrics.csv,
checkpoints/last.ckpt, assignments.csv (index, client, label, cluster) and final.json.

Called, this module is the Python API's fit: `fedclust.fit("quickstart", {"seed": 1})` returns a FitResult
(fedclust/api.py, docs/python_api.md).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import torch
import yaml
from jsonargparse import ActionConfigFile, ArgumentParser
from lightning.fabric import Fabric
from rich.console import Console

from fedclust import run_folder
from fedclust.branch import read_start_model, start_from
from fedclust.callbacks.checkpoint import Checkpoint, load_checkpoint
from fedclust.callbacks.csv_metrics import CSVMetrics
from fedclust.callbacks.diagnostics import Diagnostics, has_embedding
from fedclust.callbacks.embedding_plot import EmbeddingPlot
from fedclust.callbacks.loggers import FabricLogging, build_logger, require_logger
from fedclust.callbacks.progress import ProgressCallback
from fedclust.clustering.kmeans import backend_chosen as kmeans_backend_chosen
from fedclust.clustering.kmeans import backend_in_use as kmeans_backend_in_use
from fedclust.contract import FederatedMethod
from fedclust.data import derived
from fedclust.data.client_data import FederatedData
from fedclust.data.config import DataConfig, build_federated_data
from fedclust.data.partition import class_counts, format_class_counts
from fedclust.errors import FedclustError
from fedclust.federation.config import FederationConfig
from fedclust.federation.distributed import (
    ProcessGroup,
    check_launcher,
    has_process_group,
    process_group,
    quiet_start_up,
)
from fedclust.federation.orchestrator import Orchestrator
from fedclust.federation.setup import check_hparams, setup_method
from fedclust.nn.backbones import use_channels_last
from fedclust.nn.precision import device_type, resolve_memory_format, resolve_precision
from fedclust.parsers import command_parser, objects_config
from fedclust.resume import arithmetic_line, check_resume_overrides, started_arithmetic
from fedclust.run_checks import (
    check_cuda_request,
    check_device_count,
    check_diagnose,
    check_embedding_points,
    check_run_location,
    rank_zero_before_launch,
)
from fedclust.run_folder import CHECKPOINT
from fedclust.run_outcome import fewer_clusters, unusable_run
from fedclust.saved_run import SavedRun, read_saved_run


@dataclass
class FabricConfig:
    """Lightning Fabric settings.

    With ``devices`` > 1 (or several nodes) and ``strategy: ddp``, each process trains a disjoint share of
    every round's clients; sums are all-reduced, the server step and scoring run on rank 0, only rank 0
    writes (fedclust/federation/distributed.py). Fabric's launcher starts the local processes; for several
    nodes start the command on each node with torchrun, or once per task with Slurm's srun (docs/multinode.md).

    Args:
        accelerator: cpu, cuda, gpu or auto.
        devices: Number of devices (or "auto") per node: processes for ddp on cpu.
        strategy: Fabric strategy: auto (one process) or ddp (one process per device).
        num_nodes: Number of machines, each started with torchrun or by Slurm (docs/multinode.md).
        precision: 32-true, bf16-mixed, or auto: bf16-mixed where the method's network was measured to keep
            its quality in bf16 (CCFC's ConvNet28) and the device computes bf16 natively (AVX-512 BF16 / AMX
            CPUs, Ampere+ GPUs), else 32-true (fedclust/nn/precision.py). No loss scaling is applied, so
            16-mixed is not offered. The choice is printed and written to run.log.
        memory_format: contiguous, channels_last (convolutions in NHWC memory: oneDNN's bf16 convolutions are
            faster so; same results up to float rounding) or auto: channels_last for bf16 on the CPU.
    """

    accelerator: str = "auto"
    devices: int | str = 1
    strategy: str = "auto"
    num_nodes: int = 1
    precision: Literal["auto", "32-true", "bf16-mixed"] = "auto"
    memory_format: Literal["auto", "contiguous", "channels_last"] = "auto"


def fit(method: FederatedMethod, data: DataConfig = DataConfig(), federation: FederationConfig = FederationConfig(),  # noqa: B008
        fabric: FabricConfig = FabricConfig(), seed: int = 0,  # noqa: B008
        logger: Literal["csv", "wandb", "tensorboard"] = "csv", project: str = "fedclust",
        group: str | None = None, name: str | None = None, runs_dir: str = "runs", run_dir: str | None = None,
        resume: str | None = None, init_from: str | None = None, progress: bool = True,
        embedding_plot: bool = False, embedding_points: int = 2000,
        kmeans_backend: Literal["auto", "faiss", "torch"] = "auto", diagnose: bool = False,
        config_text: str | None = None) -> dict[str, float]:
    """Run one federated clustering experiment.

    Args:
        method: The method and its settings (class_path: CCFC | KFED | KMeans, init_args: ...).
        data: Data set, partition into clients and placement.
        federation: Rounds, sampling, device failures, aggregation options.
        fabric: Lightning Fabric settings.
        seed: Seeds every random draw (with stage, round and client).
        logger: Extra logger besides metrics.csv: csv (none), wandb, tensorboard.
        project: W&B project.
        group: W&B group (e.g. a sweep).
        name: Run name (W&B name and the run folder's prefix).
        runs_dir: Parent folder of new run folders.
        run_dir: Exact run folder (default runs_dir/<name or method_data>_<time>).
        resume: A run folder to continue from its last checkpoint.
        init_from: A finished run folder of the same method and network whose saved global weights this run starts
            from, with its own data, schedule and seed (a branch: fedclust/branch.py); read when a run starts,
            not when it is resumed.
        progress: Show the progress bar and the per-round lines (the final metrics table is printed either way).
        embedding_plot: At the end, save a t-SNE of the representations coloured by cluster and by client
            with per-client Calinski-Harabasz scores (embedding.png / embedding.json; logged to W&B).
        embedding_points: Samples drawn for the t-SNE picture (the CH scores use every sample).
        kmeans_backend: k-means on FAISS or torch; auto takes FAISS when it is installed (FAISS-GPU on CUDA
            when present, else torch on CUDA). The backend in use is printed and written to run.log.
        diagnose: At every evaluated round, also write the representation's spectrum (effective rank, top-3
            variance share), its first direction's correlation with brightness, the cluster sizes and the NMI
            of k-means on the representation to diagnostics.csv (fedclust/probes/diagnose.py). Needs a method
            that learns a representation (its own `embed`).
        config_text: The resolved config to save (the command line's); None (a call from Python) writes the one
            these objects make (fedclust.parsers.objects_config), so every run folder can be re-loaded.
    """
    if config_text is None:  # locals() holds fit's arguments alone here
        config_text = objects_config(fit_parser(), {key: value for key, value in locals().items()
                                                    if key != "config_text"})
    check_request(method, federation, fabric, logger, embedding_points, diagnose, resume, config_text)  # 1. checks
    resumed_state = read_resumed_checkpoint(runs_dir, run_dir, resume)
    start_weights = read_start_model(init_from, method) if init_from and resumed_state is None else None
    prefix = name or f"{type(method).__name__.lower()}_{data.name}"
    with run_folder.claimed(runs_dir, run_dir, resume, prefix) as claimed, \
            kmeans_backend_chosen(kmeans_backend), process_group() as pg:  # 2. the folder
        run = build_run(claimed.path, pg, method, data, federation, fabric, seed, logger, project, group, name,
                        config_text, progress, resumed_state, (init_from, start_weights))  # 3. build
        run.attach_callbacks(federation.checkpoint_every, embedding_plot, embedding_points, diagnose)
        claimed.written = True  # from here on the run writes: nothing is refused any more
        start_run(run, config_text, resumed=resumed_state is not None)
        final = run_rounds(run)  # 4. the rounds
        write_results(run, final)  # 5. what the run leaves
        pg.finished = True
    return final


# ---------------------------------------------------------------- 1. checks


def check_request(method: FederatedMethod, federation: FederationConfig, fabric: FabricConfig, logger: str,
                  embedding_points: int, diagnose: bool, resume: str | None, config_text: str | None) -> None:
    """What fit refuses before any folder exists, data is loaded or a model is built: each check also runs in
    fedclust.precheck, before torch is imported, so a refusal reads the same both ways."""
    federation.validate()
    check_devices(fabric)
    check_hparams(method)  # again in setup_method; here before any folder exists
    if logger != "csv":
        require_logger(logger)
    check_embedding_points(embedding_points)
    if diagnose:  # fedclust.precheck judges it from the registry's record
        check_diagnose(type(method).__name__, has_embedding(type(method)))
    if resume and config_text and (Path(resume) / "config.yaml").is_file():
        check_resume_overrides(Path(resume), config_text)


def check_devices(fabric: FabricConfig) -> None:
    """Asking for GPUs on a machine without them is one sentence, not Lightning's traceback."""
    cuda_devices = torch.cuda.device_count() if fabric.accelerator in ("cuda", "gpu") else 0
    check_cuda_request(fabric.accelerator, fabric.devices, cuda_devices)  # also in fedclust.precheck
    check_device_count(fabric.devices)
    check_launcher(fabric.devices, fabric.num_nodes)


def read_resumed_checkpoint(runs_dir: str, run_dir: str | None, resume: str | None) -> dict | None:
    """The checkpoint a resumed run continues from, None for a new run. Untrusted, so judged as soon as it is
    read, before the folder is locked, any data is loaded or any model is built: a refused one leaves the
    folder as it was."""
    if rank_zero_before_launch():
        check_run_location(runs_dir, run_dir, resume)  # also in fedclust.precheck; nothing is created before it
    return load_checkpoint(Path(resume) / CHECKPOINT) if resume is not None else None


# ---------------------------------------------------------------- 3. build


@dataclass
class Run:
    """What build_run assembles: Fabric, the clients' data, the orchestrator (holding the built method), where
    it writes and what it prints."""

    fabric: Fabric
    data: FederatedData
    orch: Orchestrator
    folder: Path
    leader: bool  # rank 0: the one process that prints and writes
    console: Console
    extra_logger: object | None  # W&B or TensorBoard, besides metrics.csv
    data_name: str
    arithmetic: tuple[str, str, str]  # precision, memory format, why
    backend: str  # k-means backend in use
    progress: bool
    bar: ProgressCallback | None = None

    def attach_callbacks(self, checkpoint_every: int, embedding_plot: bool, embedding_points: int,
                         diagnose: bool) -> None:
        """metrics.csv, the checkpoint, the progress lines and final table, and what was asked besides (rank 0)."""
        if not self.leader:
            return
        self.bar = ProgressCallback(self.console, live=self.progress)
        callbacks = [CSVMetrics(self.folder / "metrics.csv"), Checkpoint(self.folder / CHECKPOINT, checkpoint_every),
                     self.bar]
        if embedding_plot:
            callbacks.append(EmbeddingPlot(self.folder, embedding_points, self.orch.seed))
        if diagnose:
            callbacks.append(Diagnostics(self.folder / "diagnostics.csv"))
        if self.extra_logger:
            callbacks.append(FabricLogging())
        self.orch.callbacks = callbacks


def build_run(folder: Path, pg: ProcessGroup, method: FederatedMethod, data: DataConfig, federation: FederationConfig,
              fabric: FabricConfig, seed: int, logger: str, project: str, group: str | None, name: str | None,
              config_text: str | None, progress: bool, resumed_state: dict | None,
              start: tuple[str | None, dict | None] = (None, None)) -> Run:
    """Fabric (launched: DDP starts its processes here), the clients' data, the method built on it (from another
    run's weights with init_from) and the orchestrator, from the checkpoint when resumed; writes nothing in the run
    folder but the W&B / TensorBoard logger's own files."""
    leader = rank_zero_before_launch()
    hparams = yaml.safe_load(config_text) if config_text else {}  # nested: filterable by data.p, seed, ...
    extra = build_logger(logger, folder, project, group, name, hparams) if leader else None
    kind = device_type(fabric.accelerator)
    precision, why = resolve_precision(fabric.precision, kind, method.bf16_by_default())
    memory_format = resolve_memory_format(fabric.memory_format, precision, kind)
    started = started_arithmetic(folder) if resumed_state is not None else None
    if started and fabric.precision == "auto" and fabric.memory_format == "auto":
        # a resumed run goes on in the arithmetic it started in, even on a machine where auto says otherwise
        precision, memory_format, why = *started, "auto, as when the run started"
    fab = Fabric(accelerator=fabric.accelerator, devices=fabric.devices, strategy=fabric.strategy,
                 num_nodes=fabric.num_nodes, precision=precision, loggers=[extra] if extra else [])
    pg.started_here = not has_process_group()
    with quiet_start_up(leader):  # Lightning's start-up banners once, from rank 0
        fab.launch()  # DDP: starts the other local processes (they re-run this command) and the process group
    folder = Path(fab.broadcast(str(folder), src=0))  # torchrun-launched ranks did not see rank 0's choice
    fed_data = build_federated_data(data, fab.device, seed)
    setup_method(method, fed_data, seed)
    if start[1] is not None:
        start_from(method, start[1], start[0])
    if memory_format == "channels_last":
        use_channels_last(method)
    leader = fab.is_global_zero
    # soft_wrap: a line piped to a file stays one line (rich would cut it at 80 columns)
    console = Console(quiet=not leader, soft_wrap=True)
    orch = Orchestrator(fab, method, fed_data, federation, seed)
    if resumed_state is not None:
        orch.load_state_dict(resumed_state)
    return Run(fab, fed_data, orch, folder, leader, console, extra, data.name, (precision, memory_format, why),
               kmeans_backend_in_use(fab.device), progress)


# ---------------------------------------------------------------- 4. the rounds


def start_run(run: Run, config_text: str | None, resumed: bool) -> None:
    """Say what runs (with --progress), and record its start: a new run's config.yaml and partition, and in
    every run's run.log the k-means backend and the arithmetic; privacy.json when its summaries are noised."""
    orch, fed_data, info = run.orch, run.data, run.data.info
    counts = class_counts(fed_data.labels.cpu(), [p.cpu() for p in fed_data.parts], info.num_classes)
    table = format_class_counts(counts, info.has_labels)
    precision, memory_format, why = run.arithmetic
    say = run.console.print if run.progress else _silent
    say(f"[bold]{type(orch.method).__name__}[/] on {run.data_name}: {len(fed_data)} samples, "
        f"{fed_data.num_clients} clients, {orch.total_rounds} rounds, k-means on {run.backend}, "
        f"training in {precision} ({why}, {memory_format}), run folder {run.folder}")
    say(table, markup=False, highlight=False)
    if resumed:
        say(f"resumed after round {orch.progress.done}")
    if not run.leader:  # only rank 0 writes
        return
    if not resumed:  # atomically: a write that fails (disk full) leaves no half config.yaml behind
        run_folder.write_output(run.folder / "config.yaml", config_text or "", "run_dir")
        run_folder.write_output(run.folder / "partition.txt", table + "\n", "run_dir")
        if info.has_labels:  # per client and class; data without labels have only partition.txt's sizes
            run_folder.write_counts_csv(run.folder / "partition.csv", counts)
    with (run.folder / "run.log").open("a") as log_file:
        log_file.write(f"k-means backend: {run.backend}\n{arithmetic_line(precision, memory_format, why)}\n")
    if orch.noise is not None:  # what the run's summaries spend, for the dashboard and the reader
        run_folder.write_json(run.folder / "privacy.json", orch.noise.as_dict())
        say(f"summaries with Gaussian noise: ({orch.noise.epsilon:.3g}, {orch.noise.delta:g})-DP "
            f"over {orch.noise.releases} rounds, noise multiplier {orch.noise.noise_multiplier:.3g}")


def _silent(*args, **kwargs) -> None:
    return None


def run_rounds(run: Run) -> dict[str, float]:
    """Every round left (the orchestrator's loop), its warnings copied into run.log; the final scores."""
    with run_log(run.folder / "run.log") if run.leader else contextlib.nullcontext():
        try:
            return run.orch.run()
        finally:  # a run stopped by Ctrl-C or a failed write ends the live bar too: the terminal gets its cursor
            if run.bar is not None:
                run.bar.close()


@contextlib.contextmanager
def run_log(path: Path) -> Iterator[None]:
    """Copy the run's warnings (rejected clients, ...) into its run.log, and only this run's."""
    handler = logging.FileHandler(path)
    logger = logging.getLogger("fedclust")
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        handler.close()


# ---------------------------------------------------------------- 5. what the run leaves


def write_results(run: Run, final: dict[str, float]) -> None:
    """assignments.csv and final.json, and a sentence when the model uses fewer clusters than asked; a run with
    no usable model writes neither and is one sentence (exit 2), its rounds kept in metrics.csv and run.log."""
    orch, folder = run.orch, run.folder
    failure = unusable_run(orch.progress.history, orch.stages, final)
    if failure:
        if run.leader:
            with (folder / "run.log").open("a") as log_file:
                log_file.write(f"run failed: {failure}\n")
        raise FedclustError(f"the run in {folder} produced no usable model: {failure}; its rounds are in "
                            "metrics.csv and run.log, and no final.json or assignments.csv was written.")
    if not run.leader:
        return
    clusters = orch.predict()
    run_folder.write_assignments(folder / "assignments.csv", clusters, run.data)
    run_folder.write_json(folder / "final.json", {"metrics": final, "rounds": orch.total_rounds,
                                                   "world_size": run.fabric.world_size})
    note = fewer_clusters(orch.method, clusters)
    if note:
        with (folder / "run.log").open("a") as log_file:
            log_file.write(f"note: {note}\n")
        run.console.print(f"note: {note}", markup=False, highlight=False)


def fit_parser() -> ArgumentParser:
    """`fedclust fit`'s parser: a `--config` file, then fit's typed arguments (config_text is the command line's)."""
    import fedclust.methods  # noqa: F401  (registers the method classes so configs can name them briefly)

    parser = command_parser(fit)
    parser.add_argument("--config", action=ActionConfigFile,
                        help="A YAML config: a packaged config's name (`fedclust configs` lists them) or a path.")
    parser.add_function_arguments(fit, skip={"config_text"}, fail_untyped=True)
    return parser


# ---------------------------------------------------------------- a run folder brought back


def load_run(folder: Path, device: torch.device) -> SavedRun:
    """A run folder brought back (fedclust/saved_run.py), its config.yaml read with fit's parser."""
    return read_saved_run(folder, device, fit_parser())


derived.use_run_loader(load_run)  # the representations data set reads saved runs through the run level

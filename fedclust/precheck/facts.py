"""The checks that need the machine, the file system, a file's header, a known data set's size or the registry's
record of a method, made before torch is imported: a GPU asked for where there is certainly none, an optional
logger not installed, `--diagnose true` for a method that learns no embedding, a run folder that cannot be made
or a --resume folder without its checkpoint (or with a truncated one), an unknown data set or data option, a
known data set's missing or truncated files, and a partition or a number of clusters its sizes cannot give
(fedclust/data/catalog.py knows the sizes; other data sets are skipped); a user's feature file holding NaN
(features_file.py).

Each rule is the function the run calls (run_checks.py, data/checks.py, data/catalog.py,
federation/hparams.py), on the values the run would get, so a refusal here reads exactly as the run's.
"""

from __future__ import annotations

from pathlib import Path

from fedclust.config_files import check_config_file
from fedclust.data import catalog
from fedclust.data.checks import (
    check_data_name,
    check_data_options,
    check_partition_fits,
    check_subsample,
    client_sizes,
    simulated_num_clients,
)
from fedclust.federation.hparams import check_cluster_counts
from fedclust.precheck.features_file import check_features_file
from fedclust.precheck.values import UNKNOWN
from fedclust.registry import METHODS
from fedclust.resume import NOT_KNOWN, RESUME_KEPT, flatten, refuse_change
from fedclust.run_checks import (
    CHECKPOINT,
    check_checkpoint_file,
    check_cuda_request,
    check_diagnose,
    check_run_location,
    check_saved_run,
    check_start_folder,
    no_cuda_for_certain,
    rank_zero_before_launch,
    require_logger,
)


def cuda(accelerator, devices) -> None:
    """fit()'s GPU check, made only where this machine certainly has no GPU."""
    if accelerator in ("cuda", "gpu") and no_cuda_for_certain():
        check_cuda_request(accelerator, devices, 0)


def logger(kind) -> None:
    if kind is not UNKNOWN:
        require_logger(kind)


def diagnose(asked, class_path) -> None:
    """fit()'s and evaluate()'s refusal of `--diagnose true` for a method that learns no embedding, judged by the
    registry's record of the class (tests/test_registry.py keeps it true to the class); a class the registry
    does not hold is left to the run."""
    if asked is not True or not isinstance(class_path, str):
        return
    entry = METHODS.get(class_path.rsplit(".", 1)[-1])
    if entry is not None and entry.class_path == class_path:
        check_diagnose(entry.name, entry.embeds)


def run_location(runs_dir, run_dir, resume) -> None:
    """Where fit() writes, as rank 0 judges it before claiming a folder (a process Fabric or torchrun started
    for another rank claims nothing), and a resumed run's checkpoint, which fit() reads next."""
    if UNKNOWN in (runs_dir, run_dir, resume) or not rank_zero_before_launch():
        return
    check_run_location(runs_dir, run_dir, resume)
    if resume is not None:
        check_checkpoint_file(Path(resume) / CHECKPOINT)


def start_folder(init_from, resume) -> None:
    """The finished run a new run starts from (fedclust/branch.py); a resumed run does not read it."""
    if isinstance(init_from, str) and resume is None:
        check_start_folder(init_from)


def resume(get, options: dict, method: dict, init_values: dict) -> None:
    """fit()'s refusal of a resumed run that would compute something else (another method, data, partition, seed
    or schedule), by fedclust/resume.py's rule on what the command line says: each setting as given, else its
    default; a value or default not known here is left to the run."""
    folder = get("resume")
    if not isinstance(folder, str) or not (Path(folder) / "config.yaml").is_file():
        return
    saved = _saved_config(Path(folder))
    path = method.get("path")
    if saved is None or not isinstance(path, str):
        return
    new, defaults = {"method.class_path": path}, {}
    for option, spec in options.items():
        name = option[2:]
        if spec.get("kind") == "value" and name.split(".", 1)[0] in RESUME_KEPT:
            value = get(name)
            new[name] = NOT_KNOWN if value is UNKNOWN else value
            if "default" in spec:
                defaults[name] = spec["default"]
    class_defaults = method.get("defaults") or {}
    for param in method.get("params") or {}:
        value = init_values.get(param, class_defaults.get(param, UNKNOWN))
        new[f"method.init_args.{param}"] = NOT_KNOWN if value is UNKNOWN else value
        if param in class_defaults:
            defaults[f"method.init_args.{param}"] = class_defaults[param]
    flat = {}
    for key, value in new.items():  # a mapping's keys are settings too (data.options.size), as in config.yaml
        flat.update(flatten(value, key) if isinstance(value, dict) else {key: value})
    refuse_change(saved, flat, defaults, complete=False)


def evaluate(run: Path, values: dict, data_sets: dict | None, judge_config=None) -> None:
    """evaluate()'s checks after its settings, in its order: --data_name's name, the run folder, its config.yaml as
    a file, its checkpoint, its config.yaml as fit's parser reads it (`judge_config`, load_run's read_config), the
    run's own data (load_run), --diagnose for the saved method, then another split or data set (load_dataset)."""
    data_name, data_root, split = (values.get(k) for k in ("data_name", "data_root", "split"))
    if data_sets is not None and isinstance(data_name, str):
        check_data_name(data_name, data_sets)
    check_saved_run(run)
    check_config_file(run / "config.yaml", "run")
    check_checkpoint_file(run / CHECKPOINT)
    if judge_config is not None:
        judge_config(run)
    config = _saved_config(run)
    saved = _saved_data(config)
    if saved is not None:
        catalog.dataset_facts(*saved)
    method = (config or {}).get("method")
    diagnose(values.get("diagnose"), method.get("class_path") if isinstance(method, dict) else None)
    if saved is not None and (isinstance(data_name, str) or split in ("all", "train", "test")):
        name, root, _ = saved
        catalog.dataset_facts(data_name or name, data_root or root, "all" if split in (None, "same") else split)


def _saved_config(run: Path) -> dict | None:
    """A run folder's config.yaml as plain YAML; None where it cannot be read so (the run's own parser then
    judges it)."""
    import yaml

    try:
        config = yaml.safe_load((run / "config.yaml").read_text(encoding="utf-8")) or {}
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return None
    return config if isinstance(config, dict) else None


def _saved_data(config: dict | None) -> tuple[str, str | None, str] | None:
    """(name, root, split) of the data a run's config names; None where it is not plainly so (the run's own
    parser then judges it)."""
    if config is None:
        return None
    data = config.get("data") or {}
    if not isinstance(data, dict):
        return None
    name, root, split = data.get("name", "digits"), data.get("root"), data.get("split", "all")
    if not isinstance(name, str) or not isinstance(root, str | None) or split not in ("all", "train", "test"):
        return None
    if data.get("options"):
        return None  # options change what some loaders read: not judged here
    return name, root, split


def data(get, data_sets: dict | None, method: dict | None, init_values: dict) -> None:
    """load_dataset's checks, the partition's, then setup_method's cluster counts, in the run's order; a
    value not known (UNKNOWN) or a data set the catalogue does not know ends the checks there."""
    name, options = get("data.name"), get("data.options")
    if data_sets is None or UNKNOWN in (name, options) or not isinstance(options, dict):
        return
    check_data_name(name, data_sets)
    check_data_options(name, options, data_sets[name])
    if name == "features" and UNKNOWN not in (get("data.root"), get("data.split")):  # the loader's NaN refusal
        check_features_file(get("data.root"), get("data.split"), options)
    settings = [get(f"data.{key}") for key in ("root", "split", "partition", "num_clients", "p",
                                                 "min_partition_size", "num_classes_per_partition",
                                                 "class_assignment_mode")]
    if UNKNOWN in settings:
        return
    subsample = get("data.subsample")
    if subsample is not None:  # the sizes below are the whole split's: a subset is judged by the run
        if subsample is not UNKNOWN:
            check_subsample(subsample)
        return
    root, split, partition, num_clients, p, min_size, per_partition, mode = settings
    if partition == "natural":
        return  # the clients come from the data's own client column
    num_clients = simulated_num_clients(num_clients)
    facts = catalog.dataset_facts(name, root, split)
    if facts is None:
        return
    check_partition_fits(partition, num_clients, min_size, per_partition, mode, facts.num_classes,
                         facts.class_counts)
    sizes = client_sizes(partition, facts.class_counts, num_clients, p)
    if method is None or (sizes is not None and min(sizes) == 0):
        return  # an empty client: build_federated_data's own sentence, left to the run
    num_clusters = _first_set(method.get("num_clusters"), method, init_values)
    local = _first_set(method.get("local_clusters"), method, init_values)
    if UNKNOWN not in (num_clusters, local):
        check_cluster_counts(num_clusters, local, facts.num_classes, facts.num_samples, min(sizes) if sizes else 0)


def _first_set(chain: list[str] | None, method: dict, init_values: dict):
    """The first of these init arguments that is not None (what the method's local_clusters() or
    num_clusters returns), as given or by default; UNKNOWN when that cannot be known."""
    if chain is None:
        return UNKNOWN
    for name in chain:
        value = init_values.get(name, method.get("defaults", {}).get(name, UNKNOWN))
        if value is not None:
            return value
    return None

"""The `fedclust` command line (jsonargparse): fit and evaluate, typed from the functions' signatures.

    fedclust fit --config configs/quickstart.yaml [--federation.rounds 5 ...]
    fedclust fit --resume runs/RUN_DIR
    fedclust compare runs/RUN_A runs/RUN_B ... [--output compare.html]
    fedclust sweep --config configs/kfed_fmnist.yaml --grid data.p=0,0.5,1 --grid seed=1,2 --slots 2
    fedclust evaluate --run runs/RUN_DIR [--split test] [--knn 3 5 7 9 100 1000 7000] [--linear true]
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

from jsonargparse import ActionConfigFile, ArgumentParser

import fedclust.methods  # noqa: F401  (registers the method classes so configs can name them briefly)
from fedclust.compare import compare
from fedclust.errors import FedclustError
from fedclust.evaluate import evaluate
from fedclust.fit import fit
from fedclust.sweep import sweep


def fit_parser() -> ArgumentParser:
    parser = ArgumentParser(description=fit.__doc__.split("\n")[0], default_meta=False)
    parser.add_argument("--config", action=ActionConfigFile, help="A YAML config (configs/*.yaml).")
    parser.add_function_arguments(fit, skip={"config_text"}, fail_untyped=True)
    return parser


def evaluate_parser() -> ArgumentParser:
    parser = ArgumentParser(description=evaluate.__doc__.split("\n")[0], default_meta=False)
    parser.add_function_arguments(evaluate, fail_untyped=True, skip={"knn"})
    # added by hand so that k values are listed the argparse way (--knn 3 5 7), not as a JSON list
    parser.add_argument("--knn", type=int, nargs="+", default=None, metavar="K",
                        help="Also report majority-vote kNN test accuracy on the representations for each k "
                             "(CCFC Table 3: 3 5 7 9 100 1000 7000); saved in RUN/evaluate_probes.json.")
    return parser


def sweep_parser() -> ArgumentParser:
    parser = ArgumentParser(description=sweep.__doc__.split("\n")[0], default_meta=False)
    parser.add_function_arguments(sweep, fail_untyped=True, skip={"grid", "devices"})
    # added by hand for the shell's way of repeating a flag (--grid a=1,2 --grid b=3) and listing ids
    parser.add_argument("--grid", action="append", default=[], metavar="KEY=V1,V2",
                        help="An axis of the grid; repeat for more axes (config=a.yaml,b.yaml sweeps configs).")
    parser.add_argument("--devices", type=int, nargs="+", default=None, metavar="GPU",
                        help="GPU ids, one run per GPU at a time (default: --slots CPU runs).")
    return parser


def compare_parser() -> ArgumentParser:
    parser = ArgumentParser(description=compare.__doc__.split("\n")[0], default_meta=False)
    parser.add_function_arguments(compare, fail_untyped=True, skip={"runs"})
    parser.add_argument("runs", nargs="+", metavar="RUN_DIR", help="Run folders written by `fedclust fit`.")
    return parser


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(prog="fedclust", description="Federated clustering research framework.")
    subcommands = parser.add_subcommands()
    subcommands.add_subcommand("fit", fit_parser(), help="Run one federated clustering experiment.")
    subcommands.add_subcommand("evaluate", evaluate_parser(), help="Re-score a saved run.")
    subcommands.add_subcommand("sweep", sweep_parser(), help="Run a grid of configs over device slots.")
    subcommands.add_subcommand("compare", compare_parser(), help="One HTML page comparing run folders.")
    return parser


def load_run_config(path: Path) -> dict:
    """The instantiated fit arguments saved in a run folder's config.yaml."""
    parser = fit_parser()
    cfg = parser.parse_path(str(path))
    cfg.pop("config", None)
    return parser.instantiate_classes(cfg)


def _resume_argv(argv: list[str]) -> list[str]:
    """`fit --resume DIR` without --config loads DIR/config.yaml first, so the run continues as it was."""
    if argv[:1] != ["fit"] or "--config" in argv:
        return argv
    for i, arg in enumerate(argv):
        value = argv[i + 1] if arg == "--resume" and i + 1 < len(argv) else None
        value = arg.split("=", 1)[1] if arg.startswith("--resume=") else value
        if value:
            return ["fit", "--config", str(Path(value) / "config.yaml"), *argv[1:]]
    return argv


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    argv = _resume_argv(list(sys.argv[1:] if argv is None else argv))
    parser = build_parser()
    try:
        cfg = parser.parse_args(argv)
        command = cfg.subcommand
        if command == "fit":
            sub = fit_parser()
            cfg.fit.pop("config", None)
            text = sub.dump(cfg.fit, skip_none=False)
            init = sub.instantiate_classes(cfg.fit)
            fit(**init, config_text=text)
        elif command == "sweep":
            runs = sweep(**cfg.sweep)
            failed = [r["name"] for r in runs if r["status"] == "failed"]
            if failed:
                print(f"fedclust: {len(failed)} sweep run(s) failed: {', '.join(failed)} (logs in the sweep "
                      "folder's logs/; run the same command again to retry them)", file=sys.stderr)
                return 1
        elif command == "compare":
            compare(**cfg.compare)
        else:
            evaluate(**cfg.evaluate)
    except FedclustError as error:
        print(f"fedclust: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("fedclust: interrupted; the last checkpoint is kept (resume with --resume RUN_DIR)", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())

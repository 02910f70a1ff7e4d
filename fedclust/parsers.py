"""The jsonargparse parsers of the run-level functions (fit, evaluate, sweep, compare), typed from their
signatures. Built only when a subcommand runs: building one imports torch and Lightning.

Used by the command line (`fedclust.__main__`), by sweep (to check overrides before anything runs) and by
whatever reads a run folder's config.yaml back (`load_run_config`).
"""

from __future__ import annotations

from pathlib import Path

from jsonargparse import ActionConfigFile, ArgumentParser, Namespace


def _parser(function) -> ArgumentParser:
    # exit_on_error=False: the CLI turns every parse error into one sentence (no usage block); prog: the usage
    # line names the subcommand (`fedclust compare ...`), not python's __main__.py
    return ArgumentParser(prog=f"fedclust {function.__name__}", description=function.__doc__.split("\n")[0],
                          exit_on_error=False)


def fit_parser() -> ArgumentParser:
    import fedclust.methods  # noqa: F401  (registers the method classes so configs can name them briefly)
    from fedclust.fit import fit

    parser = _parser(fit)
    parser.add_argument("--config", action=ActionConfigFile,
                        help="A YAML config: a packaged config's name (`fedclust configs` lists them) or a path.")
    parser.add_function_arguments(fit, skip={"config_text"}, fail_untyped=True)
    return parser


def evaluate_parser() -> ArgumentParser:
    from fedclust.evaluate import evaluate

    parser = _parser(evaluate)
    parser.add_function_arguments(evaluate, fail_untyped=True, skip={"knn"})
    # added by hand so that k values are listed the argparse way (--knn 3 5 7), not as a JSON list
    parser.add_argument("--knn", type=int, nargs="+", default=None, metavar="K",
                        help="Also report majority-vote kNN test accuracy on the representations for each k "
                             "(CCFC Table 3: 3 5 7 9 100 1000 7000); saved in RUN/evaluate_probes.json.")
    return parser


def sweep_parser() -> ArgumentParser:
    from fedclust.sweep import sweep

    parser = _parser(sweep)
    parser.add_function_arguments(sweep, fail_untyped=True, skip={"grid", "devices"})
    # added by hand for the shell's way of repeating a flag (--grid a=1,2 --grid b=3) and listing ids
    parser.add_argument("--grid", action="append", default=[], metavar="KEY=V1,V2",
                        help="An axis of the grid; repeat for more axes (config=a.yaml,b.yaml sweeps configs).")
    parser.add_argument("--devices", type=int, nargs="+", default=None, metavar="GPU",
                        help="GPU ids, one run per GPU at a time (default: --slots CPU runs).")
    return parser


def compare_parser() -> ArgumentParser:
    from fedclust.compare import compare

    parser = _parser(compare)
    parser.add_function_arguments(compare, fail_untyped=True, skip={"runs"})
    parser.add_argument("runs", nargs="+", metavar="RUN_OR_SWEEP_DIR",
                        help="Run folders written by `fedclust fit`, or folders of them (a sweep folder: every run "
                             "in it).")
    return parser


PARSERS = {"fit": fit_parser, "evaluate": evaluate_parser, "sweep": sweep_parser, "compare": compare_parser}


def parse(command: str, parser: ArgumentParser, argv: list[str]) -> Namespace:
    cfg = parser.parse_args(argv, with_meta=False)
    if command == "fit":
        cfg.pop("config", None)  # the config file is folded into the other keys (sweep's config is its base file)
    return cfg


def resolved_fit_config(parser: ArgumentParser, cfg: Namespace) -> tuple[dict, str]:
    """The fit arguments as objects, and the resolved config as YAML text (saved in the run folder)."""
    text = parser.dump(cfg, skip_unset=False)
    return dict(parser.instantiate(cfg)), text


def load_run_config(path: Path) -> dict:
    """The instantiated fit arguments saved in a run folder's config.yaml."""
    parser = fit_parser()
    cfg = parser.parse_path(str(path), with_meta=False)
    cfg.pop("config", None)
    return dict(parser.instantiate(cfg))

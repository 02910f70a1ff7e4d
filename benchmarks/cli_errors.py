"""How long the command line takes to refuse bad input (issue 10, point 6: under 3 s, no torch import).

    python benchmarks/cli_errors.py            # writes benchmarks/results/cli_errors.md

Each case is `python -m fedclust ...` run from an empty temporary folder, three times; the table gives the
median wall seconds, the exit code, whether the error is one line, and whether torch was imported (checked
with `python -X importtime`, whose report names every module loaded).
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time

from common import RESULTS, machine

CASES = [
    ["--help"],
    ["fit", "--help"],  # a subcommand's help builds the real parser: the one case that imports torch
    ["fit", "--config", "nosuch"],
    ["fit", "--bogus", "1"],
    ["fit", "--config", "quickstart", "--data.p", "abc"],
    ["fit", "--config", "quickstart", "--data.p", "1.5"],
    ["fit", "--config", "quickstart", "--data.num_clients", "0"],
    ["fit", "--config", "quickstart", "--data.partition", "dirichlet", "--data.alpha", "0"],
    ["fit", "--config", "quickstart", "--federation.fraction", "0"],
    ["fit", "--config", "quickstart", "--method", "NoSuch"],
    ["fit", "--config", "quickstart", "--method.init_args.lamm", "3"],
    ["fit", "--config", "quickstart", "--method.init_args.lr=-1"],
    ["fit", "--config", "quickstart", "--method.init_args.batch_size", "1"],
    ["fit", "--config", "kfed_fmnist", "--method.init_args.niter", "0"],
    ["fit", "--config", "quickstart", "--embedding_points", "5"],
    ["evaluate", "--run", "/nonexistent"],
    ["sweep", "--config", "kfed_fmnist", "--grid", "data.pp=0,1"],
    ["compare", "/nonexistent"],
]


def one(args: list[str], folder: str) -> tuple[float, int, str, bool]:
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "fedclust", *args], cwd=folder, capture_output=True, text=True)
    wall = time.perf_counter() - start
    timed = subprocess.run([sys.executable, "-X", "importtime", "-m", "fedclust", *args], cwd=folder,
                           capture_output=True, text=True)
    torch_loaded = any(line.split("|")[-1].strip() == "torch" for line in timed.stderr.splitlines()
                       if line.startswith("import time:"))
    return wall, done.returncode, done.stderr.strip() or done.stdout.strip()[:80], torch_loaded


def main() -> None:
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for args in CASES:
            runs = [one(args, folder) for _ in range(3)]
            wall = statistics.median(r[0] for r in runs)
            code, message, torch_loaded = runs[0][1], runs[0][2], runs[0][3]
            lines = len(message.splitlines()) if code else 0
            rows.append(f"| `fedclust {' '.join(args)}` | {wall:.2f} | {code} | {lines if code else 'help'} | "
                        f"{'yes' if torch_loaded else 'no'} | {message.splitlines()[0][:110] if code else ''} |")
            print(rows[-1], flush=True)
    load = open("/proc/loadavg").read().split()[:3]
    text = ["# Bad input on the command line: seconds to the error", "", f"Machine: {machine()}", "",
            f"Command: `python benchmarks/cli_errors.py`. Load average at the end: {' '.join(load)} (the machine was "
            "shared with benchmark runs). Median of 3 runs from an empty folder.", "",
            "| command | wall s | exit code | lines | torch imported | message |", "|---|---|---|---|---|---|",
            *rows, ""]
    (RESULTS / "cli_errors.md").write_text("\n".join(text))


if __name__ == "__main__":
    main()

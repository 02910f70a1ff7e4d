"""Running the command line's refusals the way a user meets them: each argv through `fedclust.__main__.main` in one
fresh interpreter, reporting its exit code, its stderr and which heavy modules it had imported by then."""

import json
import subprocess
import sys
from pathlib import Path

HEAVY = ("torch", "lightning", "lightning.fabric", "fedclust.contract", "fedclust.methods")

_SCRIPT = (
    "import contextlib, io, json, sys\n"
    "from fedclust.__main__ import main\n"
    "out = []\n"
    "for argv in json.loads(sys.stdin.read()):\n"
    "    err = io.StringIO()\n"
    "    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):\n"
    "        code = main(argv)\n"
    f"    out.append([argv, code, err.getvalue(), [m for m in {HEAVY!r} if m in sys.modules]])\n"
    "print(json.dumps(out))\n")


def fill(argv: list[str], folder: Path) -> list[str]:
    """`{d}` in a case stands for the test's folder of prepared files."""
    return [a.replace("{d}", str(folder)) for a in argv]


def refusals_in_a_fresh_interpreter(cases: list[list[str]], cwd: Path) -> list[tuple[list[str], int, str, list[str]]]:
    """(argv, exit code, stderr, heavy modules imported) for each case, all in one new interpreter run from cwd."""
    proc = subprocess.run([sys.executable, "-c", _SCRIPT], input=json.dumps(cases), capture_output=True, text=True,
                          cwd=cwd, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return [tuple(row) for row in json.loads(proc.stdout.strip().splitlines()[-1])]

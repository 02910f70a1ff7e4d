"""benchmarks/ccfc_official.sh on a stand-in for the official CCFC code (issue 44 item 1): `prepare` swaps the MNIST
class in a copy of a clone or of a bare mirror and lays the Fashion-MNIST files out as torchvision reads them, `run`
stops the code after N rounds' prints and refuses a folder whose saved model would skip stage 1, `table` turns the
prints into the results page's rows."""

import gzip
import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MODEL = "import torch\nfrom torchvision.datasets import MNIST\n"
# prints as the official code does: tqdm's carriage-return bars, then one line a round
MAIN = """import time
for r in range(200):
    print(f"Epoch: {r} | client: 0 |  50%|\\r", end="", flush=True)
    time.sleep(0.05)
    print(f"acc:  0.{r + 1:04d} | nmi:  0.{r:04d}", flush=True)
"""


def _script(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "FMNIST_DIR": str(tmp_path / "packaged"), "FEDCLUST_OFFICIAL_RESULTS": str(tmp_path / "out"),
           "FEDCLUST_OFFICIAL_POLL": "0.2"}
    return subprocess.run(["bash", str(ROOT / "benchmarks" / "ccfc_official.sh"), *args], env=env,
                          capture_output=True, text=True, timeout=120)


def _official_clone(tmp_path: Path) -> Path:
    repo = tmp_path / "clone"
    repo.mkdir()
    (repo / "model.py").write_text(MODEL)
    (repo / "main.py").write_text(MAIN)
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "stand-in"], check=True)
    packaged = tmp_path / "packaged"
    packaged.mkdir()
    with gzip.open(packaged / "t10k-labels-idx1-ubyte.gz", "wb") as f:
        f.write(b"labels")
    return repo


def test_prepare_run_and_table_on_a_stand_in(tmp_path):
    clone = _official_clone(tmp_path)
    commit = subprocess.run(["git", "-C", str(clone), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, check=True).stdout.strip()
    mirror = tmp_path / "mirror.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(clone), str(mirror)], check=True)
    for source, copy in ((clone, tmp_path / "from_clone"), (mirror, tmp_path / "from_mirror")):
        done = _script(tmp_path, "prepare", str(source), str(copy))
        assert done.returncode == 0, done.stderr
        assert "FashionMNIST as MNIST" in (copy / "model.py").read_text()
        assert (copy / "data" / "FashionMNIST" / "raw" / "t10k-labels-idx1-ubyte").read_bytes() == b"labels"
        assert (copy / "OFFICIAL_COMMIT").read_text().strip() == commit

    copy = tmp_path / "from_mirror"
    done = _script(tmp_path, "run", str(copy), "0.5", "3")
    assert done.returncode == 0, done.stderr
    log = (copy / "fmnist_p0.5.log").read_text().replace("\r", "\n")
    assert 3 <= log.count("nmi:") < 200  # stopped soon after its third round, not run to the end

    done = _script(tmp_path, "table", str(copy), "0.5")
    assert done.returncode == 0, done.stderr
    page = (tmp_path / "out" / "ccfc_official_70k_p0.5.md").read_text()
    rows = [line for line in page.splitlines() if line.startswith("| ") and line[2].isdigit()]
    assert rows[:2] == ["| 1 | 0.0000 | 0.0001 |", "| 2 | 0.0001 | 0.0002 |"] and f"commit {commit}" in page

    (copy / "outputs" / "fmnist_p0.5").mkdir(parents=True)
    refused = _script(tmp_path, "run", str(copy), "0.5", "3")
    assert refused.returncode == 2 and "remove it to start over" in refused.stderr
    assert "fmnist_p0.5/" not in refused.stdout


def test_prepare_refuses_code_without_the_mnist_import(tmp_path):
    clone = _official_clone(tmp_path)
    (clone / "model.py").write_text("import torch\n")
    git = ["git", "-C", str(clone), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "commit", "-qam", "no MNIST"], check=True)
    done = _script(tmp_path, "prepare", str(clone), str(tmp_path / "copy"))
    assert done.returncode == 2 and "no MNIST import to swap" in done.stderr

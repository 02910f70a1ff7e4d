"""The dashboard screenshot: `fedclust compare` over the benchmark runs already on disk, rendered by
headless Chromium (Debian's chromium package) into benchmarks/results/dashboard.png.

    python benchmarks/dashboard.py                # after classic_fmnist.py, fcm_fmnist.py, ccfc_fmnist.py

The page itself (benchmarks/runs/dashboard.html, ~5 MB with plotly.js inline) is not kept in git.
"""

from __future__ import annotations

import shutil
import subprocess
import sys

from common import RESULTS, RUNS

PATTERNS = ["kfed_l2_local_p*", "ffcm_l2_m1.1_kmeans_p*", "ccfc_fmnist_p*_r3", "fedpnp_fmnist_*", "fedmcc_fmnist_*"]


def main() -> None:
    # Single-Training runs cached before metric_groups existed hold the union clustering's metrics: left out
    runs = [str(f) for pattern in PATTERNS for f in sorted(RUNS.glob(pattern))
            if (f / "config.yaml").exists() and "single_simclr" not in f.name]
    if not runs:
        sys.exit("no benchmark runs in benchmarks/runs: run the benchmarks first")
    page = RUNS / "dashboard.html"
    subprocess.run([sys.executable, "-m", "fedclust", "compare", *runs, "--output", str(page),
                    "--title", "fedclust benchmark runs (Fashion-MNIST)"], check=True)
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        sys.exit("needs chromium (apt-get install -y chromium)")
    shot = RESULTS / "dashboard.png"
    subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                    "--hide-scrollbars", "--virtual-time-budget=20000", "--window-size=1400,2400",
                    f"--screenshot={shot}", page.as_uri()], check=True, capture_output=True, timeout=180)
    print(f"wrote {shot} from {len(runs)} runs")


if __name__ == "__main__":
    main()

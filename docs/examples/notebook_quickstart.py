"""fedclust from Python, as in a notebook (docs/python_api.md); about half a minute on a 2-core CPU.

    python docs/examples/notebook_quickstart.py [RUNS_DIR]

1. Your own arrays, three lines: k-FED clusters scikit-learn's 8x8 digits held by 10 clients.
2. A packaged config with dotted overrides: the quick start's FedSpectral, cut to 3 rounds.
Every run still writes its folder (under RUNS_DIR, default runs/): `fedclust evaluate --run DIR` re-scores it.
"""

import sys

import numpy as np
from sklearn.datasets import load_digits

import fedclust

runs_dir = sys.argv[1] if len(sys.argv) > 1 else "runs"

# 1. Your own arrays: each row's client is its own client id (here every 10th row goes to the same client).
X, y = load_digits(return_X_y=True)
model = fedclust.FederatedClustering("kfed", n_clusters=10, normalize="l2", runs_dir=runs_dir)
labels = model.fit_predict(X, y, clients=np.arange(len(X)) % 10)  # y only scores the run, never clusters

print(f"k-FED: {len(set(labels))} clusters, centres shaped {model.cluster_centers_.shape}, "
      f"NMI {model.result_.metrics['nmi']:.3f}; run folder {model.result_.run_dir}")
print("clusters of 5 new rows:", model.predict(X[:5]))

# 2. A packaged config (or a YAML path) with the command line's dotted keys.
result = fedclust.fit("quickstart", {"federation.rounds": 3, "seed": 1, "progress": False, "runs_dir": runs_dir})
print(result)
print("last round:", {k: round(v, 4) for k, v in result.history[-1].items() if k in ("round", "loss", "nmi")})
print("first assignments:", {column: values[:5].tolist() for column, values in result.assignments.items()})

"""Probes of learned representations: kNN accuracy (CCFC Table 3) and linear evaluation (FedMCC Tables III-IV).

Both fit on the representations (`method.embed`) of a data set's train split and score its test split;
`fedclust evaluate --run RUN --knn 3 5 ... --linear true` runs them on a saved run (fedclust/evaluate.py).
"""

from fedclust.probes.features import ProbeData, probe_data
from fedclust.probes.knn import knn_accuracy, knn_predict
from fedclust.probes.linear import LinearProbeResult, linear_probe

__all__ = ["LinearProbeResult", "ProbeData", "knn_accuracy", "knn_predict", "linear_probe", "probe_data"]

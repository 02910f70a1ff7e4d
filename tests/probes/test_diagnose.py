"""The diagnostics that found CCFC's collapse, on inputs whose answer is known."""

import math

import pytest
import torch

from fedclust.probes.diagnose import cluster_balance, diagnose, effective_rank, spectrum


def test_effective_rank_isotropic_versus_one_direction():
    g = torch.Generator().manual_seed(0)
    iso = torch.randn(20000, 8, generator=g)
    assert effective_rank(spectrum(iso)) == pytest.approx(8, rel=0.02)
    line = torch.randn(500, 1, generator=g) * torch.tensor([[1.0, 2.0, -1.0, 0.5]])
    assert effective_rank(spectrum(line)) == pytest.approx(1, abs=1e-3)


def test_collapsed_representation_reports_top_directions_and_brightness():
    g = torch.Generator().manual_seed(1)
    brightness = torch.rand(2000, generator=g)
    # 64-d z whose dominant direction is brightness, plus small isotropic noise
    z = brightness[:, None] * torch.randn(1, 64, generator=g) * 5 + 0.05 * torch.randn(2000, 64, generator=g)
    z = z + 3 * torch.randn(1, 64, generator=g)  # away from the origin, so normalising keeps the structure
    labels = (brightness > 0.5).long()
    out = diagnose(z, clusters=labels, num_clusters=2, labels=labels, brightness=brightness)
    assert out["top1_share"] > 0.9 and out["top3_share"] >= out["top1_share"]
    assert out["directions_90"] == 1
    assert out["pc1_brightness_r"] > 0.95
    assert out["embed_kmeans_nmi"] > 0.5  # k-means on z splits by brightness, which is the label here
    assert out["cluster_balance"] > 0.9 and out["empty_clusters"] == 0


def test_cluster_balance_equal_one_and_empty():
    equal = cluster_balance(torch.arange(100) % 4, 4)
    assert equal["cluster_balance"] == pytest.approx(1.0) and equal["cluster_min"] == equal["cluster_max"] == 25
    one = cluster_balance(torch.zeros(50, dtype=torch.long), 5)
    assert one["cluster_balance"] == 0.0 and one["empty_clusters"] == 4
    assert cluster_balance(torch.tensor([-1, -1, 0, 1]), 2)["cluster_max"] == 1  # -1: unassigned


def test_without_labels_or_brightness_there_is_no_kmeans_score():
    out = diagnose(torch.randn(100, 5), clusters=torch.arange(100) % 3, num_clusters=3)
    assert "embed_kmeans_nmi" not in out and math.isnan(out["pc1_brightness_r"])


def test_fit_writes_diagnostics_every_evaluated_round(run_fit, tmp_path):
    import csv

    from fedclust.federation.config import FederationConfig
    from tests.conftest import tiny_ccfc

    run_fit(tiny_ccfc(), federation=FederationConfig(eval_every=1), diagnose=True)
    with (tmp_path / "run" / "diagnostics.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert [int(float(r["round"])) for r in rows] == [1, 2]
    assert all(0 <= float(r["embed_kmeans_nmi"]) <= 1 and float(r["effective_rank"]) >= 1 for r in rows)

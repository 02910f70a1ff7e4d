import json

from tests.conftest import tiny_ccfc


def test_embedding_plot_saves_picture_and_per_client_ch(run_fit, tmp_path):
    run_fit(tiny_ccfc(), embedding_plot=True, embedding_points=300)
    folder = tmp_path / "run"
    png = folder / "embedding.png"
    assert png.exists() and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    info = json.loads((folder / "embedding.json").read_text())
    assert info["points"] == 300
    scores = info["calinski_harabasz_per_client"]
    assert set(scores) == {"0", "1"} and all(v > 0 for v in scores.values())
    assert abs(info["calinski_harabasz_mean"] - sum(scores.values()) / 2) < 1e-9


def test_too_few_points_is_refused(run_fit):
    import pytest

    from fedclust.errors import ConfigError

    with pytest.raises(ConfigError, match="embedding_points"):
        run_fit(tiny_ccfc(), embedding_points=3)

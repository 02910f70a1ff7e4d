import pytest
import torch

from fedclust.__main__ import main
from fedclust.data.datasets import load_dataset
from fedclust.errors import ConfigError
from tests.helpers.tiny import CLI_TINY as TINY


def test_rotated_holds_one_class_at_four_rotations_cluster_by_cluster():
    base = load_dataset("digits")
    ds = load_dataset("rotated", source="digits", label=3)
    originals = base.x[base.y == 3]
    n = len(originals)
    assert len(ds) == 4 * n and ds.num_classes == 4 and ds.is_image
    assert torch.equal(ds.y, torch.arange(4).repeat_interleave(n))
    assert torch.equal(ds.x[:n], originals)
    assert torch.equal(ds.x[n:2 * n], torch.rot90(originals, 1, dims=(-2, -1)))  # 90 degrees
    assert torch.equal(ds.x[3 * n:], torch.rot90(originals, 3, dims=(-2, -1)))


@pytest.mark.parametrize("options,field", [
    ({"source": "digits", "label": 10}, "data.options.label"),
    ({"source": "gaussian"}, "data.options.source"),
    ({"source": "rotated"}, "data.options.source"),
])
def test_rotated_rejects_bad_options_naming_the_field(options, field):
    with pytest.raises(ConfigError, match=field):
        load_dataset("rotated", **options)


def test_representations_are_the_saved_models_embeddings(tmp_path):
    run = tmp_path / "run"
    assert main(["fit", "--config", "configs/ccfc_digits.yaml", *TINY, "--run_dir", str(run)]) == 0
    ds = load_dataset("representations", run=str(run))
    base = load_dataset("digits")
    assert ds.x.shape == (len(base), 16) and not ds.is_image  # TINY sets latent_dim 16
    assert torch.equal(ds.y, base.y)
    assert torch.allclose(ds.x.norm(dim=1), torch.ones(len(ds)), atol=1e-4)  # CCFC embeds on the sphere


def test_representations_need_a_run_folder(tmp_path):
    with pytest.raises(ConfigError, match="data.options.run"):
        load_dataset("representations")
    with pytest.raises(ConfigError, match="run"):
        load_dataset("representations", run=str(tmp_path / "missing"))


def test_hog_vectors_describe_a_sources_images_with_its_labels_order_and_split():
    from fedclust.data.dataset import to_float
    from fedclust.data.datasets import load_dataset
    from fedclust.data.hog import hog

    base = load_dataset("digits")
    described = load_dataset("hog", source="digits", cell=2)
    assert not described.is_image and described.x.shape == (len(base), 9 * 4 * 4)
    assert torch.equal(described.y, base.y) and torch.equal(described.split, base.split)
    torch.testing.assert_close(described.x[:7], hog(to_float(base.x[:7]), 2))
    for bad, field in ((dict(source="gaussian"), "data.options.source"), (dict(source="digits", cell=9),
                                                                           "data.options.cell")):
        with pytest.raises(ConfigError, match=field):
            load_dataset("hog", **bad)

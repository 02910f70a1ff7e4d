import torch

from fedclust.clustering.dcn import embed, train_dcn
from fedclust.nn.autoencoder import MLPAutoencoder


def blobs(n_per: int = 50, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    centres = torch.eye(16)[:3] * 4
    labels = torch.arange(3).repeat_interleave(n_per)
    return centres[labels] + 0.2 * torch.randn(3 * n_per, 16, generator=g), labels


def test_autoencoder_is_dcns_mlp():
    ae = MLPAutoencoder(784)
    widths = [(m.in_features, m.out_features) for m in ae.modules() if isinstance(m, torch.nn.Linear)]
    assert widths == [(784, 500), (500, 500), (500, 2000), (2000, 10), (10, 2000), (2000, 500), (500, 500),
                      (500, 784)]
    z, rec = ae(torch.rand(3, 1, 28, 28))
    assert z.shape == (3, 10) and rec.shape == (3, 784)


def test_pretraining_lowers_the_reconstruction_loss():
    x, _ = blobs()
    torch.manual_seed(0)
    result = train_dcn(x, 3, MLPAutoencoder(16, (32,), 3), torch.Generator().manual_seed(0), pretrain_epochs=20,
                       cluster_epochs=0, batch_size=32)
    assert result.pretrain_losses[-1] < 0.5 * result.pretrain_losses[0]


def test_with_a_frozen_network_the_running_mean_keeps_the_cluster_means():
    # lr 0: the embedding never changes, so every joint epoch adds the same points to the same clusters and
    # the running mean m <- m - (m - f(x)) / c stays the mean of each cluster's embeddings
    x, _ = blobs()
    torch.manual_seed(0)
    ae = MLPAutoencoder(16, (32,), 3)
    result = train_dcn(x, 3, ae, torch.Generator().manual_seed(0), lr=0.0, pretrain_epochs=0, cluster_epochs=3,
                       batch_size=32, kmeans_redo=5)
    z = embed(ae, x)
    means = torch.stack([z[result.labels == k].mean(0) for k in range(3)])
    assert torch.allclose(result.centroids, means, atol=1e-4)

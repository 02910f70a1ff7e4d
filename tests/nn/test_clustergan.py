import pytest
import torch
from torch import nn

from fedclust.nn.clustergan import (
    ClusterGANDiscriminator,
    ClusterGANEncoder,
    ClusterGANGenerator,
    gradient_penalty,
    sample_latent,
)


def test_paper_sized_networks_map_28x28_images_and_latents():
    torch.manual_seed(0)
    g, d, e = ClusterGANGenerator(30 + 10), ClusterGANDiscriminator(), ClusterGANEncoder(30, 10)
    x = g(torch.randn(4, 40))
    assert x.shape == (4, 1, 28, 28) and 0 <= x.min() and x.max() <= 1  # sigmoid output
    assert d(x).shape == (4,)
    z_n, logits = e(x)
    assert z_n.shape == (4, 30) and logits.shape == (4, 10)
    # the authors' layer sizes: 128 x 7 x 7 after the two strided convs, FC 1024
    assert d.net[5].in_features == 128 * 7 * 7 and d.net[5].out_features == 1024
    assert g.net[3].out_features == 128 * 7 * 7
    assert isinstance(g.net[5], nn.BatchNorm2d) and g.net[5].num_features == 128  # BN after the reshape
    assert not any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in [*d.modules(), *e.modules()])


def test_weights_start_small_as_in_the_authors_code():
    torch.manual_seed(0)
    g = ClusterGANGenerator(40)
    w = g.net[0].weight
    assert abs(w.std().item() - 0.02) < 0.002 and torch.all(g.net[0].bias == 0)


def test_latent_prior_is_small_gaussian_noise_plus_one_hot_cluster():
    gen = torch.Generator().manual_seed(0)
    z_n, z_c, ids = sample_latent(5000, 30, 10, 0.1, gen)
    assert z_n.shape == (5000, 30) and z_c.shape == (5000, 10)
    assert torch.all(z_c.sum(1) == 1) and torch.equal(z_c.argmax(1), ids)
    assert set(z_c.unique().tolist()) == {0.0, 1.0}
    assert z_n.std().item() == pytest.approx(0.1, rel=0.05)
    assert torch.bincount(ids, minlength=10).min() > 400  # uniform over the k clusters
    again = sample_latent(5000, 30, 10, 0.1, torch.Generator().manual_seed(0))
    assert torch.equal(again[0], z_n) and torch.equal(again[2], ids)  # all randomness from the generator


def test_gradient_penalty_of_a_linear_critic_is_the_squared_norm_gap():
    # f(x) = w . x has gradient w everywhere, so the penalty is (||w|| - 1)^2 whatever is mixed
    critic = nn.Sequential(nn.Flatten(), nn.Linear(4, 1, bias=False))
    with torch.no_grad():
        critic[1].weight.copy_(torch.tensor([[3.0, 0.0, 4.0, 0.0]]))  # norm 5
    real, fake = torch.rand(6, 1, 2, 2), torch.rand(6, 1, 2, 2)
    gp = gradient_penalty(critic, real, fake, torch.Generator().manual_seed(0))
    assert gp.item() == pytest.approx(16.0)
    gp.backward()  # differentiable in the critic's weights (create_graph)
    assert critic[1].weight.grad is not None

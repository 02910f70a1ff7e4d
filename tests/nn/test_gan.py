import math

import pytest
import torch
from torch import nn

from fedclust.errors import ConfigError
from fedclust.nn.gan import (
    GAN,
    Discriminator,
    Generator,
    check_gan_image,
    discriminator_loss,
    gan_losses,
    generator_loss,
    init_gan_weights,
    sample_latent,
)


def layers(module, kinds):
    return [m for m in module.modules() if isinstance(m, kinds)]


def test_generator_is_the_reference_architecture():
    g = Generator()
    linears = layers(g, nn.Linear)
    assert [(m.in_features, m.out_features) for m in linears] == [(72, 1024), (1024, 128 * 7 * 7)]
    deconvs = layers(g, nn.ConvTranspose2d)
    assert [(m.in_channels, m.out_channels) for m in deconvs] == [(128, 64), (64, 1)]
    assert all(m.kernel_size == (4, 4) and m.stride == (2, 2) and m.padding == (1, 1) for m in deconvs)
    assert len(layers(g, nn.BatchNorm1d)) == 2 and len(layers(g, nn.BatchNorm2d)) == 1
    assert isinstance(g.deconv[-1], nn.Sigmoid)


def test_discriminator_is_the_ccfc_trunk_then_two_linears():
    d = Discriminator()
    convs = layers(d, nn.Conv2d)
    assert [(c.in_channels, c.out_channels) for c in convs] == [(1, 64), (64, 128), (128, 256)]
    assert [(m.in_features, m.out_features) for m in layers(d, nn.Linear)] == [(2304, 1024), (1024, 1)]
    assert isinstance(d.fc[2], nn.LeakyReLU) and d.fc[2].negative_slope == 0.2


@pytest.mark.parametrize("channels,size", [(1, 28), (1, 8), (3, 32)])
def test_shapes(channels, size):
    gan = GAN(channels, size, g_hidden=32, d_hidden=32).eval()
    with torch.no_grad():
        x = gan.generator(sample_latent(5))
        assert x.shape == (5, channels, size, size)
        assert x.min() >= 0 and x.max() <= 1  # Sigmoid: the scale of the data
        assert gan.discriminator(x).shape == (5, 1)


def test_init_is_normal_002_with_zero_biases():
    torch.manual_seed(0)
    gan = GAN()
    big = gan.generator.fc[3].weight  # 1024 x 6272
    assert big.std().item() == pytest.approx(0.02, rel=0.01) and abs(big.mean().item()) < 1e-3
    for m in layers(gan, (nn.Linear, nn.Conv2d, nn.ConvTranspose2d)):
        assert torch.all(m.bias == 0)
    bn = gan.generator.fc[1]
    assert torch.all(bn.weight == 1) and torch.all(bn.bias == 0)  # BatchNorm keeps torch's init


def test_init_draws_only_from_the_given_generator():
    a, b = GAN(g_hidden=16, d_hidden=16), GAN(g_hidden=16, d_hidden=16)
    init_gan_weights(a, torch.Generator().manual_seed(3))
    torch.manual_seed(123)  # the global RNG must not matter
    init_gan_weights(b, torch.Generator().manual_seed(3))
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    init_gan_weights(b, torch.Generator().manual_seed(4))
    assert not torch.equal(a.generator.fc[0].weight, b.generator.fc[0].weight)


def test_sample_latent_one_hot_blocks_then_noise():
    z = sample_latent(64, generator=torch.Generator().manual_seed(0))
    assert z.shape == (64, 72)
    code, noise = z[:, :10], z[:, 10:]
    assert torch.all(code.sum(1) == 1) and set(code.unique().tolist()) == {0.0, 1.0}
    # the reference's blocks: round(64 / 10) = 6 rows per code, the last code takes the rest
    assert code.argmax(1).tolist() == [c for c in range(9) for _ in range(6)] + [9] * 10
    assert noise.mean().abs() < 0.1 and (noise.std() - 1).abs() < 0.1
    again = sample_latent(64, generator=torch.Generator().manual_seed(0))
    assert torch.equal(z, again)
    assert sample_latent(3).shape == (3, 72) and torch.all(sample_latent(3)[:, 9] == 1)  # round(0.3) = 0


def test_losses_by_hand():
    zero = torch.zeros(4, 1)
    assert discriminator_loss(zero, zero).item() == pytest.approx(2 * math.log(2))
    assert generator_loss(zero).item() == pytest.approx(math.log(2))
    # non-saturating: a confident discriminator gives the generator a large loss, not a vanishing one
    assert generator_loss(torch.full((4, 1), -10.0)).item() == pytest.approx(10.0, abs=1e-3)
    d, g = gan_losses(torch.full((2, 1), 10.0), torch.full((2, 1), -10.0), zero)
    assert d.item() == pytest.approx(0.0, abs=1e-3) and g.item() == pytest.approx(math.log(2))


def test_train_step_moves_both_networks_and_returns_detached_losses():
    torch.manual_seed(0)
    gan = GAN(1, 8, g_hidden=16, d_hidden=16)
    before = [p.clone() for p in gan.parameters()]
    opt_d = torch.optim.Adam(gan.discriminator.parameters(), lr=1e-3)
    opt_g = torch.optim.Adam(gan.generator.parameters(), lr=1e-3)
    d, g = gan.train_step(torch.rand(8, 1, 8, 8), opt_d, opt_g, torch.Generator().manual_seed(0))
    assert not d.requires_grad and not g.requires_grad
    moved = [not torch.equal(a, b) for a, b in zip(before, gan.parameters())]
    n_g = len(list(gan.generator.parameters()))
    assert any(moved[:n_g]) and any(moved[n_g:])


def test_synthesize_uses_eval_mode_and_restores_it():
    gan = GAN(1, 8, g_hidden=16, d_hidden=16).train()
    x = gan.synthesize(450, torch.Generator().manual_seed(0), torch.device("cpu"))
    assert x.shape == (450, 1, 8, 8) and gan.generator.training
    assert torch.equal(x, gan.synthesize(450, torch.Generator().manual_seed(0), torch.device("cpu")))


@pytest.mark.parametrize("channels,size,image", [(0, 0, False), (1, 30, True), (1, 4, True)])
def test_unsupported_data_is_a_config_error(channels, size, image):
    with pytest.raises(ConfigError, match="data.name"):
        check_gan_image(channels, size, image)

import pytest
import torch
import torch.nn.functional as F

from fedclust.errors import ConfigError
from fedclust.nn.backbones import (
    BACKBONES,
    ConvNet28,
    MLPBackbone,
    Resized,
    build_backbone,
    mid_level,
    resnet,
    with_mid_features,
)


def _out(net, shape):
    net.eval()
    with torch.no_grad():
        return net(torch.rand(shape))


@pytest.mark.parametrize("size,dim", [(28, 2304), (8, 256), (32, 4096)])
def test_convnet28_out_dim(size, dim):
    net = ConvNet28(1, size)
    assert net.out_dim == dim
    assert _out(net, (2, 1, size, size)).shape == (2, dim)


@pytest.mark.parametrize("name", BACKBONES)
def test_out_channels_split_the_flat_output_into_whole_maps(name):
    """channel_pool over out_channels is global average pooling of the trunk's last maps (ConvNet28), and the
    identity where the trunk pools already (ResNets, whose out_channels is out_dim)."""
    from fedclust.nn.heads import channel_pool

    net = build_backbone(name, 1, 28)
    assert net.out_dim % net.out_channels == 0
    if name == "convnet28":
        x = torch.rand(2, 1, 28, 28)
        with torch.no_grad():
            flat, maps = net.eval()(x), net.net[:-1](x)  # the maps before the flatten: 256 x 3 x 3
        assert net.out_channels == maps.shape[1] == 256
        pool, width = channel_pool(net.out_channels, net.out_dim)
        assert width == 256 and torch.allclose(pool(flat), maps.mean((2, 3)), atol=1e-6)
    else:
        h = _out(net, (2, 1, 28, 28))
        pool, width = channel_pool(net.out_channels, net.out_dim, grid=2)
        assert net.out_channels == net.out_dim == width and torch.equal(pool(h), h)
    assert build_backbone(name, 1, 8, resize=28).out_channels == net.out_channels  # Resized keeps it


def test_channel_pool_on_a_grid_averages_each_cell_of_the_maps():
    """channel_pool with grid 2 on 3 x 3 maps: each channel's means over the four overlapping 2 x 2 windows, channel
    by channel; features that are not whole square maps, or a grid below 1, are refused."""
    from fedclust.nn.heads import channel_pool

    maps = torch.arange(2 * 4 * 9, dtype=torch.float32).view(2, 4, 3, 3)
    pool, width = channel_pool(4, 36, grid=2)
    out = pool(maps.flatten(1))
    assert width == out.shape[1] == 16
    for i, j in ((0, 0), (0, 1), (1, 0), (1, 1)):
        assert torch.equal(out.view(2, 4, 2, 2)[:, :, i, j], maps[:, :, i:i + 2, j:j + 2].mean((2, 3)))
    for in_features, grid in ((4 * 6, 2), (36, 0)):
        with pytest.raises(ValueError, match="cannot pool"):
            channel_pool(4, in_features, grid)


def test_convnet28_layers_match_ccfc():
    convs = [m for m in ConvNet28().modules() if isinstance(m, torch.nn.Conv2d)]
    assert [(c.in_channels, c.out_channels) for c in convs] == [(1, 64), (64, 128), (128, 256)]
    assert all(c.kernel_size == (4, 4) and c.stride == (2, 2) and c.padding == (1, 1) for c in convs)


def test_convnet28_too_small():
    with pytest.raises(ConfigError):
        ConvNet28(1, 4)


def test_mlp_backbone():
    net = MLPBackbone(64, hidden=32, depth=3)
    assert net.out_dim == 32
    assert _out(net, (4, 64)).shape == (4, 32)
    assert _out(net, (4, 1, 8, 8)).shape == (4, 32)  # images are flattened


@pytest.mark.parametrize("name", BACKBONES)
def test_build_backbone_every_name(name):
    c, size = (1, 28) if name in ("convnet28", "mlp") else (3, 32)
    net = build_backbone(name, c, size)
    assert isinstance(net.out_dim, int)
    assert _out(net, (2, c, size, size)).shape == (2, net.out_dim)


def test_build_mlp_on_vectors():
    net = build_backbone("mlp", 1, None, in_features=10)
    assert _out(net, (3, 10)).shape == (3, net.out_dim)
    with pytest.raises(ConfigError):
        build_backbone("mlp", 1, None)


def test_resnet_out_dims_and_stems():
    assert resnet(18).out_dim == 512 and resnet(50).out_dim == 2048
    cifar = resnet(18, cifar_stem=True)
    assert cifar.conv1.kernel_size == (3, 3) and cifar.conv1.stride == (1, 1)
    assert isinstance(cifar.maxpool, torch.nn.Identity) and isinstance(cifar.fc, torch.nn.Identity)
    assert _out(cifar, (2, 3, 32, 32)).shape == (2, 512)
    gray = resnet(34, in_channels=1)
    assert gray.conv1.in_channels == 1 and gray.conv1.kernel_size == (7, 7)
    assert _out(gray, (2, 1, 32, 32)).shape == (2, 512)
    gray_cifar = build_backbone("resnet18_cifar", 1, 28)
    assert _out(gray_cifar, (2, 1, 28, 28)).shape == (2, 512)


def test_resize_wrapper():
    net = build_backbone("convnet28", 1, 8, resize=28)
    assert isinstance(net, Resized) and net.out_dim == 2304
    assert _out(net, (2, 1, 8, 8)).shape == (2, 2304)  # 8x8 digits resized to CCFC's 28x28
    net = build_backbone("resnet18", 3, 32, resize=64)
    assert _out(net, (2, 3, 32, 32)).shape == (2, 512)


def test_unknown_name():
    with pytest.raises(ConfigError, match="method.init_args.backbone"):
        build_backbone("vgg16", 3, 32)


def test_group_norm_trunks_do_not_depend_on_the_rest_of_the_batch():
    """With norm="group" a sample's features are the same whatever else is in its batch (in training mode too):
    what a client learns does not depend on its class mix through the normalisation."""
    import pytest
    import torch

    from fedclust.errors import ConfigError
    from fedclust.nn.backbones import build_backbone

    for name, shape in (("convnet28", (1, 28)), ("mlp", (1, 8)), ("resnet18_cifar", (3, 32))):
        c, s = shape
        net = build_backbone(name, c, s, in_features=c * s * s, norm="group").train()
        x = torch.rand(6, c, s, s, generator=torch.Generator().manual_seed(0))
        alone, together = net(x[:1]), net(x)[:1]
        assert torch.allclose(alone, together, atol=1e-5), name
    with pytest.raises(ConfigError, match="method.init_args.norm"):
        build_backbone("convnet28", 1, 28, norm="instance")


@pytest.mark.parametrize("name", ["convnet28", "mlp", "resnet18_cifar"])
def test_mid_features_come_from_the_same_pass_as_the_output(name):
    """with_mid_features returns the backbone's own output and its mid level flat: ConvNet28's second block averaged
    to the output's 3 x 3 grid, the MLP's first hidden layer, a ResNet's layer3 averaged per channel."""
    torch.manual_seed(0)
    if name == "mlp":
        net, x = build_backbone(name, 1, None, in_features=20, norm="group"), torch.rand(3, 20)
    elif name == "convnet28":
        net, x = build_backbone(name, 1, 28, norm="group"), torch.rand(3, 1, 28, 28)
    else:
        net, x = build_backbone(name, 3, 32, norm="group"), torch.rand(3, 3, 32, 32)
    net.eval()
    with torch.no_grad():
        out, mid = with_mid_features(net, x)
        assert torch.equal(out, net(x))
        if name == "convnet28":
            expected = F.adaptive_avg_pool2d(net.net[:6](x), 3).flatten(1)
        elif name == "mlp":
            expected = net.net[:4](x)
        else:
            stem = torch.nn.Sequential(net.conv1, net.bn1, net.relu, net.maxpool, net.layer1, net.layer2, net.layer3)
            expected = stem(x).mean((2, 3))
    torch.testing.assert_close(mid, expected)
    assert len(net._forward_hooks) == 0 and len(mid_level(net)._forward_hooks) == 0  # the hook is removed


def test_mid_level_looks_through_a_resize_and_refuses_other_nets():
    wrapped = build_backbone("convnet28", 1, 16, resize=28, norm="group")
    out, mid = with_mid_features(wrapped, torch.rand(2, 1, 16, 16))
    assert out.shape == (2, 2304) and mid.shape == (2, 128 * 9)
    with pytest.raises(TypeError, match="no mid level"):
        mid_level(torch.nn.Linear(3, 3))

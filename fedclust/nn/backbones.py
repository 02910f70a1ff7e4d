"""Encoder trunks: CCFC's 28x28 ConvNet, an MLP for vector data and torchvision ResNets.

Every module returned here has an int attribute ``out_dim`` (the width of its flat output), so heads
can be built without a dummy forward pass, and ``out_channels``: the output is ``out_channels`` maps of
``out_dim / out_channels`` positions each, flattened channel by channel (ConvNet28's 256 x 3 x 3; the others pool or
are vectors already, so theirs is ``out_dim``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
import torchvision
from torch import nn

from fedclust.errors import ConfigError, MethodArgError

BACKBONES = (
    "convnet28", "mlp", "resnet18", "resnet34", "resnet50", "resnet18_cifar", "resnet34_cifar",
    "resnet50_cifar",
)


def norm2d(kind: str, channels: int) -> nn.Module:
    """BatchNorm2d ("batch") or GroupNorm with 8 groups ("group"). GroupNorm normalises each sample on its own, so
    what a client learns does not depend on the mix of its batches: under label skew BatchNorm trains on one-class
    batch statistics and is scored with averaged ones (Hsieh et al., "The Non-IID Data Quagmire", ICML 2020)."""
    if kind == "batch":
        return nn.BatchNorm2d(channels)
    if kind == "group":
        return nn.GroupNorm(8, channels)
    raise MethodArgError("norm", kind, "batch or group")


class ConvNet28(nn.Module):
    """CCFC's encoder trunk: 3 x [Conv(k4, s2, p1) + BatchNorm2d + LeakyReLU(0.2)], 64/128/256 channels
    (``norm="group"``: GroupNorm instead of BatchNorm).

    On 1x28x28 input the output is 256x3x3 flattened (``out_dim`` 2304); 8x8 gives 256, 32x32 gives 4096.
    """

    def __init__(self, in_channels: int = 1, input_size: int = 28, norm: str = "batch"):
        super().__init__()
        layers: list[nn.Module] = []
        size, c_in = input_size, in_channels
        for c_out in (64, 128, 256):
            layers += [nn.Conv2d(c_in, c_out, 4, 2, 1), norm2d(norm, c_out), nn.LeakyReLU(0.2)]
            size, c_in = (size + 2 - 4) // 2 + 1, c_out
        if size < 1:
            raise ConfigError("data.input_size", input_size, "at least 8 pixels for convnet28")
        self.net = nn.Sequential(*layers, nn.Flatten())
        self.out_dim, self.out_channels = 256 * size * size, 256

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class MLPBackbone(nn.Module):
    """``depth`` x [Linear + BatchNorm1d (LayerNorm with ``norm="group"``) + ReLU] on flattened input; ``out_dim`` =
    ``hidden``."""

    def __init__(self, in_features: int, hidden: int = 512, depth: int = 2, norm: str = "batch"):
        super().__init__()
        layers: list[nn.Module] = [nn.Flatten()]
        d = in_features
        for _ in range(depth):
            normal = nn.BatchNorm1d(hidden) if norm == "batch" else nn.LayerNorm(hidden)
            layers += [nn.Linear(d, hidden), normal, nn.ReLU(inplace=True)]
            d = hidden
        self.net = nn.Sequential(*layers)
        self.out_dim = self.out_channels = d

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def resnet(depth: int = 18, in_channels: int = 3, cifar_stem: bool = False, norm: str = "batch") -> nn.Module:
    """A randomly initialised torchvision ResNet-18/34/50 without its classifier (``fc`` = Identity).

    ``cifar_stem`` swaps the 7x7/2 conv + max-pool stem for a 3x3/1 conv and no pool (the usual choice
    for 32x32 images, e.g. FedU/FedEMA's ResNet-18).
    """
    builders = {18: torchvision.models.resnet18, 34: torchvision.models.resnet34,
                50: torchvision.models.resnet50}
    if depth not in builders:
        raise MethodArgError("backbone", f"resnet{depth}", "resnet depth 18, 34 or 50")
    norm2d(norm, 8)  # an unknown kind is refused here
    layer = None if norm == "batch" else (lambda channels: nn.GroupNorm(32, channels))
    net = builders[depth](weights=None, norm_layer=layer)
    if cifar_stem:
        net.conv1 = nn.Conv2d(in_channels, 64, 3, 1, 1, bias=False)
        net.maxpool = nn.Identity()
    elif in_channels != 3:
        net.conv1 = nn.Conv2d(in_channels, 64, 7, 2, 3, bias=False)
    if cifar_stem or in_channels != 3:
        # torchvision's own init for conv layers, so a replaced stem starts like the original one
        nn.init.kaiming_normal_(net.conv1.weight, mode="fan_out", nonlinearity="relu")
    net.out_dim = net.out_channels = net.fc.in_features  # after torchvision's global average pool
    net.fc = nn.Identity()
    return net


class Resized(nn.Module):
    """Bilinearly resizes inputs to ``size`` x ``size`` before ``net`` (to match a paper's input size)."""

    def __init__(self, net: nn.Module, size: int):
        super().__init__()
        self.net, self.size = net, size
        self.out_dim, self.out_channels = int(net.out_dim), int(net.out_channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[-2:] != (self.size, self.size):
            x = F.interpolate(x, size=(self.size, self.size), mode="bilinear", align_corners=False)
        return self.net(x)


def build_backbone(name: str, in_channels: int, input_size: int | None, in_features: int | None = None,
                   resize: int | None = None, norm: str = "batch") -> nn.Module:
    """The backbone called ``name`` (one of ``BACKBONES``) for the given input shape.

    ``input_size`` is the side of square images (None for vector data, then ``in_features`` is needed
    by "mlp"); ``resize`` wraps the net in :class:`Resized` so inputs are resized first; ``norm`` "group" puts
    GroupNorm where the net has BatchNorm (convnet28 and mlp: LayerNorm there; ResNets: GroupNorm, 32 groups).
    """
    if name not in BACKBONES:
        raise MethodArgError("backbone", name, "one of " + ", ".join(BACKBONES))
    size = resize or input_size
    if name == "convnet28":
        if size is None:
            raise ConfigError("data.input_size", input_size, "an image side length for convnet28")
        net: nn.Module = ConvNet28(in_channels, size, norm)
    elif name == "mlp":
        if in_features is None:
            if size is None:
                raise ConfigError("data.in_features", in_features, "a feature count for mlp on vectors")
            in_features = in_channels * size * size
        net = MLPBackbone(in_features, norm=norm)
    else:
        depth = int(name.removeprefix("resnet").removesuffix("_cifar"))
        net = resnet(depth, in_channels, cifar_stem=name.endswith("_cifar"), norm=norm)
    return Resized(net, resize) if resize else net


def mid_level(backbone: nn.Module) -> nn.Module:
    """The module of ``backbone`` whose output is its mid-level features: ConvNet28's second block (128 maps of 7 x 7
    on 28 x 28 input), a ResNet's layer3, the MLP's first hidden layer (a ``Resized`` backbone: its net's)."""
    net = backbone.net if isinstance(backbone, Resized) else backbone
    if isinstance(net, ConvNet28):
        return net.net[5]
    if isinstance(net, MLPBackbone):
        return net.net[3]
    if isinstance(net, torchvision.models.ResNet):
        return net.layer3
    raise TypeError(f"no mid level is defined for a {type(net).__name__}")


def with_mid_features(backbone: nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``backbone(x)`` and, from the same pass, its mid-level features (:func:`mid_level`) flat: maps averaged to the
    grid of the output's own maps (ConvNet28: 3 x 3; pooled outputs: each channel's mean), vectors as they are. A
    forward hook reads them, so every backbone keeps its own forward."""
    kept: list[torch.Tensor] = []
    handle = mid_level(backbone).register_forward_hook(lambda _module, _inputs, out: kept.append(out))
    try:
        out = backbone(x)
    finally:
        handle.remove()
    mid = kept[-1]
    if mid.dim() == 4:
        side = max(1, round((int(backbone.out_dim) // int(backbone.out_channels)) ** 0.5))
        mid = F.adaptive_avg_pool2d(mid, side)
    return out, mid.flatten(1)


def _channels_last_input(_module: nn.Module, args: tuple) -> tuple:
    x = args[0]
    return (x.contiguous(memory_format=torch.channels_last), *args[1:]) if x.dim() == 4 else args


def use_channels_last(model: nn.Module) -> nn.Module:
    """Run every Conv2d of ``model`` in torch.channels_last (NHWC) memory: 4-D weights converted in place,
    4-D inputs converted by a forward pre-hook (a no-op once they are already channels-last). State-dict keys
    and values are unchanged and Flatten still reads NCHW order, so results equal the default layout's up to
    float rounding. oneDNN's bf16 convolutions are faster in this layout: a CCFC stage-1 round at one thread
    took 2.0 s with bf16 autocast + channels-last against 2.4 s with bf16 alone and 3.5 s in fp32
    (benchmarks/results/cpu_speed.md). Returns ``model``."""
    model.to(memory_format=torch.channels_last)
    for module in model.modules():
        if isinstance(module, nn.Conv2d):
            module.register_forward_pre_hook(_channels_last_input)
    return model

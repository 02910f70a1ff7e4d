"""use_channels_last (fedclust/nn/backbones.py): the NHWC layout the CPU speed benchmark measured as fastest
with bf16 autocast; it must change only the memory layout, never the numbers or the state dict."""

import pytest
import torch

from fedclust.nn.backbones import ConvNet28, resnet, use_channels_last


@pytest.mark.parametrize("make,shape", [(lambda: ConvNet28(1, 28), (8, 1, 28, 28)),
                                        (lambda: resnet(18, 3, cifar_stem=True), (4, 3, 32, 32))])
def test_same_outputs_and_state_dict_in_channels_last(make, shape):
    torch.manual_seed(0)
    plain = make().eval()
    nhwc = use_channels_last(make().eval())
    nhwc.load_state_dict(plain.state_dict())
    assert plain.state_dict().keys() == nhwc.state_dict().keys()
    convs = [m for m in nhwc.modules() if isinstance(m, torch.nn.Conv2d)]
    assert all(c.weight.is_contiguous(memory_format=torch.channels_last) for c in convs)
    x = torch.rand(shape)
    seen = []
    convs[0].register_forward_hook(lambda _m, args, _out: seen.append(args[0]))
    with torch.no_grad():
        assert torch.allclose(plain(x), nhwc(x), atol=1e-5)
    assert seen[0].is_contiguous(memory_format=torch.channels_last)  # the hook converted the NCHW input
    assert not x.is_contiguous(memory_format=torch.channels_last) or shape[1] == 1


def test_training_step_and_load_keep_the_layout():
    """A gradient step and a FedAvg-style load_state_dict (contiguous tensors in) keep NHWC weights."""
    net = use_channels_last(ConvNet28(1, 28))
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    net(torch.rand(16, 1, 28, 28)).pow(2).mean().backward()
    opt.step()
    net.load_state_dict({k: v.contiguous() for k, v in ConvNet28(1, 28).state_dict().items()})
    conv = next(m for m in net.modules() if isinstance(m, torch.nn.Conv2d) and m.in_channels > 1)
    assert conv.weight.is_contiguous(memory_format=torch.channels_last)


def test_fit_option_runs_a_conv_method_in_channels_last_with_the_same_metrics(run_fit, tmp_path, monkeypatch):
    """`--fabric.memory_format channels_last`: the run's convolutions see NHWC inputs; the metrics equal the
    default layout's up to float rounding."""
    from fedclust.run import FabricConfig
    from tests.helpers.tiny import tiny_method_and_data

    seen = []
    real = torch.nn.Conv2d.forward

    def spy(self, x):
        seen.append(x.is_contiguous(memory_format=torch.channels_last) and x.shape[1] > 1)
        return real(self, x)

    monkeypatch.setattr(torch.nn.Conv2d, "forward", spy)
    results = {}
    for layout in ("contiguous", "channels_last"):
        method, data = tiny_method_and_data("ClusterGANFedAvg", tmp_path / "data")
        seen.clear()
        results[layout] = run_fit(method, data=data, folder=layout, seed=1,
                                  fabric=FabricConfig(accelerator="cpu", memory_format=layout))
        assert any(seen) == (layout == "channels_last")
    assert results["channels_last"] == pytest.approx(results["contiguous"], abs=1e-4, nan_ok=True)

import pytest
import torch
from torch import nn

from fedclust.losses.contrastive import cluster_contrastive_loss, instance_contrastive_loss
from fedclust.nn.memory_efficient import chunked_backward


class TwoHeads(nn.Module):
    """A per-sample encoder (no BatchNorm) with CC's instance and cluster heads."""

    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(12, 16), nn.ReLU(), nn.Linear(16, 16))
        self.inst = nn.Linear(16, 8)
        self.clus = nn.Sequential(nn.Linear(16, 4), nn.Softmax(dim=1))

    def forward(self, x):
        h = self.body(x)
        return self.inst(h), self.clus(h)


def cc_loss(z_a, c_a, z_b, c_b):
    return instance_contrastive_loss(z_a, z_b) + cluster_contrastive_loss(c_a, c_b)


@pytest.mark.parametrize("chunk", [1, 5, 32])
def test_chunked_gradients_equal_the_ordinary_ones(chunk):
    torch.manual_seed(0)
    net = TwoHeads()
    xa, xb = torch.randn(20, 12), torch.randn(20, 12)
    loss = cc_loss(*net(xa), *net(xb))
    loss.backward()
    ordinary = [p.grad.clone() for p in net.parameters()]
    net.zero_grad()
    cached = chunked_backward(net, [xa, xb], cc_loss, chunk_size=chunk)
    assert cached.item() == pytest.approx(loss.item(), rel=1e-6)
    for p, g in zip(net.parameters(), ordinary):
        torch.testing.assert_close(p.grad, g, rtol=1e-5, atol=1e-7)


def test_single_tensor_output_and_unused_representation():
    torch.manual_seed(1)
    lin = nn.Linear(6, 3)
    x = torch.randn(9, 6)
    y = torch.randn(9, 6)

    def loss_fn(a, b):  # b unused: its gradient is zero, not an error
        return (a ** 2).sum()

    chunked_backward(lin, [x, y], loss_fn, chunk_size=4)
    expected = torch.autograd.grad((lin(x) ** 2).sum(), lin.weight)[0]
    torch.testing.assert_close(lin.weight.grad, expected)


def test_bad_chunk_size_is_refused():
    with pytest.raises(ValueError, match="chunk_size"):
        chunked_backward(nn.Linear(2, 2), [torch.randn(3, 2)], lambda a: a.sum(), chunk_size=0)

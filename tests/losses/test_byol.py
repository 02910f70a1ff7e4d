import math

import pytest
import torch

from fedclust.losses.byol import byol_loss, regression_loss


def test_regression_loss_hand_computed():
    p = torch.tensor([[1.0, 0.0], [3.0, 4.0], [1.0, 1.0]])
    z = torch.tensor([[2.0, 0.0], [-3.0, -4.0], [1.0, 0.0]])
    # cos = 1, -1, 1/sqrt(2)  ->  2 - 2 cos = 0, 4, 2 - sqrt(2)
    assert regression_loss(p, z).tolist() == pytest.approx([0.0, 4.0, 2 - math.sqrt(2)])


def test_symmetric_loss_hand_computed_and_scale_free():
    p1 = torch.tensor([[1.0, 0.0]])
    p2 = torch.tensor([[0.0, 5.0]])
    t1 = torch.tensor([[0.0, 1.0]])  # p2 against t1: cos 1 -> 0
    t2 = torch.tensor([[0.0, 2.0]])  # p1 against t2: cos 0 -> 2
    assert byol_loss(p1, p2, t1, t2).item() == pytest.approx(2.0)
    assert byol_loss(3 * p1, p2, t1, 7 * t2).item() == pytest.approx(2.0)  # only directions count


def test_no_gradient_reaches_the_targets():
    p1, p2 = torch.randn(4, 3, requires_grad=True), torch.randn(4, 3, requires_grad=True)
    t1, t2 = torch.randn(4, 3, requires_grad=True), torch.randn(4, 3, requires_grad=True)
    byol_loss(p1, p2, t1, t2).backward()
    assert p1.grad is not None and p2.grad is not None
    assert t1.grad is None and t2.grad is None

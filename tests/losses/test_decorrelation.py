import torch

from fedclust.losses.decorrelation import correlation_matrix, decorrelation_loss


def test_zero_for_decorrelated_features():
    # orthonormal columns spanning centred vectors: zero mean and exactly uncorrelated
    centring = torch.eye(64) - 1 / 64
    z, _ = torch.linalg.qr(centring @ torch.randn(64, 8, generator=torch.Generator().manual_seed(1)))
    assert torch.allclose(z.mean(0), torch.zeros(8), atol=1e-6)
    assert decorrelation_loss(z).item() < 1e-10


def test_grows_with_correlation_and_is_maximal_for_copies():
    g = torch.Generator().manual_seed(0)
    base, noise = torch.randn(256, 1, generator=g), torch.randn(256, 16, generator=g)
    losses = [decorrelation_loss(base * s + noise).item() for s in (0.0, 0.5, 1.0, 2.0, 8.0)]
    assert all(a < b for a, b in zip(losses, losses[1:]))
    copies = base.repeat(1, 16)
    assert abs(decorrelation_loss(copies).item() - 15 / 16) < 1e-3


def test_hand_computed_two_dimensions():
    z = torch.tensor([[1.0, 2.0], [2.0, 1.0], [3.0, 3.0]])
    r = torch.corrcoef(z.T)[0, 1]
    assert torch.allclose(correlation_matrix(z, eps=0.0)[0, 1], r, atol=1e-6)
    assert torch.allclose(decorrelation_loss(z), 2 * r**2 / 4, atol=1e-4)


def test_scale_and_shift_invariant_and_differentiable():
    g = torch.Generator().manual_seed(3)
    z = torch.randn(32, 4, generator=g) @ torch.randn(4, 4, generator=g)
    assert torch.allclose(decorrelation_loss(z), decorrelation_loss(3 * z + 7), atol=1e-5)
    w = z.clone().requires_grad_(True)
    decorrelation_loss(w).backward()
    assert torch.isfinite(w.grad).all() and w.grad.abs().sum() > 0


def test_one_sample_and_constant_dimension_are_finite():
    assert decorrelation_loss(torch.randn(1, 5)).item() == 0.0
    z = torch.randn(16, 3)
    z[:, 1] = 4.0
    assert torch.isfinite(decorrelation_loss(z))

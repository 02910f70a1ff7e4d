import math

import pytest
import torch
from torch.autograd.functional import jacobian
from torch.distributions import MultivariateNormal

from fedclust.errors import ConfigError
from fedclust.nn.flows import (
    MASKINGS,
    AffineFlow,
    PlanarFlow,
    RealNVP,
    coupling_masks,
    stack_log_prob,
    standard_normal_log_prob,
)
from fedclust.seeding import generator


def _perturb(flow, std=0.3, seed=0):
    """Random parameters everywhere (RealNVP starts as the identity, which would make the checks trivial)."""
    g = generator(seed, "perturb")
    with torch.no_grad():
        for p in flow.parameters():
            p.add_(std * torch.randn(p.shape, generator=g, dtype=p.dtype))
    return flow


def _log_det_brute_force(flow, x):
    """log|det dz/dx| of flow.encode for each sample of x, from the full autograd Jacobian."""
    out = []
    for xi in x:
        jac = jacobian(lambda v: flow.encode(v[None])[0][0], xi)
        n = xi.numel()
        out.append(torch.linalg.slogdet(jac.reshape(n, n)).logabsdet)
    return torch.stack(out)


# ---------------------------------------------------------------------------------------------- AffineFlow


@pytest.mark.parametrize("triangular", [False, True])
def test_affine_log_prob_is_the_gaussian_density(triangular):
    torch.manual_seed(0)
    flow = _perturb(AffineFlow(5, init_std=0.5, triangular=triangular).double())
    x = torch.randn(64, 5, generator=generator(1, "x"), dtype=torch.float64) * 2
    w = flow.matrix()
    expected = MultivariateNormal(flow.bias, covariance_matrix=w @ w.T).log_prob(x)
    assert torch.allclose(flow.log_prob(x), expected, atol=1e-9)
    assert torch.allclose(flow.nll(x), -expected, atol=1e-9)
    assert torch.allclose(flow(x), expected, atol=1e-9)


def test_affine_encode_decode_and_sample():
    torch.manual_seed(0)
    flow = AffineFlow(4, init_std=0.5).double()
    x = torch.randn(10, 4, generator=generator(0, "x"), dtype=torch.float64)
    z, log_det = flow.encode(x)
    assert torch.allclose(flow.decode(z), x, atol=1e-10)
    assert log_det.shape == (10,)
    a, b = flow.sample(7, generator(3, "s")), flow.sample(7, generator(3, "s"))
    assert a.shape == (7, 4) and torch.equal(a, b)
    with pytest.raises(ValueError):
        flow.log_prob(torch.zeros(3, 5, dtype=torch.float64))


@pytest.mark.parametrize("triangular", [False, True])
def test_affine_maximum_likelihood_reaches_the_entropy(triangular):
    torch.manual_seed(0)
    d, n = 3, 4000
    mean = torch.tensor([3.0, -1.0, 0.5], dtype=torch.float64)
    a = torch.tensor([[2.0, 0.0, 0.0], [0.8, 0.5, 0.0], [-0.3, 0.4, 1.2]], dtype=torch.float64)
    x = mean + torch.randn(n, d, generator=generator(0, "data"), dtype=torch.float64) @ a.T
    entropy = 0.5 * torch.logdet(2 * math.pi * math.e * a @ a.T)
    # the maximum-likelihood Gaussian (sample mean, biased covariance) is the optimum of the fit
    mle = MultivariateNormal(x.mean(0), covariance_matrix=torch.cov(x.T, correction=0))
    flow = AffineFlow(d, triangular=triangular).double()
    opt = torch.optim.Adam(flow.parameters(), lr=0.05)
    for _ in range(600):
        loss = flow.nll(x).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    fitted = flow.nll(x).mean().item()
    assert fitted == pytest.approx(-mle.log_prob(x).mean().item(), abs=5e-3)
    assert fitted == pytest.approx(entropy.item(), abs=0.05)


# ---------------------------------------------------------------------------------------------- PlanarFlow


def test_planar_log_det_matches_brute_force_jacobian():
    torch.manual_seed(0)
    flow = _perturb(PlanarFlow(3, layers=3, init_std=1.0).double())
    x = torch.randn(4, 3, generator=generator(2, "x"), dtype=torch.float64)
    _, log_det = flow.encode(x)
    assert torch.allclose(log_det, _log_det_brute_force(flow, x), atol=1e-9)
    z, _ = flow.encode(x)
    expected = torch.distributions.Normal(0.0, 1.0).log_prob(z).sum(1) + log_det
    assert torch.allclose(flow.log_prob(x), expected, atol=1e-9)


def test_planar_stays_invertible_and_decodes():
    torch.manual_seed(0)
    flow = PlanarFlow(2, layers=2).double()
    with torch.no_grad():  # w^T u = -3 < -1 would make a raw planar map non-invertible
        flow.w.copy_(torch.tensor([[1.0, 0.0], [0.0, 2.0]]))
        flow.u.copy_(torch.tensor([[-3.0, 0.0], [1.0, -4.0]]))
    assert ((flow.w * flow._u_hat()).sum(1) >= -1 - 1e-12).all()
    x = torch.randn(50, 2, generator=generator(1, "x"), dtype=torch.float64) * 3
    z, log_det = flow.encode(x)
    assert torch.isfinite(log_det).all()
    assert torch.allclose(flow.decode(z), x, atol=1e-8)
    assert flow.sample(5, generator(0, "s")).shape == (5, 2)


# ---------------------------------------------------------------------------------------------- RealNVP


def _tiny(masking, couplings=4, size=4, dtype=torch.float64):
    torch.manual_seed(0)
    return _perturb(RealNVP(1, size, masking, num_couplings=couplings, hidden_channels=4, num_blocks=1)).to(dtype)


@pytest.mark.parametrize("masking", MASKINGS)
def test_realnvp_decode_inverts_encode(masking):
    flow = _tiny(masking, couplings=8, size=8)
    x = torch.rand(3, 1, 8, 8, generator=generator(0, "x"), dtype=torch.float64)
    z, _ = flow.encode(x)
    assert not torch.allclose(z, flow.logit(x)[0])  # the couplings do something
    assert torch.allclose(flow.decode(z), x, atol=1e-10)


@pytest.mark.parametrize("masking", MASKINGS)
def test_realnvp_log_det_matches_brute_force_jacobian(masking):
    flow = _tiny(masking)
    x = torch.rand(2, 1, 4, 4, generator=generator(1, "x"), dtype=torch.float64)
    _, log_det = flow.encode(x)
    assert torch.allclose(log_det, _log_det_brute_force(flow, x), atol=1e-9)


@pytest.mark.parametrize("masking", MASKINGS)
def test_realnvp_at_init_is_the_logit_transform_of_a_standard_normal(masking):
    torch.manual_seed(0)
    flow = RealNVP(1, 8, masking, num_couplings=4, hidden_channels=8, num_blocks=1).double()
    x = torch.rand(5, 1, 8, 8, generator=generator(2, "x"), dtype=torch.float64)
    alpha = 0.05
    p = alpha + (1 - 2 * alpha) * x
    y = torch.special.logit(p)
    log_det = torch.log((1 - 2 * alpha) / (p * (1 - p))).sum((1, 2, 3))
    expected = torch.distributions.Normal(0.0, 1.0).log_prob(y).sum((1, 2, 3)) + log_det
    assert torch.allclose(flow.log_prob(x), expected, atol=1e-10)
    assert torch.allclose(standard_normal_log_prob(y) + log_det, expected, atol=1e-10)


def test_coupling_masks_are_binary_disjoint_and_differ():
    cb, cyc = coupling_masks("checkerboard", 28, 28, 8), coupling_masks("cyclic", 28, 28, 8)
    assert not torch.equal(cb, cyc)
    for masks in (cb, cyc):
        assert masks.shape == (8, 2, 28, 28)
        assert ((masks == 0) | (masks == 1)).all()
        read, change = masks[:, 0], masks[:, 1]
        assert (read * change).sum() == 0  # a coupling never reads what it changes: triangular Jacobian
        assert (read.sum((1, 2)) > 0).all() and (change.sum((1, 2)) > 0).all()
        assert (change[:4].sum(0) > 0).all()  # every pixel is changed within four couplings
    assert torch.equal(cb[0, 1], cb[1, 0]) and torch.equal(cb[0, 0] + cb[0, 1], torch.ones(28, 28))
    # cyclic: quadrants of 14 x 14, each coupling writes the quadrant after the one it reads
    assert (cyc[:, 0].sum((1, 2)) == 196).all() and (cyc[:, 1].sum((1, 2)) == 196).all()
    assert torch.equal(cyc[0, 1], cyc[1, 0]) and torch.equal(cyc[3, 1], cyc[0, 0]) and torch.equal(cyc[4], cyc[0])
    assert cyc[0, 0, 0, 0] == 1 and cyc[0, 1, 0, 27] == 1 and cyc[1, 1, 27, 27] == 1 and cyc[2, 1, 27, 0] == 1
    assert torch.equal(RealNVP(masking="cyclic", hidden_channels=4, num_blocks=1).masks, cyc)


def test_realnvp_rejects_unknown_masking_and_wrong_shapes():
    with pytest.raises(ConfigError):
        RealNVP(masking="diagonal")
    flow = RealNVP(1, 8, hidden_channels=4, num_blocks=1)
    with pytest.raises(ValueError):
        flow.log_prob(torch.rand(2, 1, 6, 6))


def test_realnvp_sample_is_seeded_and_in_range():
    flow = _tiny("checkerboard", size=8, dtype=torch.float32)
    a, b = flow.sample(4, generator(5, "s")), flow.sample(4, generator(5, "s"))
    assert a.shape == (4, 1, 8, 8) and torch.equal(a, b)
    assert a.min() >= 0 and a.max() <= 1


def test_realnvp_training_lowers_the_nll():
    torch.manual_seed(0)
    flow = RealNVP(1, 8, "cyclic", num_couplings=4, hidden_channels=8, num_blocks=1)
    x = torch.rand(64, 1, 8, 8, generator=generator(0, "x")) * 0.2  # dark images: far from the init's density
    opt = torch.optim.Adam(flow.parameters(), lr=1e-2)
    start = flow.nll(x).mean().item()
    for _ in range(30):
        loss = flow.nll(x).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert flow.nll(x).mean().item() < start - 10


def test_stack_log_prob_and_assignment():
    torch.manual_seed(0)
    flows = [AffineFlow(2, init_std=0.0), AffineFlow(2, init_std=0.0)]
    with torch.no_grad():
        flows[1].bias.fill_(10.0)
    x = torch.tensor([[0.1, -0.2], [9.5, 10.3], [0.0, 1.0]])
    scores = stack_log_prob(flows, x)
    assert scores.shape == (2, 3)
    assert scores.argmax(0).tolist() == [0, 1, 0]


@pytest.mark.parametrize("dilation,sees", [(1, False), (2, True)])
def test_cyclic_receptive_field_and_dilation(dilation, sees):
    """A pixel 14 columns from the read quadrant sees it only through a dilated s/t net (r = 6 vs 17)."""
    torch.manual_seed(0)
    flow = _perturb(RealNVP(1, 28, "cyclic", num_couplings=1, hidden_channels=4, num_blocks=2, dilation=dilation))
    x = torch.rand(1, 1, 28, 28, generator=generator(0, "x"), requires_grad=True)
    flow.encode(x)[0][0, 0, 5, 27].backward()  # top-right quadrant, written from the top-left one
    assert (x.grad[0, 0, :14, :14].abs().sum() > 0).item() is sees

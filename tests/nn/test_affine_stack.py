"""Stacked affine flows (fedclust.nn.affine_stack): the stack shares memory with the flows, an optimizer step on it
moves the flows, and its loss and scores equal each flow's own."""

import copy

import pytest
import torch

from fedclust.nn.affine_stack import batch_nll, shares_stack, stack_parameters, stacked_log_probs
from fedclust.nn.flows import AffineFlow
from fedclust.nn.optim import CpuAdam


def _flows(triangular: bool, count: int = 3, dim: int = 4) -> list[AffineFlow]:
    torch.manual_seed(0)
    return [AffineFlow(dim, init_std=0.5, triangular=triangular) for _ in range(count)]


@pytest.mark.parametrize("triangular", [True, False])
def test_stacked_rows_are_the_flows_parameters_and_a_step_on_them_moves_the_flows(triangular):
    flows = _flows(triangular)
    before = [{k: v.clone() for k, v in f.state_dict().items()} for f in flows]
    stacked = stack_parameters(flows)
    assert [list(f.state_dict()) for f in flows] == [list(b) for b in before]  # FedAvg sees the same keys
    assert all(torch.equal(f.state_dict()[k], b[k]) for f, b in zip(flows, before) for k in b)
    assert all(t.is_leaf and t.requires_grad and t.shape[0] == 3 for t in stacked.values())
    assert shares_stack(flows, stacked)
    for t in stacked.values():
        t.grad = torch.ones_like(t)
    CpuAdam(list(stacked.values()), lr=0.1, foreach=True).step()
    for j, (flow, old) in enumerate(zip(flows, before)):
        for name, tensor in stacked.items():
            assert torch.equal(getattr(flow, name), tensor[j])  # the flow reads the stepped row
            assert not torch.equal(flow.state_dict()[name], old[name])  # and it moved


def test_a_copied_or_replaced_flow_no_longer_shares_the_stack():
    flows = _flows(True)
    stacked = stack_parameters(flows)
    assert not shares_stack(copy.deepcopy(flows), stacked)
    flows[1].bias = torch.nn.Parameter(flows[1].bias.detach().clone())  # same values, own memory
    assert not shares_stack(flows, stacked)
    assert not shares_stack(_flows(True), {})  # no stack: nothing is shared


@pytest.mark.parametrize("triangular", [True, False])
@pytest.mark.parametrize("active", [[0, 2], [0, 1, 2]])
def test_batch_nll_of_the_active_flows_equals_autograd_through_each_flow(triangular, active):
    flows = _flows(triangular)
    reference = copy.deepcopy(flows)
    stacked = stack_parameters(flows)
    g = torch.Generator().manual_seed(1)
    x = 2 * torch.randn(len(active), 6, 4, generator=g) + 1
    weights = torch.rand(len(active), 6, generator=g)
    weights[0, 4:] = 0  # padding
    weights = weights / weights.sum(1, keepdim=True)
    loss = batch_nll(stacked, torch.tensor(active), x, weights)
    expected = sum((reference[j].nll(x[i]) * weights[i]).sum() for i, j in enumerate(active))
    assert torch.allclose(loss, expected.detach(), rtol=1e-5)
    loss.backward()
    expected.backward()
    for name, tensor in stacked.items():
        for j, flow in enumerate(reference):
            want = getattr(flow, name).grad if j in active else torch.zeros_like(tensor[j])  # a flow not trained
            assert torch.allclose(tensor.grad[j], want, atol=1e-4)


@pytest.mark.parametrize("triangular", [True, False])
def test_stacked_log_probs_equal_each_flows_log_prob(triangular):
    flows = _flows(triangular)
    x = 3 * torch.randn(5, 4, generator=torch.Generator().manual_seed(2))
    expected = torch.stack([f.log_prob(x) for f in flows]).detach()
    assert torch.allclose(stacked_log_probs(flows, x), expected, atol=1e-4)
    stack_parameters(flows)  # the same whether or not the flows view a stack
    assert torch.allclose(stacked_log_probs(flows, x), expected, atol=1e-4)

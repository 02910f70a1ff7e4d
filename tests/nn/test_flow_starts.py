import torch

from fedclust.nn.flow_starts import (
    SCORE_LIMIT,
    flow_starts,
    is_affine,
    log_probs,
    member_batches,
    membership,
    redraw_,
    score_and_assign,
    start_slice,
)
from fedclust.nn.flows import AffineFlow, PlanarFlow


def test_each_start_is_one_flow_and_its_perturbed_copies():
    torch.manual_seed(0)
    flows = flow_starts(lambda: AffineFlow(3), num_models=2, restarts=3, init_noise=0.01)
    assert len(flows) == 6
    for start in range(3):
        a, b = (flows[2 * start + k].weight.detach() for k in range(2))
        assert 0 < (a - b).abs().max() < 0.05  # copies of one draw, apart by the noise only
    assert (flows[0].weight - flows[2].weight).abs().max() > 0.05  # starts are independent draws


def test_start_slice_names_each_starts_own_models_and_is_affine_tells_the_stacked_kind():
    flows = flow_starts(lambda: AffineFlow(3, triangular=True), num_models=2, restarts=3, init_noise=0.01)
    assert [list(range(6))[start_slice(r, 2)] for r in range(3)] == [[0, 1], [2, 3], [4, 5]]
    assert is_affine(flows)  # the triangular kind trains stacked too
    assert not is_affine(flow_starts(lambda: PlanarFlow(2), num_models=2, restarts=1, init_noise=0.0))


def test_redraw_replaces_every_start_with_fresh_perturbed_copies():
    torch.manual_seed(0)
    flows = flow_starts(lambda: AffineFlow(3), num_models=2, restarts=2, init_noise=0.0)
    before = [f.weight.detach().clone() for f in flows]
    redraw_(flows, lambda: AffineFlow(3), num_models=2, init_noise=0.0)
    assert all(not torch.equal(b, f.weight) for b, f in zip(before, flows))
    # no noise: each start's models are exact copies of its fresh draw
    assert torch.equal(flows[0].weight, flows[1].weight) and torch.equal(flows[2].weight, flows[3].weight)


def test_scores_are_each_starts_best_model_summed_and_clamped():
    torch.manual_seed(0)
    flows = flow_starts(lambda: PlanarFlow(2), num_models=2, restarts=2, init_noise=0.5)
    x = torch.randn(3000, 2)  # more than one chunk of 1,024
    scores = log_probs(flows, x).view(2, 2, -1)
    totals, choice = score_and_assign(flows, x, restarts=2)
    assert torch.allclose(totals, scores.max(1).values.double().sum(1))
    assert torch.equal(choice, scores.argmax(1))
    with torch.no_grad():
        flows[0].u.fill_(float("nan"))
    assert score_and_assign(flows, x, restarts=2)[0][0] == -SCORE_LIMIT  # a diverged start stays finite


def test_membership_places_each_start_at_its_own_flows():
    assignment = torch.tensor([[0, 1, 1], [1, 1, 0]])  # two starts of two models
    expected = torch.tensor([[1, 0, 0], [0, 1, 1], [0, 0, 1], [1, 1, 0]], dtype=torch.bool)
    assert torch.equal(membership(assignment, 2), expected)


def test_member_batches_draw_each_flows_members_without_replacement():
    members = torch.zeros(3, 40, dtype=torch.bool)
    members[0, :20], members[1, 20:23], members[2, ::2] = True, True, True  # 20, 3 and 20 members
    picks, weights = member_batches(members, batch_size=5, steps=4, g=torch.Generator().manual_seed(0))
    assert picks.shape == (4, 3, 5) and weights.shape == (3, 5)
    for j in (0, 2):  # 4 steps x 5 = each of the 20 members exactly once
        assert sorted(picks[:, j].flatten().tolist()) == members[j].nonzero().flatten().tolist()
        assert torch.allclose(weights[j], torch.full((5,), 0.2))
    assert set(picks[:, 1].flatten().tolist()) == {20, 21, 22}  # fewer than a batch: cycled, padding weighted 0
    assert torch.allclose(weights[1], torch.tensor([1 / 3] * 3 + [0.0] * 2))

"""The flat, in-place WeightedSum against the plain per-key sum it replaced (same averages up to float64
rounding), and the sum-based finiteness check against the elementwise one."""

import pytest
import torch

from fedclust.federation.aggregate import WeightedSum, _weight_for, is_finite


def per_key_average(states, weights, key_weights):
    """The reference: a new float64 tensor per key and client, as the engine did before the flat buffer."""
    sums, totals, dtypes = {}, {}, {}
    for state, weight, kw in zip(states, weights, key_weights):
        for key, value in state.items():
            w = _weight_for(key, weight, kw)
            if w == 0:
                continue
            contribution = value.double() * w
            if key in sums:
                sums[key] += contribution
                totals[key] += w
            else:
                sums[key], totals[key], dtypes[key] = contribution, w, value.dtype
    return sums, totals, {k: ((sums[k] / t).round() if not dtypes[k].is_floating_point else sums[k] / t).to(dtypes[k])
                          for k, t in totals.items()}


def random_state(gen):
    """A BatchNorm-like state dict of mixed dtypes, integer step counters included."""
    def randn(*shape, dtype=torch.float32):
        return (torch.randn(*shape, generator=gen) * 3).to(dtype)
    return {"a.conv.weight": randn(8, 3, 3, 3), "a.bn.weight": randn(8), "a.bn.running_mean": randn(8),
            "a.bn.num_batches_tracked": torch.randint(0, 1000, (), generator=gen),
            "b.half": randn(5, dtype=torch.float16), "b.bf16": randn(4, 2, dtype=torch.bfloat16),
            "b.double": randn(6, dtype=torch.float64), "b.counts": torch.randint(-50, 50, (3,), generator=gen),
            "b.scalar": randn(())}


@pytest.mark.parametrize("prefix_weights", [False, True])
def test_flat_sum_matches_per_key_sum_on_mixed_dtypes(prefix_weights):
    gen = torch.Generator().manual_seed(0)
    states = [random_state(gen) for _ in range(7)]
    weights = [float(w) for w in torch.randint(1, 50, (7,), generator=gen)]
    # UIFCA-style per-prefix weights, zero for some clients (incl. the first, so a key starts late)
    kws = [{"b.": float(i % 3)} if prefix_weights else None for i in range(7)]
    total = WeightedSum()
    for state, weight, kw in zip(states, weights, kws):
        total.add(state, weight, kw)
    ref_sums, ref_totals, ref_avg = per_key_average(states, weights, kws)
    assert total.totals == ref_totals and total.count == 7
    for key, ref in ref_sums.items():
        torch.testing.assert_close(total.sums[key], ref, rtol=1e-13, atol=1e-13)
    avg = total.average()
    assert avg.keys() == ref_avg.keys()
    for key, ref in ref_avg.items():
        assert avg[key].dtype == ref.dtype and avg[key].shape == ref.shape
        if ref.dtype.is_floating_point:
            torch.testing.assert_close(avg[key], ref)  # at most one rounding step of the key's dtype apart
        else:
            assert torch.equal(avg[key], ref)


def test_flat_sum_leaves_the_clients_state_alone_and_holds_one_buffer():
    gen = torch.Generator().manual_seed(1)
    state = random_state(gen)
    before = {k: v.clone() for k, v in state.items()}
    total = WeightedSum()
    total.add(state, 2.0)
    total.add(state, 3.0)
    assert all(torch.equal(state[k], before[k]) for k in state)
    storages = {v.untyped_storage().data_ptr() for v in total.sums.values()}
    assert len(storages) == 1 and all(v.dtype == torch.float64 for v in total.sums.values())
    torch.testing.assert_close(total.average()["a.conv.weight"], before["a.conv.weight"])


def test_sum_based_finite_check_agrees_with_elementwise_check():
    big = torch.full((4,), 3e38)  # finite float32 values whose float32 sum overflows: still finite
    assert is_finite({"w": big, "n": torch.tensor(3)})
    for bad in (float("nan"), float("inf"), float("-inf")):
        x = torch.randn(1000)
        x[517] = bad
        assert not is_finite({"ok": torch.ones(3)}, {"w": x})
        assert not is_finite({"w": x.half()})
    mixed = torch.tensor([float("inf"), float("-inf")])  # sums to nan, not to a finite number
    assert not is_finite({"w": mixed})
    assert is_finite({"w": torch.empty(0)})

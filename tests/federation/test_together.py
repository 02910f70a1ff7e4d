"""A round's clients trained together (fedclust/federation/together.py) against the same round trained one by one.

Tolerances, measured on 3 Dirichlet clients of 156 / 179 / 265 digits (batches of 64: 3, 3 and 5 steps, last batches
of 28, 51 and 9 samples, each run in a group of its own):
- float64: the same maths. Weights after aggregation, payloads, per-client Adam states (the same step counts, the
  same format) and kept weights agree to 1e-7 of each tensor's largest entry (measured: FedSpectral 5e-13, CCFC
  5e-9 over both stages).
- float32: the two paths sum in different orders (batched matrix products under vmap), and Adam turns rounding-level
  differences of a gradient that is truly zero into steps of up to lr: a bias just before a BatchNorm, which the
  BatchNorm cancels, has a gradient of pure rounding noise. FedSpectral (GroupNorm / LayerNorm) stays within 1e-3 of
  each tensor's norm (measured 5e-5 on weights, 8e-5 on Adam states; its summaries, made before training, are
  equal). CCFC's fp32 training is chaotic whichever way it runs: the sequential round against itself with the loss
  scaled by (1 + 2^-20) already parts by 2e-2 of the weights' norm, as much as training together does, so in float32
  CCFC is held to that same bound (3x) rather than to a fixed tolerance.
"""

import math

import pytest
import torch

import fedclust.data.client_data as client_data
import fedclust.methods.families.cluster_contrastive as family
from fedclust.contract import LOCAL_WEIGHTS, OPTIMIZER, RoundContext
from fedclust.errors import ConfigError
from fedclust.federation import together
from fedclust.federation.config import FederationConfig
from fedclust.methods import CCFCPlusPlus, FedCC, FedSpectral
from fedclust.run import fit
from tests.conftest import tiny_ccfc, tiny_data
from tests.helpers.tiny import build, interrupted_after_round

UNEQUAL = dict(num_clients=3, partition="dirichlet", alpha=0.5, subsample=600)


def tiny_fedspectral(**kw) -> FedSpectral:
    return FedSpectral(**{**dict(backbone="mlp", projector_hidden=32, latent_dim=16, rounds=1, batch_size=64,
                                 neighbors=5), **kw})


def first_rounds(method, clients_together: str, double: bool = False, **federation) -> dict:
    """The first round of every stage: what reached the server each round, and every client's state after."""
    fed = FederationConfig(clients_together=clients_together, min_summary_size=10, **federation)
    orch = build(method, data_cfg=tiny_data(**UNEQUAL), federation=fed)
    if double:
        method.double()
        if hasattr(method, "_frozen"):
            method._frozen["net"].double()
    seen, real = [], method.aggregate

    def spy(averaged, updates, ctx):
        seen.append(({k: v.clone() for k, v in averaged.items()}, [u.payload for u in updates]))
        real(averaged, updates, ctx)

    method.aggregate = spy
    for index, stage in enumerate(orch.stages):
        orch.run_round(RoundContext(stage, index, 0, orch.seed))
    return {"rounds": seen, "clients": orch.client_states, "together": orch.together,
            "sizes": [len(part) for part in orch.data.parts]}


def tensors(result: dict) -> dict[str, torch.Tensor]:
    """Every number the round leaves behind, by a name saying where it is."""
    found = {}
    for r, (averaged, payloads) in enumerate(result["rounds"]):
        found.update({f"round {r} weights {k}": v for k, v in averaged.items()})
        for c, payload in enumerate(payloads):
            found.update({f"round {r} client {c} payload {k}": v for k, v in payload.items()})
    for c, state in result["clients"].items():
        found.update({f"client {c} kept {k}": v for k, v in state.get(LOCAL_WEIGHTS, {}).items()})
        for i, saved in enumerate(state[OPTIMIZER]["states"]):
            for p, entry in saved["state"].items():
                found.update({f"client {c} optimizer {i} param {p} {k}": v for k, v in entry.items()})
    return found


def assert_same_structure(a: dict, b: dict) -> None:
    assert a["together"] is False and b["together"] is True
    assert len(set(a["sizes"])) == len(a["sizes"])  # unequal clients: padding and remainders are exercised
    for c, state in a["clients"].items():
        other = b["clients"][c]
        assert other[OPTIMIZER]["stage"] == state[OPTIMIZER]["stage"]
        for mine, theirs in zip(state[OPTIMIZER]["states"], other[OPTIMIZER]["states"]):
            assert theirs["param_groups"] == mine["param_groups"]
            assert list(theirs["state"]) == list(mine["state"])
            for p, entry in mine["state"].items():  # the same step counts, kept as torch.optim.Adam keeps them
                assert list(theirs["state"][p]) == list(entry)
                assert theirs["state"][p]["step"].dtype == entry["step"].dtype
                assert float(theirs["state"][p]["step"]) == float(entry["step"])
    assert tensors(a).keys() == tensors(b).keys()


def worst(a: dict, b: dict, measure) -> tuple[float, str]:
    """The largest difference between the two rounds' tensors, by ``measure``, and where it is."""
    ta, tb = tensors(a), tensors(b)
    return max((measure(tb[k].double(), ta[k].double()), k) for k in ta if ta[k].is_floating_point())


def largest_entry(x: torch.Tensor, ref: torch.Tensor) -> float:
    """max |x - ref| over ref's largest entry (entries of pure rounding noise, below 1e-6, count as 1e-6)."""
    return float((x - ref).abs().max() / ref.abs().max().clamp(min=1e-6)) if ref.numel() else 0.0


def norm(x: torch.Tensor, ref: torch.Tensor) -> float:
    return float((x - ref).norm() / ref.norm().clamp(min=1e-6)) if ref.numel() else 0.0


@pytest.fixture
def float64_samples(monkeypatch):
    real = client_data.FederatedData.gather
    monkeypatch.setattr(client_data.FederatedData, "gather", lambda self, idx: real(self, idx).double())


METHODS = {"FedSpectral": tiny_fedspectral, "CCFC": tiny_ccfc, "CCFC++": lambda: tiny_ccfc(CCFCPlusPlus),
           "CCFC, BatchNorm statistics kept per client": tiny_ccfc}


@pytest.mark.parametrize("name", list(METHODS))
def test_a_round_trained_together_equals_the_round_trained_one_by_one_in_float64(name, float64_samples):
    federation = dict(average_bn_buffers=False) if "kept" in name else {}
    one_by_one = first_rounds(METHODS[name](), "off", double=True, **federation)
    stacked = first_rounds(METHODS[name](), "on", double=True, **federation)
    assert_same_structure(one_by_one, stacked)
    if "kept" in name:
        assert any("running_mean" in k for k in tensors(stacked) if " kept " in k)
    difference, where = worst(one_by_one, stacked, largest_entry)
    assert difference < 1e-7, where


def test_fedspectral_trained_together_in_float32_is_within_1e_3_of_one_by_one():
    one_by_one, stacked = first_rounds(tiny_fedspectral(), "off"), first_rounds(tiny_fedspectral(), "on")
    assert_same_structure(one_by_one, stacked)
    difference, where = worst(one_by_one, stacked, norm)
    assert difference < 1e-3, where
    summaries = [(k, v) for k, v in tensors(stacked).items() if "payload" in k]
    assert all(torch.equal(v, tensors(one_by_one)[k]) for k, v in summaries)  # made before training: equal


def test_ccfc_trained_together_in_float32_parts_from_one_by_one_no_more_than_rounding_does(monkeypatch):
    one_by_one, stacked = first_rounds(tiny_ccfc(), "off"), first_rounds(tiny_ccfc(), "on")
    assert_same_structure(one_by_one, stacked)
    real = family.ClusterContrastiveFC.loss_from_inputs
    monkeypatch.setattr(family.ClusterContrastiveFC, "loss_from_inputs",
                        lambda self, inputs: real(self, inputs) * (1 + 2**-20))
    rounded = first_rounds(tiny_ccfc(), "off")

    def weights(result):  # the first round's averaged weights: the later numbers inherit its spread (its payloads,
        # local centroids under the floor, may differ in number: rounding can move a sample across a merge)
        return {"rounds": [(result["rounds"][0][0], [])], "clients": {}}

    together_spread = worst(weights(one_by_one), weights(stacked), norm)[0]
    rounding_spread = worst(weights(one_by_one), weights(rounded), norm)[0]
    assert 0 < rounding_spread and together_spread < 3 * rounding_spread


def test_off_auto_on_the_cpu_and_methods_without_the_hooks_train_one_by_one(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("trained together")

    monkeypatch.setattr("fedclust.federation.orchestrator.train_together", refuse)
    for method, setting in ((tiny_fedspectral(), "off"), (tiny_fedspectral(), "auto"),
                            (FedCC(backbone="mlp", rounds=1, local_epochs=1, batch_size=64), "on")):
        orch = build(method, data_cfg=tiny_data(**UNEQUAL),
                     federation=FederationConfig(clients_together=setting, min_summary_size=10))
        assert orch.together is False
        record = orch.run_round(RoundContext(orch.stages[0], 0, 0, orch.seed))
        assert record["clients"] == 3 and not math.isnan(record["loss"])
    assert build(tiny_fedspectral(), federation=FederationConfig(clients_together="on")).together is True


def test_what_cannot_be_trained_together_says_why():
    class OwnStep(FedSpectral):
        def training_step(self, batch, batch_idx):
            return super().training_step(batch, batch_idx) * 2

    class AdamW(FedSpectral):
        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters())

    for method, reason in ((FedCC(backbone="mlp"), "does not split"), (OwnStep(backbone="mlp"), "training_step"),
                           (AdamW(backbone="mlp"), "not one torch.optim.Adam")):
        method.build(tiny_fedspectral_info())
        why = together.unsupported(method, [method.configure_optimizers()])
        assert why is not None and reason in why, why
    method = tiny_fedspectral()
    method.build(tiny_fedspectral_info())
    assert together.unsupported(method, [method.configure_optimizers()]) is None
    assert together.clients_together("auto", method, [method.configure_optimizers()], torch.device("cuda")) is True
    assert together.clients_together("auto", method, [method.configure_optimizers()], torch.device("cpu")) is False


def tiny_fedspectral_info():
    from fedclust.contract import DataInfo

    return DataInfo(num_classes=10, in_channels=1, input_size=8, num_features=64, is_image=True)


def test_the_setting_is_checked_without_torch():
    with pytest.raises(ConfigError, match="federation.clients_together"):
        FederationConfig(clients_together="sometimes").validate()


def test_a_run_trained_together_stopped_and_resumed_ends_like_the_uninterrupted_run(tmp_path):
    method_args = dict(pretrain_rounds=2, cluster_rounds=2)
    fed = FederationConfig(checkpoint_every=2, clients_together="on")
    common = dict(data=tiny_data(**UNEQUAL), federation=fed, seed=5, progress=False)
    full = fit(tiny_ccfc(**method_args), run_dir=str(tmp_path / "full"), **common)
    with interrupted_after_round(2):
        fit(tiny_ccfc(**method_args), run_dir=str(tmp_path / "cut"), **common)
    resumed = fit(tiny_ccfc(**method_args), resume=str(tmp_path / "cut"), **common)
    assert resumed == pytest.approx(full, abs=1e-6)

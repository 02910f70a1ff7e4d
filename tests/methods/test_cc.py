import lightning as L
import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from fedclust.errors import ConfigError
from fedclust.methods import CC
from tests.conftest import tiny_data
from tests.helpers.tiny import INFO, tiny_cc


def trainer_fit(cc: CC, x: torch.Tensor) -> None:
    trainer = L.Trainer(max_epochs=1, accelerator="cpu", logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(cc, DataLoader(TensorDataset(x), batch_size=16))


@pytest.mark.parametrize("chunk", [None, 8])
def test_lightning_trainer_trains_it_without_the_engine_reproducibly(chunk):
    x = torch.rand(48, 1, 8, 8)
    torch.manual_seed(0)
    first = tiny_cc(memory_efficient_chunk=chunk)
    first.build(INFO)
    second = tiny_cc(memory_efficient_chunk=chunk)
    second.build(INFO)
    second.load_state_dict(first.state_dict())
    before = {k: v.clone() for k, v in first.state_dict().items()}
    trainer_fit(first, x)
    trainer_fit(second, x)
    after = first.state_dict()
    assert any(not torch.equal(before[k], after[k]) for k in after)  # it trained
    for k, v in after.items():  # views from the module's own seeded generator: same run twice
        assert torch.allclose(v, second.state_dict()[k]), k


def test_engine_run_on_one_client(run_fit):
    assert 0 <= run_fit(tiny_cc(), data=tiny_data(num_clients=1))["nmi"] <= 1


def test_more_than_one_client_is_refused(run_fit):
    with pytest.raises(ConfigError, match="data.num_clients"):
        run_fit(tiny_cc())


def test_epochs_are_rounds_of_one_epoch():
    assert [(s.rounds, s.local_epochs) for s in CC(epochs=7).stages()] == [(7, 1)]
    with pytest.raises(ConfigError, match="method.init_args.epochs"):
        CC(epochs=0)

import lightning as L
import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from fedclust.contract import ClientSession, DataInfo
from fedclust.errors import ConfigError
from tests.conftest import tiny_data
from tests.helpers.tiny import tiny_mcc

INFO = DataInfo(num_classes=10, in_channels=1, input_size=8, num_features=64, is_image=True)




def test_one_client_engine_run_trains_the_global_model(run_fit, tmp_path):
    metrics = run_fit(tiny_mcc(epochs=2), tiny_data(num_clients=1))
    assert 0 <= metrics["nmi"] <= 1
    from fedclust.callbacks.csv_metrics import read_metrics

    rows = read_metrics(tmp_path / "run" / "metrics.csv")
    assert len(rows) == 2  # one round per epoch


def test_more_than_one_client_is_refused(run_fit):
    with pytest.raises(ConfigError, match="data.num_clients"):
        run_fit(tiny_mcc(), tiny_data(num_clients=2))


def test_runs_under_a_lightning_trainer_with_its_own_view_generator():
    torch.manual_seed(0)
    mcc = tiny_mcc()
    mcc.build(INFO)
    before = {k: v.clone() for k, v in mcc.state_dict().items()}
    images = torch.rand(128, 1, 8, 8)
    loader = DataLoader(TensorDataset(images, torch.zeros(128)), batch_size=64)
    trainer = L.Trainer(max_epochs=1, accelerator="cpu", logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(mcc, loader)
    after = mcc.state_dict()
    for prefix in ("encoder.", "instance_head.", "cluster_head.", "target_encoder.", "target_cluster_head."):
        key = next(k for k in after if k.startswith(prefix) and k.endswith("weight"))
        assert not torch.equal(before[key], after[key]), prefix  # online trained, target moved by EMA
    assert mcc._own_gen is not None  # views came from MCC's own generator (no engine context)
    assert mcc.assign(images[:5]).shape == (5,)


def test_loss_is_equation_6_the_sum_of_8_and_9():
    # eq. (6) = eq. (8) + eq. (9): the training loss equals FedMCC's two stage losses on the same outputs
    torch.manual_seed(0)
    mcc = tiny_mcc()
    mcc.build(INFO)
    seen = {}
    real_instance, real_cluster = mcc.instance_loss, mcc.cluster_loss
    mcc.instance_loss = lambda *a: seen.setdefault("i", real_instance(*a))
    mcc.cluster_loss = lambda *a: seen.setdefault("c", real_cluster(*a))
    opt = mcc.configure_optimizers()
    mcc.session = ClientSession(ctx=None, optimizers=[opt])  # the engine's optimizer, no client
    mcc._own_gen = torch.Generator().manual_seed(0)
    loss = mcc.training_step(torch.rand(16, 1, 8, 8), 0)
    mcc.session = None
    assert loss.item() == pytest.approx((seen["i"] + seen["c"]).item())

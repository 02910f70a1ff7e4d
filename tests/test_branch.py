"""`fit --init_from RUN` (fedclust/branch.py): a new run starts from a finished run's global weights, strictly the
same method and network, and refuses anything else in one sentence before it writes."""

import subprocess
import sys

import pytest
import torch

from fedclust.callbacks.checkpoint import load_checkpoint
from fedclust.contract import Stage
from fedclust.errors import ConfigError
from fedclust.federation.config import FederationConfig
from fedclust.run_checks import CHECKPOINT
from tests.conftest import tiny_data
from tests.helpers.tiny import tiny_cc, tiny_fedmcc


@pytest.fixture
def finished(run_fit, tmp_path):
    """A finished FedMCC run: one representation round, no cluster round (its head never trained)."""
    run_fit(tiny_fedmcc(cluster_rounds=0), folder="source")
    return tmp_path / "source"


def test_the_cluster_stage_alone_on_the_encoder_a_finished_run_made(run_fit, finished, tmp_path):
    """FedMCC with representation_rounds 0 from the source: the frozen encoder is the source's, weight for weight,
    on another partition; the head it trains moved from where the source left it."""
    run_fit(tiny_fedmcc(representation_rounds=0, cluster_target_encoder="global"),
            data=tiny_data(num_clients=3), folder="branch", init_from=str(finished))
    source = load_checkpoint(finished / CHECKPOINT)["model"]
    branch = load_checkpoint(tmp_path / "branch" / CHECKPOINT)["model"]
    encoder = [k for k in source if k.startswith("encoder.")]
    assert encoder and all(torch.equal(source[k], branch[k]) for k in encoder)
    head = [k for k in source if k.startswith("cluster_head.") and source[k].is_floating_point()]
    assert head and any(not torch.equal(source[k], branch[k]) for k in head)


def test_a_branch_is_refused_in_one_sentence_before_it_writes(run_fit, finished, tmp_path):
    branch = tmp_path / "branch"
    cases = [
        (tiny_cc(), str(finished), "a run of CC (that run was FedMCC)"),
        (tiny_fedmcc(representation_rounds=0, cluster_target_encoder="global", instance_dim=8), str(finished),
         "instance_head"),
        (tiny_fedmcc(), str(tmp_path / "nowhere"), "a finished run folder"),
    ]
    for method, source, words in cases:
        with pytest.raises(ConfigError) as error:
            run_fit(method, folder="branch", init_from=source)
        assert "init_from" in str(error.value) and words in str(error.value), str(error.value)
        assert not branch.exists()
    (finished / "final.json").unlink()  # a run still going (or stopped) has a checkpoint but no final.json
    with pytest.raises(ConfigError, match="lacks final.json"):
        run_fit(tiny_fedmcc(), folder="branch", init_from=str(finished))


def test_the_command_line_refuses_an_unfinished_source_before_torch(tmp_path):
    (tmp_path / "src").mkdir()
    done = subprocess.run([sys.executable, "-m", "fedclust", "fit", "--config", "quickstart", "--init_from",
                           str(tmp_path / "src"), "--run_dir", str(tmp_path / "new")],
                          capture_output=True, text=True)
    assert done.returncode == 2 and "init_from" in done.stderr and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and not (tmp_path / "new").exists()


def test_fedmcc_needs_a_round_and_a_global_target_without_representation_rounds():
    with pytest.raises(ConfigError, match="cluster_rounds"):
        tiny_fedmcc(representation_rounds=0, cluster_rounds=0, cluster_target_encoder="global")
    with pytest.raises(ConfigError, match="cluster_target_encoder"):
        tiny_fedmcc(representation_rounds=0)


def test_rescaled_schedules_keep_a_stage_without_rounds_at_none():
    stages = [Stage("pretrain", 100, 1), Stage("cluster", 0, 1)]
    assert [s.rounds for s in FederationConfig(rounds=5).schedule(stages)] == [5, 0]
    assert [s.rounds for s in FederationConfig(rounds=5).schedule([Stage("a", 100, 1), Stage("b", 30, 1)])] == [4, 1]

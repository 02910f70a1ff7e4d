"""Property-based checks of issue 11: whatever a user types or whatever bytes lie on disk, fedclust answers
with exit code 2 and one line on stderr, no traceback, no run folder left behind, and every existing run
folder byte-identical afterwards."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fedclust.__main__ import main

SETTINGS = settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module")
def saved_run(tmp_path_factory) -> Path:
    """One real run folder that no bad input may touch."""
    run = tmp_path_factory.mktemp("saved") / "run"
    assert main(["fit", "--config", "ccfc_digits", "--federation.rounds", "2", "--progress", "false",
                 "--run_dir", str(run)]) == 0
    return run


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _refused(capsys, argv: list[str]) -> str:
    code = main(argv)
    err = capsys.readouterr().err.strip()
    assert code == 2, (argv, err)
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


@SETTINGS
@given(content=st.binary(max_size=2000))
def test_random_bytes_as_a_config_file(tmp_path, capsys, saved_run, content):
    before = _snapshot(saved_run)
    path = tmp_path / "config.yaml"
    path.write_bytes(content)
    target = tmp_path / "new_run"
    _refused(capsys, ["fit", "--config", str(path), "--run_dir", str(target)])
    assert not target.exists()
    assert _snapshot(saved_run) == before


OUT_OF_RANGE = st.one_of(
    st.tuples(st.just("data.p"), st.one_of(st.floats(max_value=-1e-6), st.floats(min_value=1.000001),
                                           st.just(math.nan))),
    st.tuples(st.just("federation.fraction"), st.one_of(st.floats(max_value=0.0), st.floats(min_value=1.000001))),
    st.tuples(st.just("federation.disconnect_rate"), st.one_of(st.floats(max_value=-1e-6), st.floats(min_value=1.0))),
    st.tuples(st.just("federation.rounds"), st.integers(max_value=0)),
    st.tuples(st.just("method.init_args.latent_dim"), st.integers(max_value=0)),
    st.tuples(st.just("method.init_args.batch_size"), st.integers(max_value=1)),
    st.tuples(st.just("method.init_args.lr"), st.one_of(st.floats(max_value=0.0), st.just(math.inf),
                                                        st.just(math.nan))),
    st.tuples(st.just("method.init_args.lam"), st.sampled_from([math.inf, -math.inf, math.nan])),
    st.tuples(st.just("method.init_args.num_clusters"), st.one_of(st.integers(max_value=0),
                                                                   st.integers(min_value=178, max_value=10**6))),
    st.tuples(st.just("data.num_clients"), st.integers(max_value=9)),
    st.tuples(st.just("seed"), st.text(alphabet="abcxyz", min_size=1, max_size=5)),
)


def _yaml_value(value) -> str:
    if isinstance(value, float) and math.isnan(value):
        return ".nan"
    if isinstance(value, float) and math.isinf(value):
        return ".inf" if value > 0 else "-.inf"
    return str(value)


@SETTINGS
@given(field_value=OUT_OF_RANGE)
def test_values_outside_every_fields_range(tmp_path, capsys, saved_run, field_value):
    field, value = field_value
    before = _snapshot(saved_run)
    target = tmp_path / "new_run"
    err = _refused(capsys, ["fit", "--config", "ccfc_digits", f"--{field}={_yaml_value(value)}",
                            "--run_dir", str(target)])
    assert field.rsplit(".", 1)[-1] in err
    assert not target.exists()
    assert _snapshot(saved_run) == before


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(content=st.binary(max_size=4000))
def test_random_bytes_as_a_checkpoint(tmp_path, capsys, saved_run, content):
    import shutil

    copy = tmp_path / "copy"
    if copy.exists():
        shutil.rmtree(copy)
    shutil.copytree(saved_run, copy)
    (copy / "checkpoints" / "last.ckpt").write_bytes(content)
    before = _snapshot(copy)
    _refused(capsys, ["evaluate", "--run", str(copy)])
    _refused(capsys, ["fit", "--resume", str(copy)])
    assert _snapshot(copy) == before


@SETTINGS
@given(content=st.binary(max_size=3000), which=st.sampled_from(["train-images-idx3-ubyte", "train-labels-idx1-ubyte"]))
def test_random_bytes_as_a_data_file(tmp_path, capsys, saved_run, content, which):
    import numpy as np

    root = tmp_path / "mnist"
    root.mkdir(exist_ok=True)
    for stem, n in (("train", 20), ("t10k", 10)):  # a valid tiny MNIST, then one file replaced by random bytes
        for kind, shape in (("images-idx3-ubyte", (n, 28, 28)), ("labels-idx1-ubyte", (n,))):
            array = np.zeros(shape, np.uint8)
            (root / f"{stem}-{kind}").write_bytes(bytes([0, 0, 8, len(shape)]) +
                                                  np.asarray(shape, ">i4").tobytes() + array.tobytes())
    (root / which).write_bytes(content)
    before = _snapshot(saved_run)
    target = tmp_path / "new_run"
    err = _refused(capsys, ["fit", "--config", "ccfc_mnist", "--data.root", str(root), "--run_dir", str(target)])
    assert which in err
    assert not target.exists()
    assert _snapshot(saved_run) == before

"""`fabric.precision: auto` (fedclust/nn/precision.py): bf16 only for a network measured to keep its quality in
bf16, and only on a device that computes bf16 natively; the choice reaches Fabric and run.log."""

import pytest

from fedclust.nn import precision
from fedclust.nn.precision import BF16, FP32, resolve_memory_format, resolve_precision
from tests.conftest import tiny_ccfc, tiny_data


@pytest.fixture
def native_cpu_bf16(monkeypatch):
    def set_native(value: bool):
        monkeypatch.setattr(precision, "cpu_has_native_bf16", lambda: value)
    return set_native


@pytest.mark.parametrize(("prefers", "native", "expected"), [
    (True, True, BF16), (True, False, FP32), (False, True, FP32), (False, False, FP32)])
def test_auto_needs_both_a_measured_network_and_native_bf16(native_cpu_bf16, prefers, native, expected):
    native_cpu_bf16(native)
    assert resolve_precision("auto", "cpu", prefers)[0] == expected


@pytest.mark.parametrize("explicit", [FP32, BF16])
def test_an_explicit_precision_is_kept(native_cpu_bf16, explicit):
    native_cpu_bf16(False)
    assert resolve_precision(explicit, "cpu", False) == (explicit, "as configured")


def test_memory_format_auto_follows_bf16_on_the_cpu_only():
    assert resolve_memory_format("auto", BF16, "cpu") == "channels_last"
    assert resolve_memory_format("auto", FP32, "cpu") == "contiguous"
    assert resolve_memory_format("auto", BF16, "cuda") == "contiguous"
    assert resolve_memory_format("contiguous", BF16, "cpu") == "contiguous"


def test_cpu_flags_are_read_from_proc_cpuinfo(monkeypatch, tmp_path):
    precision.cpu_has_native_bf16.cache_clear()
    fake = tmp_path / "cpuinfo"
    fake.write_text("processor\t: 0\nflags\t\t: fpu avx512f avx512_bf16 sse\n")
    real_path = precision.Path
    monkeypatch.setattr(precision, "Path", lambda p: fake if p == "/proc/cpuinfo" else real_path(p))
    try:
        assert precision.cpu_has_native_bf16()
        precision.cpu_has_native_bf16.cache_clear()
        fake.write_text("flags\t\t: fpu avx512f sse\n")  # AVX-512 alone: oneDNN would only emulate bf16
        assert not precision.cpu_has_native_bf16()
    finally:
        precision.cpu_has_native_bf16.cache_clear()


def test_only_ccfc_convnet28_asks_for_bf16():
    assert tiny_ccfc(backbone="convnet28").bf16_by_default()
    assert not tiny_ccfc(backbone="mlp").bf16_by_default()
    from fedclust.methods import KFED
    assert not KFED().bf16_by_default()


@pytest.mark.parametrize(("native", "expected"), [(True, "bf16-mixed"), (False, "32-true")])
def test_the_run_trains_in_the_resolved_precision_and_says_so(run_fit, native_cpu_bf16, monkeypatch, tmp_path,
                                                               native, expected):
    native_cpu_bf16(native)
    from lightning.fabric import Fabric

    seen = []
    real_init = Fabric.__init__

    def spy(self, *args, **kwargs):
        seen.append(kwargs["precision"])
        real_init(self, *args, **kwargs)

    monkeypatch.setattr(Fabric, "__init__", spy)
    run_fit(tiny_ccfc(backbone="convnet28", batch_size=32))
    assert seen == [expected]
    log = (tmp_path / "run" / "run.log").read_text()
    assert f"precision: {expected}" in log
    assert ("memory format: channels_last" in log) == native


def test_a_resumed_run_keeps_the_arithmetic_it_started_in(run_fit, native_cpu_bf16, monkeypatch, tmp_path):
    """auto is resolved once, when the run starts: resumed on a machine without native bf16, it stays in bf16."""
    from lightning.fabric import Fabric

    from fedclust.resume import started_arithmetic
    from fedclust.run import FabricConfig, fit

    native_cpu_bf16(True)
    run_fit(tiny_ccfc(backbone="convnet28", batch_size=32))
    folder = tmp_path / "run"
    assert started_arithmetic(folder) == ("bf16-mixed", "channels_last")

    native_cpu_bf16(False)
    seen = []
    real_init = Fabric.__init__
    monkeypatch.setattr(Fabric, "__init__", lambda self, *a, **kw: (seen.append(kw["precision"]),
                                                                    real_init(self, *a, **kw))[1])
    method = lambda: tiny_ccfc(backbone="convnet28", batch_size=32)  # noqa: E731
    fit(method(), tiny_data(), fabric=FabricConfig(accelerator="cpu"), resume=str(folder), progress=False)
    assert seen == ["bf16-mixed"]
    # asked for explicitly, another precision is honoured
    fit(method(), tiny_data(), fabric=FabricConfig(accelerator="cpu", precision="32-true"), resume=str(folder),
        progress=False)
    assert seen[-1] == "32-true"


def test_started_arithmetic_ignores_a_garbled_run_log(tmp_path):
    from fedclust.resume import started_arithmetic

    assert started_arithmetic(tmp_path) is None
    (tmp_path / "run.log").write_text("precision: fp8 (x); memory format: weird\nprecision:\n")
    assert started_arithmetic(tmp_path) is None


def test_the_recorded_line_reads_back_whatever_the_reason_says(tmp_path):
    from fedclust.resume import arithmetic_line, started_arithmetic

    (tmp_path / "run.log").write_text("k-means backend: torch\n"
                                      + arithmetic_line("bf16-mixed", "channels_last", "auto: x; (y)") + "\n"
                                      + arithmetic_line("32-true", "contiguous", "as configured") + "\n")
    assert started_arithmetic(tmp_path) == ("bf16-mixed", "channels_last")  # the first: how the run started

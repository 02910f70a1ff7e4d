"""Which arithmetic a run trains in: `fabric.precision: auto` and `fabric.memory_format: auto` resolved here.

bf16 autocast pays only where the hardware computes in bf16 natively (CUDA GPUs from Ampere on; CPUs with
AVX-512 BF16 or AMX); elsewhere it is emulated and slower than fp32. It is the default only for networks where
it was measured to keep the clustering quality within seed noise of fp32 and to be faster
(benchmarks/results/precision_quality.md, cpu_speed.md): a method says so through `bf16_by_default()`.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import torch

FP32, BF16 = "32-true", "bf16-mixed"


@cache
def cpu_has_native_bf16() -> bool:
    """AVX-512 BF16 or AMX-BF16 among the CPU flags (Linux). torch has no public query for it
    (torch.ops.mkldnn._is_mkldnn_bf16_supported is also true where oneDNN only emulates bf16)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    flags = next((line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")), [])
    return "avx512_bf16" in flags or "amx_bf16" in flags


def device_type(accelerator: str) -> str:
    """The device kind Fabric will pick for `accelerator` (auto: a CUDA GPU when there is one)."""
    if accelerator in ("cuda", "gpu") or (accelerator == "auto" and torch.cuda.is_available()):
        return "cuda"
    return "cpu"


def native_bf16(kind: str) -> bool:
    """True where bf16 matrix products run natively on this device kind."""
    if kind == "cuda":
        return torch.cuda.is_available() and torch.cuda.is_bf16_supported(including_emulation=False)
    return cpu_has_native_bf16()


def resolve_precision(requested: str, kind: str, method_prefers_bf16: bool) -> tuple[str, str]:
    """(precision, why): `auto` gives bf16-mixed when the method asks for it and the device has native bf16."""
    if requested != "auto":
        return requested, "as configured"
    if not method_prefers_bf16:
        return FP32, "auto: bf16 is not measured to keep the quality and to pay for this network"
    if not native_bf16(kind):
        return FP32, f"auto: no native bf16 on this {kind.upper()}"
    return BF16, f"auto: native bf16 on this {kind.upper()} and a network measured to keep its quality in bf16"


def resolve_memory_format(requested: str, precision: str, kind: str) -> str:
    """`auto` gives channels_last for bf16 on the CPU, where oneDNN's bf16 convolutions want NHWC (measured:
    1.73x over fp32 with it, 1.43x without, benchmarks/results/cpu_speed.md); contiguous otherwise."""
    if requested != "auto":
        return requested
    return "channels_last" if precision == BF16 and kind == "cpu" else "contiguous"

"""CCFC's stage-1 local step eager and under torch.compile (issue 46 item 3): `python -m benchmarks step`.

The step as the engine runs it (two views, encoder and predictor on each, the frozen global model, SimSiam +
model-contrastive loss, backward, Adam) on one batch of 128 images, per variant KIND:PRECISION; `reduce-overhead` is
torch.compile replaying CUDA graphs. A row per variant in results/gpu_step.csv as it ends (a call cut off by its
budget keeps what finished). Why these variants, and the rule that decides on them: docs/findings/engine.md.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

from .common import append_row, git_commit, machine, now

VARIANTS = [f"{kind}:{precision}" for kind in ("eager", "compile", "reduce-overhead") for precision in ("fp32", "bf16")]
COLUMNS = ["variant", "device", "steps", "seconds_per_step", "seconds_total", "peak_memory_mb", "loss", "error",
           "commit", "machine", "started"]
SEED = 66


def measure(device: str, variants: list[str], steps: int, warmup: int, out: Path) -> Path:
    """Each variant from the same fresh model (configs/ccfc_fmnist.yaml's network); a row per variant in `out`."""
    import torch

    dev = torch.device(device)
    record = {"device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu", "steps": steps,
              "commit": git_commit(), "machine": machine(date=False)}
    for variant in variants:
        row = {**record, "variant": variant, "started": now()}
        try:
            row.update(_time_variant(dev, variant, steps, warmup))
        except Exception as error:  # a variant that does not work here is a row saying why; the others still run
            row["error"] = f"{type(error).__name__}: {str(error)[:300]}"
        append_row(out, COLUMNS, row)
    return out


def _time_variant(dev, variant: str, steps: int, warmup: int) -> dict:
    import torch

    from fedclust.contract import DataInfo
    from fedclust.methods import CCFC
    from fedclust.seeding import generator

    kind, precision = variant.split(":")  # one of VARIANTS (the runner's parser checks)
    if dev.type != "cuda" and kind != "eager":
        raise RuntimeError("skipped: needs CUDA")
    x = torch.rand(128, 1, 28, 28, generator=generator(SEED, "step-images")).to(dev)  # time does not need pixels
    torch.manual_seed(SEED)
    start = time.perf_counter()
    method = CCFC(latent_dim=256, lam=0.001, sync_init=False)  # configs/ccfc_fmnist.yaml's settings
    method.build(DataInfo(num_classes=10, in_channels=1, input_size=28, num_features=784, is_image=True))
    method.to(dev).train()
    method.on_round_start(None)  # the frozen global model, as each round starts
    method._augment_gen, method._pseudo = generator(SEED, "augment", device=dev), None
    if kind != "eager":
        mode = "reduce-overhead" if kind == "reduce-overhead" else None
        method.encoder, method.predictor = torch.compile(method.encoder, mode=mode), torch.compile(method.predictor,
                                                                                                  mode=mode)
        method._frozen["net"] = torch.compile(method._frozen["net"], mode=mode)
    cast = torch.autocast(dev.type, dtype=torch.bfloat16) if precision == "bf16" else contextlib.nullcontext()
    optimizer = torch.optim.Adam(method.parameters(), lr=1e-3, foreach=True)
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats(dev)

    def step() -> torch.Tensor:
        if kind == "reduce-overhead":  # torch.compile's CUDA graphs: a new training step begins
            torch.compiler.cudagraph_mark_step_begin()
        with cast:
            loss = method.training_step({"x": x}, 0)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        return loss.detach()

    for _ in range(warmup):
        step()
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
    timed = time.perf_counter()
    for _ in range(steps):
        loss = step()
    loss = float(loss)  # also waits for the device
    return {"seconds_per_step": f"{(time.perf_counter() - timed) / steps:.6f}", "loss": f"{loss:.4f}",
            "seconds_total": f"{time.perf_counter() - start:.1f}",
            "peak_memory_mb": f"{torch.cuda.max_memory_allocated(dev) / 2**20:.0f}" if dev.type == "cuda" else ""}

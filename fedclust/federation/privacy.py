"""Optional differential privacy for the summaries a client sends (federation.dp_epsilon): the Gaussian mechanism
on each summary's sum and count, its noise calibrated and its budget computed by Google's dp-accounting (RDP).

The mechanism (the SuLQ / DP-Lloyd form: Blum, Dwork, McSherry & Nissim, PODS 2005). A summary row is the mean of
the vectors of ``count`` samples, each of L2 norm at most C (`summary_norm_bound`), and every sample is in one row
of a key. Adding or removing one sample moves that row's sum by at most C and its count by 1, so the vector of
every key's (sum / C, count) moves by at most sqrt(2 * keys) in L2. Each release adds N(0, (sigma * sensitivity)^2)
to every coordinate of it; the client sends the noisy sum over the noisy count (at least 1) and the noisy count.
A client's summaries over the run are ``releases`` such mechanisms (one per round it sends, counted as if it took
part in every round: no amplification by sampling is claimed), composed by the RDP accountant.

What it covers and what it does not: the values sent, given each sample's group. How a method forms its groups
from the client's data (k-means, FedSpectral's fixed groups) is not itself privatised, as in k-FED-style local
clustering; the floor (federation.min_summary_size) still bounds how few samples a row stands for.

dp-accounting is optional (`pip install fedclust[privacy]`); it is imported only by a run that asks for noise.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
from torch import Tensor

from fedclust.errors import ConfigError


@dataclass(frozen=True)
class SummaryNoise:
    """A run's calibrated mechanism and what it spends (written to the run folder's privacy.json)."""

    epsilon: float
    delta: float
    noise_multiplier: float  # sigma: noise std over the L2 sensitivity
    releases: int  # rounds in which a client may send summaries
    clip: float  # C, the method's bound on one sample's vector
    accountant: str = "dp_accounting RDP (Gaussian mechanism, self-composed)"

    def as_dict(self) -> dict:
        return asdict(self)


def _accounting():
    try:
        import dp_accounting
    except ImportError:
        raise ConfigError("federation.dp_epsilon", "set", "null, or install the accountant first: "
                          "pip install 'fedclust[privacy]' (Google's dp-accounting)") from None
    return dp_accounting


def calibrate(epsilon: float, delta: float, releases: int, clip: float) -> SummaryNoise:
    """The smallest noise multiplier whose ``releases``-fold composition is (epsilon, delta)-DP."""
    dp = _accounting()
    event = lambda sigma: dp.SelfComposedDpEvent(dp.GaussianDpEvent(sigma), releases)
    sigma = dp.calibrate_dp_mechanism(dp.rdp.RdpAccountant, event, epsilon, delta)
    return SummaryNoise(spent_epsilon(sigma, releases, delta), delta, float(sigma), releases, clip)


def spent_epsilon(noise_multiplier: float, releases: int, delta: float) -> float:
    """The epsilon at ``delta`` of ``releases`` Gaussian mechanisms of this noise multiplier (RDP accountant)."""
    dp = _accounting()
    accountant = dp.rdp.RdpAccountant()
    accountant.compose(dp.SelfComposedDpEvent(dp.GaussianDpEvent(noise_multiplier), releases))
    return float(accountant.get_epsilon(delta))


def add_summary_noise(payload: dict[str, Tensor], summary_keys: dict[str, str], noise: SummaryNoise,
                      generator: torch.Generator) -> dict[str, Tensor]:
    """The payload as sent under ``noise``: every summary key's rows clipped (a mean of vectors of norm <= C has
    norm <= C), turned into sums, noised with their counts, and divided again."""
    present = [(key, count_key) for key, count_key in summary_keys.items() if key in payload and len(payload[key])]
    if not present:
        return payload
    scale = noise.noise_multiplier * math.sqrt(2 * len(present))  # sigma * the L2 sensitivity of (sum / C, count)
    sent = dict(payload)
    for key, count_key in present:
        rows, counts = payload[key].double(), payload[count_key].double()
        flat = rows.ndim == 1  # a vector of scalars (a support per centre): one coordinate a row
        rows = rows[:, None] if flat else rows.flatten(1)
        norms = rows.norm(dim=1, keepdim=True).clamp_min(1e-12)
        rows = rows * (noise.clip / norms).clamp(max=1.0)
        sums = rows * counts[:, None]
        noisy_sums = sums + noise.clip * scale * torch.randn(sums.shape, generator=generator, dtype=torch.float64,
                                                             device=generator.device).to(sums.device)
        noisy_counts = counts + scale * torch.randn(counts.shape, generator=generator, dtype=torch.float64,
                                                    device=generator.device).to(counts.device)
        noisy_counts = noisy_counts.clamp_min(1.0)
        noisy = noisy_sums / noisy_counts[:, None]
        sent[key] = (noisy[:, 0] if flat else noisy.reshape(payload[key].shape)).to(payload[key].dtype)
        sent[count_key] = noisy_counts.to(payload[count_key].dtype)
    return sent

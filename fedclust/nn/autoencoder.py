"""The fully connected autoencoder of DEC / DCN (Yang et al., "Towards K-means-friendly Spaces", ICML 2017):
d-500-500-2000-10 with ReLU between layers, a linear embedding and a linear reconstruction."""

from __future__ import annotations

from collections.abc import Sequence

from torch import Tensor, nn


def _mlp(widths: Sequence[int]) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(zip(widths[:-1], widths[1:])):
        layers.append(nn.Linear(a, b))
        if i < len(widths) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class MLPAutoencoder(nn.Module):
    """encoder: flatten -> hidden widths -> latent_dim (linear); decoder: the mirror image -> in_features."""

    def __init__(self, in_features: int, hidden: Sequence[int] = (500, 500, 2000), latent_dim: int = 10):
        super().__init__()
        widths = [in_features, *hidden, latent_dim]
        self.encoder = nn.Sequential(nn.Flatten(), _mlp(widths))
        self.decoder = _mlp(widths[::-1])

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """(embedding, reconstruction of the flattened input)."""
        z = self.encoder(x)
        return z, self.decoder(z)

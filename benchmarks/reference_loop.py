"""A plain federated round written the way the papers' public code is (the speed baseline of issue 5).

CCFC's stage-1 round on the same networks (fedclust's CCFC module, so only the loop differs):
- a ``copy.deepcopy`` of the global model per client;
- a torch DataLoader over a Dataset that turns each sample into a PIL image and applies torchvision's
  per-sample transforms twice (RandomResizedCrop, RandomRotation, GaussianBlur), as the reference code's
  ``TwoCropsTransform``;
- SimSiam + the model-contrastive term against a frozen copy of the global model, Adam;
- FedAvg by summing every client's state dict after the round (all client copies held in memory);
- a fresh scikit-learn k-means per client on its embeddings and a fresh one on the server every round.
"""

from __future__ import annotations

import copy
import time

import numpy as np
import torch
from PIL import Image
from sklearn.cluster import KMeans
from torch.utils.data import DataLoader, Dataset
from torchvision import transforms

from fedclust.losses.simsiam import model_contrastive_loss, simsiam_loss


class TwoViews(Dataset):
    def __init__(self, images: np.ndarray):
        self.images = images  # uint8 (N, 28, 28)
        self.transform = transforms.Compose([
            transforms.RandomResizedCrop(28, scale=(0.5, 1.0)), transforms.RandomRotation(10),
            transforms.RandomApply([transforms.GaussianBlur(3, sigma=(0.1, 2.0))], p=0.5), transforms.ToTensor()])

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, i: int):
        img = Image.fromarray(self.images[i], mode="L")
        return self.transform(img), self.transform(img)


def reference_round(global_model, images_per_client: list[np.ndarray], lam: float = 1.0, batch_size: int = 128,
                    lr: float = 1e-3, k: int = 10) -> float:
    """One round; returns its wall time in seconds. ``global_model`` is a built fedclust CCFC module."""
    start = time.perf_counter()
    frozen = copy.deepcopy(torch.nn.Sequential(global_model.encoder, global_model.predictor)).eval()
    states, sizes, local_centroids = [], [], []
    for images in images_per_client:
        model = copy.deepcopy(global_model)
        model.train()
        optimizer = torch.optim.Adam(model.parameters(), lr=lr)
        for x1, x2 in DataLoader(TwoViews(images), batch_size=batch_size, shuffle=True, drop_last=False):
            z1, z2 = model.encoder(x1), model.encoder(x2)
            p1, p2 = model.predictor(z1), model.predictor(z2)
            with torch.no_grad():
                g1, g2 = frozen(x1), frozen(x2)
            loss = simsiam_loss(p1, p2, z1, z2) + lam * 0.5 * (model_contrastive_loss(p1, g1)
                                                               + model_contrastive_loss(p2, g2))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        model.eval()
        with torch.no_grad():
            z = model.embed(torch.from_numpy(images).float().div(255).unsqueeze(1)).numpy()
        local_centroids.append(KMeans(k, n_init=3, max_iter=100, random_state=0).fit(z).cluster_centers_)
        states.append(model.state_dict())
        sizes.append(len(images))
    total = sum(sizes)
    averaged = {key: sum(s[key].double() * n for s, n in zip(states, sizes)) / total for key in states[0]}
    global_model.load_state_dict({k: v.to(states[0][k].dtype) for k, v in averaged.items()})
    KMeans(k, n_init=3, max_iter=100, random_state=0).fit(np.concatenate(local_centroids))
    return time.perf_counter() - start

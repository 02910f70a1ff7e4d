"""Why CCFC's stage-1 (SimSiam) representation clusters Fashion-MNIST worse than raw pixels (issue 14).

Subcommands (CPU, one thread, run with `nice -n 5`; outputs go to benchmarks/runs/ccfc_probe/, git-ignored):

  # analyse a saved whole-schedule checkpoint without training (copy it first: the run rewrites it)
  python benchmarks/ccfc_stage1_probe.py ckpt benchmarks/runs/ccfc_probe/p0_last.ckpt
  # raw-pixel references on the same 10,000 test images
  python benchmarks/ccfc_stage1_probe.py raw
  # centralized SimSiam (one client holding all 10,000 images), fedclust's modules and views
  python benchmarks/ccfc_stage1_probe.py train --impl fedclust --lam 1 --epochs 20 --tag fc_lam1
  # the same with an independent minimal SimSiam written here (own net, own PIL views, own loss)
  python benchmarks/ccfc_stage1_probe.py train --impl mine --lam 0 --epochs 20 --tag mine_lam0
  # the paper's data scale: train on all 70,000 images, evaluate on the 10,000 test images
  python benchmarks/ccfc_stage1_probe.py train --impl fedclust --train-split all --epochs 2 --eval-every 1 \\
      --eval-steps 79 158 316 --tag fc_all
  # augmentation variants: --aug simsiam28|noblur|none|strong|color, --crop-min, --sigma-max
  # a centralized proxy of stage 2 (cluster-contrastive, lambda 1) from the round-65 model of the p = 0 run
  python benchmarks/ccfc_stage1_probe.py cluster benchmarks/runs/ccfc_probe/p0_last.ckpt --epochs 8 --tag p0

Every evaluation embeds all 10,000 test images in eval mode and reports, for several representations
(backbone output, projector hidden layer, z, p), the NMI of scikit-learn k-means (k = 10, n_init 10) on the
L2-normalised features (CCFC clusters normalised z), a leave-one-out cosine 10-NN accuracy, and for z the
effective rank (exp of the entropy of the normalised singular values of the centred, L2-normalised z) and
the mean per-dimension std of L2-normalised z (SimSiam's collapse indicator: 1/sqrt(d) = 0.125 for d = 64
when not collapsed, 0 when collapsed).
"""

from __future__ import annotations

import argparse
import copy
import csv
import json
import math
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

OUT = Path(__file__).resolve().parent / "runs" / "ccfc_probe"


# ----------------------------------------------------------------------------------------------- data
def load_test(split: str = "test") -> tuple[torch.Tensor, np.ndarray]:
    from fedclust.data.dataset import to_float
    from fedclust.data.datasets import load_dataset
    ds = load_dataset("fmnist", split=split)
    return to_float(ds.x), ds.y.numpy()


# ---------------------------------------------------------------------------------------------- metrics
def kmeans_nmi(feat: torch.Tensor, y: np.ndarray, normalise: bool = True, n_init: int = 10, seed: int = 0,
               pca: int | None = None) -> float:
    from sklearn.cluster import KMeans
    from sklearn.metrics import normalized_mutual_info_score
    f = feat.double()
    if normalise:
        f = F.normalize(f, dim=1)
    f = f.numpy()
    if pca and f.shape[1] > pca:  # only for speed on wide features (2304-d backbone): k-means in a PCA space
        from sklearn.decomposition import PCA
        f = PCA(pca, random_state=seed).fit_transform(f)
    lab = KMeans(10, n_init=n_init, random_state=seed).fit_predict(f)
    return float(normalized_mutual_info_score(y, lab))


def knn_acc(feat: torch.Tensor, y: np.ndarray, k: int = 10) -> float:
    """Leave-one-out cosine k-NN (majority vote) accuracy."""
    f = F.normalize(feat.float(), dim=1)
    yt = torch.as_tensor(y)
    correct = 0
    for s in range(0, len(f), 1000):
        sim = f[s:s + 1000] @ f.T
        sim[torch.arange(sim.shape[0]), torch.arange(s, s + sim.shape[0])] = -2.0
        idx = sim.topk(k, dim=1).indices
        votes = F.one_hot(yt[idx], 10).sum(1)
        correct += int((votes.argmax(1) == yt[s:s + 1000]).sum())
    return correct / len(f)


def rank_stats(z: torch.Tensor) -> dict[str, float]:
    zn = F.normalize(z.double(), dim=1)
    std = float(zn.std(0).mean())
    s = torch.linalg.svdvals(zn - zn.mean(0))
    pr = s / s.sum()
    erank = float(torch.exp(-(pr * torch.log(pr.clamp_min(1e-30))).sum()))
    var = s ** 2 / (s ** 2).sum()
    top1 = float(var[0])
    n90 = int((torch.cumsum(var, 0) < 0.9).sum()) + 1
    cos = zn @ zn.T
    mean_cos = float((cos.sum() - cos.diagonal().sum()) / (len(zn) * (len(zn) - 1)))
    return {"z_std": std, "z_erank": erank, "z_top1var": top1, "z_n90": n90, "z_meancos": mean_cos}


def pc_report(z: torch.Tensor, x: torch.Tensor, y: np.ndarray, top: int = 5) -> list[dict[str, float]]:
    """For the top principal directions of L2-normalised z: share of variance, |Pearson r| with the image's
    mean intensity and with its ink area (pixels > 0.1), and eta^2 = between-class share of its variance
    (how much of that direction the class explains)."""
    zn = F.normalize(z.double(), dim=1)
    zc = zn - zn.mean(0)
    u, s, vh = torch.linalg.svd(zc, full_matrices=False)
    var = (s ** 2 / (s ** 2).sum()).numpy()
    proj = (zc @ vh[:top].T).numpy()
    inten = x.flatten(1).mean(1).double().numpy()
    ink = (x.flatten(1) > 0.1).double().mean(1).numpy()
    rows = []
    for i in range(top):
        v = proj[:, i]
        means = np.array([v[y == c].mean() for c in range(10)])
        counts = np.array([(y == c).sum() for c in range(10)])
        eta2 = float((counts * (means - v.mean()) ** 2).sum() / ((v - v.mean()) ** 2).sum())
        rows.append({"pc": i + 1, "var": float(var[i]), "r_intensity": float(abs(np.corrcoef(v, inten)[0, 1])),
                     "r_ink": float(abs(np.corrcoef(v, ink)[0, 1])), "eta2_class": eta2})
    return rows


def nuisance_removed_nmi(z: torch.Tensor, x: torch.Tensor, y: np.ndarray) -> dict[str, float]:
    """NMI of k-means on L2-normalised z after removing (a) its first principal direction, (b) the part of
    every coordinate linearly predicted by the image's mean intensity (least squares), then re-normalising."""
    zn = F.normalize(z.double(), dim=1)
    zc = zn - zn.mean(0)
    vh = torch.linalg.svd(zc, full_matrices=False)[2]
    no_pc1 = zc - (zc @ vh[0:1].T) @ vh[0:1]
    inten = x.flatten(1).mean(1).double()
    a = torch.stack([torch.ones_like(inten), inten], 1)
    coef = torch.linalg.lstsq(a, zn).solution
    no_int = zn - a @ coef
    return {"nmi_z_minus_pc1": kmeans_nmi(no_pc1, y), "nmi_z_minus_intensity": kmeans_nmi(no_int, y)}


def evaluate_reps(reps: dict[str, torch.Tensor], y: np.ndarray, knn: bool = True,
                  only: tuple[str, ...] | None = None) -> dict[str, float]:
    out: dict[str, float] = {}
    for name, f in reps.items():
        if only is not None and name not in only:
            continue
        out[f"nmi_{name}"] = kmeans_nmi(f, y, pca=256 if f.shape[1] > 512 else None,
                                        n_init=3 if f.shape[1] > 512 else 10)
        if knn:
            out[f"knn_{name}"] = knn_acc(f, y)
    if "z" in reps:
        out.update(rank_stats(reps["z"]))
    return out


# ---------------------------------------------------------------------------- fedclust's model and views
class FCModel(nn.Module):
    """fedclust's CCFC encoder (ConvNet28 + projector) and predictor, built with fedclust's own builders."""

    def __init__(self, latent: int = 64):
        super().__init__()
        from fedclust.nn.backbones import build_backbone
        from fedclust.nn.heads import predictor, projector
        trunk = build_backbone("convnet28", 1, 28)
        self.encoder = nn.Sequential(trunk, projector(trunk.out_dim, 256, latent))
        self.predictor = predictor(latent, 16)

    def forward(self, x):
        z = self.encoder(x)
        return z, self.predictor(z)

    @torch.no_grad()
    def reps(self, x: torch.Tensor, bs: int = 1000) -> dict[str, torch.Tensor]:
        trunk, proj = self.encoder[0], self.encoder[1]
        acc: dict[str, list] = {"backbone": [], "hidden": [], "z": [], "p": []}
        for s in range(0, len(x), bs):
            b = trunk(x[s:s + bs])
            h = proj[2](proj[1](proj[0](b)))
            z = proj[4](proj[3](h))
            p = self.predictor(z)
            for k, v in zip(acc, (b, h, z, p)):
                acc[k].append(v)
        return {k: torch.cat(v) for k, v in acc.items()}


# -------------------------------------------------------------------- an independent minimal SimSiam
class MineNet(nn.Module):
    """Written from REFERENCE.md's description only: conv(4,2,1) x3 64/128/256 + BN + LeakyReLU(0.2);
    projector Linear-BN-ReLU-Linear-BN(no affine); predictor Linear(d,16)-BN-ReLU-Linear(16,d)."""

    def __init__(self, latent: int = 64):
        super().__init__()
        chans = [1, 64, 128, 256]
        layers = []
        for a, b in zip(chans[:-1], chans[1:]):
            layers += [nn.Conv2d(a, b, kernel_size=4, stride=2, padding=1), nn.BatchNorm2d(b), nn.LeakyReLU(0.2)]
        self.conv = nn.Sequential(*layers, nn.Flatten())
        self.fc1 = nn.Sequential(nn.Linear(2304, 256), nn.BatchNorm1d(256), nn.ReLU())
        self.fc2 = nn.Sequential(nn.Linear(256, latent), nn.BatchNorm1d(latent, affine=False))
        self.pred = nn.Sequential(nn.Linear(latent, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, latent))

    def forward(self, x):
        z = self.fc2(self.fc1(self.conv(x)))
        return z, self.pred(z)

    @torch.no_grad()
    def reps(self, x: torch.Tensor, bs: int = 1000) -> dict[str, torch.Tensor]:
        acc: dict[str, list] = {"backbone": [], "hidden": [], "z": [], "p": []}
        for s in range(0, len(x), bs):
            b = self.conv(x[s:s + bs])
            h = self.fc1(b)
            z = self.fc2(h)
            for k, v in zip(acc, (b, h, z, self.pred(z))):
                acc[k].append(v)
        return {k: torch.cat(v) for k, v in acc.items()}


class PILViews:
    """The official pipeline's views made per image with torchvision on PIL images: RandomResizedCrop(28,
    scale), RandomRotation(10), PIL GaussianBlur(radius ~ U[sigma]) with p 0.5; optional brightness/contrast
    jitter (``strong``)."""

    def __init__(self, scale=(0.5, 1.0), sigma=(0.1, 2.0), blur=True, jitter=False, seed=0):
        import random

        from torchvision import transforms as T
        self.rng = random.Random(seed)
        ops = [T.RandomResizedCrop(28, scale=scale), T.RandomRotation(10)]
        self.geom = T.Compose(ops)
        self.jitter = T.RandomApply([T.ColorJitter(0.4, 0.4)], p=0.8) if jitter else None
        self.blur, self.sigma = blur, sigma
        self.to_pil, self.to_tensor = T.ToPILImage(), T.ToTensor()

    def __call__(self, x: torch.Tensor, g=None) -> torch.Tensor:
        from PIL import ImageFilter
        out = []
        for img in x:
            im = self.geom(self.to_pil(img))
            if self.jitter is not None:
                im = self.jitter(im)
            if self.blur and self.rng.random() < 0.5:
                im = im.filter(ImageFilter.GaussianBlur(radius=self.rng.uniform(*self.sigma)))
            out.append(self.to_tensor(im))
        return torch.stack(out)


class Jitter:
    """Brightness/contrast jitter added after fedclust's views (variant ``strong``)."""

    def __init__(self, base, strength: float = 0.4, p: float = 0.8):
        self.base, self.s, self.p = base, strength, p

    def __call__(self, x, g):
        y = self.base(x, g)
        b = y.shape[0]
        on = (torch.rand(b, generator=g) < self.p).float().view(-1, 1, 1, 1)
        bri = 1 + self.s * (2 * torch.rand(b, generator=g) - 1)
        con = 1 + self.s * (2 * torch.rand(b, generator=g) - 1)
        j = (y * bri.view(-1, 1, 1, 1)).clamp(0, 1)
        m = j.mean((1, 2, 3), keepdim=True)
        j = (con.view(-1, 1, 1, 1) * j + (1 - con.view(-1, 1, 1, 1)) * m).clamp(0, 1)
        return on * j + (1 - on) * y


def make_views(args):
    scale, sigma = (args.crop_min, 1.0), (0.1, args.sigma_max)
    if args.aug == "none":
        return lambda x, g: x.clone()
    if args.aug == "color":  # fedclust's ColorViews (CCFC's `method.augment: color`), crop range as given
        from fedclust.data.views import ColorViews
        return ColorViews(scale=scale)
    if args.impl == "mine":
        return PILViews(scale, sigma, blur=args.aug != "noblur", jitter=args.aug == "strong", seed=args.seed)
    from fedclust.data.views import SimSiamViews28
    base = SimSiamViews28(scale=scale, sigma=sigma, blur_p=0.0 if args.aug == "noblur" else 0.5)
    return Jitter(base) if args.aug == "strong" else base


def neg_cos(p, z):
    return -F.cosine_similarity(p, z.detach(), dim=-1).mean()


# --------------------------------------------------------------------------------------- subcommands
def cmd_raw(args):
    x, y = load_test()
    flat = x.flatten(1)
    res = {"nmi_raw_l2": kmeans_nmi(flat, y), "nmi_raw_unnormalised": kmeans_nmi(flat, y, normalise=False),
           "knn_raw": knn_acc(flat, y)}
    print(json.dumps(res))
    (OUT / "raw.json").write_text(json.dumps(res, indent=1))


def load_ckpt_model(path: str) -> tuple[FCModel, dict]:
    state = torch.load(path, map_location="cpu", weights_only=True)
    if path.endswith(".pt"):  # a state dict saved by `train --impl fedclust`
        state = {"model": state, "history": [], "done": None, "server": {"centroids": None}}
    model = FCModel(latent=state["model"]["encoder.1.3.weight"].shape[0])
    model.load_state_dict(state["model"])
    return model.eval(), state


def cmd_ckpt(args):
    x, y = load_test()
    model, state = load_ckpt_model(args.path)
    hist = state["history"]
    last = hist[-1] if hist else {}
    print(f"checkpoint {args.path}: done {state['done']}, logged nmi {last.get('nmi')}")
    res = {"done": state["done"], "logged_nmi": last.get("nmi")}
    if args.pcs_only:
        z = model.reps(x)["z"]
        print(json.dumps({"z_pcs": pc_report(z, x, y), "raw_pcs": pc_report(x.flatten(1), x, y),
                          **nuisance_removed_nmi(z, x, y)}))
        return
    res.update(evaluate_reps(model.reps(x), y))
    # BN in train mode (batch statistics, batches of 1000) instead of the averaged running statistics
    model.train()
    with torch.no_grad():
        zt = torch.cat([model.encoder(x[s:s + 1000]) for s in range(0, len(x), 1000)])
    model.eval()
    res["nmi_z_trainbn"] = kmeans_nmi(zt, y)
    # the global centroids in the checkpoint, used as the run's evaluation uses them (argmax cosine of z)
    cents = state["server"]["centroids"]
    if cents is not None:
        from sklearn.metrics import normalized_mutual_info_score
        z = F.normalize(model.reps(x)["z"], dim=1)
        lab = (z @ F.normalize(cents.float(), dim=1).T).argmax(1).numpy()
        res["nmi_z_run_centroids"] = float(normalized_mutual_info_score(y, lab))
        res["run_centroid_cluster_sizes"] = np.bincount(lab, minlength=10).tolist()
    res["z_pcs"] = pc_report(model.reps(x)["z"], x, y)
    res.update(nuisance_removed_nmi(model.reps(x)["z"], x, y))
    res["raw_pcs"] = pc_report(x.flatten(1), x, y)
    print(json.dumps(res))
    (OUT / f"ckpt_{Path(args.path).stem}.json").write_text(json.dumps(res, indent=1))


def cmd_train(args):
    torch.manual_seed(args.seed)
    x, y = load_test()  # evaluation: always the 10,000 test images
    xt = x
    if args.train_split == "all":  # data scale: train on all 70,000 images (the paper's scale)
        xt, _ = load_test("all")
    n = len(xt)
    if args.n and args.n < n:
        keep = torch.randperm(n, generator=torch.Generator().manual_seed(args.seed))[:args.n].sort().values
        x, y = x[keep], y[keep.numpy()]
        xt, n = x, len(x)
    model = MineNet(args.latent) if args.impl == "mine" else FCModel(args.latent)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    views = make_views(args)
    g = torch.Generator().manual_seed(args.seed)
    frozen = None
    log = OUT / f"train_{args.tag}.csv"
    rows = []
    fields = None
    step = 0
    steps_per_epoch = math.ceil(n / args.batch)
    refresh = args.refresh or steps_per_epoch

    def evaluate(epoch, loss):
        nonlocal fields
        model.eval()
        t0 = time.time()
        res = {"epoch": epoch, "step": step, "loss": loss}
        full = epoch == args.epochs  # backbone and hidden layer (slow: 2304-d) at the end only
        reps = model.reps(x)
        res.update(evaluate_reps(reps, y, knn=True, only=None if full else ("z", "p")))
        pc1 = pc_report(reps["z"], x, y, top=1)[0]
        res.update({"pc1_var": pc1["var"], "pc1_r_intensity": pc1["r_intensity"], "pc1_eta2": pc1["eta2_class"]})
        res["eval_s"] = round(time.time() - t0, 1)
        model.train()
        rows.append(res)
        if fields is None or len(res) > len(fields):
            fields = list(res)
        with log.open("w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=fields, restval="")
            w.writeheader()
            w.writerows(rows)
        print(json.dumps({k: (round(v, 4) if isinstance(v, float) else v) for k, v in res.items()}), flush=True)

    evaluate(0, float("nan"))
    t_start = time.time()
    for epoch in range(1, args.epochs + 1):
        perm = torch.randperm(n, generator=g)
        tot, cnt = 0.0, 0
        model.train()
        for s in range(0, n, args.batch):
            xb = xt[perm[s:s + args.batch]]
            if len(xb) < 2:
                continue
            if args.lam and step % refresh == 0:
                frozen = copy.deepcopy(model).eval().requires_grad_(False)
            v1, v2 = views(xb, g), views(xb, g)
            z1, p1 = model(v1)
            z2, p2 = model(v2)
            loss = 0.5 * neg_cos(p1, z2) + 0.5 * neg_cos(p2, z1)
            if args.lam:
                with torch.no_grad():
                    _, g1 = frozen(v1)
                    _, g2 = frozen(v2)
                loss = loss + args.lam * 0.5 * (neg_cos(p1, g1) + neg_cos(p2, g2))
            opt.zero_grad()
            loss.backward()
            opt.step()
            tot += float(loss.detach())
            cnt += 1
            step += 1
            if step in args.eval_steps:
                evaluate(round(epoch - 1 + cnt / steps_per_epoch, 3), tot / cnt)
        if epoch <= 4 or epoch % args.eval_every == 0 or epoch == args.epochs:
            print(f"# epoch {epoch} train {time.time() - t_start:.0f}s", flush=True)
            evaluate(epoch, tot / max(cnt, 1))
    torch.save(model.state_dict(), OUT / f"train_{args.tag}.pt")


def cmd_cluster(args):
    """A centralized proxy of CCFC's stage 2 from a saved model: every epoch, k-means (k = 10) on the
    model's L2-normalised z gives the centroids, pseudo-labels = argmax cosine (what the run reports as its
    clustering), then one epoch of fedclust's cluster-contrastive loss on un-augmented images + lam * the
    model-contrastive term against the model frozen at the start of the epoch; fresh Adam (as the official
    code at the start of stage 2)."""
    from sklearn.cluster import KMeans
    from sklearn.metrics import normalized_mutual_info_score

    from fedclust.losses.simsiam import cluster_contrastive_loss, model_contrastive_loss
    torch.manual_seed(args.seed)
    x, y = load_test()
    if args.init.endswith(".ckpt"):
        model, _ = load_ckpt_model(args.init)
    else:
        model = FCModel()
        model.load_state_dict(torch.load(args.init, map_location="cpu", weights_only=True))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(args.seed)
    rows = []
    for epoch in range(args.epochs + 1):
        model.eval()
        z = F.normalize(model.reps(x)["z"], dim=1)
        km = KMeans(10, n_init=10, random_state=epoch).fit(z.double().numpy())
        cent = F.normalize(torch.as_tensor(km.cluster_centers_, dtype=torch.float32), dim=1)
        labels = (z @ cent.T).argmax(1)
        res = {"epoch": epoch, "nmi": float(normalized_mutual_info_score(y, labels.numpy())),
               "knn_z": knn_acc(z, y), "sizes": np.bincount(labels.numpy(), minlength=10).tolist()}
        res.update(rank_stats(z))
        pc1 = pc_report(z, x, y, top=1)[0]
        res.update({"pc1_var": pc1["var"], "pc1_r_intensity": pc1["r_intensity"], "pc1_eta2": pc1["eta2_class"]})
        rows.append(res)
        print(json.dumps({k: (round(v, 4) if isinstance(v, float) else v) for k, v in res.items()}), flush=True)
        if epoch == args.epochs:
            break
        frozen = copy.deepcopy(model).eval().requires_grad_(False)
        model.train()
        perm = torch.randperm(len(x), generator=g)
        for s in range(0, len(x), 128):
            idx = perm[s:s + 128]
            zb, pb = model(x[idx])
            loss = cluster_contrastive_loss(pb, zb, labels[idx])
            if args.lam:
                with torch.no_grad():
                    _, gb = frozen(x[idx])
                loss = loss + args.lam * model_contrastive_loss(pb, gb)
            opt.zero_grad()
            loss.backward()
            opt.step()
    (OUT / f"cluster_{args.tag}.json").write_text(json.dumps(rows, indent=1))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("raw")
    c = sub.add_parser("ckpt")
    c.add_argument("path")
    c.add_argument("--pcs-only", action="store_true", help="only the principal-direction report")
    k = sub.add_parser("cluster")
    k.add_argument("init", help="a fedclust checkpoint (.ckpt) or a state dict saved by train (.pt)")
    k.add_argument("--epochs", type=int, default=8)
    k.add_argument("--lam", type=float, default=1.0)
    k.add_argument("--seed", type=int, default=66)
    k.add_argument("--tag", required=True)
    t = sub.add_parser("train")
    t.add_argument("--impl", choices=["fedclust", "mine"], default="fedclust")
    t.add_argument("--lam", type=float, default=0.0)
    t.add_argument("--refresh", type=int, default=0, help="steps between refreshes of the frozen copy "
                   "(0: once per epoch, a round of a single client)")
    t.add_argument("--aug", choices=["simsiam28", "noblur", "none", "strong", "color"], default="simsiam28")
    t.add_argument("--crop-min", type=float, default=0.5)
    t.add_argument("--sigma-max", type=float, default=2.0)
    t.add_argument("--epochs", type=int, default=20)
    t.add_argument("--eval-every", type=int, default=2)
    t.add_argument("--eval-steps", type=int, nargs="*", default=[],
                   help="also evaluate after these optimizer steps (mid-epoch)")
    t.add_argument("--batch", type=int, default=128)
    t.add_argument("--lr", type=float, default=1e-3)
    t.add_argument("--latent", type=int, default=64)
    t.add_argument("--n", type=int, default=0, help="subset size (0: all 10,000)")
    t.add_argument("--seed", type=int, default=66)
    t.add_argument("--train-split", choices=["test", "all"], default="test",
                   help="train on the 10,000 test images (as the runs) or on all 70,000 (the paper's scale)")
    t.add_argument("--tag", required=True)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    OUT.mkdir(parents=True, exist_ok=True)
    print("argv:", " ".join(sys.argv), flush=True)
    {"raw": cmd_raw, "ckpt": cmd_ckpt, "train": cmd_train, "cluster": cmd_cluster}[args.cmd](args)


if __name__ == "__main__":
    main()

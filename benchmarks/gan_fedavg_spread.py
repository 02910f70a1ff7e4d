"""How FedAvg slows a GAN down (issue 23, PPFC-GAN's collapse): K clients, each 1,000 Fashion-MNIST test images in
order (IID), train copies of the global SDA-FC GAN (fedclust/nn/gan.py) for `steps` steps of 64 with fresh Adam
(SDA-FC's learning rates, no decay), then the copies are averaged (every float tensor, BatchNorm statistics
included); after each round the global generator draws 500 images in eval mode and their mean per-pixel standard
deviation is printed (real images: 0.27). K = 1 is plain training. Kept as a script: it measures a GAN outside
the engine, which no declared experiment does. Usage: python -m benchmarks.gan_fedavg_spread K ROUNDS STEPS [bf16]
(bf16: the local steps under bf16 autocast) (benchmarks/results/ppfc_gan_collapse.md)."""
import contextlib, copy, gzip, sys, time, numpy as np, torch
from fedclust.nn.gan import GAN
torch.set_num_threads(1); torch.manual_seed(66)
raw = gzip.open("/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz").read()
X = torch.from_numpy(np.frombuffer(raw, np.uint8, offset=16).reshape(-1, 1, 28, 28).astype(np.float32) / 255)
K, R, steps = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
bf16 = sys.argv[4:] == ["bf16"]
glob = GAN(); g = torch.Generator().manual_seed(0)
sp = lambda im: im.flatten(1).std(0).mean().item()
t = time.time()
for r in range(R):
    states = []
    for k in range(K):
        gan = copy.deepcopy(glob)
        od = torch.optim.Adam(gan.discriminator.parameters(), 2e-4, betas=(0.5, 0.999))
        og = torch.optim.Adam(gan.generator.parameters(), 1.8e-3, betas=(0.5, 0.999))
        Xk = X[k * 1000:(k + 1) * 1000]
        perm = torch.randperm(1000, generator=g)
        for s in range(steps):
            with torch.autocast("cpu", dtype=torch.bfloat16) if bf16 else contextlib.nullcontext():
                gan.train_step(Xk[perm[(s * 64) % 960:(s * 64) % 960 + 64]], od, og, g)
        states.append(gan.state_dict())
    new = {}
    for key in states[0]:
        if states[0][key].is_floating_point():
            new[key] = sum(s[key] for s in states) / K
        else:
            new[key] = states[0][key]
    glob.load_state_dict(new)
    ev = glob.synthesize(500, g, torch.device("cpu"))
    print(f"K={K}{' bf16' if bf16 else ''} round {r+1} ({(r+1)*steps} local steps): spread eval {sp(ev):.4f} mean {ev.mean():.3f} ({time.time()-t:.0f}s)", flush=True)

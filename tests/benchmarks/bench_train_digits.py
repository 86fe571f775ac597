"""archspec.train's defaults beside a plain PyTorch loop on a small real dataset (issue 39, item 1).

    python tests/benchmarks/bench_train_digits.py [--epochs 30] [--batch 64] [--out digits/] [--log FILE]

The data: scikit-learn's handwritten digits (1,797 8x8 images, 10 classes; `pip install
scikit-learn`), written as 32x32 PNGs into an ImageFolder (train/ and val/, 80/20, split with a
seeded permutation). The model: specs/vit_ti16.yaml with img=32, patch=8, depth=4, classes=10,
built by archspec.build with the same seed for both runs. The same optimizer (AdamW, lr 1e-3,
weight decay 0.05), schedule (cosine per step, no warm-up), batch and epochs, and a validation
pass each epoch in both:

    archspec   archspec.train with its defaults for an image folder (nothing else given)
    plain      a plain loop: ToTensor + Normalize, shuffled DataLoader, cross-entropy

Both run in this process, one after the other, with the same torch threads; each time is the
wall time from the build to the last validation. Prints both side by side (and appends them to
--log).
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import os
import platform
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SPEC = os.path.join(ROOT, "specs", "vit_ti16.yaml")
OVERRIDES = {"img": 32, "patch": 8, "depth": 4, "classes": 10}
LR, WEIGHT_DECAY = 1e-3, 0.05


def write_digits(out: str, seed: int = 0, size: int = 32) -> tuple[int, int]:
    """The digits as size x size greyscale PNGs in out/{train,val}/CLASS/; (train, val) counts."""
    import numpy
    from PIL import Image
    from sklearn.datasets import load_digits

    digits = load_digits()
    order = numpy.random.default_rng(seed).permutation(len(digits.images))
    cut = int(round(len(order) * 0.8))
    for split, rows in (("train", order[:cut]), ("val", order[cut:])):
        for row in rows:
            folder = os.path.join(out, split, str(digits.target[row]))
            os.makedirs(folder, exist_ok=True)
            pixels = (digits.images[row] * (255 / 16)).round().astype("uint8")  # 0..16 -> 0..255
            Image.fromarray(pixels, mode="L").resize((size, size), Image.BILINEAR).save(
                os.path.join(folder, f"{row:04d}.png"))
    return cut, len(order) - cut


def run_archspec(data: str, epochs: int, batch: int) -> dict:
    from archspec.train import Options, train

    begin = time.perf_counter()
    summary = train(Options(SPEC, overrides=dict(OVERRIDES), data=data, epochs=epochs, batch=batch, lr=LR,
                            weight_decay=WEIGHT_DECAY))
    seconds = time.perf_counter() - begin
    return {"top1": summary["evals"][-1]["top1"], "seconds": seconds,
            "best_top1": max(e["top1"] for e in summary["evals"])}


def run_plain(data: str, epochs: int, batch: int) -> dict:
    """A plain PyTorch loop on the same model, optimizer and schedule."""
    import torch
    import torch.nn.functional as F
    from torchvision import datasets, transforms

    import archspec

    begin = time.perf_counter()
    torch.manual_seed(0)
    model = archspec.build(SPEC, dict(OVERRIDES), seed=0).train()
    simple = transforms.Compose([transforms.ToTensor(),
                                 transforms.Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))])
    train_set = datasets.ImageFolder(os.path.join(data, "train"), transform=simple)
    val_set = datasets.ImageFolder(os.path.join(data, "val"), transform=simple)
    loader = torch.utils.data.DataLoader(train_set, batch_size=batch, shuffle=True, drop_last=True,
                                         generator=torch.Generator().manual_seed(0))
    val_loader = torch.utils.data.DataLoader(val_set, batch_size=batch)
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=WEIGHT_DECAY)
    total = epochs * len(loader)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda k: (1 + math.cos(math.pi * k / total)) / 2)
    tops = []
    for epoch in range(epochs):
        model.train()
        for images, labels in loader:
            optimizer.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(images), labels)
            loss.backward()
            optimizer.step()
            schedule.step()
        model.eval()
        correct = 0
        with torch.no_grad():
            for images, labels in val_loader:
                correct += int((model(images).argmax(-1) == labels).sum())
        tops.append(correct / len(val_set))
        print(f"plain: epoch {epoch + 1}/{epochs}  loss {float(loss.detach()):.4f}  top-1 {tops[-1]:.3f}",
              file=sys.stderr, flush=True)
    return {"top1": tops[-1], "seconds": time.perf_counter() - begin, "best_top1": max(tops)}


def machine() -> str:
    import torch

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{cpu}, {os.cpu_count()} cores, torch {torch.__version__}, {torch.get_num_threads()} threads"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--out", default="digits", help="the image folder to write (kept; reused if there)")
    parser.add_argument("--log", help="append the results to this file")
    args = parser.parse_args()
    if importlib.util.find_spec("sklearn") is None:
        print("this benchmark needs scikit-learn's digits: pip install scikit-learn", file=sys.stderr)
        return 1
    if not os.path.isdir(os.path.join(args.out, "train")):
        counts = write_digits(args.out)
        print(f"wrote {counts[0]} training and {counts[1]} validation digits to {args.out}", file=sys.stderr)
    results = {"archspec": run_archspec(args.out, args.epochs, args.batch),
               "plain": run_plain(args.out, args.epochs, args.batch)}
    a, p = results["archspec"], results["plain"]
    lines = [f"machine: {machine()}",
             f"digits (scikit-learn, 1,797 8x8 -> 32x32 PNGs, 80/20 seeded split); vit_ti16 img=32 patch=8 depth=4 "
             f"classes=10; AdamW lr {LR:g} wd {WEIGHT_DECAY:g}, cosine, batch {args.batch}, {args.epochs} epochs",
             f"{'':10}{'top-1 (last)':>14}{'top-1 (best)':>14}{'seconds':>10}",
             *(f"{name:10}{r['top1']:>14.3f}{r['best_top1']:>14.3f}{r['seconds']:>10.1f}"
               for name, r in results.items()),
             f"archspec/plain: top-1 {a['top1'] - p['top1']:+.3f}, time {a['seconds'] / p['seconds']:.2f}x "
             f"(goal: top-1 >= plain's within 1.2x its time: "
             f"{'met' if a['top1'] >= p['top1'] and a['seconds'] <= 1.2 * p['seconds'] else 'NOT met'})"]
    print("\n".join(lines))
    if args.log:
        with open(args.log, "a") as f:
            f.write("\n".join(lines) + "\n\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

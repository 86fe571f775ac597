"""A tiny image dataset of coloured shapes in torchvision's ImageFolder layout, drawn with PIL.

    python tests/train/train_data_shapes.py OUT [--classes 3] [--train 100] [--val 30] [--size 32] [--seed 0]
                                          [--any-colour]

writes OUT/train/CLASS/NNNN.png and OUT/val/CLASS/NNNN.png: each class is one shape in one colour
(red circles, green squares, blue triangles, ...), at a random place and size on a random grey
background, the colour jittered a little, so a small model learns it in a few epochs and chance
is 1 / classes. --any-colour paints every shape in a random colour: only the shape tells the
class (a harder task: ViT-Ti/16 at 32x32, four patches, does not learn it in ten epochs).
tests/train/test_train_data.py uses it at a smaller size; the command line makes the run the README
shows.
"""

from __future__ import annotations

import argparse
import os
import random

CLASSES = [  # (name, shape, colour)
    ("red_circle", "circle", (220, 40, 40)),
    ("green_square", "square", (40, 180, 60)),
    ("blue_triangle", "triangle", (40, 70, 220)),
    ("yellow_diamond", "diamond", (230, 210, 40)),
]


def draw(shape: str, colour: tuple, size: int, rng: random.Random):
    from PIL import Image, ImageDraw

    grey = rng.randint(60, 200)
    image = Image.new("RGB", (size, size), (grey, grey, grey))
    side = rng.randint(size // 3, size * 2 // 3)
    x, y = rng.randint(0, size - side), rng.randint(0, size - side)
    fill = tuple(max(0, min(255, c + rng.randint(-25, 25))) for c in colour)
    box = [x, y, x + side - 1, y + side - 1]
    pen = ImageDraw.Draw(image)
    if shape == "circle":
        pen.ellipse(box, fill=fill)
    elif shape == "square":
        pen.rectangle(box, fill=fill)
    elif shape == "triangle":
        pen.polygon([(x + side // 2, y), (x, y + side - 1), (x + side - 1, y + side - 1)], fill=fill)
    else:
        pen.polygon([(x + side // 2, y), (x + side - 1, y + side // 2), (x + side // 2, y + side - 1),
                     (x, y + side // 2)], fill=fill)
    return image


def make_shapes(out: str, classes: int = 3, train: int = 100, val: int = 30, size: int = 32, seed: int = 0,
                any_colour: bool = False) -> dict:
    """Write the dataset under `out`; the number of images per split."""
    if not 2 <= classes <= len(CLASSES):
        raise ValueError(f"classes must be from 2 to {len(CLASSES)}, got {classes}")
    rng = random.Random(seed)
    counts = {"train": 0, "val": 0}
    for split, per_class in (("train", train), ("val", val)):
        for name, shape, colour in CLASSES[:classes]:
            folder = os.path.join(out, split, name)
            os.makedirs(folder, exist_ok=True)
            for index in range(per_class):
                paint = tuple(rng.randint(0, 255) for _ in range(3)) if any_colour else colour
                draw(shape, paint, size, rng).save(os.path.join(folder, f"{index:04d}.png"))
                counts[split] += 1
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out", help="the folder to write (train/ and val/ inside)")
    parser.add_argument("--classes", type=int, default=3, help=f"2 to {len(CLASSES)} (default 3)")
    parser.add_argument("--train", type=int, default=100, help="training images per class (default 100)")
    parser.add_argument("--val", type=int, default=30, help="validation images per class (default 30)")
    parser.add_argument("--size", type=int, default=32, help="image side in pixels (default 32)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--any-colour", action="store_true", help="shapes in random colours: only the shape tells")
    args = parser.parse_args()
    counts = make_shapes(args.out, args.classes, args.train, args.val, args.size, args.seed, args.any_colour)
    print(f"{args.out}: {counts['train']} training and {counts['val']} validation images, {args.classes} classes")


if __name__ == "__main__":
    main()

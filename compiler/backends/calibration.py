"""What static int8 quantization calibrates on: batches of inputs whose activations set each
quantized layer's input range (`build --target onnx --precision int8 --calibration SOURCE`).

    random    inputs drawn like the example inputs (images ~ N(0, 1), token ids over the
              vocabulary), from a seed apart from the one the deviation is measured on
    DIR       images from a folder, the ImageFolder layout (DIR/CLASS/*.png; a training folder's
              val/ when DIR holds train/ and val/), read by torchvision with timm's evaluation
              transform (resize, centre crop, ImageNet normalisation) at the spec's image size:
              for a spec whose one input is an image [B, 3, H, W]

Random inputs give ranges for random inputs: fine to see what static quantization costs, but
the ranges of real data differ, so deploy a model calibrated on samples of its own data.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from archspec.core.errors import UsageError
from archspec.core.ir import Graph

from .export import example_inputs, value_bound

RANDOM = "random"
CALIBRATION_BATCH = 4
CALIBRATION_SEED = 20261124  # not the deviation's seed (precision.py): the measure is on inputs not calibrated on
TRAIN_EXTRA = "pip install 'archspec-compiler[train]'"


@dataclass(frozen=True)
class Calibration:
    """Batches of inputs (one tuple of tensors per batch, in the graph's input order) and what
    they are, in words for the build's line and precision.json."""

    source: str
    batches: tuple[tuple[torch.Tensor, ...], ...]

    @property
    def samples(self) -> int:
        return sum(batch[0].shape[0] for batch in self.batches)


def check_source(source: str) -> None:
    """A usage error for a --calibration that names neither `random` nor a folder."""
    if source != RANDOM and not os.path.isdir(source):
        raise UsageError(f"--calibration {source}: no such folder; give `random` or a folder of images "
                         "(DIR/CLASS/*.png, the ImageFolder layout)")


def calibration(graph: Graph, source: str, samples: int = 32) -> Calibration:
    """`samples` inputs (fewer if a folder has fewer images) from `source`, in batches."""
    check_source(source)
    if source == RANDOM:
        return Calibration(f"{samples} random inputs", random_batches(graph, samples))
    return Calibration(f"{source}", image_batches(graph, source, samples))


def random_batches(graph: Graph, samples: int) -> tuple[tuple[torch.Tensor, ...], ...]:
    """Inputs like the example inputs, each batch from its own seed."""
    generator = torch.Generator().manual_seed(CALIBRATION_SEED)
    batches = []
    for index in range(0, samples, CALIBRATION_BATCH):
        base = example_inputs(graph, batch=min(CALIBRATION_BATCH, samples - index))  # the shapes: [count, ...]
        batches.append(tuple(_drawn_like(a, graph, name, generator) for a, name in zip(base, (node.name for node in graph.inputs()))))
    return tuple(batches)


def _drawn_like(example: torch.Tensor, graph: Graph, name: str, generator: torch.Generator) -> torch.Tensor:
    """A tensor of the example's shape: N(0, 1) values, or ids over the whole range the input takes."""
    if example.is_floating_point():
        return torch.randn(example.shape, generator=generator)
    return torch.randint(0, value_bound(graph, name), example.shape, generator=generator)


def check_fits(graph: Graph, source: str) -> tuple | None:
    """A usage error when a folder of images cannot calibrate this spec; the image's shape."""
    if source == RANDOM:
        return None
    inputs = graph.inputs()
    shape = inputs[0].type.shape if len(inputs) == 1 else ()
    if len(shape) != 4 or shape[1] != 3 or not all(isinstance(d, int) for d in shape[2:]):
        raise UsageError(f"--calibration {source}: a folder of images calibrates a spec whose one input is an "
                         "image [B, 3, H, W]; use --calibration random for this one")
    return shape


def image_batches(graph: Graph, folder: str, samples: int) -> tuple[tuple[torch.Tensor, ...], ...]:
    """Images of an ImageFolder-layout folder, transformed as timm evaluates, at the spec's size."""
    shape = check_fits(graph, folder)  # [B, 3, H, W]
    try:
        from timm.data import create_transform
        from torchvision.datasets import ImageFolder
    except ImportError as exc:
        raise UsageError(f"--calibration with a folder needs torchvision and timm ({exc}): {TRAIN_EXTRA}") from None
    split = os.path.join(folder, "val")
    root = split if os.path.isdir(split) and os.path.isdir(os.path.join(folder, "train")) else folder
    try:
        images = ImageFolder(root, transform=create_transform(input_size=(3, shape[2], shape[3])))
    except (OSError, ValueError) as exc:  # no class folders, or a class folder without images
        raise UsageError(f"--calibration {folder}: {str(exc).splitlines()[0]} (the ImageFolder layout: "
                         "DIR/CLASS/*.png)") from None
    count = min(samples, len(images))
    step = max(1, len(images) // count)  # spread over the classes (ImageFolder lists them class by class)
    picked = [images[i * step][0] for i in range(count)]  # each [3, H, W]
    return tuple((torch.stack(picked[i:i + CALIBRATION_BATCH]),) for i in range(0, count, CALIBRATION_BATCH))

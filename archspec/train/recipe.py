"""A run's recipe beyond the optimizer (timm's train.py as the reference): mixup/cutmix and label
smoothing of the training loss, an exponential moving average of the weights (--ema), and the
metrics file (a JSON line per evaluation; TensorBoard's event files beside it when installed).
"""

from __future__ import annotations

import copy
import json
import os

import torch
import torch.nn.functional as F

from ..core.errors import UsageError
from .options import Options


class Mixing:
    """timm.data.Mixup on a classify batch: the images mixed, the labels as soft targets (label
    smoothing folded in); the loss is the soft targets' cross-entropy."""

    def __init__(self, options: Options, classes: int, image: str, labels: str):
        from timm.data import Mixup

        self.image, self.labels = image, labels
        self.mix = Mixup(mixup_alpha=options.mixup, cutmix_alpha=options.cutmix, label_smoothing=options.smoothing,
                         num_classes=classes)

    def __call__(self, batch: dict) -> dict:
        images, soft = self.mix(batch[self.image], batch[self.labels])  # [B, C, H, W], [B] -> [B, classes]
        return {**batch, self.image: images, self.labels: soft}


def check_recipe_fits(options: Options, kind: str, first_input_rank: int) -> None:
    """A UsageError where the recipe asks what this spec's objective cannot take."""
    if options.mixing and (kind != "classify" or first_input_rank != 4):
        raise UsageError("--mixup/--cutmix mix images: they need a classify head and an image input [B, C, H, W]")
    if options.smoothing and kind not in ("classify", "lm"):
        raise UsageError("--smoothing smooths the labels of a classify or lm head; this spec trains on its "
                         "objectives")


def training_loss(outputs: torch.Tensor, targets: torch.Tensor, smoothing: float) -> torch.Tensor:
    """Cross-entropy against class indices (smoothed) or soft targets (mixup's, already smoothed)."""
    logits = outputs.reshape(-1, outputs.shape[-1]).float()  # [B, ..., K] -> [B*..., K]
    if targets.is_floating_point():  # soft targets [B, K]
        return torch.sum(-targets * F.log_softmax(logits, dim=-1), dim=-1).mean()
    return F.cross_entropy(logits, targets.reshape(-1), label_smoothing=smoothing)


class Ema:
    """An exponential moving average of a model's weights: after each step
    ema = decay * ema + (1 - decay) * weights (floating tensors; the others copied), as
    timm.utils.ModelEmaV3 without warm-up. Evaluated beside the model."""

    def __init__(self, model: torch.nn.Module, decay: float):
        self.decay = decay
        self.module = copy.deepcopy(model).eval()
        for p in self.module.parameters():
            p.requires_grad_(False)

    @torch.no_grad()
    def update(self, model: torch.nn.Module) -> None:
        pairs = list(zip(self.module.state_dict().values(), model.state_dict().values()))
        floating = [(e, m) for e, m in pairs if e.is_floating_point()]
        if floating:
            torch._foreach_lerp_([e for e, _ in floating], [m.detach() for _, m in floating], 1 - self.decay)
        for e, m in pairs:
            if not e.is_floating_point():
                e.copy_(m)

    def state_dict(self) -> dict:
        return {name: t.detach().clone() for name, t in self.module.state_dict().items()}

    def load_state_dict(self, state: dict) -> None:
        self.module.load_state_dict(state)


class Metrics:
    """A JSON line per evaluation (epoch, step, train loss, val loss, top-1, EMA's, lr, seconds),
    appended and flushed at once; TensorBoard's scalars beside it when tensorboard is installed."""

    def __init__(self, path: str):
        self.path = path
        folder = os.path.dirname(os.path.abspath(path))
        try:
            self.file = open(path, "a", encoding="utf-8")
        except OSError as exc:
            raise UsageError(f"--metrics {path}: cannot write it: {exc.strerror or exc}") from None
        self.board = None
        try:
            from torch.utils.tensorboard import SummaryWriter  # needs the tensorboard package
        except ImportError:
            return
        self.board = SummaryWriter(os.path.join(folder, "tensorboard"))

    def write(self, line: dict) -> None:
        self.file.write(json.dumps(line) + "\n")
        self.file.flush()
        if self.board is not None:
            for key, value in line.items():
                if key not in ("epoch", "step") and isinstance(value, (int, float)):
                    self.board.add_scalar(key, value, line["step"])
            self.board.flush()

    def close(self) -> None:
        self.file.close()
        if self.board is not None:
            self.board.close()
